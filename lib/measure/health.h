// Devices a fault has left unusable. A CUDA device-side fault (an illegal
// address, a device-side assert) is sticky: every later call on that GPU
// fails the same way until the process ends. The benchmark that faulted
// records the error; later benchmarks on that device fail at once saying
// why; benchmarks on other devices (the CPU) go on, and the results are
// written as usual.
#pragma once

#include <c10/core/Device.h>

#include <exception>
#include <optional>
#include <string>

namespace ltb {

// After `benchmark` failed on `device`: asks the device's
// backend whether it still works. If not, marks it unusable and returns
// the note to add to the benchmark's error.
std::optional<std::string> CheckDeviceAfterFailure(const c10::Device& device,
                                                   const std::string& benchmark);

// Marks `device` unusable because of `why` (the first reason is kept).
void MarkDeviceUnusable(const c10::Device& device, const std::string& why);

// Why `device` is unusable, or nullopt while it works.
std::optional<std::string> WhyDeviceUnusable(const c10::Device& device);

// An exception's message without LibTorch's backtrace.
std::string ErrorText(const std::exception& e);

// Forgets every mark (tests).
void ClearUnusableDevices();

}  // namespace ltb
