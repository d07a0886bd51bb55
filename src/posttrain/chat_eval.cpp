#include "posttrain/chat_eval.hpp"

#include <algorithm>
#include <cstdio>

#include "eval/pass_at_k.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

void check_chat_eval_options(const ChatEvalOptions& options) {
  if (options.problems_per_cell < 1) {
    throw InputError(
        "chat evaluation: needs at least one problem per task and level (--eval-problems)");
  }
  if (options.samples < 1 || options.k < 1 || options.k > options.samples) {
    throw InputError("chat evaluation: needs 1 <= k <= samples (k " + std::to_string(options.k) +
                     ", samples " + std::to_string(options.samples) + ")");
  }
  if (options.max_tokens < 1) throw InputError("chat evaluation: --eval-max-tokens must be >= 1");
}

ChatEvalResult evaluate_chat_tasks(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                                   const ChatTokens& chat, const std::vector<TaskCell>& cells,
                                   const ChatEvalOptions& options) {
  check_chat_eval_options(options);
  const Config& c = scorer.config();
  const int64_t context =
      options.max_prompt_tokens > 0 ? options.max_prompt_tokens : c.train_seq_len;
  const std::vector<TaskInstance> problems =
      mixture_problems(cells, TaskSplit::kTest, options.seed, options.problems_per_cell);
  // Prompts without their first id: the scorer starts every sequence with <|endoftext|>, the
  // chat format's begin token.
  std::vector<std::vector<uint32_t>> prompts;
  for (size_t i = 0; i < problems.size(); ++i) {
    std::vector<uint32_t> ids =
        render_prompt(task_prompt_conversation(problems[i]), tokenizer, chat,
                      context - options.max_tokens, "test problem " + problems[i].canonical);
    ids.erase(ids.begin());
    prompts.push_back(std::move(ids));
  }
  SamplingSettings settings;
  settings.temperature = options.temperature;
  std::vector<std::vector<Rng>> rngs(problems.size());
  std::vector<GenerateRequest> requests;
  const uint32_t end = chat.assistant_end;
  for (size_t i = 0; i < problems.size(); ++i) {
    for (int64_t s = 0; s < options.samples; ++s) {
      rngs[i].emplace_back(options.seed * 0x9E3779B97F4A7C15ull + i * 1000003ull +
                           static_cast<uint64_t>(s));
    }
    GenerateRequest r;
    r.prompt = prompts[i];
    r.max_tokens = options.max_tokens;
    r.settings = settings;
    r.rngs = &rngs[i];
    r.stop_here = [end](const std::vector<uint32_t>& t) { return !t.empty() && t.back() == end; };
    requests.push_back(std::move(r));
  }
  const std::vector<std::vector<GeneratedSample>> replies = scorer.generate(requests);

  ChatEvalResult out;
  for (const TaskCell& cell : cells) out.cells.push_back(CellScore{cell});
  double tokens = 0, total_replies = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    CellScore& cs = out.cells[i % cells.size()];
    int64_t correct = 0;
    for (const GeneratedSample& g : replies[i]) {
      std::vector<uint32_t> reply = g.tokens;
      const bool ended = !reply.empty() && reply.back() == end;
      if (ended) reply.pop_back();
      const std::string text = tokenizer.decode(reply);
      const Reward r = verify(problems[i], text);
      correct += r.value >= 1.0 ? 1 : 0;
      cs.mean_reward += r.value;
      cs.mean_reply_tokens += static_cast<double>(g.tokens.size());
      cs.ended_fraction += ended ? 1.0 : 0.0;
      tokens += static_cast<double>(g.tokens.size());
      total_replies += 1;
      if (out.examples.size() < 8 && &g == &replies[i].front()) {
        out.examples.push_back({problems[i].question, text, r.value});
      }
    }
    const auto n = static_cast<int64_t>(replies[i].size());
    cs.problems += 1;
    cs.pass_at_1 += static_cast<double>(correct) / static_cast<double>(n);
    cs.pass_at_k += pass_at_k(n, correct, options.k);
  }
  double p1 = 0, pk = 0, count = 0;
  for (CellScore& cs : out.cells) {
    const double n = static_cast<double>(cs.problems);
    const double replies_n = n * static_cast<double>(options.samples);
    p1 += cs.pass_at_1;
    pk += cs.pass_at_k;
    count += n;
    cs.pass_at_1 /= n;
    cs.pass_at_k /= n;
    cs.mean_reward /= replies_n;
    cs.mean_reply_tokens /= replies_n;
    cs.ended_fraction /= replies_n;
  }
  out.pass_at_1 = p1 / count;
  out.pass_at_k = pk / count;
  out.mean_reply_tokens = tokens / total_replies;
  return out;
}

nlohmann::ordered_json chat_eval_json(const ChatEvalResult& result, int64_t step) {
  nlohmann::ordered_json cells = nlohmann::ordered_json::object();
  for (const CellScore& cs : result.cells) {
    cells[cs.cell.family + ":" + std::to_string(cs.cell.level)] = {
        {"pass@1", cs.pass_at_1},
        {"pass@k", cs.pass_at_k},
        {"reward", cs.mean_reward},
        {"problems", cs.problems},
        {"reply_tokens", cs.mean_reply_tokens},
        {"ended", cs.ended_fraction}};
  }
  return {{"step", step},
          {"eval",
           {{"pass@1", result.pass_at_1},
            {"pass@k", result.pass_at_k},
            {"reply_tokens", result.mean_reply_tokens},
            {"cells", cells}}}};
}

ChatEvalResult evaluate_and_record(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                                   const ChatTokens& chat, const std::vector<TaskCell>& cells,
                                   ChatEvalOptions options, int64_t seq_len,
                                   const RunDirectory* run, const std::string& stage,
                                   int64_t step) {
  options.max_prompt_tokens = seq_len;
  ChatEvalResult r = evaluate_chat_tasks(scorer, tokenizer, chat, cells, options);
  if (run == nullptr) return r;
  run->append_metrics(chat_eval_json(r, step));
  std::fprintf(stderr, "%s: step %lld: held-out pass@1 %.3f (", stage.c_str(),
               static_cast<long long>(step), r.pass_at_1);
  for (size_t i = 0; i < r.cells.size(); ++i) {
    const CellScore& cs = r.cells[i];
    std::fprintf(stderr, "%s%s:%d %.2f", i > 0 ? ", " : "", cs.cell.family.c_str(), cs.cell.level,
                 cs.pass_at_1);
  }
  if (options.k > 1) {
    std::fprintf(stderr, "), pass@%lld %.3f", static_cast<long long>(options.k), r.pass_at_k);
  } else {
    std::fprintf(stderr, ")");
  }
  std::fprintf(stderr, "; reply %.1f tokens\n", r.mean_reply_tokens);
  return r;
}

}  // namespace nanogpt
