// `nanogpt plot`: metrics.jsonl files read back (cumulative seconds and tokens, sparse
// validation rows, errors naming file:line), the SVG they make (well-formed XML, one polyline
// per run with one point per row that has the chosen loss, escaped labels), and the command.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/svg_plot.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"
#include "train/loss_plot.hpp"
#include "train/run_metrics.hpp"

namespace nanogpt {
namespace {

// A small XML well-formedness check, enough for what the plots write: every tag closed in
// order, one root element, attributes name='value' or name="value", entities known, and no
// stray '<' or '>' in text. Returns "" or what is wrong and where.
std::string xml_problem(const std::string& x) {
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  auto entity_ok = [&](size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
      if (x.compare(at, std::string(e).size(), e) == 0) return true;
    }
    return false;
  };
  while (i < x.size()) {
    if (x[i] == '&' && !entity_ok(i)) return "bad entity at " + std::to_string(i);
    if (x[i] == '>') return "stray '>' at " + std::to_string(i);
    if (x[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(x[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    const size_t end = x.find('>', i);
    if (end == std::string::npos) return "unclosed tag at " + std::to_string(i);
    std::string tag = x.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> unopened";
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    size_t p = 0;
    while (p < tag.size() && (std::isalnum(static_cast<unsigned char>(tag[p])) || tag[p] == '-'))
      ++p;
    const std::string name = tag.substr(0, p);
    if (name.empty()) return "tag without a name: <" + tag + ">";
    // Attributes: name='...' or name="..."; '<' and bare '&' not allowed inside.
    while (p < tag.size()) {
      while (p < tag.size() && std::isspace(static_cast<unsigned char>(tag[p]))) ++p;
      if (p == tag.size()) break;
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size()) return "bad attribute in <" + name;
      const char q = tag[eq + 1];
      if (q != '\'' && q != '"') return "unquoted attribute in <" + name;
      const size_t close = tag.find(q, eq + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + name;
      const std::string value = tag.substr(eq + 2, close - eq - 2);
      if (value.find('<') != std::string::npos) return "'<' in an attribute of <" + name;
      p = close + 1;
    }
    if (open.empty()) ++roots;
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The coordinate pairs of each polyline, in order.
std::vector<size_t> polyline_point_counts(const std::string& svg) {
  std::vector<size_t> out;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    const size_t b = svg.find("points='", p) + 8, e = svg.find('\'', b);
    out.push_back(count_of(svg.substr(b, e - b), ","));
  }
  return out;
}

// `steps` rows as the trainer writes them, val_loss every `every` steps and at the last.
std::string metrics_text(int steps, int every, double step_s = 0.5, double start = 9.0) {
  std::string s;
  for (int k = 1; k <= steps; ++k) {
    s += "{\"step\":" + std::to_string(k) + ",\"loss\":" + std::to_string(start - 0.1 * k) +
         ",\"lr_mult\":1.0,\"window_blocks\":1,\"step_s\":" + std::to_string(step_s) +
         ",\"tokens_per_s\":" + std::to_string(4096 / step_s);
    if (k % every == 0 || k == steps) s += ",\"val_loss\":" + std::to_string(start - 0.09 * k);
    s += "}\n";
  }
  return s;
}

TEST(SvgPlot, EscapesTextAndPicksRoundTicks) {
  EXPECT_EQ(svg::escape("a<b & 'c' \"d\">"), "a&lt;b &amp; &apos;c&apos; &quot;d&quot;&gt;");
  EXPECT_DOUBLE_EQ(svg::nice_step(0, 250, 8), 50);
  EXPECT_DOUBLE_EQ(svg::nice_step(4.2, 9.1, 6), 1);
  EXPECT_DOUBLE_EQ(svg::nice_step(0, 0.07, 6), 0.02);
  EXPECT_EQ(svg::linear_ticks(0, 250, 50), (std::vector<double>{0, 50, 100, 150, 200, 250}));
  EXPECT_EQ(svg::log_ticks(0.01, 1), (std::vector<double>{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1}));
  // A narrow range (losses 4 to 9) gets every integer instead of 5 alone.
  EXPECT_EQ(svg::log_ticks(3.8, 9.5), (std::vector<double>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(svg::tick_label(-0.0), "0");
}

TEST(RunMetrics, ReadsRowsWithRunningSecondsAndTokens) {
  TempDir dir;
  write_file_atomic(dir.path() + "/metrics.jsonl", metrics_text(10, 4, 0.25));
  const RunMetrics m = read_run_metrics(dir.path());  // a run directory
  EXPECT_EQ(m.path, dir.path() + "/metrics.jsonl");
  ASSERT_EQ(m.rows.size(), 10u);
  EXPECT_EQ(m.rows[9].step, 10);
  EXPECT_DOUBLE_EQ(m.rows[9].train_seconds, 2.5);
  EXPECT_DOUBLE_EQ(m.rows[9].tokens, 40960);
  EXPECT_DOUBLE_EQ(m.rows[0].train_loss, 8.9);
  int with_val = 0;
  for (const MetricsRow& r : m.rows) with_val += r.val_loss ? 1 : 0;
  EXPECT_EQ(with_val, 3);  // steps 4, 8 and the last
  const auto by_seconds = loss_curve(m, PlotX::kSeconds, PlotY::kValLoss);
  ASSERT_EQ(by_seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(by_seconds[1].first, 2.0);
  EXPECT_DOUBLE_EQ(by_seconds[1].second, 9.0 - 0.09 * 8);
  EXPECT_EQ(loss_curve(m, PlotX::kTokens, PlotY::kTrainLoss).size(), 10u);
  EXPECT_FALSE(m.torn_last_line);
}

TEST(RunMetrics, BadInputIsAnErrorNamingTheFileAndLine) {
  TempDir dir;
  const std::string f = dir.path() + "/m.jsonl";
  std::string e = input_error([&] { read_run_metrics(dir.path() + "/nowhere"); });
  EXPECT_NE(e.find("no metrics at '" + dir.path() + "/nowhere'"), std::string::npos) << e;
  e = input_error([&] { read_run_metrics(dir.path()); });
  EXPECT_NE(e.find("without a metrics.jsonl"), std::string::npos) << e;

  write_file_atomic(f, metrics_text(2, 1) + "{\"step\": 3, oops}\n" + metrics_text(1, 1));
  e = input_error([&] { read_run_metrics(f); });
  EXPECT_NE(e.find(f + ":3: not valid JSON"), std::string::npos) << e;
  write_file_atomic(f, "{\"step\": 1, \"step_s\": 1, \"tokens_per_s\": 1}\n");
  e = input_error([&] { read_run_metrics(f); });
  EXPECT_NE(e.find(f + ":1: the row has no \"loss\""), std::string::npos) << e;
  write_file_atomic(f, "[1, 2]\n");
  EXPECT_NE(input_error([&] { read_run_metrics(f); }).find(":1: not a JSON object"),
            std::string::npos);

  // A last line cut short (a run still writing) is skipped, not an error.
  write_file_atomic(f, metrics_text(3, 1) + "{\"step\": 4, \"lo");
  const RunMetrics m = read_run_metrics(f);
  EXPECT_EQ(m.rows.size(), 3u);
  EXPECT_TRUE(m.torn_last_line);
}

TEST(LossPlot, OneWellFormedLinePerRunWithAPointPerRow) {
  TempDir dir;
  std::vector<RunMetrics> runs;
  for (int r = 0; r < 3; ++r) {
    const std::string f = dir.path() + "/run" + std::to_string(r) + ".jsonl";
    write_file_atomic(f, metrics_text(20 + 10 * r, 5, 0.3 + 0.1 * r, 9.0 - r * 0.2));
    runs.push_back(read_run_metrics(f));
  }
  LossPlotOptions o;
  o.labels = {"ddp <2 ranks>", "diloco & co", "'quoted'"};
  for (PlotX x : {PlotX::kStep, PlotX::kSeconds, PlotX::kTokens}) {
    for (PlotY y : {PlotY::kValLoss, PlotY::kTrainLoss}) {
      for (bool log_y : {false, true}) {
        o.x = x;
        o.y = y;
        o.log_y = log_y;
        const std::string svg = loss_plot_svg(runs, o);
        SCOPED_TRACE(std::string(plot_x_name(x)) + " " + plot_y_name(y) + (log_y ? " log" : ""));
        EXPECT_EQ(xml_problem(svg), "");
        std::vector<size_t> expected;
        for (const RunMetrics& r : runs) expected.push_back(loss_curve(r, x, y).size());
        EXPECT_EQ(polyline_point_counts(svg), expected);
        EXPECT_NE(svg.find("ddp &lt;2 ranks&gt;"), std::string::npos);
        EXPECT_NE(svg.find("diloco &amp; co"), std::string::npos);
        EXPECT_NE(svg.find("&apos;quoted&apos;"), std::string::npos);
      }
    }
  }
  EXPECT_EQ(polyline_point_counts(loss_plot_svg(runs, o)), (std::vector<size_t>{20, 30, 40}));
  // A dozen runs: colours repeat dashed, the legend keeps growing downwards.
  std::vector<RunMetrics> many(12, runs[0]);
  o.labels.clear();
  const std::string svg = loss_plot_svg(many, o);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count_of(svg, "<polyline"), 12u);
  EXPECT_EQ(count_of(svg, "stroke-dasharray"), 4u);  // runs 11 and 12: line and legend each
}

TEST(LossPlot, RefusesWhatItCannotDraw) {
  TempDir dir;
  const std::string f = dir.path() + "/m.jsonl";
  // No validation rows at all.
  write_file_atomic(f, "{\"step\":1,\"loss\":5,\"step_s\":1,\"tokens_per_s\":10}\n");
  const RunMetrics m = read_run_metrics(f);
  LossPlotOptions o;
  std::string e = input_error([&] { loss_plot_svg({m}, o); });
  EXPECT_NE(e.find("'" + f + "' has no row with val_loss"), std::string::npos) << e;
  EXPECT_NE(e.find("--y train_loss"), std::string::npos) << e;
  o.y = PlotY::kTrainLoss;
  EXPECT_EQ(xml_problem(loss_plot_svg({m}, o)), "");  // a single point still makes a chart
  o.labels = {"a", "b"};
  e = input_error([&] { loss_plot_svg({m}, o); });
  EXPECT_NE(e.find("2 labels for 1 runs"), std::string::npos) << e;
  o.labels.clear();
  write_file_atomic(f, "{\"step\":1,\"loss\":-1,\"step_s\":1,\"tokens_per_s\":10}\n");
  o.log_y = true;
  e = input_error([&] { loss_plot_svg({read_run_metrics(f)}, o); });
  EXPECT_NE(e.find("--log-y"), std::string::npos) << e;
}

TEST(LossPlot, CommandWritesTheChartAndExplainsBadInput) {
  TempDir dir;
  for (const char* run : {"ddp", "diloco"}) {
    std::filesystem::create_directories(dir.path() + "/" + run);
    write_file_atomic(dir.path() + "/" + run + "/metrics.jsonl", metrics_text(30, 10));
  }
  const std::string out = dir.path() + "/plot.svg";
  auto r =
      run_nanogpt("plot " + dir.path() + "/ddp " + dir.path() + "/diloco/metrics.jsonl --out " +
                  out + " --x seconds --title 'DDP vs DiLoCo'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string svg = read_file(out);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polyline_point_counts(svg), (std::vector<size_t>{3, 3}));
  EXPECT_NE(svg.find(">ddp</text>"), std::string::npos) << "default label: the run's directory";
  EXPECT_NE(svg.find(">diloco</text>"), std::string::npos);
  EXPECT_NE(svg.find("DDP vs DiLoCo"), std::string::npos);
  EXPECT_NE(r.err.find("2 runs, 6 points"), std::string::npos) << r.err;

  r = run_nanogpt("plot " + dir.path() + "/ddp --out " + out +
                  " --y train_loss --labels one --log-y --x tokens");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(polyline_point_counts(read_file(out)), (std::vector<size_t>{30}));

  r = run_nanogpt("plot " + dir.path() + "/missing --out " + out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no metrics at '" + dir.path() + "/missing'"), std::string::npos) << r.err;
  r = run_nanogpt("plot " + dir.path() + "/ddp --out " + out + " --x wallclock");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--x"), std::string::npos) << r.err;
  r = run_nanogpt("plot " + dir.path() + "/ddp --out " + dir.path() + "/no/such/dir/p.svg");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no/such/dir"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nanogpt
