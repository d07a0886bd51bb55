// Turns input files into documents: plain text (one document per file, or split at a
// separator line such as fortune's "%"), or JSON Lines with a "text" field per line (the
// shape of FineWeb). Documents are visited in file order, then order within the file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

enum class InputFormat { kAuto, kText, kJsonLines };

struct CorpusOptions {
  std::vector<std::string> files;
  InputFormat format = InputFormat::kAuto;  // auto: *.jsonl / *.json is JSON Lines, else text
  std::optional<std::string> doc_separator;
};

// Where a document came from, for error messages ("file:line").
struct DocumentOrigin {
  const std::string* file;
  uint64_t line;  // 1-based line where the document starts
};

struct CorpusStats {
  uint64_t documents = 0;        // non-empty documents visited
  uint64_t empty_documents = 0;  // skipped: nothing but whitespace
  uint64_t bytes = 0;            // input bytes read
};

// Calls visit(text, origin) for every non-empty document. A document is empty when it holds
// only whitespace; those are skipped and counted. The view is valid only during the call.
CorpusStats for_each_document(
    const CorpusOptions& options,
    const std::function<void(std::string_view, const DocumentOrigin&)>& visit);

InputFormat parse_input_format(const std::string& name);

}  // namespace nanogpt
