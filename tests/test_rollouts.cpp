// RL's sampling step (posttrain/rollouts.hpp) on a micro model: the prompts are the mixture's
// train stream, step after step, and what a sample draws does not depend on how the samples are
// batched or on the thread count (each has its own generator), so `nanogpt bench rollout
// --batch-one` times the same work as the batched figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "model/model_io.hpp"
#include "posttrain/rollouts.hpp"
#include "posttrain/task_conversations.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"
#include "support/chat_checkpoint.hpp"

namespace nanogpt {
namespace {

std::vector<std::string> canonicals(const std::vector<TaskInstance>& problems) {
  std::vector<std::string> out;
  for (const TaskInstance& p : problems) out.push_back(p.canonical);
  return out;
}

TEST(Rollouts, StepsWalkTheMixturesTrainStream) {
  const std::vector<TaskCell> cells = parse_task_mixture("addition:1-2,reverse:1");
  const std::vector<TaskInstance> stream = mixture_problems(cells, TaskSplit::kTrain, 7, 4);
  ASSERT_EQ(stream.size(), 12u);
  const std::vector<std::string> all = canonicals(stream);
  // Five prompts a step: step 0 is the stream's first five, step 1 the next five.
  EXPECT_EQ(canonicals(rollout_problems(cells, 7, 0, 5)),
            std::vector<std::string>(all.begin(), all.begin() + 5));
  EXPECT_EQ(canonicals(rollout_problems(cells, 7, 1, 5)),
            std::vector<std::string>(all.begin() + 5, all.begin() + 10));
  for (const TaskInstance& p : rollout_problems(cells, 7, 0, 5)) {
    EXPECT_EQ(p.split, TaskSplit::kTrain);
  }
}

TEST(Rollouts, PromptsAreTheChatFormatWithoutTheBeginToken) {
  const BpeTokenizer tok = chat_micro_tokenizer();
  const ChatTokens chat = chat_tokens(tok);
  const TaskInstance problem = rollout_problems(parse_task_mixture("addition:1"), 0, 0, 1)[0];
  const std::vector<uint32_t> rendered =
      render_prompt(task_prompt_conversation(problem), tok, chat, 128, "test");
  const std::vector<uint32_t> prompt = rollout_prompt(problem, tok, chat, 128, 8);
  EXPECT_EQ(rendered.front(), chat.bos);
  EXPECT_EQ(prompt, std::vector<uint32_t>(rendered.begin() + 1, rendered.end()));
  EXPECT_EQ(prompt.front(), chat.user_start);
  EXPECT_EQ(prompt.back(), chat.assistant_start);
  // Prompt and completion must fit the rows RL trains on: begin token + prompt + max_tokens.
  const auto room = static_cast<int64_t>(rendered.size());
  EXPECT_NO_THROW(rollout_prompt(problem, tok, chat, 128, 128 - room));
  EXPECT_THROW(rollout_prompt(problem, tok, chat, 128, 129 - room), InputError);
}

TEST(Rollouts, OneAtATimeSamplesWhatTheBatchSamples) {
  const MicroChatCheckpoint f;
  const BpeTokenizer tok = BpeTokenizer::load(f.tokenizer);
  const ChatTokens chat = chat_tokens(tok);
  const std::unique_ptr<Gpt> model = load_model(f.checkpoint);
  ModelScorer scorer(*model, 4);
  std::vector<std::vector<uint32_t>> prompts;
  for (const TaskInstance& p :
       rollout_problems(parse_task_mixture("addition:1-2,reverse:1"), 3, 0, 3)) {
    prompts.push_back(rollout_prompt(p, tok, chat, model->config().train_seq_len, 10));
  }
  for (double temperature : {1.0, 0.0}) {
    RolloutSampling s;
    s.group_size = 4;
    s.max_tokens = 10;
    s.sampling.temperature = temperature;
    s.seed = 11;
    s.step = 2;
    s.assistant_end = chat.assistant_end;
    const auto batched = sample_completions(scorer, prompts, s, RolloutBatching::kBatched);
    const auto one = sample_completions(scorer, prompts, s, RolloutBatching::kOneAtATime);
    ThreadPool single(1);
    const ThreadPool::Use use(single);
    const auto one_thread = sample_completions(scorer, prompts, s, RolloutBatching::kBatched);
    ASSERT_EQ(batched.size(), prompts.size());
    int64_t tokens = 0;
    std::vector<std::vector<uint32_t>> distinct;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(batched[i].size(), 4u);
      ASSERT_EQ(one[i].size(), 4u);
      for (size_t g = 0; g < 4; ++g) {
        const GeneratedSample& b = batched[i][g];
        EXPECT_EQ(b.tokens, one[i][g].tokens) << "prompt " << i << " sample " << g;
        EXPECT_EQ(b.hit_eot, one[i][g].hit_eot) << "prompt " << i << " sample " << g;
        EXPECT_EQ(b.tokens, one_thread[i][g].tokens) << "prompt " << i << " sample " << g;
        EXPECT_LE(b.tokens.size(), 10u);
        EXPECT_TRUE(b.hit_eot || b.tokens.size() == 10u ||
                    (!b.tokens.empty() && b.tokens.back() == chat.assistant_end));
        tokens += sampled_tokens(b);
        if (std::find(distinct.begin(), distinct.end(), b.tokens) == distinct.end()) {
          distinct.push_back(b.tokens);
        }
      }
    }
    EXPECT_GT(tokens, 0);
    // Sampled: each sample its own draw; greedy: one completion per prompt.
    if (temperature > 0) {
      EXPECT_GT(distinct.size(), prompts.size());
    } else {
      EXPECT_LE(distinct.size(), prompts.size());
    }
  }
}

}  // namespace
}  // namespace nanogpt

namespace nanogpt {
namespace {

// A rollout's FLOPs: one sample is the forward of its prompt and fed tokens as one sequence,
// with the head on its prompt's last row and on each fed token (the rows whose logits are
// drawn from); a group's samples share the prompt's prefill and its head row.
TEST(Rollouts, FlopsAreEachPrefillOnceAndEachFedToken) {
  Config c = micro_config();
  c.vocab_size = 300;
  const int64_t window = 2;
  const std::vector<std::vector<uint32_t>> prompts = {std::vector<uint32_t>(20, 7)};
  GeneratedSample a, b;
  a.tokens = std::vector<uint32_t>(9, 5);  // 9 draws: 8 fed
  b.tokens = std::vector<uint32_t>(3, 5);
  b.hit_eot = true;  // 4 draws: 3 fed
  const double head_row = 2.0 * static_cast<double>(c.vocab_padded() * c.model_dim);
  const std::vector<std::vector<GeneratedSample>> one = {{a}};
  const FlopCount f1 = rollout_flops(c, window, prompts, one);
  const FlopCount whole = sequence_flops(c, 21 + 8, window, false);
  EXPECT_DOUBLE_EQ(f1.linear_fwd, whole.linear_fwd);
  EXPECT_DOUBLE_EQ(f1.attention_fwd, whole.attention_fwd);
  EXPECT_DOUBLE_EQ(f1.lm_head_fwd, 9 * head_row);
  const std::vector<std::vector<GeneratedSample>> two = {{a, b}};
  const FlopCount f2 = rollout_flops(c, window, prompts, two);
  const FlopCount more_b = sequence_flops(c, 21 + 3, window, false);
  const FlopCount prefill = sequence_flops(c, 21, window, false);
  EXPECT_DOUBLE_EQ(f2.linear_fwd, whole.linear_fwd + more_b.linear_fwd - prefill.linear_fwd);
  EXPECT_DOUBLE_EQ(f2.attention_fwd,
                   whole.attention_fwd + more_b.attention_fwd - prefill.attention_fwd);
  EXPECT_DOUBLE_EQ(f2.lm_head_fwd, (1 + 8 + 3) * head_row);
}

}  // namespace
}  // namespace nanogpt
