// The ATen operators a piece of code calls on this thread, by name and count,
// as LibTorch's profiler would name them (RecordFunction's FUNCTION scope).
#pragma once

#include <ATen/record_function.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace ltb {

inline std::map<std::string, int> OperatorsCalled(const std::function<void()>& code) {
  static thread_local std::map<std::string, int>* calls = nullptr;
  std::map<std::string, int> counted;
  calls = &counted;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                     -> std::unique_ptr<at::ObserverContext> {
        ++(*calls)[fn.name()];
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  code();
  at::removeCallback(handle);
  calls = nullptr;
  return counted;
}

}  // namespace ltb
