#include "posttrain/chat_session.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "data/utf8.hpp"
#include "posttrain/posttrain_checkpoint.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

// The shortest prompt: <|endoftext|> <|user_start|> one token <|user_end|> <|assistant_start|>.
constexpr int64_t kShortestPrompt = 5;

}  // namespace

ChatSession::ChatSession(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                         const ChatSessionOptions& options)
    : scorer_(scorer),
      tokenizer_(tokenizer),
      chat_(chat_tokens(tokenizer)),
      max_tokens_(options.max_tokens),
      context_(options.context > 0 ? options.context : scorer.config().train_seq_len),
      turn_seeds_(options.seed) {
  check_chat_vocabulary(scorer.config(), tokenizer, chat_, tokenizer.spec());
  set_sampling(options.sampling);
  if (max_tokens_ < 1 || max_tokens_ + kShortestPrompt > context_) {
    throw InputError(
        "chat: a reply of up to " + std::to_string(max_tokens_) +
        " tokens (--max-tokens) leaves no room for a prompt in the model's context of " +
        std::to_string(context_) + " tokens (a prompt takes " + std::to_string(kShortestPrompt) +
        " at least): pass --max-tokens between 1 and " +
        std::to_string(context_ - kShortestPrompt));
  }
  if (!options.system.empty()) {
    // Checked once here (not UTF-8, blank) rather than failing every reply.
    validate_conversation(
        Conversation{{{ChatRole::kSystem, options.system}, {ChatRole::kUser, "?"}}},
        "chat: the system message (--system)");
    conversation_.messages.push_back({ChatRole::kSystem, options.system});
  }
}

void ChatSession::set_sampling(const SamplingSettings& sampling) {
  if (!std::isfinite(sampling.temperature) || sampling.temperature < 0 ||
      sampling.temperature > 100) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", sampling.temperature);
    throw InputError(std::string("chat: temperature ") + shown +
                     " is out of range (--temperature, /temperature): give a number from 0 "
                     "(greedy) to 100");
  }
  if (sampling.top_k < 0) {
    throw InputError("chat: top-k " + std::to_string(sampling.top_k) +
                     " is out of range (--top-k, /topk): give 0 (every token) or a positive "
                     "count");
  }
  sampling_ = sampling;
}

void ChatSession::clear() {
  const bool has_system =
      !conversation_.messages.empty() && conversation_.messages[0].role == ChatRole::kSystem;
  conversation_.messages.resize(has_system ? 1 : 0);
  last_prompt_.clear();
}

ChatReply ChatSession::reply(const std::string& user_text) {
  if (const size_t bad = find_invalid_utf8(user_text); bad != std::string::npos) {
    throw InputError("chat: the message is not valid UTF-8 at byte " + std::to_string(bad) +
                     "; send text in UTF-8 (check the terminal's encoding)");
  }
  if (is_blank_content(user_text)) {
    throw InputError("chat: the message is empty; type some text (or /help for the commands)");
  }
  // Everything happens on a copy: an error leaves the history as it was.
  Conversation trial = conversation_;
  trial.messages.push_back({ChatRole::kUser, user_text});
  validate_conversation(trial, "chat");
  const size_t first_turn = trial.messages[0].role == ChatRole::kSystem ? size_t{1} : size_t{0};
  ChatReply out;
  std::vector<uint32_t> prompt;
  for (;;) {
    // No limit in render_prompt: the fit is checked here, against prompt + reply.
    prompt = render_prompt(trial, tokenizer_, chat_, std::numeric_limits<int64_t>::max(), "chat");
    if (static_cast<int64_t>(prompt.size()) + max_tokens_ <= context_) break;
    if (trial.messages.size() - first_turn < 3) {
      // The history is already forgotten (or there is none): the message itself is too long.
      throw InputError("chat: the message makes a prompt of " + std::to_string(prompt.size()) +
                       " tokens" + (first_turn == 1 ? " with the system message" : "") +
                       ", but the model's context of " + std::to_string(context_) +
                       " tokens leaves " + std::to_string(context_ - max_tokens_) +
                       " for a prompt beside a reply of up to " + std::to_string(max_tokens_) +
                       " (--max-tokens): shorten the message" +
                       (first_turn == 1 ? " or the system message" : "") +
                       ", or restart with a smaller --max-tokens");
    }
    // The oldest exchange goes; the system message stays in front of the next user message.
    trial.messages.erase(trial.messages.begin() + static_cast<std::ptrdiff_t>(first_turn),
                         trial.messages.begin() + static_cast<std::ptrdiff_t>(first_turn + 2));
    ++out.dropped_exchanges;
  }

  // The scorer puts <|endoftext|> (the prompt's first id) in front of every sequence itself.
  const std::vector<uint32_t> continued(prompt.begin() + 1, prompt.end());
  std::vector<Rng> rngs{Rng(turn_seeds_.next_u64())};
  const uint32_t end = chat_.assistant_end;
  GeneratedSample sample =
      std::move(scorer_
                    .generate(continued, max_tokens_, sampling_, rngs,
                              [end](const std::vector<uint32_t>& t) { return t.back() == end; })
                    .at(0));
  std::vector<uint32_t>& tokens = sample.tokens;
  out.tokens = static_cast<int64_t>(tokens.size()) + (sample.hit_eot ? 1 : 0);
  if (sample.hit_eot) {
    out.end = ChatReplyEnd::kDocumentEnded;
  } else if (!tokens.empty() && tokens.back() == end) {
    out.end = ChatReplyEnd::kTurnEnded;
    tokens.pop_back();
  } else {
    out.end = ChatReplyEnd::kMaxTokens;
  }
  // Special tokens the model sampled inside its turn decode as their text; stored as text they
  // are encoded as plain text again next turn, so a reply cannot forge a turn either.
  out.text = valid_utf8(tokenizer_.decode(tokens));

  last_prompt_ = prompt;
  trial.messages.pop_back();  // the user message, kept only with a reply
  if (is_blank_content(out.text)) {
    out.kept = false;
  } else {
    trial.messages.push_back({ChatRole::kUser, user_text});
    trial.messages.push_back({ChatRole::kAssistant, out.text});
  }
  conversation_ = std::move(trial);
  return out;
}

}  // namespace nanogpt
