// The message of the InputError a call throws ("" if it throws none), for tests of error
// messages: EXPECT_NE(input_error([&] { ... }).find("field"), std::string::npos).
#pragma once

#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

template <class Fn>
std::string input_error(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace nanogpt
