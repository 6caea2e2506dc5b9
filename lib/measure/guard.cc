#include "measure/guard.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/format.h"
#include "device/device.h"
#include "distributed/distributed.h"
#include "measure/counters.h"

namespace ltb {
namespace {

// " (note)", or "" without one.
std::string Parenthesised(const std::string& note) {
  return note.empty() ? "" : absl::StrCat(" (", note, ")");
}

// "weights ..., activations ..." and the overhead where it was estimated.
std::string Parts(const MemoryEstimate& need) {
  std::string parts = absl::StrCat("weights ", FormatBytes(need.weights), ", gradients ",
                                   FormatBytes(need.gradients), ", optimizer state ",
                                   FormatBytes(need.optimizer), ", activations ",
                                   FormatBytes(need.activations));
  if (need.overhead > 0) {
    absl::StrAppend(&parts, ", allocator overhead ", FormatBytes(need.overhead));
  }
  return parts;
}

// What may make it fit: where the weights and what training keeps of them
// fill `available` alone, a batch or a sequence cannot.
std::string Advice(const MemoryEstimate& need, int64_t available) {
  const int64_t state = need.weights + need.gradients + need.optimizer;
  if (state >= available) {
    return absl::StrCat(
        "; its weights",
        need.gradients + need.optimizer > 0 ? " and their training state" : "",
        " alone need ", FormatBytes(state),
        ", which no --batch or --seq changes: try a smaller size",
        need.gradients + need.optimizer > 0 ? "" : " or a narrower --dtype");
  }
  return "; try a smaller size, --batch or --seq";
}

}  // namespace

absl::Status CheckFits(const MemoryEstimate& need, const c10::Device& device,
                       int host_ranks, bool heap_keeps_freed) {
  const int64_t host_available = DeviceAvailableBytes(HostDevice());
  const bool on_cpu = BackendOf(device).Caps().host;
  // Freed blocks the heap keeps beside the live ones.
  const int64_t kept = on_cpu && heap_keeps_freed ? need.activations : 0;
  // Built on the host first; on the CPU the build and the run share memory.
  const int64_t rank_need =
      on_cpu ? std::max(need.Total() + kept, need.host_build) : need.host_build;
  const int64_t host_need = rank_need * std::max(host_ranks, 1);
  if (host_available >= 0 && host_need > host_available) {
    std::string what =
        on_cpu && need.Total() + kept >= need.host_build
            ? absl::StrCat(FormatBytes(need.Total() + kept), " (", Parts(need),
                           kept > 0 ? absl::StrCat(", and as much as the activations "
                                                   "again for the freed blocks the heap "
                                                   "keeps under --malloc=tuned")
                                    : "",
                           ")")
            : absl::StrCat(
                  FormatBytes(need.host_build),
                  " of host memory (to build the model before it is converted or moved, "
                  "or a transfer's host copy)");
    if (host_ranks > 1) {
      absl::StrAppend(&what, " for each of the ", host_ranks,
                      " data-parallel ranks on this machine, ", FormatBytes(host_need),
                      " in all,");
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "does not fit: needs about ", what, " but cpu has ", FormatBytes(host_available),
        " available", Parenthesised(BackendOf(HostDevice()).AvailableNote(HostDevice())),
        on_cpu && need.Total() + kept >= need.host_build
            ? Advice(need, host_available / std::max(host_ranks, 1))
            : "; try a smaller size"));
  }
  if (on_cpu) return absl::OkStatus();
  const int64_t available = DeviceAvailableBytes(device);
  if (available < 0 || need.Total() <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "does not fit: needs about ", FormatBytes(need.Total()), " (", Parts(need),
      ") but ", DeviceName(device), " has ", FormatBytes(available), " available",
      Parenthesised(BackendOf(device).AvailableNote(device)), Advice(need, available)));
}

int RanksOnThisHost(DataParallel* group) {
  if (group == nullptr) return 1;
  // One machine's ranks share its memory.
  const double id = MachineKey("memory");
  at::Tensor ids = at::zeros({group->world_size()}, at::TensorOptions(at::kDouble));
  ids[group->rank()] = id;
  ids = ids.to(group->device());
  group->SumInPlace(ids);
  ids = ids.cpu().contiguous();
  const double* p = ids.data_ptr<double>();
  return static_cast<int>(std::count(p, p + ids.numel(), id));
}

absl::Status AgreeOnFit(absl::Status fits, DataParallel* group) {
  if (group == nullptr) return fits;
  at::Tensor refused = at::full({1}, fits.ok() ? 0.0 : 1.0,
                                at::TensorOptions(at::kDouble).device(group->device()));
  group->MaxInPlace(refused);
  if (fits.ok() && refused.item<double>() > 0) {
    return absl::ResourceExhaustedError("does not fit on another rank (see its message)");
  }
  return fits;
}

}  // namespace ltb
