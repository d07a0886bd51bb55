// The ranks of one job must run the same binary on the same configuration and data: otherwise
// their collectives do not match, which hangs the job or silently mixes different models.
// Checked once at start: every rank's digest of each fact is gathered, and any difference is
// an InputError naming the fact and the ranks that differ from rank 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/comm.hpp"

namespace nanogpt {

// (what, value): e.g. ("configuration", its JSON). Every rank passes the same list of whats.
using RankFacts = std::vector<std::pair<std::string, std::string>>;

void check_ranks_agree(Comm& comm, const RankFacts& facts);

// The digest of this process's executable (/proc/self/exe), for RankFacts.
std::string executable_digest();

}  // namespace nanogpt
