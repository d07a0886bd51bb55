#include "train/run_metrics.hpp"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

std::string metrics_file_of(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string inside = (fs::path(path) / "metrics.jsonl").string();
    if (!fs::is_regular_file(inside, ec)) {
      throw InputError("'" + path +
                       "' is a directory without a metrics.jsonl; give a run directory (nanogpt "
                       "train --out) or a metrics.jsonl file");
    }
    return inside;
  }
  if (!fs::is_regular_file(path, ec)) {
    throw InputError("no metrics at '" + path +
                     "': give a run directory (nanogpt train --out) or a metrics.jsonl file");
  }
  return path;
}

double number_field(const nlohmann::json& row, const char* key, const std::string& where) {
  if (!row.contains(key)) throw InputError(where + ": the row has no \"" + key + "\"");
  const nlohmann::json& v = row[key];
  if (!v.is_number()) {
    throw InputError(where + ": \"" + key + "\" must be a number, got " + v.dump());
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw InputError(where + ": \"" + key + "\" is not finite");
  return d;
}

}  // namespace

RunMetrics read_run_metrics(const std::string& path) {
  RunMetrics out;
  out.path = metrics_file_of(path);
  const std::string text = read_file(out.path);
  double seconds = 0, tokens = 0;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string where = out.path + ":" + std::to_string(line_no);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      if (!terminated) {  // being written, or torn by a crash
        out.torn_last_line = true;
        break;
      }
      throw InputError(where + ": not valid JSON (" + e.what() + ")");
    }
    if (!row.is_object()) throw InputError(where + ": not a JSON object");
    MetricsRow r;
    const double step = number_field(row, "step", where);
    if (step != std::floor(step)) throw InputError(where + ": \"step\" must be an integer");
    r.step = static_cast<int64_t>(step);
    r.train_loss = number_field(row, "loss", where);
    const double step_s = number_field(row, "step_s", where);
    seconds += step_s;
    // The step's tokens: tokens_per_s is tokens_per_step / step_s, so this is the whole
    // number the step trained, up to the division's rounding.
    tokens += std::round(number_field(row, "tokens_per_s", where) * step_s);
    r.train_seconds = seconds;
    r.tokens = tokens;
    // null: a non-finite loss as JSON writes it; no point to draw.
    if (row.contains("val_loss") && !row["val_loss"].is_null())
      r.val_loss = number_field(row, "val_loss", where);
    out.rows.push_back(r);
  }
  return out;
}

}  // namespace nanogpt
