#include "cli/number_range.hpp"

#include <cmath>
#include <sstream>

namespace nanogpt::cli {

CLI::Validator finite_in_range(double min, double max) {
  std::ostringstream range;
  range << "[" << min << ", " << max << "]";
  const std::string bounds = range.str();
  return CLI::Validator(
      [min, max, bounds](std::string& input) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(input, v) || !std::isfinite(v) || v < min || v > max) {
          return "value " + input + " is not a finite number in the range " + bounds;
        }
        return "";
      },
      "FLOAT in " + bounds);
}

}  // namespace nanogpt::cli
