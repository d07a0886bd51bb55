// The lane masks of kernels/target.hpp: the mask of the first n lanes, against a mask built one
// bit at a time, for every n a loop can pass (negative and past the width included).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/target.hpp"

namespace nanogpt {
namespace {

uint64_t lanes_one_at_a_time(int64_t n, int width) {
  uint64_t mask = 0;
  for (int lane = 0; lane < width; ++lane) {
    if (lane < n) mask |= uint64_t{1} << lane;
  }
  return mask;
}

TEST(LaneMasks, SetExactlyTheFirstNLanes) {
  for (int64_t n = -40; n <= 70; ++n) {
    EXPECT_EQ(first_lanes(n), lanes_one_at_a_time(n, 16)) << "n = " << n;
    EXPECT_EQ(first_lanes32(n), lanes_one_at_a_time(n, 32)) << "n = " << n;
  }
}

}  // namespace
}  // namespace nanogpt
