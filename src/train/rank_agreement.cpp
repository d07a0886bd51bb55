#include "train/rank_agreement.hpp"

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"

namespace nanogpt {

std::string executable_digest() {
  try {
    return sha256_hex(read_file("/proc/self/exe"));
  } catch (const Error&) {
    return "unreadable";  // then only the other facts are compared
  }
}

void check_ranks_agree(Comm& comm, const RankFacts& facts) {
  if (!comm.distributed()) return;
  std::string mine;
  for (const auto& [what, value] : facts) mine += sha256_hex(value) + "\n";
  const std::vector<std::string> all = comm.allgather_strings(mine, "start-up agreement");
  std::string problems;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    for (size_t f = 0; f < facts.size(); ++f) {
      const size_t at = f * 65;  // 64 hex digits and a newline per fact
      if (all[r].compare(at, 64, all[0], at, 64) == 0) continue;
      problems += "\n  " + facts[f].first + " differs on rank " + std::to_string(r) + " (" +
                  comm.hosts()[r] + ") from rank 0's (" + comm.hosts()[0] + ")";
    }
  }
  if (!problems.empty()) {
    throw InputError("the ranks of this job disagree:" + problems +
                     "\nrun the same nanogpt build with the same configuration, data and flags on "
                     "every rank (mpirun copies one command line; check each host's binary and "
                     "data files)");
  }
}

}  // namespace nanogpt
