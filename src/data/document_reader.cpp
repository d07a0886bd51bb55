#include "data/document_reader.hpp"

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

bool is_blank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f') return false;
  }
  return true;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

InputFormat resolve_format(const std::string& path, InputFormat requested) {
  if (requested != InputFormat::kAuto) return requested;
  if (ends_with(path, ".jsonl") || ends_with(path, ".json")) return InputFormat::kJsonLines;
  return InputFormat::kText;
}

// Strips one trailing "\n" or "\r\n": the line break before a separator belongs to it.
std::string_view strip_final_newline(std::string_view s) {
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  return s;
}

}  // namespace

InputFormat parse_input_format(const std::string& name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "text") return InputFormat::kText;
  if (name == "jsonl") return InputFormat::kJsonLines;
  throw InputError("unknown input format '" + name + "'; use auto, text or jsonl");
}

CorpusStats for_each_document(
    const CorpusOptions& options,
    const std::function<void(std::string_view, const DocumentOrigin&)>& visit) {
  CorpusStats stats;
  auto emit = [&](std::string_view doc, const std::string& file, uint64_t line) {
    if (is_blank(doc)) {
      ++stats.empty_documents;
      return;
    }
    ++stats.documents;
    visit(doc, DocumentOrigin{&file, line});
  };
  for (const std::string& file : options.files) {
    MappedFile mapped(file);
    std::string_view text(reinterpret_cast<const char*>(mapped.data()), mapped.size());
    stats.bytes += text.size();
    InputFormat format = resolve_format(file, options.format);

    if (format == InputFormat::kJsonLines) {
      uint64_t line_no = 0;
      size_t pos = 0;
      while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (is_blank(line)) continue;
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          throw InputError(
              file + ":" + std::to_string(line_no) +
              ": not valid JSON (JSON Lines input needs one object per line): " + e.what());
        }
        if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
          throw InputError(file + ":" + std::to_string(line_no) +
                           ": expected an object with a string field \"text\"");
        }
        emit(j["text"].get_ref<const std::string&>(), file, line_no);
      }
      continue;
    }

    if (!options.doc_separator) {
      emit(text, file, 1);
      continue;
    }
    const std::string& sep = *options.doc_separator;
    size_t doc_start = 0;
    uint64_t doc_line = 1;
    uint64_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      size_t next = end == std::string_view::npos ? text.size() : end + 1;
      std::string_view line =
          text.substr(pos, (end == std::string_view::npos ? text.size() : end) - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      ++line_no;
      if (line == sep) {
        emit(strip_final_newline(text.substr(doc_start, pos - doc_start)), file, doc_line);
        doc_start = next;
        doc_line = line_no + 1;
      }
      pos = next;
    }
    if (doc_start < text.size()) {
      emit(strip_final_newline(text.substr(doc_start)), file, doc_line);
    }
  }
  return stats;
}

}  // namespace nanogpt
