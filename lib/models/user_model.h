// The Model family: a user's own model files, AOTInductor packages (.pt2)
// or TorchScript modules, benchmarked with --model=PATH[,PATH...] as
// Model/<file stem>/<device>/forward/batch:B/<dtype>/<aoti|torchscript>.
// A model file is code: load only files you trust.
#pragma once

#include "absl/status/statusor.h"
#include "family/family.h"
#include "family/registry.h"

namespace ltb {

// The family of the files --model names, with --inputs and
// --flops_per_step (`options`); a family with no cases when --model is not
// given.
absl::StatusOr<Family> ModelFamilyFromOptions(const FamilyOptions& options);

}  // namespace ltb
