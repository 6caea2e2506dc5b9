#include "measure/health.h"

#include <c10/util/Exception.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "device/device.h"

namespace ltb {
namespace {

std::map<std::string, std::string>& Unusable() {
  static auto* unusable = new std::map<std::string, std::string>;
  return *unusable;
}

}  // namespace

std::optional<std::string> CheckDeviceAfterFailure(const c10::Device& device,
                                                   const std::string& benchmark) {
  if (WhyDeviceUnusable(device)) return std::nullopt;  // already known
  std::string sticky;
  bool usable = true;
  try {
    usable = BackendOf(device).Usable(device, &sticky);
  } catch (const std::exception& e) {
    usable = false;
    sticky = ErrorText(e);
  }
  if (usable) return std::nullopt;
  MarkDeviceUnusable(device, absl::StrCat("a fault in ", benchmark, " (", sticky,
                                          ") left it unusable for the rest of this run"));
  return absl::StrCat("; ", DeviceName(device),
                      " is unusable after this fault: its later benchmarks are not run "
                      "(run them in a new process); other devices go on");
}

void MarkDeviceUnusable(const c10::Device& device, const std::string& why) {
  Unusable().emplace(DeviceName(device), why);
}

std::optional<std::string> WhyDeviceUnusable(const c10::Device& device) {
  auto it = Unusable().find(DeviceName(device));
  if (it == Unusable().end()) return std::nullopt;
  return it->second;
}

std::string ErrorText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return c10->what_without_backtrace();
  }
  return e.what();
}

void ClearUnusableDevices() { Unusable().clear(); }

}  // namespace ltb
