#include "eval/leaderboard_state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "nanogpt-leaderboard";
constexpr int kVersion = 1;

// Every error about a state file ends the same way: say what to do, and that nothing was touched.
[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw InputError("leaderboard state '" + path + "' is unusable: " + what +
                   "; the file was left unchanged (restore it from a backup, or start a new "
                   "board with `nanogpt leaderboard init --state OTHER_FILE`)");
}

// Field access that names the field in errors.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  const Json& at(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key))
      corrupt(path_, "field '" + where + key + "' is missing");
    return j.at(key);
  }
  std::string str(const Json& j, const std::string& key, const std::string& where) const {
    const Json& v = at(j, key, where);
    if (!v.is_string()) corrupt(path_, "field '" + where + key + "' must be a string");
    return v.get<std::string>();
  }
  double number(const Json& j, const std::string& key, const std::string& where) const {
    const Json& v = at(j, key, where);
    if (!v.is_number()) corrupt(path_, "field '" + where + key + "' must be a number");
    return v.get<double>();
  }
  int64_t integer(const Json& j, const std::string& key, const std::string& where) const {
    const Json& v = at(j, key, where);
    if (!v.is_number_integer()) corrupt(path_, "field '" + where + key + "' must be an integer");
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const Json& j, const std::string& key, const std::string& where) const {
    const Json& v = at(j, key, where);
    if (!v.is_number_unsigned()) {
      corrupt(path_, "field '" + where + key + "' must be a non-negative integer");
    }
    return v.get<uint64_t>();
  }
  bool boolean(const Json& j, const std::string& key, const std::string& where) const {
    const Json& v = at(j, key, where);
    if (!v.is_boolean()) corrupt(path_, "field '" + where + key + "' must be true or false");
    return v.get<bool>();
  }
  [[noreturn]] void fail(const std::string& what) const { corrupt(path_, what); }

 private:
  const std::string& path_;
};

bool in_unit_interval(double x) {
  return x >= 0.0 && x <= 1.0;
}

}  // namespace

LeaderboardState new_leaderboard(const Holdout& holdout, LossKind loss, MechanismParams mechanism) {
  validate_mechanism_params(mechanism);
  check_loss_fits_holdout(loss, holdout);
  LeaderboardState s;
  s.holdout_path = std::filesystem::absolute(holdout.path).lexically_normal().string();
  s.holdout_sha256 = holdout.sha256;
  s.rows = static_cast<int64_t>(holdout.labels.size());
  s.loss = loss;
  s.mechanism = mechanism;
  return s;
}

std::string leaderboard_state_json(const LeaderboardState& s) {
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["holdout"] = {{"path", s.holdout_path}, {"sha256", s.holdout_sha256}, {"rows", s.rows}};
  j["loss"] = std::string(loss_kind_name(s.loss));
  j["mechanism"] = {{"name", std::string(mechanism_name(s.mechanism.kind))},
                    {"eta", s.mechanism.eta},
                    {"votes", s.mechanism.votes},
                    {"seed", s.mechanism.seed}};
  const MechanismMemory& m = s.memory;
  j["board"] = {{"answered", m.answered},
                {"has_leader", m.has_leader},
                {"shown", m.shown},
                {"leader_loss", m.leader_loss},
                {"leader_losses", m.leader_losses}};
  Json subs = Json::array();
  for (const SubmissionRecord& r : s.submissions) {
    subs.push_back({{"number", r.number},
                    {"name", r.name},
                    {"file", r.file},
                    {"sha256", r.sha256},
                    {"time", r.time},
                    {"private_score", r.private_score},
                    {"answer", r.answer},
                    {"leads", r.leads}});
  }
  j["submissions"] = std::move(subs);
  return j.dump(2) + "\n";
}

LeaderboardState parse_leaderboard_state(const std::string& text, const std::string& path) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    corrupt(path, std::string("it is not valid JSON (") + e.what() + ")");
  }
  const Reader r(path);
  if (!j.is_object()) r.fail("the top level must be a JSON object");
  if (r.str(j, "format", "") != kFormat) {
    r.fail(std::string("field 'format' must be \"") + kFormat + "\"");
  }
  if (r.integer(j, "version", "") != kVersion) {
    r.fail("field 'version' must be " + std::to_string(kVersion) + " (written by another release)");
  }
  LeaderboardState s;
  const Json& h = r.at(j, "holdout", "");
  s.holdout_path = r.str(h, "path", "holdout.");
  s.holdout_sha256 = r.str(h, "sha256", "holdout.");
  if (s.holdout_sha256.size() != 64) r.fail("field 'holdout.sha256' must be 64 hex digits");
  s.rows = r.integer(h, "rows", "holdout.");
  if (s.rows < 1) r.fail("field 'holdout.rows' must be at least 1");
  try {
    s.loss = parse_loss_kind(r.str(j, "loss", ""));
    const Json& mj = r.at(j, "mechanism", "");
    s.mechanism.kind = parse_mechanism(r.str(mj, "name", "mechanism."));
    s.mechanism.eta = r.number(mj, "eta", "mechanism.");
    s.mechanism.votes = r.integer(mj, "votes", "mechanism.");
    s.mechanism.seed = r.unsigned_integer(mj, "seed", "mechanism.");
    validate_mechanism_params(s.mechanism);
  } catch (const InputError& e) {
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    r.fail(std::string("field 'loss' or 'mechanism': ") + e.what());
  }
  const Json& b = r.at(j, "board", "");
  MechanismMemory& m = s.memory;
  m.answered = r.integer(b, "answered", "board.");
  m.has_leader = r.boolean(b, "has_leader", "board.");
  m.shown = r.number(b, "shown", "board.");
  m.leader_loss = r.number(b, "leader_loss", "board.");
  const Json& ll = r.at(b, "leader_losses", "board.");
  if (!ll.is_array()) r.fail("field 'board.leader_losses' must be an array");
  for (const Json& v : ll) {
    if (!v.is_number() || !in_unit_interval(v.get<double>())) {
      r.fail("field 'board.leader_losses' must hold numbers in [0, 1]");
    }
    m.leader_losses.push_back(v.get<double>());
  }
  const bool free_ladder = s.mechanism.kind == MechanismKind::kLadderFree;
  const size_t want_losses = free_ladder && m.has_leader ? static_cast<size_t>(s.rows) : 0;
  if (m.leader_losses.size() != want_losses) {
    r.fail("field 'board.leader_losses' has " + std::to_string(m.leader_losses.size()) +
           " entries where " + std::to_string(want_losses) + " belong");
  }
  if (!in_unit_interval(m.shown) || !in_unit_interval(m.leader_loss)) {
    r.fail("fields 'board.shown' and 'board.leader_loss' must be in [0, 1]");
  }
  const Json& subs = r.at(j, "submissions", "");
  if (!subs.is_array()) r.fail("field 'submissions' must be an array");
  for (size_t i = 0; i < subs.size(); ++i) {
    const std::string where = "submissions[" + std::to_string(i) + "].";
    const Json& sj = subs[i];
    SubmissionRecord rec;
    rec.number = r.integer(sj, "number", where);
    if (rec.number != static_cast<int64_t>(i) + 1) {
      r.fail("field '" + where + "number' must be " + std::to_string(i + 1));
    }
    rec.name = r.str(sj, "name", where);
    rec.file = r.str(sj, "file", where);
    rec.sha256 = r.str(sj, "sha256", where);
    rec.time = r.str(sj, "time", where);
    rec.private_score = r.number(sj, "private_score", where);
    rec.answer = r.number(sj, "answer", where);
    rec.leads = r.boolean(sj, "leads", where);
    s.submissions.push_back(std::move(rec));
  }
  if (m.answered != static_cast<int64_t>(s.submissions.size())) {
    r.fail("field 'board.answered' is " + std::to_string(m.answered) + " but 'submissions' holds " +
           std::to_string(s.submissions.size()));
  }
  if (answers_best_so_far(s.mechanism.kind) && m.has_leader != (m.answered > 0)) {
    r.fail("field 'board.has_leader' contradicts the number of submissions");
  }
  return s;
}

LeaderboardState load_leaderboard_state(const std::string& path) {
  if (!file_exists(path)) {
    throw InputError("leaderboard state '" + path +
                     "' does not exist; create the board with `nanogpt leaderboard init --state " +
                     path + " ...`");
  }
  return parse_leaderboard_state(read_file(path), path);
}

void save_leaderboard_state(const LeaderboardState& state, const std::string& path) {
  write_file_atomic(path, leaderboard_state_json(state));
}

Holdout load_board_holdout(const LeaderboardState& state, const std::string& state_path) {
  if (!file_exists(state.holdout_path)) {
    throw InputError("the holdout '" + state.holdout_path + "' of leaderboard '" + state_path +
                     "' is missing; put the labels back there (they are pinned by sha256)");
  }
  Holdout h = load_holdout(state.holdout_path);
  if (h.sha256 != state.holdout_sha256) {
    throw InputError("the holdout '" + state.holdout_path + "' changed since leaderboard '" +
                     state_path + "' was created (sha256 " + h.sha256.substr(0, 16) +
                     "..., the board has " + state.holdout_sha256.substr(0, 16) +
                     "...); restore the original labels, or create a new board");
  }
  if (static_cast<int64_t>(h.labels.size()) != state.rows) {
    throw InputError("the holdout '" + state.holdout_path + "' has " +
                     std::to_string(h.labels.size()) + " rows but leaderboard '" + state_path +
                     "' records " + std::to_string(state.rows));
  }
  return h;
}

LeaderboardLock::LeaderboardLock(const std::string& state_path) {
  std::filesystem::path dir = std::filesystem::path(state_path).parent_path();
  if (dir.empty()) dir = ".";
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw SystemError("cannot open the directory of", state_path, errno);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int err = errno;
      ::close(fd_);
      throw SystemError("cannot lock the directory of", state_path, err);
    }
  }
}

LeaderboardLock::~LeaderboardLock() {
  ::close(fd_);
}  // closing releases the lock

const SubmissionRecord& submit_to_leaderboard(LeaderboardState& state, const Holdout& holdout,
                                              const std::string& predictions_path,
                                              const std::string& name, const std::string& time) {
  // Everything that can fail happens before the state is touched.
  const ScoredSubmission scored = score_submission(predictions_path, holdout, state.loss);
  return submit_scored(state, scored, name, time);
}

const SubmissionRecord& submit_scored(LeaderboardState& state, const ScoredSubmission& scored,
                                      const std::string& name, const std::string& time) {
  LeaderboardMechanism mechanism(state.mechanism, state.memory);
  const MechanismAnswer a = mechanism.answer(scored.losses, scored.mean_loss);
  SubmissionRecord rec;
  rec.number = static_cast<int64_t>(state.submissions.size()) + 1;
  rec.name = name;
  rec.file = scored.path;
  rec.sha256 = scored.sha256;
  rec.time = time;
  rec.private_score = scored.mean_loss;
  rec.answer = a.answer;
  rec.leads = a.leads;
  state.memory = mechanism.memory();
  state.submissions.push_back(std::move(rec));
  return state.submissions.back();
}

}  // namespace nanogpt
