// What the backward tells as it goes: which gradients are final, so that data-parallel training
// can send them to the other ranks while the backward goes on with the layers below
// (optim/gradient_reducer.hpp), as the seed's post-accumulate-grad hooks do.
#pragma once

namespace nanogpt {

// Stages of GptT's backward, in the order they finish: 0 after the head (lm_head), L - i after
// block i (its matrices, lambdas, router; the U-net skip weights after the last block that
// writes them; a value embedding after the lowest layer that reads it), L + 1 after the
// embedding. GptT::gradient_ready_stages() gives each parameter's.
class BackwardListener {
 public:
  virtual ~BackwardListener() = default;
  // Every gradient whose ready stage is <= `stage` is final for this backward.
  virtual void gradients_final(int stage) = 0;
};

}  // namespace nanogpt
