// Conversations for post-training, and how they become token ids: the chat format.
//
// A conversation is an optional system message, then user and assistant messages alternating,
// starting with user. In JSON Lines, one per line:
//   {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
// Rendered as nanochat does (its tool-use tokens aside):
//   <|endoftext|> <|user_start|> Hi <|user_end|> <|assistant_start|> Hello <|assistant_end|>
// with a loss on the assistant's tokens and its end token only: the model learns to answer and
// to stop, never to imitate the user. A system message has no tokens of its own: it is put in
// front of the first user message ("SYSTEM\n\nUSER").
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.hpp"

namespace nanogpt {

// The ids of the chat format's tokens in one tokenizer. bos is <|endoftext|>: shards put it
// before every document, so a pre-trained model already reads it as "a text begins".
struct ChatTokens {
  uint32_t bos, user_start, user_end, assistant_start, assistant_end;
};

// InputError naming what is missing when the tokenizer predates the chat tokens, and the fix.
ChatTokens chat_tokens(const BpeTokenizer& tokenizer);

enum class ChatRole { kSystem, kUser, kAssistant };

// "system", "user", "assistant": the JSON spelling.
std::string_view chat_role_name(ChatRole role);

struct ChatMessage {
  ChatRole role;
  std::string content;
  bool operator==(const ChatMessage&) const = default;
};

struct Conversation {
  std::vector<ChatMessage> messages;
  bool operator==(const Conversation&) const = default;
};

// Whether the text is empty or only whitespace (Unicode White_Space, as the
// pre-tokenizer sees it): such a message is refused, so a sampled reply is checked with it
// before it joins a conversation.
bool is_blank_content(std::string_view text);

// The rules every conversation must meet, for ones built in code too: at least one message; a
// system message only first, followed by a user message; then user and assistant alternating,
// starting with user; content valid UTF-8 and not empty or whitespace only. InputError
// otherwise, as "WHERE: message N: ..." (N from 1).
void validate_conversation(const Conversation& conversation, const std::string& where);

// Reads {"messages": [{"role": ..., "content": ...}, ...]} and validates it. Other top-level
// keys (an id, a source) are ignored; a message with any key but role and content is refused,
// since a misspelt key would otherwise lose its text silently. `where` starts every error
// ("FILE:LINE").
Conversation conversation_from_json(const nlohmann::json& json, const std::string& where);
// The inverse, keys in the order a person writes them (role, then content): parsed back, a
// valid conversation gives itself again.
nlohmann::ordered_json conversation_to_json(const Conversation& conversation);

// One conversation per line; blank lines are skipped. Errors name FILE:LINE, for malformed JSON
// too (with the parser's message); a file without any conversation is an error.
std::vector<Conversation> read_conversations_jsonl(const std::string& path);
// Validates every conversation (errors name "conversation K", from 1), then writes them one per
// line, atomically; read_conversations_jsonl gives them back equal.
void write_conversations_jsonl(const std::string& path,
                               const std::vector<Conversation>& conversations);

// loss_mask[i] is 1 iff ids[i] is an assistant content token or <|assistant_end|>, so a trainer
// predicts ids[1:] from ids[:-1] with the losses weighted by loss_mask[1:]. A conversation that
// ends with a user message renders that turn too, without loss.
struct RenderedConversation {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> loss_mask;
};

// The conversation (validated) as ids. Content is encoded with allow_special = false, so text
// that spells a special token ("<|user_end|>") stays text and cannot forge a turn. InputError
// "WHERE: ..." naming both lengths when it renders to more than max_tokens tokens (the context
// it will be trained in).
RenderedConversation render_conversation(const Conversation& conversation,
                                         const BpeTokenizer& tokenizer, const ChatTokens& tokens,
                                         int64_t max_tokens, const std::string& where);

// What a sampler continues: a conversation that ends with a user message, rendered as above and
// followed by <|assistant_start|>. The reply is the tokens sampled up to <|assistant_end|>.
// InputError unless it ends with a user message, or unless it is shorter than max_tokens (one
// token at least is left for the reply).
std::vector<uint32_t> render_prompt(const Conversation& conversation, const BpeTokenizer& tokenizer,
                                    const ChatTokens& tokens, int64_t max_tokens,
                                    const std::string& where);

}  // namespace nanogpt
