// Streaming DiLoCo's fragments: which parameters synchronize together, and when.
//
// A block's tensors ("blocks.i.*") belong to layer i. The tensors outside the blocks go with
// the layer nearest to where they act: the token embedding with layer 0, value embedding k with
// layer k (the first layer it feeds), lm_head with the last layer, the U-net skip weights with
// layer L/2 (the first decoder layer, which reads them), anything else with layer 0.
// Layers map to P fragments "strided" (layer i in fragment i mod P, the paper's choice: each
// fragment spans the depth) or "sequential" (P contiguous runs of layers, as evenly as
// possible).
//
// Fragment p synchronizes after the inner steps t (t = steps done, t >= 1) with
// (t − p·H/P) mod H = 0, where H = sync_every is a multiple of P: the P fragments leave in turn,
// H/P steps apart, so one at a time is on the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/parameters.hpp"

namespace nanogpt {

// A run of consecutive parameters in the model's buffer.
struct ParamRun {
  size_t offset = 0, count = 0;
};

struct OuterFragment {
  std::vector<size_t> tensors;  // indices into the parameter set's tensors(), in buffer order
  std::vector<ParamRun> runs;   // the same, as buffer runs (adjacent tensors merged)
  size_t numel = 0;
};

// The layer a parameter tensor belongs to (see above), for a model of `num_layers` blocks.
int64_t fragment_layer_of(const std::string& tensor_name, int64_t num_layers);
// The fragment of `layer` among `fragments`.
int64_t fragment_of_layer(int64_t layer, int64_t num_layers, int64_t fragments,
                          FragmentOrder order);
std::vector<OuterFragment> plan_fragments(const std::vector<ParamTensor>& tensors,
                                          int64_t num_layers, int64_t fragments,
                                          FragmentOrder order);
// Whether fragment p of P synchronizes after `steps_done` inner steps with period H.
bool fragment_syncs_after(int64_t steps_done, int64_t p, int64_t fragments, int64_t sync_every);

}  // namespace nanogpt
