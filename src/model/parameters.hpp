// All trainable tensors of a model in one contiguous buffer, each with its PyTorch name, shape
// and the optimizer group it belongs to. Gradients use the same layout, so zeroing,
// checkpointing and finiteness checks are single passes. Templated on the scalar type so the
// same model runs in float32 (training) and float64 (numerical checks).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

enum class ParamGroup {
  kMatrix,     // hidden matrices of the blocks: Muon
  kEmbedding,  // token and value embeddings: Adam
  kHead,       // lm_head: Adam
  kScalar,     // lambdas and skip weights: Adam
  kRouter,     // a mixture of experts' router [E, d]: Adam (at the scalars' rate, gpt_optimizer)
};

// How a tensor starts, recorded when it is added (the model's initialisation reads the role,
// never the name).
enum class ParamInit {
  kZero,          // zeros: output projections (attn.c_proj, mlp.c_proj, experts' c_proj), lm_head
  kNormal,        // standard normal: token and value embeddings
  kUniformFanIn,  // uniform ±√3·0.5·fan_in^-½ (fan_in = the last dimension): hidden matrices,
                  // experts' c_fc and routers
  kAttnLambdas,   // (0.5, 0.5): the value mix λa0·v + λa1·ve
  kBlockLambdas,  // (1, 0): the residual mix λ0·x + λ1·x0
  kOnes,          // ones: the U-net's skip weights
};

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t numel = 0;
  ParamGroup group = ParamGroup::kScalar;
  ParamInit init = ParamInit::kZero;
};

template <class Real>
class ParameterSetT {
 public:
  // Returns the tensor's offset in the buffer (its place in values() and in the gradients).
  size_t add(const std::string& name, std::vector<int64_t> shape, ParamGroup group,
             ParamInit init = ParamInit::kZero) {
    size_t numel = 1;
    for (int64_t s : shape) numel *= static_cast<size_t>(s);
    index_[name] = tensors_.size();
    const size_t offset = total_;
    tensors_.push_back({name, std::move(shape), offset, numel, group, init});
    total_ += numel;
    return offset;
  }
  // Allocates storage (zeroed) once all tensors are added.
  void allocate() { values_.assign(total_, Real(0)); }

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor& info(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw Error("internal: no parameter named '" + name + "'");
    return tensors_[it->second];
  }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Every non-const access counts as a change of the values (version() moves on): copies made
  // of them before it, such as weights packed for the GEMM (model/packed_weights.hpp), are
  // stale after it. So a writer takes a fresh pointer for each round of writes (the optimizer
  // every step, a load, an initialisation) rather than keeping one across reads of the model.
  Real* data(const std::string& name) {
    ++version_;
    return values_.data() + info(name).offset;
  }
  const Real* data(const std::string& name) const { return values_.data() + info(name).offset; }
  AlignedVector<Real>& values() {
    ++version_;
    return values_;
  }
  const AlignedVector<Real>& values() const { return values_; }
  size_t size() const { return values_.size(); }
  // Counts the non-const accesses above: equal versions mean unchanged values.
  uint64_t version() const { return version_; }

 private:
  std::vector<ParamTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  AlignedVector<Real> values_;
  size_t total_ = 0;
  uint64_t version_ = 0;
};

using ParameterSet = ParameterSetT<float>;

}  // namespace nanogpt
