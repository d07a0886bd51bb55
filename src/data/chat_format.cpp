#include "data/chat_format.hpp"

#include <nlohmann/json.hpp>

#include "data/unicode_class.hpp"
#include "data/utf8.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

constexpr const char* kConversationShape =
    "a conversation is {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, {\"role\": "
    "\"assistant\", \"content\": \"...\"}, ...]}";

// A JSON string with its quotes and escapes, so an error shows exactly what the file says.
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string message_label(size_t index) {
  return "message " + std::to_string(index + 1) + ": ";
}

}  // namespace

ChatTokens chat_tokens(const BpeTokenizer& tokenizer) {
  std::string missing;
  auto id = [&](std::string_view text) -> uint32_t {
    if (auto found = tokenizer.find_special(text)) return *found;
    missing += (missing.empty() ? "" : ", ") + std::string(text);
    return kNoToken;
  };
  // Braced initialisers run in order, so `missing` lists the tokens in id order.
  const ChatTokens tokens{id(kEndOfText), id(kUserStart), id(kUserEnd), id(kAssistantStart),
                          id(kAssistantEnd)};
  if (!missing.empty()) {
    throw InputError("tokenizer '" + tokenizer.spec() + "' has no " + missing +
                     ": it predates the chat tokens. Retrain it with `nanogpt tokenizer train` "
                     "(which reserves them by default) and pre-train on shards made with it, or "
                     "use gpt2:DIR (GPT-2's tokenizer has them after <|endoftext|>)");
  }
  return tokens;
}

// A message of no-break spaces counts as empty too; a byte that is not UTF-8 is not blank.
bool is_blank_content(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const int length = decode_utf8(text, i, &cp);
    if (length == 0 || classify_code_point(cp) != CharClass::kWhitespace) return false;
    i += static_cast<size_t>(length);
  }
  return true;
}

std::string_view chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem:
      return "system";
    case ChatRole::kUser:
      return "user";
    case ChatRole::kAssistant:
      return "assistant";
  }
  return "?";
}

void validate_conversation(const Conversation& conversation, const std::string& where) {
  auto fail = [&](const std::string& why) { return InputError(where + ": " + why); };
  const std::vector<ChatMessage>& messages = conversation.messages;
  if (messages.empty()) {
    throw fail("\"messages\" is empty; a conversation needs at least one user message");
  }
  const size_t first_turn = messages[0].role == ChatRole::kSystem ? 1 : 0;
  if (first_turn == 1 && messages.size() == 1) {
    throw fail(message_label(0) + "a system message must be followed by a user message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i >= first_turn) {
      const ChatRole expected = (i - first_turn) % 2 == 0 ? ChatRole::kUser : ChatRole::kAssistant;
      if (m.role == ChatRole::kSystem) {
        throw fail(message_label(i) + "a system message may only be the first message");
      }
      if (m.role != expected) {
        throw fail(message_label(i) + "expected " +
                   (expected == ChatRole::kUser ? "a user" : "an assistant") + " message, found " +
                   std::string(chat_role_name(m.role)) +
                   " (after an optional system message, user and assistant messages alternate, "
                   "starting with user)");
      }
    }
    const size_t bad = find_invalid_utf8(m.content);
    if (bad != std::string_view::npos) {
      throw fail(message_label(i) + "content is not valid UTF-8 at byte " + std::to_string(bad));
    }
    if (is_blank_content(m.content)) {
      throw fail(message_label(i) + std::string(chat_role_name(m.role)) +
                 " content is empty (or only whitespace); every message needs text");
    }
  }
}

Conversation conversation_from_json(const nlohmann::json& json, const std::string& where) {
  auto fail = [&](const std::string& why) { return InputError(where + ": " + why); };
  if (!json.is_object()) {
    throw fail(std::string("expected an object, found ") + json.type_name() + "; " +
               kConversationShape);
  }
  const auto list = json.find("messages");
  if (list == json.end()) throw fail(std::string("missing \"messages\"; ") + kConversationShape);
  if (!list->is_array()) {
    throw fail(std::string("\"messages\" must be an array, found ") + list->type_name() + "; " +
               kConversationShape);
  }
  Conversation conversation;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& m = (*list)[i];
    const std::string at = message_label(i);
    if (!m.is_object()) {
      throw fail(at + "expected an object {\"role\": ..., \"content\": ...}, found " +
                 m.type_name());
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content") {
        throw fail(at + "unknown key " + quoted(key) +
                   "; a message has only \"role\" and \"content\"");
      }
    }
    const auto role = m.find("role");
    if (role == m.end()) throw fail(at + "missing \"role\" (system, user or assistant)");
    if (!role->is_string()) {
      throw fail(at + "\"role\" must be a string, found " + role->type_name());
    }
    const std::string& name = role->get_ref<const std::string&>();
    ChatMessage message;
    if (name == "system") {
      message.role = ChatRole::kSystem;
    } else if (name == "user") {
      message.role = ChatRole::kUser;
    } else if (name == "assistant") {
      message.role = ChatRole::kAssistant;
    } else {
      throw fail(at + "role " + quoted(name) + " is not one of system, user, assistant");
    }
    const auto content = m.find("content");
    if (content == m.end()) throw fail(at + "missing \"content\"");
    if (!content->is_string()) {
      throw fail(at + "\"content\" must be a string, found " + content->type_name());
    }
    message.content = content->get<std::string>();
    conversation.messages.push_back(std::move(message));
  }
  validate_conversation(conversation, where);
  return conversation;
}

nlohmann::ordered_json conversation_to_json(const Conversation& conversation) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const ChatMessage& m : conversation.messages) {
    nlohmann::ordered_json message;
    message["role"] = std::string(chat_role_name(m.role));
    message["content"] = m.content;
    messages.push_back(std::move(message));
  }
  nlohmann::ordered_json json;
  json["messages"] = std::move(messages);
  return json;
}

std::vector<Conversation> read_conversations_jsonl(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<Conversation> conversations;
  uint64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r\v\f") == std::string_view::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(where + ": not valid JSON (each line holds one conversation; " +
                       kConversationShape + "): " + e.what());
    }
    conversations.push_back(conversation_from_json(json, where));
  }
  if (conversations.empty()) {
    throw InputError(path +
                     ": no conversations (the file is empty or blank); write one per line; " +
                     kConversationShape);
  }
  return conversations;
}

void write_conversations_jsonl(const std::string& path,
                               const std::vector<Conversation>& conversations) {
  std::string text;
  for (size_t k = 0; k < conversations.size(); ++k) {
    validate_conversation(conversations[k], "conversation " + std::to_string(k + 1));
    text += conversation_to_json(conversations[k]).dump() + "\n";
  }
  write_file_atomic(path, text);
}

namespace {

// [bos], then each turn between its start and end tokens, the system text put in front of the
// first user message. Only assistant text and <|assistant_end|> carry loss. `conversation` is
// valid (validate_conversation), so its text encodes.
RenderedConversation render_turns(const Conversation& conversation, const BpeTokenizer& tokenizer,
                                  const ChatTokens& tokens) {
  RenderedConversation out;
  auto push = [&](uint32_t id, uint8_t loss) {
    out.ids.push_back(id);
    out.loss_mask.push_back(loss);
  };
  push(tokens.bos, 0);
  const std::vector<ChatMessage>& messages = conversation.messages;
  const bool has_system = messages[0].role == ChatRole::kSystem;
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool assistant = m.role == ChatRole::kAssistant;
    const uint8_t loss = assistant ? 1 : 0;
    push(assistant ? tokens.assistant_start : tokens.user_start, 0);
    if (has_system && i == 1) {
      tokenizer.encode_append(messages[0].content + "\n\n" + m.content, false, out.ids);
    } else {
      tokenizer.encode_append(m.content, false, out.ids);
    }
    out.loss_mask.resize(out.ids.size(), loss);
    push(assistant ? tokens.assistant_end : tokens.user_end, loss);
  }
  return out;
}

}  // namespace

RenderedConversation render_conversation(const Conversation& conversation,
                                         const BpeTokenizer& tokenizer, const ChatTokens& tokens,
                                         int64_t max_tokens, const std::string& where) {
  validate_conversation(conversation, where);
  RenderedConversation out = render_turns(conversation, tokenizer, tokens);
  if (static_cast<int64_t>(out.ids.size()) > max_tokens) {
    throw InputError(where + ": the conversation is " + std::to_string(out.ids.size()) +
                     " tokens long, more than the context of " + std::to_string(max_tokens) +
                     " it must fit in; shorten it or leave it out, or train with a longer context");
  }
  return out;
}

std::vector<uint32_t> render_prompt(const Conversation& conversation, const BpeTokenizer& tokenizer,
                                    const ChatTokens& tokens, int64_t max_tokens,
                                    const std::string& where) {
  validate_conversation(conversation, where);
  if (conversation.messages.back().role != ChatRole::kUser) {
    throw InputError(where +
                     ": the conversation ends with an assistant message; a prompt for a reply "
                     "must end with a user message");
  }
  std::vector<uint32_t> ids = render_turns(conversation, tokenizer, tokens).ids;
  ids.push_back(tokens.assistant_start);
  if (static_cast<int64_t>(ids.size()) >= max_tokens) {
    throw InputError(where + ": the prompt is " + std::to_string(ids.size()) +
                     " tokens long, which leaves no room for a reply in the context of " +
                     std::to_string(max_tokens) + " tokens; shorten the conversation");
  }
  return ids;
}

}  // namespace nanogpt
