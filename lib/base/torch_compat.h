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

// c10d::Reducer, the engine of Python's DistributedDataParallel, over a
// c10d::ProcessGroup that wraps the collectives' c10d::Backend (2.0); before
// it, data-parallel gradients are averaged after the whole backward. The
// Reducer's constructor changes with the version (distributed.cc follows):
//   2.0 to 2.6: (params, bucket_indices, per_bucket_size_limits,
//               process_group, expect_sparse_gradients, bucket_bytes_cap,
//               find_unused_parameters, gradient_as_bucket_view, param_names,
//               first_bucket_bytes_cap)
//   2.7:        per_bucket_size_limits removed
//   2.8:        + skip_all_reduce_unused_params, use_python_reducer
//   2.11:       + bucket_bytes_cap_list
//   2.12:       + batched_grad_copy = false; 2.15: + lazy_bucket_allocation = false
// and the ProcessGroup's: with Options (2.0 to 2.5), without, and with
// setDefaultBackend (2.6).
#define LTB_HAS_REDUCER LTB_HAS_C10D_BACKEND
#define LTB_REDUCER_VERSION "2.0"

// torch/mps.h, the C++ API to query and synchronise MPS (2.1).
#define LTB_HAS_MPS_API LTB_TORCH_AT_LEAST(2, 1)

// at::autocast's per-device functions (2.4); before them, CPU and CUDA each
// have their own.
#define LTB_HAS_DEVICE_AUTOCAST LTB_TORCH_AT_LEAST(2, 4)

// torch::inductor::AOTIModelPackageLoader, which runs AOTInductor packages
// (.pt2) from C++, with the constructor that takes the number of runners and
// the device index, and its runner's extract_constants_map (both 2.8; the
// loaders of 2.6 and 2.7 take only the path, the model's name and, in 2.7,
// run_single_threaded).
#define LTB_HAS_AOTI_PACKAGE LTB_TORCH_AT_LEAST(2, 8)
#define LTB_AOTI_PACKAGE_VERSION "2.8"

// AOTIModelPackageLoader::load_metadata_from_package, which reads a package's
// metadata without loading its model (2.10); before it, the metadata is read
// from the package's archive.
#define LTB_HAS_AOTI_PACKAGE_METADATA LTB_TORCH_AT_LEAST(2, 10)

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
