// The 1-minute load average, which every benchmark records beside its figures: the machines
// are shared, and a figure measured while something else ran says how much else there was.
#pragma once

#include <cstdlib>

namespace nanogpt::bench {

inline double load_average() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

}  // namespace nanogpt::bench
