#include "device/autocast.h"

#include <ATen/autocast_mode.h>

#include "base/torch_compat.h"

namespace ltb {
namespace {

#if LTB_HAS_DEVICE_AUTOCAST
bool AutocastEnabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
c10::ScalarType AutocastDtype(c10::DeviceType d) {
  return at::autocast::get_autocast_dtype(d);
}
void SetAutocast(c10::DeviceType d, bool enabled, c10::ScalarType dtype) {
  at::autocast::set_autocast_enabled(d, enabled);
  at::autocast::set_autocast_dtype(d, dtype);
}
#else
// Before LibTorch 2.4, autocast has one set of functions for CPU and one for
// CUDA, and none for other devices.
void CheckLegacyAutocast(c10::DeviceType d) {
  TORCH_CHECK(d == c10::kCPU || d == c10::kCUDA, "mixed precision on ", d,
              " needs LibTorch 2.4 or newer; this one is " TORCH_VERSION);
}
bool AutocastEnabled(c10::DeviceType d) {
  CheckLegacyAutocast(d);
  return d == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
c10::ScalarType AutocastDtype(c10::DeviceType d) {
  return d == c10::kCPU ? at::autocast::get_autocast_cpu_dtype()
                        : at::autocast::get_autocast_gpu_dtype();
}
void SetAutocast(c10::DeviceType d, bool enabled, c10::ScalarType dtype) {
  if (d == c10::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(const c10::Device& device, c10::ScalarType dtype)
    : device_(BackendOf(device).AutocastType(device)) {
  if (dtype == c10::kFloat) return;
  was_enabled_ = AutocastEnabled(device_);
  old_dtype_ = AutocastDtype(device_);
  active_ = true;
  SetAutocast(device_, true, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As Python's autocast does: the cast-weight cache lives for the
  // outermost region only.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(device_, was_enabled_, old_dtype_);
}

}  // namespace ltb
