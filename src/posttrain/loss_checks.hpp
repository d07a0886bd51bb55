// Argument checks shared by the post-training losses, so every loss words its InputErrors the
// same way: which loss, which key or array, the value given, the valid range.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/error.hpp"

namespace nanogpt::posttrain_checks {

// A double as the shortest text that reads back as it, so a message shows the value as given.
std::string show(double value);

// `value` of `key` must be finite and lie in the range `range` describes; `range` is the phrase
// the message ends with, e.g. "in [0, 1]" or "> 0".
inline void require(bool ok, std::string_view loss, std::string_view key, double value,
                    std::string_view range) {
  if (!ok || !std::isfinite(value)) {
    throw InputError(std::string(loss) + ": " + std::string(key) + " = " + show(value) +
                     " is out of range; it must be " + std::string(range));
  }
}

// Every entry of the array `name` must be finite (a NaN or an infinity would otherwise reach the
// loss and the gradients silently).
void require_finite(std::span<const double> values, std::string_view loss, std::string_view name);

// The array `name` must have `expected` entries, one per `unit` ("token", "pair", ...), like
// `reference_name`.
void require_length(size_t size, size_t expected, std::string_view loss, std::string_view name,
                    std::string_view reference_name, std::string_view unit);

}  // namespace nanogpt::posttrain_checks
