#include "posttrain/rollouts.hpp"

#include "eval/task_registry.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

namespace {

// Sample g of prompt i at a step: a generator of its own, so batching changes nothing.
uint64_t sample_seed(uint64_t seed, int64_t step, size_t prompt, size_t sample) {
  Rng mix(seed ^ 0xA0761D6478BD642Full);
  uint64_t s = mix.next_u64() + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull;
  s ^= (static_cast<uint64_t>(prompt) + 1) * 0xBF58476D1CE4E5B9ull;
  s ^= (static_cast<uint64_t>(sample) + 1) * 0x94D049BB133111EBull;
  return Rng(s).next_u64();
}

}  // namespace

std::vector<TaskInstance> rollout_problems(const std::vector<TaskCell>& cells, uint64_t seed,
                                           int64_t step, int64_t prompts) {
  std::vector<TaskInstance> problems;
  const auto P = static_cast<uint64_t>(prompts);
  for (uint64_t i = 0; i < P; ++i) {
    const uint64_t index = static_cast<uint64_t>(step) * P + i;
    const TaskCell& cell = cells[index % cells.size()];
    problems.push_back(
        generate_task(cell.family, cell.level, TaskSplit::kTrain, seed, index / cells.size()));
  }
  return problems;
}

std::vector<uint32_t> rollout_prompt(const TaskInstance& problem, const BpeTokenizer& tokenizer,
                                     const ChatTokens& chat, int64_t seq_len, int64_t max_tokens) {
  std::vector<uint32_t> ids =
      render_prompt(task_prompt_conversation(problem), tokenizer, chat, seq_len + 1 - max_tokens,
                    "train problem " + problem.canonical);
  ids.erase(ids.begin());  // the scorer starts every sequence with <|endoftext|>
  return ids;
}

std::vector<std::vector<GeneratedSample>> sample_completions(
    ModelScorer& scorer, std::span<const std::vector<uint32_t>> prompts,
    const RolloutSampling& settings, RolloutBatching batching) {
  const size_t P = prompts.size();
  const auto G = static_cast<size_t>(settings.group_size);
  const uint32_t end = settings.assistant_end;
  auto request_for = [&](size_t i, std::vector<Rng>& rngs) {
    GenerateRequest r;
    r.prompt = prompts[i];
    r.max_tokens = settings.max_tokens;
    r.settings = settings.sampling;
    r.rngs = &rngs;
    r.stop_here = [end](const std::vector<uint32_t>& t) { return !t.empty() && t.back() == end; };
    return r;
  };
  if (batching == RolloutBatching::kBatched) {
    std::vector<std::vector<Rng>> rngs(P);
    std::vector<GenerateRequest> requests;
    for (size_t i = 0; i < P; ++i) {
      for (size_t g = 0; g < G; ++g) {
        rngs[i].emplace_back(
            sample_seed(settings.seed, settings.step, settings.first_prompt + i, g));
      }
      requests.push_back(request_for(i, rngs[i]));
    }
    return scorer.generate(requests);
  }
  std::vector<std::vector<GeneratedSample>> out(P);
  for (size_t i = 0; i < P; ++i) {
    for (size_t g = 0; g < G; ++g) {
      std::vector<Rng> rng = {
          Rng(sample_seed(settings.seed, settings.step, settings.first_prompt + i, g))};
      const GenerateRequest r = request_for(i, rng);
      out[i].push_back(std::move(scorer.generate(std::span<const GenerateRequest>(&r, 1))[0][0]));
    }
  }
  return out;
}

FlopCount rollout_flops(const Config& c, int64_t window_blocks,
                        std::span<const std::vector<uint32_t>> prompts,
                        std::span<const std::vector<GeneratedSample>> completions) {
  const double head_row = 2.0 * static_cast<double>(c.vocab_padded() * c.model_dim);
  FlopCount total;
  for (size_t i = 0; i < prompts.size() && i < completions.size(); ++i) {
    const auto rows = static_cast<int64_t>(prompts[i].size()) + 1;  // + <|endoftext|>
    FlopCount prefill = sequence_flops(c, rows, window_blocks, false);
    prefill.lm_head_fwd = head_row;
    total += prefill;
    for (const GeneratedSample& s : completions[i]) {
      const int64_t fed = sampled_tokens(s) - 1;
      if (fed <= 0) continue;
      FlopCount more = sequence_flops(c, rows + fed, window_blocks, false);
      const FlopCount before = sequence_flops(c, rows, window_blocks, false);
      more.linear_fwd -= before.linear_fwd;
      more.attention_fwd -= before.attention_fwd;
      more.lm_head_fwd = head_row * static_cast<double>(fed);
      total += more;
    }
  }
  return total;
}

int64_t sampled_tokens(const GeneratedSample& completion) {
  return static_cast<int64_t>(completion.tokens.size()) + (completion.hit_eot ? 1 : 0);
}

}  // namespace nanogpt
