#include "posttrain/policy_pairs.hpp"

#include "data/utf8.hpp"
#include "eval/task_registry.hpp"
#include "posttrain/rollouts.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

PolicyPairs sample_policy_pairs(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                                const ChatTokens& chat, const std::vector<TaskCell>& cells,
                                const PolicyPairOptions& o) {
  if (o.problems < 1 || o.group_size < 2 || o.max_tokens < 1 || !(o.temperature > 0)) {
    throw InputError(
        "on-policy pairs need problems >= 1, a group of 2 or more, max_tokens >= 1 "
        "and a temperature > 0");
  }
  // The problems as RL's first step would draw them, in one batch of `problems` prompts.
  const std::vector<TaskInstance> problems = rollout_problems(cells, o.seed, 0, o.problems);
  std::vector<std::vector<uint32_t>> prompts;
  for (const TaskInstance& p : problems) {
    prompts.push_back(rollout_prompt(p, tokenizer, chat, o.seq_len, o.max_tokens));
  }
  RolloutSampling rs;
  rs.group_size = o.group_size;
  rs.max_tokens = o.max_tokens;
  rs.sampling.temperature = o.temperature;
  rs.seed = o.seed ^ 0x5DEECE66Dull;  // not RL's stream for the same seed
  rs.assistant_end = chat.assistant_end;
  const auto samples = sample_completions(scorer, prompts, rs);
  PolicyPairs out;
  double rewards = 0, count = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    ++out.problems;
    std::string best, worst;
    double best_r = -1, worst_r = 2;
    for (const GeneratedSample& g : samples[i]) {
      std::vector<uint32_t> ids = g.tokens;
      if (!ids.empty() && ids.back() == chat.assistant_end) ids.pop_back();
      std::string text = tokenizer.decode(ids);
      const double r = verify(problems[i], text).value;
      rewards += r;
      count += 1;
      // A reply must be a valid message: whole UTF-8 characters (a sample may stop inside one:
      // cut bytes become U+FFFD) and not empty (the model may end at once).
      text = valid_utf8(text);
      if (is_blank_content(text)) text = "(no answer)";
      if (r > best_r) {
        best_r = r;
        best = text;
      }
      if (r < worst_r) {
        worst_r = r;
        worst = text;
      }
    }
    if (best_r <= worst_r) {
      ++out.uniform_problems;
      continue;
    }
    out.pairs.push_back({task_prompt_conversation(problems[i]), best, worst});
  }
  out.mean_reward = rewards / count;
  return out;
}

}  // namespace nanogpt
