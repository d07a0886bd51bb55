#include "data/token_loader.hpp"

#include <algorithm>

#include "data/token_shard.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

TokenLoader::TokenLoader(LoaderOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw InputError("loader: rank " + std::to_string(o.rank) + " is not in [0, world size " +
                     std::to_string(o.world_size) + ")");
  }
  if (o.batch_tokens == 0 || o.batch_tokens % static_cast<uint64_t>(o.world_size) != 0) {
    throw InputError("loader: batch of " + std::to_string(o.batch_tokens) +
                     " tokens must be positive and divisible by the world size " +
                     std::to_string(o.world_size));
  }
  if (o.align_to_eot && (o.seq_len == 0 || local_batch_tokens() % o.seq_len != 0)) {
    throw InputError(
        "loader: aligning to <|endoftext|> needs a sequence length that divides the "
        "per-rank batch (" +
        std::to_string(local_batch_tokens()) + " tokens)");
  }
  files_ = glob_sorted(o.pattern);
  if (files_.empty()) {
    throw InputError("no token shards match '" + o.pattern +
                     "'; check the path, or create shards with `nanogpt tokenize`");
  }
  open_shard(0);
  // The seed starts on the first shard and only checks the fit before each batch.
}

void TokenLoader::open_shard(uint64_t index) {
  if (index == open_index_) return;
  MappedFile mapped(files_.at(index));
  std::span<const uint16_t> tokens = shard_tokens(mapped);
  if (options_.vocab_size != 0) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= options_.vocab_size) {
        throw InputError("token shard '" + files_[index] + "' holds token id " +
                         std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                         ", outside the model's vocabulary of " +
                         std::to_string(options_.vocab_size) +
                         "; the shards were made with a different tokenizer");
      }
    }
  }
  eot_positions_.clear();
  if (options_.align_to_eot) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == options_.eot_id) eot_positions_.push_back(i);
    }
  }
  mapped_ = std::move(mapped);
  tokens_ = tokens;
  open_index_ = index;
}

void TokenLoader::advance_shard() {
  uint64_t next = position_.shard + 1;
  if (next >= files_.size()) {
    if (!options_.cycle) {
      throw InputError("ran out of training data: all " + std::to_string(files_.size()) +
                       " shard(s) matching '" + options_.pattern +
                       "' are used up; add data, lower the step count, or enable cycling");
    }
    next = 0;
    ++position_.epoch;
  }
  position_.shard = next;
  position_.pos = 0;
  open_shard(next);
}

bool TokenLoader::batch_fits() const {
  return position_.pos + options_.batch_tokens + 1 < tokens_.size();
}

void TokenLoader::next(std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  if (options_.align_to_eot) {
    next_aligned(inputs, targets);
    return;
  }
  // Skip shards too small for a whole batch; give up after a full pass finds none.
  uint64_t tried = 0;
  while (!batch_fits()) {
    if (++tried > files_.size()) {
      throw InputError("no shard matching '" + options_.pattern + "' holds more than one batch (" +
                       std::to_string(options_.batch_tokens + 1) +
                       " tokens); lower the batch size");
    }
    advance_shard();
  }
  const uint64_t local = local_batch_tokens();
  const uint16_t* buf =
      tokens_.data() + position_.pos + static_cast<uint64_t>(options_.rank) * local;
  inputs.resize(local);
  targets.resize(local);
  for (uint64_t i = 0; i < local; ++i) {
    inputs[i] = buf[i];
    targets[i] = buf[i + 1];
  }
  position_.pos += options_.batch_tokens;
}

void TokenLoader::next_aligned(std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  // Every rank walks all B/T sequence starts of the step (cheap: a binary search each), so the
  // ranks agree on the layout without talking to each other.
  const uint64_t T = options_.seq_len;
  const uint64_t per_rank = local_batch_tokens() / T;
  const uint64_t total = options_.batch_tokens / T;
  std::vector<uint64_t> starts(total);
  uint64_t tried = 0;
  for (;;) {
    uint64_t cursor = position_.pos;
    bool ok = true;
    for (uint64_t s = 0; s < total; ++s) {
      auto it = std::lower_bound(eot_positions_.begin(), eot_positions_.end(), cursor);
      if (it == eot_positions_.end() || *it + T + 1 > tokens_.size()) {
        ok = false;
        break;
      }
      starts[s] = *it;
      cursor = *it + T;
    }
    if (ok) {
      position_.pos = cursor;
      break;
    }
    if (++tried > files_.size()) {
      throw InputError("no shard matching '" + options_.pattern + "' has room for " +
                       std::to_string(total) + " document-aligned sequences of " +
                       std::to_string(T) + " tokens; lower the batch size");
    }
    advance_shard();
  }
  inputs.resize(per_rank * T);
  targets.resize(per_rank * T);
  for (uint64_t s = 0; s < per_rank; ++s) {
    const uint16_t* buf =
        tokens_.data() + starts[static_cast<uint64_t>(options_.rank) * per_rank + s];
    for (uint64_t i = 0; i < T; ++i) {
      inputs[s * T + i] = buf[i];
      targets[s * T + i] = buf[i + 1];
    }
  }
}

void TokenLoader::restore(const LoaderPosition& position) {
  if (position.shard >= files_.size()) {
    throw InputError("saved data position points at shard " + std::to_string(position.shard) +
                     " but only " + std::to_string(files_.size()) + " shard(s) match '" +
                     options_.pattern + "'; resume with the same data");
  }
  open_shard(position.shard);
  if (position.pos > tokens_.size()) {
    throw InputError("saved data position " + std::to_string(position.pos) +
                     " is past the end of '" + files_[position.shard] + "' (" +
                     std::to_string(tokens_.size()) + " tokens); resume with the same data");
  }
  position_ = position;
}

}  // namespace nanogpt
