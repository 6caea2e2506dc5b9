// Mixed precision: autocast switched on for a region, on whichever device
// type a backend runs autocast for, across the LibTorch versions' APIs.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "device/backend.h"

namespace ltb {

// RAII autocast on `device` (on the device type its backend names); a
// no-op for fp32.
class AutocastGuard {
 public:
  AutocastGuard(const c10::Device& device, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool was_enabled_ = false;
  c10::ScalarType old_dtype_ = c10::kFloat;
};

}  // namespace ltb
