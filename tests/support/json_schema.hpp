// A validator for the subset of JSON Schema (draft 2020-12) that docs/*.schema.json use, so a
// test can check a document against a published schema without a schema library: type, enum,
// const, properties, required, additionalProperties, items, minItems, minLength, pattern,
// minimum, maximum, $ref (to "#/..." in the same schema), allOf, anyOf, oneOf, not and
// if/then/else; annotations ($schema, $id, title, description, default, format, $defs) are
// ignored. A keyword outside the subset throws std::logic_error, so a schema cannot quietly rely
// on a keyword this validator would skip.
#pragma once

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>

namespace nanogpt {

class JsonSchemaValidator {
 public:
  using Json = nlohmann::ordered_json;

  explicit JsonSchemaValidator(Json schema) : root_(std::move(schema)) {}

  // The first violation as "<JSON path>: <what>", or "" when `doc` is valid.
  std::string violation(const Json& doc) const { return check(root_, doc, "$"); }

 private:
  const Json& resolve(const std::string& ref) const {
    if (ref.rfind("#/", 0) != 0) throw std::logic_error("only local $refs: " + ref);
    const Json* at = &root_;
    size_t start = 2;
    while (start <= ref.size()) {
      size_t end = ref.find('/', start);
      if (end == std::string::npos) end = ref.size();
      at = &at->at(ref.substr(start, end - start));
      start = end + 1;
    }
    return *at;
  }

  static bool has_type(const Json& v, const std::string& type) {
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "string") return v.is_string();
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "number") return v.is_number();
    if (type == "integer") {
      return v.is_number_integer() ||
             (v.is_number_float() && v.get<double>() == static_cast<double>(v.get<int64_t>()));
    }
    throw std::logic_error("unknown type " + type);
  }

  std::string check(const Json& s, const Json& v, const std::string& path) const {
    static const std::set<std::string> annotations = {"$schema", "$id",    "title", "description",
                                                      "default", "format", "$defs"};
    static const std::set<std::string> known = {
        "type",  "enum",     "const",     "properties", "required", "additionalProperties",
        "items", "minItems", "minLength", "pattern",    "minimum",  "maximum",
        "$ref",  "allOf",    "anyOf",     "oneOf",      "not",      "if",
        "then",  "else"};
    for (const auto& item : s.items()) {
      if (annotations.count(item.key()) == 0 && known.count(item.key()) == 0) {
        throw std::logic_error("schema keyword '" + item.key() + "' is not supported");
      }
    }
    if (s.contains("$ref")) {
      if (std::string e = check(resolve(s["$ref"]), v, path); !e.empty()) return e;
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_array()) {
        for (const Json& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
      } else {
        ok = has_type(v, s["type"].get<std::string>());
      }
      if (!ok) return path + ": is not of type " + s["type"].dump();
    }
    if (s.contains("enum")) {
      bool ok = false;
      for (const Json& e : s["enum"]) ok = ok || e == v;
      if (!ok) return path + ": " + v.dump() + " is not one of " + s["enum"].dump();
    }
    if (s.contains("const") && s["const"] != v) {
      return path + ": " + v.dump() + " is not " + s["const"].dump();
    }
    if (v.is_object()) {
      if (s.contains("required")) {
        for (const Json& r : s["required"]) {
          if (!v.contains(r.get<std::string>()))
            return path + ": '" + r.get<std::string>() + "' is missing";
        }
      }
      for (const auto& item : v.items()) {
        const std::string sub = path + "." + item.key();
        if (s.contains("properties") && s["properties"].contains(item.key())) {
          if (std::string e = check(s["properties"][item.key()], item.value(), sub); !e.empty()) {
            return e;
          }
        } else if (s.contains("additionalProperties")) {
          const Json& extra = s["additionalProperties"];
          if (extra.is_boolean()) {
            if (!extra.get<bool>()) return sub + ": is not allowed";
          } else if (std::string e = check(extra, item.value(), sub); !e.empty()) {
            return e;
          }
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) {
        return path + ": fewer than " + s["minItems"].dump() + " items";
      }
      if (s.contains("items")) {
        for (size_t i = 0; i < v.size(); ++i) {
          const std::string sub = path + "[" + std::to_string(i) + "]";
          if (std::string e = check(s["items"], v[i], sub); !e.empty()) return e;
        }
      }
    }
    if (v.is_string()) {
      const std::string& text = v.get_ref<const std::string&>();
      // Code points, as the standard counts a string's length.
      size_t length = 0;
      for (unsigned char c : text) length += (c & 0xC0) != 0x80;
      if (s.contains("minLength") && length < s["minLength"].get<size_t>()) {
        return path + ": shorter than " + s["minLength"].dump();
      }
      if (s.contains("pattern") &&
          !std::regex_search(text, std::regex(s["pattern"].get<std::string>()))) {
        return path + ": does not match " + s["pattern"].dump();
      }
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) {
        return path + ": below the minimum " + s["minimum"].dump();
      }
      if (s.contains("maximum") && x > s["maximum"].get<double>()) {
        return path + ": above the maximum " + s["maximum"].dump();
      }
    }
    if (s.contains("allOf")) {
      for (const Json& sub : s["allOf"]) {
        if (std::string e = check(sub, v, path); !e.empty()) return e;
      }
    }
    if (s.contains("anyOf")) {
      bool ok = false;
      for (const Json& sub : s["anyOf"]) ok = ok || check(sub, v, path).empty();
      if (!ok) return path + ": matches none of anyOf";
    }
    if (s.contains("oneOf")) {
      int matches = 0;
      for (const Json& sub : s["oneOf"]) matches += check(sub, v, path).empty() ? 1 : 0;
      if (matches != 1) return path + ": matches " + std::to_string(matches) + " of oneOf, not 1";
    }
    if (s.contains("not") && check(s["not"], v, path).empty()) return path + ": matches 'not'";
    if (s.contains("if")) {
      const bool holds = check(s["if"], v, path).empty();
      const char* branch = holds ? "then" : "else";
      if (s.contains(branch)) {
        if (std::string e = check(s[branch], v, path); !e.empty()) return e;
      }
    }
    return "";
  }

  Json root_;
};

}  // namespace nanogpt
