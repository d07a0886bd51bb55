// Chatting with a checkpoint (posttrain/chat_session.hpp, `nanogpt chat`) on a micro model:
// replies reproducible from the seed, the history and the prompts built from it, old exchanges
// forgotten when the context is full, and the command's loop and errors end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "model/model_io.hpp"
#include "posttrain/chat_session.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/chat_checkpoint.hpp"
#include "support/fixtures.hpp"
#include "support/model.hpp"
#include "train/attention_window.hpp"

namespace nanogpt {
namespace {

// The micro checkpoint loaded, its weights perturbed so that its replies are not uniform noise
// (the initialisation's head is zero).
struct ChatModel {
  MicroChatCheckpoint files;
  BpeTokenizer tokenizer = BpeTokenizer::load(files.tokenizer);
  std::unique_ptr<Gpt> model = load_model(files.checkpoint);
  std::unique_ptr<ModelScorer> scorer;
  ChatModel() {
    randomize(*model, 7);
    const Config& c = model->config();
    scorer = std::make_unique<ModelScorer>(*model, attention_window_at(c, c.num_iterations));
  }
  ChatSession session(const ChatSessionOptions& o) { return ChatSession(*scorer, tokenizer, o); }
};

ChatSessionOptions short_replies(uint64_t seed = 3) {
  ChatSessionOptions o;
  o.max_tokens = 8;
  o.seed = seed;
  return o;
}

std::vector<uint32_t> concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kMessages = {"hello there", "how are you", "tell me a story",
                                            "what is the sun", "good night"};

TEST(ChatSession, TheSameSeedGivesTheSameReplies) {
  ChatModel m;
  ChatSession a = m.session(short_replies(3)), b = m.session(short_replies(3)),
              other = m.session(short_replies(4));
  bool differs = false;
  for (const std::string& text : kMessages) {
    const ChatReply ra = a.reply(text), rb = b.reply(text), ro = other.reply(text);
    EXPECT_EQ(ra.text, rb.text);
    EXPECT_EQ(ra.end, rb.end);
    EXPECT_EQ(ra.tokens, rb.tokens);
    EXPECT_GE(ra.tokens, 1);
    EXPECT_LE(ra.tokens, 8);
    EXPECT_EQ(ra.end == ChatReplyEnd::kMaxTokens,
              ra.tokens == 8 && ra.end != ChatReplyEnd::kTurnEnded);
    differs = differs || ra.text != ro.text;
  }
  EXPECT_EQ(a.history(), b.history());
  EXPECT_TRUE(differs) << "another seed, the same five replies";
  // Greedy is the same from any seed.
  ChatSessionOptions greedy = short_replies(1);
  greedy.sampling.temperature = 0;
  ChatSession g1 = m.session(greedy);
  greedy.seed = 2;
  ChatSession g2 = m.session(greedy);
  EXPECT_EQ(g1.reply("hello").text, g2.reply("hello").text);
}

TEST(ChatSession, HistoryGrowsByAnExchangePerTurnAndClearForgetsIt) {
  ChatModel m;
  ChatSession s = m.session(short_replies());
  EXPECT_TRUE(s.history().messages.empty());
  for (size_t turn = 0; turn < 3; ++turn) {
    const ChatReply r = s.reply(kMessages[turn]);
    ASSERT_TRUE(r.kept) << "an empty reply at turn " << turn;
    EXPECT_EQ(r.dropped_exchanges, 0);
    const std::vector<ChatMessage>& h = s.history().messages;
    ASSERT_EQ(h.size(), 2 * (turn + 1));
    EXPECT_EQ(h[2 * turn], (ChatMessage{ChatRole::kUser, kMessages[turn]}));
    EXPECT_EQ(h[2 * turn + 1], (ChatMessage{ChatRole::kAssistant, r.text}));
  }
  s.clear();
  EXPECT_TRUE(s.history().messages.empty());
  EXPECT_TRUE(s.last_prompt().empty());
  s.reply("again");
  EXPECT_EQ(s.history().messages.size(), 2u);

  // A system message leads the history and survives a clear.
  ChatSessionOptions o = short_replies();
  o.system = "You are terse.";
  ChatSession with_system = m.session(o);
  with_system.reply("hi");
  ASSERT_EQ(with_system.history().messages.size(), 3u);
  EXPECT_EQ(with_system.history().messages[0], (ChatMessage{ChatRole::kSystem, o.system}));
  with_system.clear();
  ASSERT_EQ(with_system.history().messages.size(), 1u);
  EXPECT_EQ(with_system.history().messages[0].role, ChatRole::kSystem);
}

TEST(ChatSession, EachPromptIsTheHistoryRenderedThenTheNewMessage) {
  ChatModel m;
  const ChatTokens chat = chat_tokens(m.tokenizer);
  ChatSession s = m.session(short_replies());
  auto encode = [&](const std::string& text) { return m.tokenizer.encode(text, false); };

  s.reply("hello");
  // Turn 1: <|endoftext|> <|user_start|> hello <|user_end|> <|assistant_start|>.
  EXPECT_EQ(s.last_prompt(), concat(concat({chat.bos, chat.user_start}, encode("hello")),
                                    {chat.user_end, chat.assistant_start}));
  const Conversation after_one = s.history();
  ASSERT_EQ(after_one.messages.size(), 2u);

  s.reply("more");
  // Turn 2: turn 1's exchange (the reply as text, between its start and end tokens), then the
  // new message.
  const std::vector<uint32_t> exchange =
      concat(concat(concat(concat({chat.bos, chat.user_start}, encode("hello")),
                           {chat.user_end, chat.assistant_start}),
                    encode(after_one.messages[1].content)),
             {chat.assistant_end});
  EXPECT_EQ(s.last_prompt(), concat(concat(concat(exchange, {chat.user_start}), encode("more")),
                                    {chat.user_end, chat.assistant_start}));
  EXPECT_EQ(render_conversation(after_one, m.tokenizer, chat, 1 << 20, "test").ids, exchange);
}

TEST(ChatSession, AFullContextForgetsTheOldestExchanges) {
  ChatModel m;
  const ChatTokens chat = chat_tokens(m.tokenizer);
  ChatSessionOptions o = short_replies();
  o.context = 64;
  o.system = "be kind";
  ChatSession s = m.session(o);
  int64_t dropped = 0;
  for (int turn = 0; turn < 12; ++turn) {
    const Conversation before = s.history();
    const std::string text = "message number " + std::to_string(turn);
    const ChatReply r = s.reply(text);
    ASSERT_TRUE(r.kept);
    // The prompt and a whole reply fit; what was forgotten is the oldest exchanges, in order.
    EXPECT_LE(static_cast<int64_t>(s.last_prompt().size()) + o.max_tokens, o.context);
    const std::vector<ChatMessage>& h = s.history().messages;
    ASSERT_EQ(h.size(), before.messages.size() + 2 - 2 * static_cast<size_t>(r.dropped_exchanges));
    EXPECT_EQ(h[0], (ChatMessage{ChatRole::kSystem, o.system}));
    for (size_t i = 1; i + 2 < h.size(); ++i) {
      EXPECT_EQ(h[i], before.messages[i + 2 * static_cast<size_t>(r.dropped_exchanges)]);
    }
    EXPECT_EQ(h[h.size() - 2].content, text);
    // The system message is still in front of the first user message the model reads.
    const std::vector<uint32_t> lead = concat(
        {chat.bos, chat.user_start}, m.tokenizer.encode(o.system + "\n\n" + h[1].content, false));
    EXPECT_TRUE(std::equal(lead.begin(), lead.end(), s.last_prompt().begin()));
    dropped += r.dropped_exchanges;
  }
  EXPECT_GT(dropped, 0) << "twelve exchanges fit 64 tokens";

  // A message too long even alone is refused, and the history stays as it was.
  const Conversation before = s.history();
  try {
    s.reply(std::string(80, 'x'));
    FAIL() << "a message longer than the context";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shorten the message"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.history(), before);
}

TEST(ChatSession, AnEmptyReplyLeavesTheHistoryAsItWas) {
  ChatModel m;
  const ChatTokens chat = chat_tokens(m.tokenizer);
  // A head that only knows <|assistant_end|> (+1 on every feature) and " " (-1): whichever wins,
  // the reply has no text.
  const int64_t d = m.model->config().model_dim;
  float* head = m.model->params().data("lm_head.weight");
  std::fill(head, head + m.model->config().vocab_padded() * d, 0.0f);
  const uint32_t space = m.tokenizer.encode(" ", false).at(0);
  std::fill(head + chat.assistant_end * d, head + (chat.assistant_end + 1) * d, 1.0f);
  std::fill(head + space * d, head + (space + 1) * d, -1.0f);
  ChatSessionOptions o = short_replies();
  o.sampling.temperature = 0;
  ChatSession s = m.session(o);
  const ChatReply r = s.reply("hello");
  EXPECT_FALSE(r.kept);
  EXPECT_TRUE(is_blank_content(r.text)) << r.text;
  EXPECT_TRUE(s.history().messages.empty());
  EXPECT_FALSE(s.last_prompt().empty());
}

TEST(ChatSession, RefusesWhatCannotWork) {
  ChatModel m;
  auto message_of = [&](auto&& make) -> std::string {
    try {
      make();
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  // A tokenizer without the chat tokens: the fix is named.
  const BpeTokenizer plain = chat_micro_tokenizer(false);
  EXPECT_NE(
      message_of([&] { ChatSession(*m.scorer, plain, short_replies()); }).find("<|user_start|>"),
      std::string::npos);
  // Another vocabulary than the model's.
  std::vector<std::pair<uint32_t, uint32_t>> merges = chat_micro_tokenizer().merges();
  merges.emplace_back(static_cast<uint32_t>('x'), static_cast<uint32_t>('y'));
  const BpeTokenizer bigger = BpeTokenizer::from_merges(merges, kChatSpecials);
  EXPECT_NE(message_of([&] {
              ChatSession(*m.scorer, bigger, short_replies());
            }).find("vocabulary of 300"),
            std::string::npos);
  // No room for a prompt beside the longest reply (micro_config's context: 128).
  ChatSessionOptions o = short_replies();
  o.max_tokens = 124;
  EXPECT_NE(message_of([&] { m.session(o); }).find("--max-tokens between 1 and 123"),
            std::string::npos);
  o.max_tokens = 123;
  EXPECT_NO_THROW(m.session(o));
  o = short_replies();
  o.system = " \n";
  EXPECT_NE(message_of([&] { m.session(o); }).find("--system"), std::string::npos);

  ChatSession s = m.session(short_replies());
  EXPECT_THROW(s.set_sampling({-0.5, 0}), InputError);
  EXPECT_THROW(s.set_sampling({std::nan(""), 0}), InputError);
  EXPECT_THROW(s.set_sampling({1.0, -1}), InputError);
  s.set_sampling({0.5, 7});
  EXPECT_EQ(s.sampling().temperature, 0.5);
  EXPECT_EQ(s.sampling().top_k, 7);
  EXPECT_THROW(s.reply("  "), InputError);
  EXPECT_NE(message_of([&] { s.reply("ok \xff"); }).find("not valid UTF-8 at byte 3"),
            std::string::npos);
  EXPECT_TRUE(s.history().messages.empty());
}

std::string chat_command(const MicroChatCheckpoint& f) {
  return "chat --checkpoint " + f.checkpoint + " --max-tokens 8 --seed 5";
}

TEST(ChatCli, TalksKeepsHistoryAndClearsIt) {
  MicroChatCheckpoint f;
  const std::string input = "hello\n/history\n/clear\n/history\n/quit\nnever sent\n";
  const CommandResult r = run_nanogpt(chat_command(f), input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& out = r.out;
  // No prompt when stdin is not a terminal; one reply; the history before and after /clear.
  EXPECT_EQ(out.find("you>"), std::string::npos) << out;
  const size_t reply = out.find("assistant> ");
  ASSERT_NE(reply, std::string::npos) << out;
  EXPECT_EQ(out.find("assistant> ", reply + 1), std::string::npos) << out;
  const size_t user = out.find("user: hello\n", reply);
  ASSERT_NE(user, std::string::npos) << out;
  EXPECT_NE(out.find("assistant: ", user), std::string::npos) << out;
  const size_t cleared = out.find("(history cleared)", user);
  ASSERT_NE(cleared, std::string::npos) << out;
  EXPECT_NE(out.find("(no messages)", cleared), std::string::npos) << out;
  EXPECT_EQ(out.find("user: ", cleared), std::string::npos) << out;
  // The same seed, the same transcript.
  EXPECT_EQ(run_nanogpt(chat_command(f), input).out, out);
}

TEST(ChatCli, CommandsChangeTheSamplingAndBadOnesAreReportedNotFatal) {
  MicroChatCheckpoint f;
  const CommandResult r = run_nanogpt(
      chat_command(f) + " --system 'Be brief.'",
      "/temperature 0\n/topk 3\n/temperature hot\n/topk -1\n/nonsense\n/help\nhi\n/history\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;  // EOF ends the chat too
  EXPECT_NE(r.out.find("temperature 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("top-k 3"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("/temperature"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/topk"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown command /nonsense"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("/clear"), std::string::npos) << r.out;  // the help
  EXPECT_NE(r.out.find("system: Be brief.\nuser: hi\n"), std::string::npos) << r.out;
  // The greedy reply of the zero head is byte 0 eight times: shown escaped, never raw.
  EXPECT_NE(r.out.find("assistant> \\x00\\x00"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\0'), std::string::npos);
}

TEST(ChatCli, ACheckpointItCannotChatWithExitsWithTheFix) {
  MicroChatCheckpoint plain(false);  // its tokenizer predates the chat tokens
  CommandResult r = run_nanogpt(chat_command(plain), "hello\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("<|user_start|>"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nanogpt tokenizer train"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("assistant> "), std::string::npos) << r.out;

  // A tokenizer with the chat tokens but another vocabulary than the model's.
  MicroChatCheckpoint f;
  std::vector<std::pair<uint32_t, uint32_t>> merges = chat_micro_tokenizer().merges();
  merges.emplace_back(static_cast<uint32_t>('x'), static_cast<uint32_t>('y'));
  const std::string other = f.dir.path() + "/other.json";
  write_file_atomic(other, BpeTokenizer::from_merges(merges, kChatSpecials).to_json());
  r = run_nanogpt(chat_command(f) + " --tokenizer " + other, "hello\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("vocabulary of 300"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nanogpt
