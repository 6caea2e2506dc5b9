// What differs between the LibTorch versions the suite builds against: 1.13
// (Debian 12's libtorch-dev) up to the newest 2.x. Code that needs an API
// from a later version asks LTB_TORCH_AT_LEAST and keeps an older path.
#pragma once

#include <torch/version.h>

#define LTB_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::scaled_dot_product_attention (2.0); before it, attention is always the
// explicit matmul-softmax-matmul.
#define LTB_HAS_SDPA LTB_TORCH_AT_LEAST(2, 0)

// c10d::Backend as the base of ProcessGroupGloo and ProcessGroupNCCL (2.0);
// before it they derive from c10d::ProcessGroup, which has the same
// collectives.
#define LTB_HAS_C10D_BACKEND LTB_TORCH_AT_LEAST(2, 0)

// c10d::Reducer, the engine of Python's DistributedDataParallel, with the
// constructor of 2.15 (its arguments change between versions); before it,
// data-parallel gradients are averaged after the whole backward.
#define LTB_HAS_REDUCER LTB_TORCH_AT_LEAST(2, 15)

// torch/mps.h, the C++ API to query and synchronise MPS (2.1).
#define LTB_HAS_MPS_API LTB_TORCH_AT_LEAST(2, 1)

// at::autocast's per-device functions (2.4); before them, CPU and CUDA each
// have their own.
#define LTB_HAS_DEVICE_AUTOCAST LTB_TORCH_AT_LEAST(2, 4)

// torch::inductor::AOTIModelPackageLoader, which runs AOTInductor packages
// (.pt2) from C++ (2.6).
#define LTB_HAS_AOTI_PACKAGE LTB_TORCH_AT_LEAST(2, 6)

namespace c10d {
class Backend;
class ProcessGroup;
}  // namespace c10d

namespace ltb {

#if LTB_HAS_C10D_BACKEND
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

}  // namespace ltb
