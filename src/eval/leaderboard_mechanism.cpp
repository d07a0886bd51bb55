#include "eval/leaderboard_mechanism.hpp"

#include <cmath>

#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

namespace {

constexpr double kKaggleStep = 1e-5;  // Kaggle shows 5 decimals
constexpr double kTieSlack = 1e-12;   // see "Beats by more than t" in the header

bool beats(double loss, double previous, double margin) {
  return previous - loss > margin + kTieSlack;
}

double round_to_5_decimals(double value) {
  return std::round(value / kKaggleStep) / 1e5;
}

// Sample standard deviation (n - 1 in the denominator) of a[i] - b[i], or of a[i] when b is
// empty; two passes, so it is exact for the small integers of zero-one losses.
double paired_sd(std::span<const double> a, std::span<const double> b) {
  const size_t n = a.size();
  if (n < 2) return 0.0;
  auto diff = [&](size_t i) { return b.empty() ? a[i] : a[i] - b[i]; };
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += diff(i);
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = diff(i) - mean;
    squares += d * d;
  }
  return std::sqrt(squares / static_cast<double>(n - 1));
}

// The votes of submission `index` come from their own stream, so no generator state is saved.
uint64_t vote_stream_seed(uint64_t seed, int64_t index) {
  Rng mix(seed ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(index + 1)));
  return mix.next_u64();
}

}  // namespace

std::string_view mechanism_name(MechanismKind kind) {
  switch (kind) {
    case MechanismKind::kKaggle:
      return "kaggle";
    case MechanismKind::kLadder:
      return "ladder";
    case MechanismKind::kLadderFree:
      return "ladder-free";
    case MechanismKind::kSubsample:
      return "subsample";
  }
  return "?";
}

MechanismKind parse_mechanism(std::string_view name) {
  for (MechanismKind k : {MechanismKind::kKaggle, MechanismKind::kLadder,
                          MechanismKind::kLadderFree, MechanismKind::kSubsample}) {
    if (name == mechanism_name(k)) return k;
  }
  throw InputError("unknown leaderboard mechanism '" + std::string(name) +
                   "'; valid mechanisms: kaggle, ladder, ladder-free, subsample");
}

bool answers_best_so_far(MechanismKind kind) {
  return kind == MechanismKind::kLadder || kind == MechanismKind::kLadderFree;
}

void validate_mechanism_params(const MechanismParams& p) {
  if (p.kind == MechanismKind::kLadder && !(p.eta > 0.0 && p.eta <= 1.0)) {
    throw InputError("the ladder's step eta must be in (0, 1], got " + std::to_string(p.eta) +
                     "; try 0.01 (about 1.3 standard errors of a 0-1 loss on 4000 rows)");
  }
  if (p.kind == MechanismKind::kSubsample && p.votes < 1) {
    throw InputError("the subsample mechanism needs at least 1 vote per answer, got " +
                     std::to_string(p.votes));
  }
}

double mean_loss(std::span<const double> losses) {
  double sum = 0;
  for (double l : losses) sum += l;
  return losses.empty() ? 0.0 : sum / static_cast<double>(losses.size());
}

double round_to_step(double value, double step) {
  return std::round(value / step) * step;
}

LeaderboardMechanism::LeaderboardMechanism(MechanismParams params, MechanismMemory memory)
    : params_(params), memory_(std::move(memory)) {
  validate_mechanism_params(params_);
}

MechanismAnswer LeaderboardMechanism::answer(std::span<const double> losses) {
  return answer(losses, mean_loss(losses));
}

MechanismAnswer LeaderboardMechanism::answer(std::span<const double> losses, double loss) {
  MechanismAnswer a;
  MechanismMemory& m = memory_;
  switch (params_.kind) {
    case MechanismKind::kKaggle:
      a.answer = round_to_5_decimals(loss);
      break;
    case MechanismKind::kLadder:
      if (!m.has_leader || beats(loss, m.shown, params_.eta)) {
        m.has_leader = true;
        m.shown = round_to_step(loss, params_.eta);
        a.leads = true;
      }
      a.answer = m.shown;
      break;
    case MechanismKind::kLadderFree: {
      bool leads = !m.has_leader;
      if (!leads) {
        const double se =
            paired_sd(losses, m.leader_losses) / std::sqrt(static_cast<double>(losses.size()));
        leads = beats(loss, m.leader_loss, se);
      }
      if (leads) {
        m.has_leader = true;
        m.leader_loss = loss;
        m.shown = round_to_5_decimals(loss);
        m.leader_losses.assign(losses.begin(), losses.end());
        a.leads = true;
      }
      a.answer = m.shown;
      break;
    }
    case MechanismKind::kSubsample: {
      Rng rng(vote_stream_seed(params_.seed, m.answered));
      const size_t n = losses.size();
      int64_t ones = 0;
      for (int64_t v = 0; v < params_.votes; ++v) {
        size_t row = static_cast<size_t>(rng.uniform() * static_cast<double>(n));
        if (row >= n) row = n - 1;
        // uniform() < loss is a Bernoulli(loss) vote; for a 0/1 loss it is the loss itself.
        ones += rng.uniform() < losses[row] ? 1 : 0;
      }
      a.answer = static_cast<double>(ones) / static_cast<double>(params_.votes);
      break;
    }
  }
  ++m.answered;
  return a;
}

}  // namespace nanogpt
