#include "posttrain/value_head.hpp"

#include <algorithm>
#include <cmath>
#include <exception>

#include "runtime/error.hpp"
#include "runtime/safetensors.hpp"

namespace nanogpt {

namespace {

constexpr const char* kFormat = "value_head";

std::span<const float> part(const std::vector<float>& v, size_t begin, size_t n) {
  return std::span<const float>(v).subspan(begin, n);
}

}  // namespace

ValueHead::ValueHead(int64_t model_dim) : dim_(model_dim) {
  if (model_dim < 1) {
    throw Error("ValueHead: model_dim = " + std::to_string(model_dim) + " must be >= 1");
  }
  const auto n = static_cast<size_t>(model_dim + 1);
  params_.assign(n, 0.0f);
  exp_avg_.assign(n, 0.0f);
  exp_avg_sq_.assign(n, 0.0f);
  grads_.assign(n, 0.0);
}

double ValueHead::value(const float* row) const {
  double v = 0;
  for (int64_t i = 0; i < dim_; ++i) v += static_cast<double>(row[i]) * params_[i];
  return v + params_.back();
}

std::vector<double> ValueHead::values(std::span<const float> rows) const {
  const auto d = static_cast<size_t>(dim_);
  if (rows.size() % d != 0) {
    throw Error("ValueHead::values: " + std::to_string(rows.size()) +
                " floats are not rows of model_dim = " + std::to_string(dim_));
  }
  std::vector<double> out(rows.size() / d);
  for (size_t r = 0; r < out.size(); ++r) out[r] = value(rows.data() + r * d);
  return out;
}

void ValueHead::feature_grad(double grad_value, double scale, float* out) const {
  const double g = scale * grad_value;
  for (int64_t i = 0; i < dim_; ++i) out[i] = static_cast<float>(g * params_[i]);
}

void ValueHead::accumulate(const float* row, double grad_value) {
  for (int64_t i = 0; i < dim_; ++i) grads_[i] += grad_value * static_cast<double>(row[i]);
  grads_.back() += grad_value;
}

void ValueHead::zero_grads() {
  grads_.assign(grads_.size(), 0.0);
}

void ValueHead::adam_step(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    throw InputError("value head: the learning rate must be finite and > 0, not " +
                     std::to_string(lr));
  }
  // The gradients in float, as the model's: Adam's arithmetic is float32 like the trunk's.
  std::vector<float> g(grads_.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(grads_[i]);
  ++adam_steps_;
  adam_update(params_.data(), g.data(), exp_avg_.data(), exp_avg_sq_.data(),
              static_cast<int64_t>(params_.size()), lr, kAdam, adam_steps_);
}

std::string ValueHead::serialize() const {
  SafetensorsWriter w;
  w.set_metadata("format", kFormat);
  w.set_metadata("adam_steps", std::to_string(adam_steps_));
  const auto d = static_cast<size_t>(dim_);
  const std::vector<int64_t> wshape = {dim_}, bshape = {1};
  w.add_f32("weight", wshape, part(params_, 0, d));
  w.add_f32("bias", bshape, part(params_, d, 1));
  w.add_f32("weight.exp_avg", wshape, part(exp_avg_, 0, d));
  w.add_f32("bias.exp_avg", bshape, part(exp_avg_, d, 1));
  w.add_f32("weight.exp_avg_sq", wshape, part(exp_avg_sq_, 0, d));
  w.add_f32("bias.exp_avg_sq", bshape, part(exp_avg_sq_, d, 1));
  return w.serialize();
}

ValueHead ValueHead::load(const std::string& path, int64_t model_dim) {
  const SafetensorsReader r(path);
  auto damaged = [&](const std::string& what) {
    return InputError("'" + path + "' " + what +
                      "; it is not a value head `nanogpt rl --estimator ppo_gae` wrote for this "
                      "model: resume from a checkpoint of the same run");
  };
  if (r.metadata().count("format") == 0 || r.metadata().at("format") != kFormat) {
    throw damaged("has no \"format\": \"value_head\" metadata");
  }
  const std::vector<int64_t> wshape = {model_dim}, bshape = {1};
  if (r.tensor("weight").shape != wshape) {
    throw damaged("holds a head of " + shape_string(r.tensor("weight").shape) +
                  " weights, the model's rows have " + std::to_string(model_dim));
  }
  ValueHead head(model_dim);
  auto read = [&](const std::string& suffix, std::vector<float>& into) {
    const std::vector<float> w = r.read_f32("weight" + suffix, wshape);
    std::copy(w.begin(), w.end(), into.begin());
    into.back() = r.read_f32("bias" + suffix, bshape)[0];
  };
  read("", head.params_);
  read(".exp_avg", head.exp_avg_);
  read(".exp_avg_sq", head.exp_avg_sq_);
  const std::string& steps = r.metadata_value("adam_steps");
  size_t used = 0;
  try {
    head.adam_steps_ = std::stoll(steps, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != steps.size() || head.adam_steps_ < 0) {
    throw damaged("has adam_steps = \"" + steps + "\", not a count");
  }
  return head;
}

}  // namespace nanogpt
