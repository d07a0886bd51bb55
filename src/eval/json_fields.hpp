// Reading the fields of one JSON object of an input file, so that every error is an InputError
// "<where>field '<prefix><key>': <what>" — the file (in `where`), the JSON path of the field and
// what is wrong with it. Suites (suite.cpp) and rubrics (rubric.cpp) read their files with it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nanogpt {

class JsonFields {
 public:
  using Json = nlohmann::ordered_json;

  // `j` must outlive this reader. where: names the file ("suite 'a.json': "); prefix: the JSON
  // path of `j` followed by a dot ("cases[2]."), or "" at the top.
  JsonFields(const Json& j, std::string where, std::string prefix)
      : j_(j), where_(std::move(where)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  // Refuses any key not in `known`, listing the known ones.
  void only(const std::vector<std::string>& known) const;

  bool has(const std::string& key) const { return j_.contains(key); }
  const Json& at(const std::string& key) const;  // refuses a missing key
  std::string str(const std::string& key) const;
  std::string nonempty_str(const std::string& key) const;
  std::string optional_str(const std::string& key) const;  // "" when absent
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;  // any JSON number
  bool boolean(const std::string& key) const;
  const Json& object(const std::string& key) const;
  const Json& array(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;

  const std::string& where() const { return where_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const Json& j_;
  std::string where_, prefix_;
};

// "a, b, c": the known names in "unknown ... (known: ...)" messages.
std::string join_names(const std::vector<std::string>& names);

}  // namespace nanogpt
