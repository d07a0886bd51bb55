#include "eval/json_fields.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace nanogpt {

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void JsonFields::fail(const std::string& key, const std::string& what) const {
  throw InputError(where_ + "field '" + prefix_ + key + "': " + what);
}

void JsonFields::only(const std::vector<std::string>& known) const {
  for (const auto& item : j_.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) {
      fail(item.key(), "unknown field (known: " + join_names(known) + ")");
    }
  }
}

const JsonFields::Json& JsonFields::at(const std::string& key) const {
  if (!has(key)) fail(key, "is missing");
  return j_.at(key);
}

std::string JsonFields::str(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_string()) fail(key, "must be a string");
  return v.get<std::string>();
}

std::string JsonFields::nonempty_str(const std::string& key) const {
  std::string s = str(key);
  if (s.empty()) fail(key, "must not be empty");
  return s;
}

std::string JsonFields::optional_str(const std::string& key) const {
  return has(key) ? str(key) : "";
}

int64_t JsonFields::integer(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_number_integer()) fail(key, "must be an integer");
  return v.get<int64_t>();
}

double JsonFields::number(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_number()) fail(key, "must be a number");
  return v.get<double>();
}

bool JsonFields::boolean(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_boolean()) fail(key, "must be true or false");
  return v.get<bool>();
}

const JsonFields::Json& JsonFields::object(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_object()) fail(key, "must be an object");
  return v;
}

const JsonFields::Json& JsonFields::array(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail(key, "must be an array");
  return v;
}

std::vector<std::string> JsonFields::strings(const std::string& key) const {
  std::vector<std::string> out;
  for (const Json& s : array(key)) {
    if (!s.is_string()) fail(key, "must be an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace nanogpt
