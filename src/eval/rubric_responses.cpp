#include "eval/rubric_responses.hpp"

#include <nlohmann/json.hpp>

#include "eval/json_fields.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

std::vector<PromptResponse> parse_rubric_responses(std::string_view text, const std::string& path,
                                                   const Rubric& rubric) {
  std::vector<PromptResponse> out;
  size_t start = 0;
  for (size_t line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view row = text.substr(start, end - start);
    start = end + 1;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = "responses '" + path + "': line " + std::to_string(line) + ": ";
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(row.begin(), row.end());
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where + "not valid JSON: " + std::string(e.what()));
    }
    if (!j.is_object()) {
      throw InputError(where + "must be an object {\"prompt\": NAME, \"response\": TEXT}");
    }
    const JsonFields f(j, where, "");
    f.only({"prompt", "response"});
    PromptResponse r;
    const std::string name = f.str("prompt");
    r.prompt_item = rubric.find_prompt(name);
    if (r.prompt_item == nullptr) {
      std::vector<std::string> names;
      for (const RubricItem& item : rubric.prompts) names.push_back(item.name);
      f.fail("prompt", "rubric '" + rubric.name + "' has no prompt '" + name +
                           "' (its prompts: " + join_names(names) + ")");
    }
    r.response = f.str("response");
    out.push_back(std::move(r));
  }
  if (out.empty()) throw InputError("responses '" + path + "': no responses (the file is empty)");
  return out;
}

std::vector<PromptResponse> load_rubric_responses(const std::string& path, const Rubric& rubric) {
  if (!file_exists(path)) throw InputError("responses '" + path + "' does not exist");
  return parse_rubric_responses(read_file(path), path, rubric);
}

std::vector<RubricResponse> rubric_responses_view(const std::vector<PromptResponse>& responses) {
  std::vector<RubricResponse> out;
  out.reserve(responses.size());
  for (const PromptResponse& r : responses) out.push_back({r.prompt_item, r.response});
  return out;
}

}  // namespace nanogpt
