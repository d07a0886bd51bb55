// The communicators of a training run: the world, and under DiLoCo (sync = diloco or
// streaming_diloco) its split into `replicas` groups of consecutive ranks: `replica` is this
// rank's group (its inner, data-parallel optimizer's ranks), `across` the ranks with this
// rank's index in every replica (the outer sync's). A data-parallel run is one replica: then
// `replica` is the world and there is no `across`.
#pragma once

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

class ReplicaComms {
 public:
  // A collective over `world` when it splits. Throws InputError if replicas does not divide
  // the ranks.
  ReplicaComms(Comm& world, const Config& config);

  Comm& world() const { return world_; }
  Comm& replica() const { return *replica_; }
  Comm* across() const { return across_; }  // null for data-parallel runs
  int replicas() const { return replicas_; }
  int replica_index() const { return replica_index_; }

  // Every communicator this rank uses, each once; their statistics summed.
  std::vector<Comm*> all() const;
  CommStats stats() const;
  void reset_stats();

 private:
  Comm& world_;
  std::unique_ptr<Comm> replica_split_, across_split_;
  Comm* replica_ = nullptr;
  Comm* across_ = nullptr;
  int replicas_ = 1, replica_index_ = 0;
};

}  // namespace nanogpt
