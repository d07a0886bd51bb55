// `nanogpt chat`: a terminal conversation with a post-trained checkpoint
// (posttrain/chat_session.hpp). Lines from stdin are messages, or commands when they start with
// '/'; replies and command output go to stdout, notes and errors about a line to stderr (a bad
// line never ends the chat). The "you> " prompt is printed only at a terminal, so a piped
// transcript holds the replies alone.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>

#include "cli/commands.hpp"
#include "cli/number_range.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "model/model_io.hpp"
#include "posttrain/chat_session.hpp"
#include "runtime/error.hpp"
#include "train/attention_window.hpp"
#include "train/train_state.hpp"

namespace nanogpt::cli {

namespace {

constexpr const char* kHelp =
    "Type a message and press Enter; the model replies with the whole conversation in view.\n"
    "  /clear           forget the conversation (the --system message stays)\n"
    "  /history         print the conversation so far\n"
    "  /temperature X   sampling temperature, 0 (greedy) to 100; without X: the current one\n"
    "  /topk K          sample among the K most likely tokens, 0 for all; without K: the current\n"
    "  /help            this list\n"
    "  /quit            leave (so does end of input, Ctrl-D)\n"
    "A message that starts with '/' is sent with '//' in front (\"//etc\" sends \"/etc\").\n";

void print(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

// The whole of `text` as a number of type T, or nothing.
template <class T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [at, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || at != end) return std::nullopt;
  return value;
}

// Model text as shown: control characters but newline and tab as \xNN, so bytes a model
// samples (an escape sequence) cannot drive the terminal. Stored text is not changed.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if ((byte < 0x20 && ch != '\n' && ch != '\t') || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += ch;
    }
  }
  return out;
}

void print_history(const Conversation& conversation) {
  if (conversation.messages.empty()) {
    print("(no messages)\n");
    return;
  }
  for (const ChatMessage& m : conversation.messages) {
    print(std::string(chat_role_name(m.role)) + ": " + printable(m.content) + "\n");
  }
}

void print_reply(const ChatReply& r, const ChatSession& session) {
  if (r.dropped_exchanges > 0) {
    const std::string what =
        r.dropped_exchanges == 1
            ? std::string("the oldest exchange")
            : "the " + std::to_string(r.dropped_exchanges) + " oldest exchanges";
    std::fprintf(stderr,
                 "(forgot %s: the conversation and a reply of up to %lld tokens must fit the "
                 "model's context of %lld tokens)\n",
                 what.c_str(), static_cast<long long>(session.max_tokens()),
                 static_cast<long long>(session.context()));
  }
  print("assistant> " + printable(r.text) + "\n");
  std::fflush(stdout);
  if (r.end == ChatReplyEnd::kMaxTokens) {
    std::fprintf(stderr, "(cut at %lld tokens, --max-tokens)\n",
                 static_cast<long long>(session.max_tokens()));
  } else if (r.end == ChatReplyEnd::kDocumentEnded) {
    std::fprintf(stderr, "(the model ended the document instead of its turn)\n");
  }
  if (!r.kept) {
    std::fprintf(stderr, "(an empty reply: neither it nor your message joins the history)\n");
  }
}

// A line that starts with '/' (not "//"). Returns false for /quit.
bool run_command(std::string_view line, ChatSession& session) {
  const size_t space = line.find(' ');
  const std::string_view name = line.substr(0, space);
  std::string_view arg = space == std::string_view::npos ? "" : line.substr(space + 1);
  while (!arg.empty() && arg.front() == ' ') arg.remove_prefix(1);
  while (!arg.empty() && arg.back() == ' ') arg.remove_suffix(1);
  if (name == "/quit") return false;
  if (name == "/help") {
    print(kHelp);
  } else if (name == "/clear") {
    session.clear();
    print("(history cleared)\n");
  } else if (name == "/history") {
    print_history(session.history());
  } else if (name == "/temperature" || name == "/topk") {
    SamplingSettings s = session.sampling();
    const bool temperature = name == "/temperature";
    if (!arg.empty()) {
      const auto t = parse_number<double>(arg);
      const auto k = parse_number<int64_t>(arg);
      if (temperature ? !t.has_value() : !k.has_value()) {
        throw InputError(
            std::string(name) + ": '" + std::string(arg) + "' is not " +
            (temperature ? "a number; e.g. /temperature 0.7" : "a whole number; e.g. /topk 50"));
      }
      if (temperature) {
        s.temperature = *t;
      } else {
        s.top_k = *k;
      }
      session.set_sampling(s);
    }
    char text[64];
    if (temperature) {
      std::snprintf(text, sizeof text, "temperature %g\n", session.sampling().temperature);
    } else {
      std::snprintf(text, sizeof text, "top-k %lld\n",
                    static_cast<long long>(session.sampling().top_k));
    }
    print(text);
  } else {
    throw InputError("unknown command " + std::string(name) +
                     "; /help lists the commands (start a message that begins with '/' with "
                     "'//')");
  }
  return true;
}

}  // namespace

void register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "chat",
      "Talk with a post-trained checkpoint in the chat format: each line of stdin is a message "
      "(or a /command: /help lists them), each reply sees the conversation so far");
  struct Args {
    std::string checkpoint, tokenizer, system;
    double temperature = 0.8;
    int64_t top_k = 50, max_tokens = 256, window = 0;
    int64_t seed = 0;  // int64_t: CLI11 would wrap a negative value into a uint64_t
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "A checkpoint directory, or a run directory (its newest checkpoint)")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer (default: the one recorded with the checkpoint)");
  cmd->add_option("--temperature", a->temperature, "Softmax temperature; 0 is greedy")
      ->capture_default_str()
      ->check(finite_in_range(0.0, 100.0));
  cmd->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{65536}));
  cmd->add_option("--max-tokens", a->max_tokens, "The longest reply, in tokens")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seed", a->seed,
                  "Random seed; the same seed and the same lines give the same replies")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--system", a->system,
                  "A system message, put in front of the first user message");
  add_checkpoint_window_option(cmd, a->window);
  cmd->callback([a] {
    const std::string dir = require_checkpoint(a->checkpoint);
    const std::string spec = checkpoint_tokenizer_spec(dir, a->tokenizer);
    const BpeTokenizer tokenizer = BpeTokenizer::load(spec);
    chat_tokens(tokenizer);  // a tokenizer without them fails here, before the model loads
    const std::unique_ptr<Gpt> model = load_model(dir);
    const Config& c = model->config();
    ModelScorer scorer(*model,
                       a->window > 0 ? a->window : attention_window_at(c, c.num_iterations));
    ChatSessionOptions o;
    o.sampling.temperature = a->temperature;
    o.sampling.top_k = a->top_k;
    o.max_tokens = a->max_tokens;
    o.seed = static_cast<uint64_t>(a->seed);
    o.system = a->system;
    ChatSession session(scorer, tokenizer, o);

    const bool terminal = ::isatty(STDIN_FILENO) == 1;
    if (terminal) {
      std::printf(
          "Chatting with %s (context %lld tokens, replies up to %lld). /help lists the "
          "commands, /quit or Ctrl-D leaves.\n",
          dir.c_str(), static_cast<long long>(session.context()),
          static_cast<long long>(session.max_tokens()));
    }
    std::string line;
    for (;;) {
      if (terminal) {
        print("you> ");
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, line)) {
        if (terminal) print("\n");
        break;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      try {
        if (line[0] == '/' && line.rfind("//", 0) != 0) {
          if (!run_command(line, session)) break;
        } else {
          print_reply(session.reply(line[0] == '/' ? line.substr(1) : line), session);
        }
      } catch (const InputError& e) {
        // A line the session refuses (too long, not UTF-8, a bad value) ends nothing.
        std::fprintf(stderr, "nanogpt: %s\n", e.what());
      }
      std::fflush(stdout);
    }
  });
}

}  // namespace nanogpt::cli
