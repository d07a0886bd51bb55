// Range checks for floating-point flags. CLI::Range lets NaN through (every comparison with it
// is false) and prints its bounds as 0.000000; this one refuses NaN and infinities and names
// the range as the help text does.
#pragma once

#include <CLI/CLI.hpp>

namespace nanogpt::cli {

// A finite number in [min, max].
CLI::Validator finite_in_range(double min, double max);

}  // namespace nanogpt::cli
