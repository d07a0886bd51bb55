#include "eval/model_scorer.hpp"

#include <algorithm>
#include <cmath>

#include "model/model_kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

ModelScorer::ModelScorer(Gpt& model, int64_t window_blocks)
    : model_(model), window_blocks_(window_blocks) {}

void ModelScorer::make_caches(std::span<const int64_t> positions) {
  const Config& c = model_.config();
  int64_t total = 0;
  for (int64_t n : positions) total += KvCache::storage_bytes(c, n);
  caches_.clear();
  caches_.reserve(positions.size());
  auto* next = static_cast<std::byte*>(arena_.reserve(static_cast<size_t>(total)));
  for (int64_t n : positions) {
    caches_.emplace_back(c, n, next);
    next += KvCache::storage_bytes(c, n);
  }
}

void ModelScorer::copy_prefixes(std::span<const size_t> first_slot) {
  // Slot k belongs to the last request whose first slot is at or before it.
  std::vector<size_t> source(caches_.size());
  size_t r = 0;
  for (size_t k = 0; k < caches_.size(); ++k) {
    while (r + 1 < first_slot.size() && first_slot[r + 1] <= k) ++r;
    source[k] = first_slot[r];
  }
  ThreadPool::current().parallel_for(caches_.size(), [&](size_t k, int) {
    if (source[k] != k) caches_[k].copy_from(caches_[source[k]]);
  });
}

std::vector<float> ModelScorer::head_logprobs(const float* rows, std::span<const int32_t> targets) {
  const Config& c = model_.config();
  // The head as forward_loss runs it (gpt.cpp's loss_params): the same fused kernel, so a
  // row's loss here is the loss a full forward gives that position.
  LossArgs<float> p;
  p.precision = model_.precision();
  p.T = static_cast<int64_t>(targets.size());
  p.d = c.model_dim;
  p.V = c.vocab_padded();
  p.x = rows;
  p.W = model_.weights().lm_head;
  p.W_packed = model_.packed_head();
  p.buffers = &model_.loss_buffers();
  p.targets = targets.data();
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(static_cast<double>(c.model_dim)));
  p.fp8 = c.fp8_head;
  std::vector<float> loss(targets.size());
  const Workspace::Use scratch(model_.workspace());
  model_loss_forward(p, loss.data());
  for (float& l : loss) l = -l;
  return loss;
}

namespace {

void check_ids(std::span<const uint32_t> ids, const Config& c, const char* what) {
  for (uint32_t t : ids) {
    if (static_cast<int64_t>(t) >= c.vocab_size) {
      throw InputError(std::string(what) + " has token id " + std::to_string(t) +
                       ", outside the model's vocabulary of " + std::to_string(c.vocab_size) +
                       " (was the suite tokenized for another model?)");
    }
  }
}

}  // namespace

double ModelScorer::text_logprob(std::span<const uint32_t> tokens) {
  if (tokens.empty()) throw InputError("cannot score an empty text");
  const Config& c = model_.config();
  check_ids(tokens, c, "the text");
  std::vector<int32_t> inputs, targets;
  inputs.push_back(static_cast<int32_t>(c.eot_id));
  for (size_t i = 0; i < tokens.size(); ++i) {
    targets.push_back(static_cast<int32_t>(tokens[i]));
    if (i + 1 < tokens.size()) inputs.push_back(static_cast<int32_t>(tokens[i]));
  }
  const int64_t positions = static_cast<int64_t>(inputs.size());
  make_caches(std::span<const int64_t>(&positions, 1));
  model_.forward_cached(inputs, window_blocks_, caches_[0]);
  double sum = 0;
  for (float l : head_logprobs(model_.final_norm().data(), targets)) sum += l;
  return sum;
}

std::vector<double> ModelScorer::continuation_logprobs(
    std::span<const uint32_t> context, const std::vector<std::vector<uint32_t>>& continuations) {
  const ChoiceRequest r{context, continuations};
  return std::move(continuation_logprobs(std::span<const ChoiceRequest>(&r, 1))[0]);
}

std::vector<std::vector<double>> ModelScorer::continuation_logprobs(
    std::span<const ChoiceRequest> requests) {
  const Config& c = model_.config();
  for (const ChoiceRequest& r : requests) {
    if (r.context.empty()) throw InputError("cannot score continuations of an empty context");
    check_ids(r.context, c, "the context");
    for (const auto& cont : r.continuations) {
      if (cont.empty()) throw InputError("cannot score an empty continuation");
      check_ids(cont, c, "a continuation");
    }
  }
  // Per request, EOT and the context: the prefix its choices share, run into the cache of its
  // first choice (slots: the requests' choices in order).
  std::vector<std::vector<int32_t>> prefixes(requests.size());
  std::vector<size_t> first_slot(requests.size());
  std::vector<int64_t> positions;  // per slot: its prefix and continuation but its last token
  for (size_t i = 0; i < requests.size(); ++i) {
    const ChoiceRequest& r = requests[i];
    first_slot[i] = positions.size();
    std::vector<int32_t>& prefix = prefixes[i];
    prefix.push_back(static_cast<int32_t>(c.eot_id));
    for (uint32_t t : r.context) prefix.push_back(static_cast<int32_t>(t));
    for (const auto& cont : r.continuations)
      positions.push_back(static_cast<int64_t>(prefix.size() + cont.size() - 1));
  }
  make_caches(positions);
  std::vector<CachedSegment> segments;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].continuations.empty()) continue;
    segments.push_back({prefixes[i], &caches_[first_slot[i]]});
  }
  std::vector<std::vector<double>> out(requests.size());
  if (segments.empty()) return out;
  model_.forward_cached_batch(segments, window_blocks_);
  // A prefix's last row predicts the first token of each of its choices: kept from here rather
  // than run again once per choice.
  const int64_t d = c.model_dim;
  std::vector<float> last_rows(static_cast<size_t>(static_cast<int64_t>(requests.size()) * d));
  int64_t prefix_rows = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].continuations.empty()) continue;
    prefix_rows += static_cast<int64_t>(prefixes[i].size());
    const float* row = model_.final_norm().data() + (prefix_rows - 1) * d;
    std::copy(row, row + d, last_rows.begin() + static_cast<int64_t>(i) * d);
  }
  // Every choice but its last token from a copy of its prefix, all choices of all requests in
  // one forward (a one-token choice runs nothing).
  std::vector<std::vector<int32_t>> inputs(positions.size());
  std::vector<int32_t> targets;
  segments.clear();
  copy_prefixes(first_slot);
  for (size_t i = 0; i < requests.size(); ++i) {
    const ChoiceRequest& r = requests[i];
    for (size_t j = 0; j < r.continuations.size(); ++j) {
      const size_t slot = first_slot[i] + j;
      const std::vector<uint32_t>& cont = r.continuations[j];
      for (size_t k = 0; k < cont.size(); ++k) {
        targets.push_back(static_cast<int32_t>(cont[k]));
        if (k + 1 < cont.size()) inputs[slot].push_back(static_cast<int32_t>(cont[k]));
      }
      if (!inputs[slot].empty()) segments.push_back({inputs[slot], &caches_[slot]});
    }
  }
  if (!segments.empty()) model_.forward_cached_batch(segments, window_blocks_);
  // The head's rows, per choice: its prefix's last row, then its own rows. One head call over
  // all of them: its product packs the whole vocabulary's weights per call.
  std::vector<float> rows(targets.size() * static_cast<size_t>(d));
  const float* choice_row = model_.final_norm().data();
  auto next_row = rows.begin();
  for (size_t i = 0; i < requests.size(); ++i) {
    for (const auto& cont : requests[i].continuations) {
      const auto last = last_rows.begin() + static_cast<int64_t>(i) * d;
      next_row = std::copy(last, last + d, next_row);
      const int64_t own = static_cast<int64_t>(cont.size()) - 1;
      next_row = std::copy(choice_row, choice_row + own * d, next_row);
      choice_row += own * d;
    }
  }
  const std::vector<float> lp = head_logprobs(rows.data(), targets);
  size_t row = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    for (const auto& cont : requests[i].continuations) {
      double sum = 0;
      for (size_t k = 0; k < cont.size(); ++k) sum += lp[row++];
      out[i].push_back(sum);
    }
  }
  return out;
}

std::vector<std::vector<GeneratedSample>> ModelScorer::generate(
    std::span<const GenerateRequest> requests) {
  const Config& c = model_.config();
  std::vector<std::vector<GeneratedSample>> out(requests.size());
  // A sample being decoded: its request, index, cache slot and the token it feeds next.
  struct Running {
    size_t request, sample, slot;
    int32_t next = 0;
  };
  std::vector<std::vector<int32_t>> prompts(requests.size());
  std::vector<size_t> first_slot(requests.size());
  std::vector<int64_t> positions;  // per slot (sample): its prompt and max_tokens
  std::vector<size_t> prompted;    // requests with samples to draw, in segment order
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    if (r.rngs == nullptr) throw InputError("a generate request needs its samples' generators");
    check_ids(r.prompt, c, "the prompt");
    const size_t n = r.rngs->size();
    out[i].resize(n);
    first_slot[i] = positions.size();
    if (n == 0 || r.max_tokens <= 0) continue;
    std::vector<int32_t>& ids = prompts[i];
    ids.push_back(static_cast<int32_t>(c.eot_id));
    for (uint32_t t : r.prompt) ids.push_back(static_cast<int32_t>(t));
    positions.insert(positions.end(), n, static_cast<int64_t>(ids.size()) + r.max_tokens);
    prompted.push_back(i);
  }
  if (prompted.empty()) return out;
  make_caches(positions);
  std::vector<CachedSegment> segments;
  for (size_t i : prompted) segments.push_back({prompts[i], &caches_[first_slot[i]]});
  // All prompts in one forward, into the caches of their first samples; the logits of each
  // prompt's last row start all of its samples.
  model_.forward_cached_batch(segments, window_blocks_);
  std::vector<std::vector<float>> prompt_logits(requests.size());
  int64_t row = 0;
  for (size_t i : prompted) {
    row += static_cast<int64_t>(prompts[i].size());
    forward_row_logits(model_, row - 1, prompt_logits[i]);
  }
  copy_prefixes(first_slot);
  std::vector<Running> running;
  for (size_t i : prompted) {
    for (size_t s = 0; s < requests[i].rngs->size(); ++s) {
      running.push_back({i, s, first_slot[i] + s});
    }
  }
  // Each round: every running sample draws a token from its logits (the prompt's in the first
  // round), those that go on feed it together, and each gets its row's logits.
  const int64_t Vp = c.vocab_padded();
  bool first_round = true;
  std::vector<int32_t> drawn;
  while (!running.empty()) {
    // The draws run on the pool (each sample has its own generator, so the order they run in
    // changes nothing); the rest in order.
    drawn.resize(running.size());
    ThreadPool& pool = ThreadPool::current();
    sampling_.resize(static_cast<size_t>(pool.size()));
    pool.parallel_for(running.size(), [&](size_t k, int worker) {
      const Running& u = running[k];
      const GenerateRequest& r = requests[u.request];
      const std::span<const float> z =
          first_round ? std::span<const float>(prompt_logits[u.request])
                      : std::span<const float>(logits_.data() + static_cast<int64_t>(k) * Vp,
                                               static_cast<size_t>(Vp));
      drawn[k] = sample_token(z, c.vocab_size, r.settings, (*r.rngs)[u.sample],
                              sampling_[static_cast<size_t>(worker)]);
    });
    std::vector<Running> next_round;
    for (size_t k = 0; k < running.size(); ++k) {
      Running& u = running[k];
      const GenerateRequest& r = requests[u.request];
      const int32_t next = drawn[k];
      GeneratedSample& g = out[u.request][u.sample];
      if (next == c.eot_id) {
        g.hit_eot = true;
        continue;
      }
      g.tokens.push_back(static_cast<uint32_t>(next));
      if ((r.stop_here && r.stop_here(g.tokens)) ||
          static_cast<int64_t>(g.tokens.size()) == r.max_tokens) {
        continue;
      }
      u.next = next;
      next_round.push_back(u);
    }
    running = std::move(next_round);
    first_round = false;
    if (running.empty()) break;
    segments.clear();
    for (const Running& u : running)
      segments.push_back({std::span<const int32_t>(&u.next, 1), &caches_[u.slot]});
    model_.forward_cached_batch(segments, window_blocks_);
    forward_rows_logits(model_, 0, static_cast<int64_t>(running.size()), logits_);
  }
  return out;
}

}  // namespace nanogpt
