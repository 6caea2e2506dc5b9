// The families' optimizers, stepped as Python PyTorch steps them by default
// on each device: multi-tensor (foreach) kernels where its default is
// foreach (CUDA), parameter by parameter elsewhere (the CPU, MPS), so that a
// train_step compares with what a Python user of the same device gets.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <vector>

namespace ltb {

// AdamW stepped with _foreach kernels (Python's _multi_tensor_adamw): a few
// kernels for all parameters instead of about eight for each. Same state
// (AdamWParamState) and the same update as torch::optim::AdamW; no amsgrad.
class ForeachAdamW final : public torch::optim::AdamW {
 public:
  ForeachAdamW(const std::vector<at::Tensor>& params, torch::optim::AdamWOptions options);
  at::Tensor step(LossClosure closure = nullptr) override;
};

// AdamW stepped parameter by parameter with the kernels of Python's
// _single_tensor_adamw, its default on the CPU: the first moment in one pass
// (lerp_), where torch::optim::AdamW makes two (mul_, then add_), one more
// read and write of every parameter's size a step. Same state and update as
// torch::optim::AdamW; no amsgrad.
class PerParameterAdamW final : public torch::optim::AdamW {
 public:
  PerParameterAdamW(const std::vector<at::Tensor>& params,
                    torch::optim::AdamWOptions options);
  at::Tensor step(LossClosure closure = nullptr) override;
};

// SGD with momentum stepped with _foreach kernels (Python's
// _multi_tensor_sgd). Same state and update as torch::optim::SGD; no
// nesterov.
class ForeachSGD final : public torch::optim::SGD {
 public:
  ForeachSGD(const std::vector<at::Tensor>& params, torch::optim::SGDOptions options);
  at::Tensor step(LossClosure closure = nullptr) override;
};

// Whether Python PyTorch's optimizers default to foreach for parameters on
// `device`: its backend says so.
bool DefaultsToForeach(const c10::Device& device);

// The optimizer Python's default picks for parameters on `device`: foreach
// or parameter by parameter, with Python's kernels either way.
std::unique_ptr<torch::optim::Optimizer> MakeAdamW(
    const c10::Device& device, const std::vector<at::Tensor>& params,
    const torch::optim::AdamWOptions& options);
std::unique_ptr<torch::optim::Optimizer> MakeSGD(const c10::Device& device,
                                                 const std::vector<at::Tensor>& params,
                                                 const torch::optim::SGDOptions& options);

}  // namespace ltb
