#include "posttrain/loss_checks.hpp"

#include <charconv>

namespace nanogpt::posttrain_checks {

std::string show(double value) {
  // The shortest text that reads back as the same double: 0.1, not 0.10000000000000001.
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

void require_finite(std::span<const double> values, std::string_view loss, std::string_view name) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw InputError(std::string(loss) + ": " + std::string(name) + "[" + std::to_string(i) +
                       "] = " + show(values[i]) +
                       " is not a finite number; every input must be finite (look for a "
                       "log-probability of a token the model gives probability 0)");
    }
  }
}

void require_length(size_t size, size_t expected, std::string_view loss, std::string_view name,
                    std::string_view reference_name, std::string_view unit) {
  if (size != expected) {
    throw InputError(std::string(loss) + ": " + std::string(name) + " has " + std::to_string(size) +
                     " entries but " + std::string(reference_name) + " has " +
                     std::to_string(expected) + "; give one entry per " + std::string(unit));
  }
}

}  // namespace nanogpt::posttrain_checks
