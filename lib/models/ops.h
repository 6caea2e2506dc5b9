// The Ops family: single LibTorch operations that give the model benchmarks
// a reference point (what the hardware does on one large matmul) and the
// harness a self-check (what timing an empty step costs).
#pragma once

#include "harness/family.h"

namespace ltb {

// Ops/matmul/2048x2048/<device>/<dtype>: C = A B, 2 n^3 FLOPs per step.
// Ops/copy/256MiB/<device>/<dtype>: dst.copy_(src); bytes/s counts the
// bytes read plus the bytes written.
// Ops/noop/empty/<device>/<dtype>: a step that does nothing.
Family OpsFamily();

}  // namespace ltb
