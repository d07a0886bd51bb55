// A conversation with a post-trained model, one reply at a time (issue 18, item 8): what
// `nanogpt chat` runs, so a person can try what training did. Each reply renders the history
// and the new user message as a chat-format prompt (data/chat_format.hpp) and samples the
// assistant's turn up to <|assistant_end|>; the exchange then joins the history.
//
// A session is reproducible from its seed: the same messages (and commands) give the same
// replies. Each turn draws from a generator of its own, seeded by the session's generator, so a
// turn's reply does not depend on how many tokens the earlier replies drew.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "model/sampling.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

struct ChatSessionOptions {
  SamplingSettings sampling{0.8, 50};
  int64_t max_tokens = 256;  // the longest reply, its end token included
  uint64_t seed = 0;
  // Put in front of the first user message (the chat format's system message); empty: none.
  // It is never forgotten, by clear() or when old exchanges make room.
  std::string system;
  // Tokens the model reads at most, prompt and reply; 0: the model's train_seq_len (what it
  // was trained on; longer contexts are untested).
  int64_t context = 0;
};

enum class ChatReplyEnd {
  kTurnEnded,      // the model ended its turn (<|assistant_end|>)
  kDocumentEnded,  // the model ended the document (<|endoftext|>) instead
  kMaxTokens,      // cut at max_tokens
};

struct ChatReply {
  std::string text;  // without the end token; bytes of a character cut at the end as U+FFFD
  ChatReplyEnd end = ChatReplyEnd::kTurnEnded;
  int64_t tokens = 0;  // sampled, the end token included
  // The oldest user/assistant exchanges forgotten so that the prompt and a reply of max_tokens
  // fit the context; they are gone from the history too.
  int64_t dropped_exchanges = 0;
  // false when the reply was empty (or whitespace), which a conversation cannot hold: neither
  // the user message nor the reply joined the history.
  bool kept = true;
};

class ChatSession {
 public:
  // InputError when the tokenizer has no chat tokens or another vocabulary than the model (both
  // messages say how to fix it), when options are out of range, or when max_tokens leaves no
  // room for a prompt in the context.
  ChatSession(ModelScorer& scorer, const BpeTokenizer& tokenizer,
              const ChatSessionOptions& options);

  // Appends the user message, samples the reply and appends it (see ChatReply). InputError
  // (the history unchanged) for a message that is empty, not UTF-8, or too long to fit the
  // context with a reply of max_tokens even alone.
  ChatReply reply(const std::string& user_text);

  // Forgets every exchange (the system message stays). The seed's generator goes on, so the
  // replies after a clear are new samples.
  void clear();

  // The conversation so far: the system message if any, then user and assistant alternating.
  const Conversation& history() const { return conversation_; }
  // The ids the last reply continued, <|endoftext|> to <|assistant_start|>; empty before one.
  const std::vector<uint32_t>& last_prompt() const { return last_prompt_; }

  const SamplingSettings& sampling() const { return sampling_; }
  // InputError unless temperature is finite in [0, 100] and top_k >= 0.
  void set_sampling(const SamplingSettings& sampling);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t context() const { return context_; }

 private:
  ModelScorer& scorer_;
  const BpeTokenizer& tokenizer_;
  ChatTokens chat_;
  SamplingSettings sampling_;
  int64_t max_tokens_;
  int64_t context_;
  Rng turn_seeds_;
  Conversation conversation_;
  std::vector<uint32_t> last_prompt_;
};

}  // namespace nanogpt
