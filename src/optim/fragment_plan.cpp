#include "optim/fragment_plan.hpp"

#include <cstdlib>

#include "runtime/error.hpp"

namespace nanogpt {

namespace {

// The integer after `prefix` at the start of `name` ("blocks.12.mlp" → 12), or -1.
int64_t index_after(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  const char* begin = name.c_str() + prefix.size();
  char* end = nullptr;
  const long long v = std::strtoll(begin, &end, 10);
  return end != begin && *end == '.' ? v : -1;
}

}  // namespace

int64_t fragment_layer_of(const std::string& name, int64_t num_layers) {
  if (const int64_t i = index_after(name, "blocks."); i >= 0) return i;
  if (const int64_t k = index_after(name, "value_embeds."); k >= 0) return k;
  if (name == "lm_head.weight") return num_layers - 1;
  if (name == "skip_weights") return num_layers / 2;
  return 0;  // the token embedding, and anything not tied to a block
}

int64_t fragment_of_layer(int64_t layer, int64_t num_layers, int64_t fragments,
                          FragmentOrder order) {
  return order == FragmentOrder::kStrided ? layer % fragments : layer * fragments / num_layers;
}

std::vector<OuterFragment> plan_fragments(const std::vector<ParamTensor>& tensors,
                                          int64_t num_layers, int64_t fragments,
                                          FragmentOrder order) {
  std::vector<OuterFragment> out(static_cast<size_t>(fragments));
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ParamTensor& pt = tensors[t];
    const int64_t layer = fragment_layer_of(pt.name, num_layers);
    OuterFragment& f =
        out[static_cast<size_t>(fragment_of_layer(layer, num_layers, fragments, order))];
    f.tensors.push_back(t);
    f.numel += pt.numel;
    if (!f.runs.empty() && f.runs.back().offset + f.runs.back().count == pt.offset) {
      f.runs.back().count += pt.numel;
    } else {
      f.runs.push_back({pt.offset, pt.numel});
    }
  }
  return out;
}

bool fragment_syncs_after(int64_t steps_done, int64_t p, int64_t fragments, int64_t sync_every) {
  const int64_t offset = p * sync_every / fragments;
  return steps_done >= 1 && steps_done >= offset && (steps_done - offset) % sync_every == 0;
}

}  // namespace nanogpt
