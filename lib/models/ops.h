// The Ops family: single LibTorch operations, as references for the model
// benchmarks (what the hardware does on a large matmul or a plain copy) and
// to see where a model's time goes. Names are Ops/<op>/<shape>/<device>/<dtype>.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

// What one step of an op costs, for its FLOP/s and bytes/s counters.
struct OpCost {
  double flops = 0;  // 2 per multiply-add; 0 for memory-bound ops
  // Bytes read + bytes written, each operand once: the least a step moves
  // (see Plan::MemoryBound for what they are measured against).
  double bytes = 0;
};

struct OpShape {
  std::string op;
  std::string shape;
};

// Every op and shape the family registers, in registration order.
std::vector<OpShape> OpShapes();

// The cost of one step of `op` on `shape` in `dtype`; errors list the valid ops.
absl::StatusOr<OpCost> OpCostFor(const std::string& op, const std::string& shape,
                                 c10::ScalarType dtype);

// The (m, k, n) of every matmul the family registers: the measured FLOP/s
// peak is the best of these, so no Ops/matmul benchmark should exceed it.
std::vector<MatmulShape> OpsMatmulShapes();

Family OpsFamily();

}  // namespace ltb
