#include "train/replica_comms.hpp"

#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

ReplicaComms::ReplicaComms(Comm& world, const Config& c) : world_(world), replica_(&world) {
  if (c.sync == SyncMode::kDdp) return;
  replicas_ = c.replicas > 0 ? static_cast<int>(c.replicas) : world.size();
  if (world.size() % replicas_ != 0) {
    throw InputError("replicas = " + std::to_string(replicas_) + " does not divide the " +
                     std::to_string(world.size()) +
                     " ranks; run on a multiple of it (mpirun -np) or set replicas (0: one per "
                     "rank)");
  }
  const int per = world.size() / replicas_;
  replica_index_ = world.rank() / per;
  const int index = world.rank() % per;
  replica_split_ =
      world.split(replica_index_, world.rank(), "replica " + std::to_string(replica_index_));
  across_split_ = world.split(index, world.rank(), "outer group " + std::to_string(index));
  replica_ = replica_split_.get();
  across_ = across_split_.get();
}

std::vector<Comm*> ReplicaComms::all() const {
  std::vector<Comm*> v = {&world_};
  if (replica_ != &world_) v.push_back(replica_);
  if (across_ != nullptr) v.push_back(across_);
  return v;
}

CommStats ReplicaComms::stats() const {
  CommStats total;
  for (Comm* c : all()) {
    const CommStats s = c->stats();
    total.operations += s.operations;
    total.bytes_sent += s.bytes_sent;
    total.busy_s += s.busy_s;
    total.waited_s += s.waited_s;
  }
  return total;
}

void ReplicaComms::reset_stats() {
  for (Comm* c : all()) c->reset_stats();
}

}  // namespace nanogpt
