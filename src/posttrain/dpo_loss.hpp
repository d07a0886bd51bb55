// Direct Preference Optimization's losses on sequence log-probabilities (issue 18, item 5).
//
// For one preference pair the model gives four numbers, each a completion's summed token
// log-probability: πc, πr under the policy being trained for the chosen and the rejected
// completion, and rc, rr under the frozen reference model. DPO's implicit reward of a completion
// is β·(π − r), and every loss is a function of the margin
//   h = (πc − rc) − (πr − rr)
// (β > 0 sets how far the policy may move from the reference):
//   sigmoid (Rafailov et al. 2023):  −log σ(β·h)           dℓ/dh = −β·σ(−β·h)
//   ipo     (Azar et al. 2023):      (h − 1/(2β))²          dℓ/dh = 2·(h − 1/(2β))
//   hinge   (SLiC, Zhao et al. 2023): max(0, 1 − β·h)       dℓ/dh = −β where 1 − β·h > 0, else 0
// (TRL's loss_type names; IPO regresses the margin onto 1/(2β) instead of pushing it to
// infinity; hinge stops pushing once the margin reaches 1/β). dℓ/dπc = dℓ/dh and
// dℓ/dπr = −dℓ/dh; the reference's log-probabilities carry no gradient.
//
// The batch loss is the mean over pairs, L = (1/N)·Σ ℓ. N is the whole batch's number of pairs:
// a batch cut into micro-batches passes it to each part, so the parts' losses and gradients add
// up to the whole batch's. What a pair's log-probability is (a sum, or for IPO as TRL feeds it a
// mean over the completion's tokens) is the caller's choice; the loss only sees the numbers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace nanogpt {

enum class DpoLossKind { kSigmoid, kIpo, kHinge };

// "sigmoid", "ipo", "hinge".
const char* dpo_loss_kind_name(DpoLossKind kind);
// The inverse of dpo_loss_kind_name; any other name is an InputError listing the valid ones.
DpoLossKind parse_dpo_loss_kind(std::string_view name);

struct DpoConfig {
  DpoLossKind kind = DpoLossKind::kSigmoid;
  double beta = 0.1;  // > 0; TRL's default
};

// One entry per pair in each span; all four the same length.
struct DpoLogps {
  std::span<const double> policy_chosen;
  std::span<const double> policy_rejected;
  std::span<const double> reference_chosen;
  std::span<const double> reference_rejected;
};

struct DpoResult {
  double loss = 0;  // (1/N)·Σ ℓ over this call's pairs, N the batch's pairs
  // dL/dπc and dL/dπr for each pair: the loss's gradients, already divided by N.
  std::vector<double> grad_policy_chosen;
  std::vector<double> grad_policy_rejected;
  // Metrics over this call's pairs (TRL's rewards/*), plain means: combine micro-batches by
  // weighting each with its `pairs`.
  double reward_chosen = 0;    // mean of β·(πc − rc)
  double reward_rejected = 0;  // mean of β·(πr − rr)
  double reward_margin = 0;    // mean of β·(πc − rc) − β·(πr − rr)
  double reward_accuracy = 0;  // fraction of pairs whose chosen reward is the larger (strictly)
  int64_t pairs = 0;
};

// The loss of a whole batch (N = its number of pairs).
DpoResult dpo_loss(const DpoLogps& logps, const DpoConfig& config);
// A part of a batch of `batch_pairs` pairs (at least this part's pairs).
DpoResult dpo_loss(const DpoLogps& logps, const DpoConfig& config, int64_t batch_pairs);

}  // namespace nanogpt
