#include "posttrain/preference_pairs.hpp"

#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

std::string reply_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw InputError(where + ": missing \"" + key + "\" (the reply text)");
  if (!j[key].is_string()) throw InputError(where + ": \"" + key + "\" must be a string");
  const std::string s = j[key].get<std::string>();
  if (s.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InputError(where + ": \"" + key + "\" is empty");
  }
  return s;
}

}  // namespace

Conversation with_reply(const Conversation& prompt, const std::string& reply) {
  Conversation c = prompt;
  c.messages.push_back({ChatRole::kAssistant, reply});
  return c;
}

std::vector<PreferencePair> read_preference_pairs(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<PreferencePair> pairs;
  std::istringstream in(text);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where + ": not a JSON object (" + e.what() + ")");
    }
    if (!j.is_object()) throw InputError(where + ": not a JSON object");
    if (!j.contains("prompt")) throw InputError(where + ": missing \"prompt\"");
    PreferencePair p;
    if (j["prompt"].is_string()) {
      p.prompt.messages.push_back({ChatRole::kUser, j["prompt"].get<std::string>()});
      validate_conversation(p.prompt, where + ": prompt");
    } else if (j["prompt"].is_array()) {
      p.prompt =
          conversation_from_json(nlohmann::json{{"messages", j["prompt"]}}, where + ": prompt");
    } else {
      throw InputError(where + ": \"prompt\" must be a string or a list of messages");
    }
    if (p.prompt.messages.back().role != ChatRole::kUser) {
      throw InputError(where + ": the prompt must end with a user message (the replies answer it)");
    }
    p.chosen = reply_field(j, "chosen", where);
    p.rejected = reply_field(j, "rejected", where);
    validate_conversation(with_reply(p.prompt, p.chosen), where + ": chosen");
    validate_conversation(with_reply(p.prompt, p.rejected), where + ": rejected");
    pairs.push_back(std::move(p));
  }
  if (pairs.empty()) throw InputError(path + ": no preference pairs (one JSON object per line)");
  return pairs;
}

void write_preference_pairs(const std::string& path, const std::vector<PreferencePair>& pairs) {
  std::string out;
  for (const PreferencePair& p : pairs) {
    nlohmann::ordered_json j;
    j["prompt"] = conversation_to_json(p.prompt)["messages"];
    j["chosen"] = p.chosen;
    j["rejected"] = p.rejected;
    out += j.dump() + "\n";
  }
  write_file_atomic(path, out);
}

}  // namespace nanogpt
