#include "eval/boosting_attack.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// n labels, one bit each (1 = label 1), the bits past n zero.
struct BitVector {
  std::vector<uint64_t> words;
  int64_t n = 0;
};

BitVector random_bits(Rng& rng, int64_t n) {
  BitVector v;
  v.n = n;
  v.words.resize(static_cast<size_t>((n + 63) / 64));
  for (uint64_t& w : v.words) w = rng.next_u64();
  if (n % 64 != 0) v.words.back() &= (uint64_t{1} << (n % 64)) - 1;
  return v;
}

int64_t count_disagreements(const BitVector& a, const BitVector& b) {
  int64_t c = 0;
  for (size_t i = 0; i < a.words.size(); ++i) c += std::popcount(a.words[i] ^ b.words[i]);
  return c;
}

// The per-row 0/1 losses of `guess` against `labels`, as the mechanisms take them.
void row_losses(const BitVector& guess, const BitVector& labels, std::vector<double>& out) {
  out.resize(static_cast<size_t>(guess.n));
  for (int64_t i = 0; i < guess.n; ++i) {
    const uint64_t w =
        guess.words[static_cast<size_t>(i / 64)] ^ labels.words[static_cast<size_t>(i / 64)];
    out[static_cast<size_t>(i)] = static_cast<double>((w >> (i % 64)) & 1);
  }
}

// One mechanism under attack within one seed.
struct Attacked {
  LeaderboardMechanism board;
  std::vector<int32_t> ones;  // per row: kept vectors voting for label 1
  int64_t kept = 0;
  double previous_answer = 2.0;  // above any loss: "the board shows nothing yet"
  double best = 2.0;             // B_t
  double error = 0;              // max_t |B_t - 1/2| so far
};

struct SeedPoint {
  double holdout = 0, shown = 0, fresh = 0, kept = 0, error = 0;
};

double board_value(MechanismKind kind, double best, double answer) {
  return answers_best_so_far(kind) ? answer : std::min(best, answer);
}

// Runs one seed; out[m * ks + j] gets mechanism m at ks[j].
void attack_one_seed(const BoostingAttackOptions& o, uint64_t seed, std::vector<SeedPoint>& out) {
  const int64_t n = o.rows;
  // SplitMix64 walks its state in fixed steps, so seeds s and s + 1 must not start one step
  // apart (their streams would be the same numbers shifted): start each at a hash of the seed.
  Rng rng(Rng(seed ^ 0x632BE59BD9B4E019ULL).next_u64());
  const BitVector labels = random_bits(rng, n);
  const BitVector fresh = random_bits(rng, n);
  std::vector<Attacked> attacked;
  for (size_t m = 0; m < o.mechanisms.size(); ++m) {
    MechanismParams p = o.mechanisms[m];
    p.seed = rng.next_u64();  // the subsample votes' own stream
    attacked.push_back({LeaderboardMechanism(p), std::vector<int32_t>(static_cast<size_t>(n), 0)});
  }
  std::vector<double> losses;
  const double half = 0.5;
  size_t next_k = 0;
  const int64_t k_max = o.ks.back();
  for (int64_t t = 1; t <= k_max; ++t) {
    const BitVector guess = random_bits(rng, n);
    row_losses(guess, labels, losses);
    const double loss =
        static_cast<double>(count_disagreements(guess, labels)) / static_cast<double>(n);
    for (Attacked& a : attacked) {
      const MechanismKind kind = a.board.params().kind;
      const MechanismAnswer ans = a.board.answer(losses, loss);
      const bool keep = answers_best_so_far(kind)
                            ? (ans.answer < a.previous_answer && ans.answer < half)
                            : ans.answer < half;
      a.previous_answer = ans.answer;
      a.best = board_value(kind, a.best, ans.answer);
      a.error = std::max(a.error, std::abs(a.best - half));
      if (keep) {
        ++a.kept;
        for (int64_t i = 0; i < n; ++i) {
          a.ones[static_cast<size_t>(i)] +=
              static_cast<int32_t>((guess.words[static_cast<size_t>(i / 64)] >> (i % 64)) & 1);
        }
      }
    }
    if (t != o.ks[next_k]) continue;
    for (size_t m = 0; m < attacked.size(); ++m) {
      const Attacked& a = attacked[m];
      BitVector vote;
      vote.n = n;
      vote.words.assign(labels.words.size(), 0);
      for (int64_t i = 0; i < n; ++i) {
        if (2 * static_cast<int64_t>(a.ones[static_cast<size_t>(i)]) >= a.kept) {
          vote.words[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
        }
      }
      row_losses(vote, labels, losses);
      const double vote_loss =
          static_cast<double>(count_disagreements(vote, labels)) / static_cast<double>(n);
      LeaderboardMechanism copy = a.board;  // submitting the vote must not change later k
      const double shown = copy.answer(losses, vote_loss).answer;
      const double best = board_value(copy.params().kind, a.best, shown);
      SeedPoint& p = out[m * o.ks.size() + next_k];
      p.holdout = vote_loss;
      p.shown = shown;
      p.fresh = static_cast<double>(count_disagreements(vote, fresh)) / static_cast<double>(n);
      p.kept = static_cast<double>(a.kept);
      p.error = std::max(a.error, std::abs(best - half));
    }
    ++next_k;
  }
}

}  // namespace

std::vector<BoostingAttackPoint> run_boosting_attack(const BoostingAttackOptions& o) {
  if (o.rows < 2) throw InputError("the attack needs a holdout of at least 2 rows");
  if (o.ks.empty() || o.ks.front() < 1 || !std::is_sorted(o.ks.begin(), o.ks.end()) ||
      std::adjacent_find(o.ks.begin(), o.ks.end()) != o.ks.end()) {
    throw InputError("the attack's numbers of submissions k must be positive and increasing");
  }
  if (o.seeds < 1) throw InputError("the attack needs at least one seed");
  if (o.mechanisms.empty()) throw InputError("the attack needs at least one mechanism");
  for (const MechanismParams& p : o.mechanisms) validate_mechanism_params(p);

  const size_t points = o.mechanisms.size() * o.ks.size();
  std::vector<std::vector<SeedPoint>> per_seed(static_cast<size_t>(o.seeds),
                                               std::vector<SeedPoint>(points));
  // Seeds are independent; each writes its own slot and the sums below run in seed order, so
  // the result does not depend on the thread count.
  ThreadPool::current().parallel_for(static_cast<size_t>(o.seeds), [&](size_t s, int) {
    attack_one_seed(o, o.first_seed + s, per_seed[s]);
  });

  std::vector<BoostingAttackPoint> result(points);
  const double seeds = static_cast<double>(o.seeds);
  for (size_t m = 0; m < o.mechanisms.size(); ++m) {
    for (size_t j = 0; j < o.ks.size(); ++j) {
      const size_t idx = m * o.ks.size() + j;
      BoostingAttackPoint& r = result[idx];
      r.mechanism = o.mechanisms[m].kind;
      r.k = o.ks[j];
      double h2 = 0, f2 = 0;
      for (const auto& seed_points : per_seed) {
        const SeedPoint& p = seed_points[idx];
        r.holdout_loss += p.holdout / seeds;
        r.shown += p.shown / seeds;
        r.fresh_loss += p.fresh / seeds;
        r.kept += p.kept / seeds;
        r.leaderboard_error += p.error / seeds;
        h2 += p.holdout * p.holdout / seeds;
        f2 += p.fresh * p.fresh / seeds;
      }
      const double correction = o.seeds > 1 ? seeds / (seeds - 1) : 0.0;
      r.holdout_sd = std::sqrt(std::max(0.0, h2 - r.holdout_loss * r.holdout_loss) * correction);
      r.fresh_sd = std::sqrt(std::max(0.0, f2 - r.fresh_loss * r.fresh_loss) * correction);
    }
  }
  return result;
}

double ladder_error_bound(double k, double n) {
  return std::cbrt(std::log(k * n) / n);
}

}  // namespace nanogpt
