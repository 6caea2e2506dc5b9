#include "workloads/optimizers.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "device/backend.h"

namespace ltb {

ForeachAdamW::ForeachAdamW(const std::vector<at::Tensor>& params,
                           torch::optim::AdamWOptions options)
    : torch::optim::AdamW(params, std::move(options)) {}

namespace {

// The loss of a step's closure, computed with autograd on (none without one).
at::Tensor LossOf(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  c10::AutoGradMode grad(true);
  return closure();
}

// A parameter's AdamW state, made on its first step as torch::optim::AdamW
// makes it, and counted one step further.
torch::optim::AdamWParamState& NextAdamWState(
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
    const at::Tensor& p) {
  auto it = state.find(p.unsafeGetTensorImpl());
  if (it == state.end()) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(0);
    s->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
    s->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    it = state.emplace(p.unsafeGetTensorImpl(), std::move(s)).first;
  }
  auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
  s.step(s.step() + 1);
  return s;
}

}  // namespace

at::Tensor ForeachAdamW::step(LossClosure closure) {
  const at::Tensor loss = LossOf(closure);
  c10::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "ForeachAdamW: amsgrad is not supported");
    const double lr = o.lr(), eps = o.eps(), wd = o.weight_decay();
    const auto [beta1, beta2] = o.betas();
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<at::Scalar> step_sizes, bias_correction2_sqrt;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = NextAdamWState(state_, p);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      const double step = static_cast<double>(s.step());
      step_sizes.emplace_back(-lr / (1 - std::pow(beta1, step)));
      bias_correction2_sqrt.emplace_back(std::sqrt(1 - std::pow(beta2, step)));
    }
    if (params.empty()) continue;
    if (wd != 0) at::_foreach_mul_(params, 1 - lr * wd);
    at::_foreach_lerp_(exp_avgs, grads, 1 - beta1);
    at::_foreach_mul_(exp_avg_sqs, beta2);
    at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
    std::vector<at::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denom, bias_correction2_sqrt);
    at::_foreach_add_(denom, eps);
    at::_foreach_addcdiv_(params, exp_avgs, denom, step_sizes);
  }
  return loss;
}

PerParameterAdamW::PerParameterAdamW(const std::vector<at::Tensor>& params,
                                     torch::optim::AdamWOptions options)
    : torch::optim::AdamW(params, std::move(options)) {}

at::Tensor PerParameterAdamW::step(LossClosure closure) {
  const at::Tensor loss = LossOf(closure);
  c10::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "PerParameterAdamW: amsgrad is not supported");
    const double lr = o.lr(), eps = o.eps(), wd = o.weight_decay();
    const auto [beta1, beta2] = o.betas();
    for (at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      const at::Tensor& grad = p.grad();
      auto& s = NextAdamWState(state_, p);
      const double step = static_cast<double>(s.step());
      if (wd != 0) p.mul_(1 - lr * wd);
      s.exp_avg().lerp_(grad, 1 - beta1);
      s.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const at::Tensor denom =
          (s.exp_avg_sq().sqrt() / std::sqrt(1 - std::pow(beta2, step))).add_(eps);
      p.addcdiv_(s.exp_avg(), denom, -lr / (1 - std::pow(beta1, step)));
    }
  }
  return loss;
}

ForeachSGD::ForeachSGD(const std::vector<at::Tensor>& params,
                       torch::optim::SGDOptions options)
    : torch::optim::SGD(params, std::move(options)) {}

at::Tensor ForeachSGD::step(LossClosure closure) {
  const at::Tensor loss = LossOf(closure);
  c10::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    TORCH_CHECK(!o.nesterov(), "ForeachSGD: nesterov is not supported");
    std::vector<at::Tensor> params, grads;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
    if (o.momentum() != 0) {
      // A parameter's first buffer is its gradient itself; the buffers that
      // existed before this step are updated in one go (a parameter whose
      // first gradient comes later leaves the others' update as it is).
      std::vector<at::Tensor> buffers, updated, updated_grads;
      for (size_t i = 0; i < params.size(); ++i) {
        auto it = state_.find(params[i].unsafeGetTensorImpl());
        if (it == state_.end()) {
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(grads[i].clone().detach());
          buffers.push_back(s->momentum_buffer());
          state_.emplace(params[i].unsafeGetTensorImpl(), std::move(s));
        } else {
          buffers.push_back(
              static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
          updated.push_back(buffers.back());
          updated_grads.push_back(grads[i]);
        }
      }
      if (!updated.empty()) {
        at::_foreach_mul_(updated, o.momentum());
        at::_foreach_add_(updated, updated_grads, 1 - o.dampening());
      }
      grads = std::move(buffers);
    }
    at::_foreach_add_(params, grads, -o.lr());
  }
  return loss;
}

bool DefaultsToForeach(const c10::Device& device) {
  return BackendOf(device).Caps().foreach_optimizers;
}

std::unique_ptr<torch::optim::Optimizer> MakeAdamW(
    const c10::Device& device, const std::vector<at::Tensor>& params,
    const torch::optim::AdamWOptions& options) {
  if (DefaultsToForeach(device)) return std::make_unique<ForeachAdamW>(params, options);
  return std::make_unique<PerParameterAdamW>(params, options);
}

std::unique_ptr<torch::optim::Optimizer> MakeSGD(
    const c10::Device& device, const std::vector<at::Tensor>& params,
    const torch::optim::SGDOptions& options) {
  if (DefaultsToForeach(device)) return std::make_unique<ForeachSGD>(params, options);
  return std::make_unique<torch::optim::SGD>(params, options);
}

}  // namespace ltb
