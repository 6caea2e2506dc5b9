// The suite's command-line flags: Abseil flags of typed values (lists,
// devices, dtypes, choices), each parsed by its own AbslParseFlag, all
// defined in suite/flags.cc (a family's own settings too: its factory gets
// them as FamilyOptions). SuiteFlags() is the one list of them; ParseSuiteFlags reads
// them from what Google Benchmark left of the command line; OptionsFromFlags
// turns them into the settings of a run. A bad value stops bench with exit
// code 2 and the valid choices.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/threads.h"
#include "family/registry.h"
#include "measure/runner.h"
#include "suite/sweep.h"
#include "workloads/loader.h"

namespace ltb {

// --- flag value types -------------------------------------------------------
// Lists are comma-separated, deduplicated in order. Each type's parse error
// says what is valid; the flag's name is added by the caller.

struct PositiveInts {  // 1,8,32; empty: not given
  std::vector<int64_t> values;
};
struct WholeInts {  // 0,1024,4096: whole numbers >= 0
  std::vector<int64_t> values;
};
struct DeviceList {  // cpu,cuda,cuda:1,mps; empty: every available device
  std::vector<c10::Device> values;
};
struct CpuLinearList {  // aten,onednn -> packed or not
  std::vector<bool> packed;
};
struct QuantList {  // none,int8,int4,int8dyn
  std::vector<QuantKind> values;
};
struct QuantGroups {  // 32,64,128: int4's group sizes
  std::vector<int64_t> values;
};
struct DtypeList {  // fp32,bf16,fp16
  std::vector<c10::ScalarType> values;
};
struct MemoryFormats {  // contiguous,channels_last
  std::vector<bool> channels_last;
};
struct Switch {  // true/false (also 1/0, yes/no)
  bool value = false;
};
struct SwitchList {  // false,true
  std::vector<bool> values;
};
struct Count {  // a whole number >= 0
  int value = 0;
};
struct PositiveCount {  // a whole number >= 1
  int value = 1;
};
struct Seconds {  // a number >= 0
  double value = 0;
};
struct PeakFlopsValue {  // 1.2e14, or fp32=6.7e13,bf16=9.9e14; empty: not given
  std::map<c10::ScalarType, double> per_dtype;
};
struct PeakBandwidthValue {  // bytes/s; 0: not given
  double value = 0;
};
struct OptionalPositive {  // a whole number >= 1, or empty: not given
  int64_t value = 0;
};
enum class MallocMode { kTuned, kSystem };
enum class DataSource { kMemory, kDisk };

#define LTB_FLAG_TYPE(T)                                                  \
  bool AbslParseFlag(absl::string_view text, T* out, std::string* error); \
  std::string AbslUnparseFlag(const T& value)
LTB_FLAG_TYPE(PositiveInts);
LTB_FLAG_TYPE(WholeInts);
LTB_FLAG_TYPE(DeviceList);
LTB_FLAG_TYPE(DtypeList);
LTB_FLAG_TYPE(MemoryFormats);
LTB_FLAG_TYPE(SwitchList);
LTB_FLAG_TYPE(Switch);
LTB_FLAG_TYPE(Count);
LTB_FLAG_TYPE(PositiveCount);
LTB_FLAG_TYPE(Seconds);
LTB_FLAG_TYPE(PeakFlopsValue);
LTB_FLAG_TYPE(PeakBandwidthValue);
LTB_FLAG_TYPE(OptionalPositive);
LTB_FLAG_TYPE(MallocMode);
LTB_FLAG_TYPE(DataSource);
LTB_FLAG_TYPE(CpuLinearList);
LTB_FLAG_TYPE(QuantList);
LTB_FLAG_TYPE(QuantGroups);
#undef LTB_FLAG_TYPE

// --- the suite's flags --------------------------------------------------------

// Every flag of the suite (every Abseil flag not defined by Abseil itself),
// sorted by where it is defined, then by name.
std::vector<const absl::CommandLineFlag*> SuiteFlags();

// Sets flag `name` from `value` as the command line would; errors name the
// flag, the value and what is valid.
absl::Status SetSuiteFlag(absl::string_view name, absl::string_view value);

// Parses argv[1..argc) (what Google Benchmark left): every argument must be
// --name=value of a suite flag. Errors name the valid flags.
absl::Status ParseSuiteFlags(int argc, char** argv);

// Whether ParseSuiteFlags saw --name=... (a default left as it is: false).
bool SuiteFlagGiven(absl::string_view name);

// The suite flags and their help, after Google Benchmark's.
void PrintSuiteHelp();

// Everything the flags decide about a run.
struct SuiteOptions {
  Sweep sweep;
  RunOptions run;
  ThreadSettings threads;
  EpochSettings epochs;
  MallocMode malloc = MallocMode::kTuned;
  std::map<c10::ScalarType, double> peak_flops;  // empty: datasheet or measured
  double peak_bandwidth = 0;                     // 0: datasheet or measured
  std::string peak_cache;                        // --peak_cache: a path, or "off"
  int measured_epochs = 2;                       // --epochs
  int steps = 0;                                 // --steps; 0: timed
  int dist_timeout_s = 300;                      // --dist_timeout_s
  bool force_process_group = false;              // --force_process_group
  std::vector<std::string> suite_skip;           // --suite_skip: Family/size
  bool list_families = false;                    // --list_families
  FamilyOptions families;     // what families with settings of their own read
  bool dtypes_given = false;  // --dtype given: none is added from the filter
};

// The options the current flag values give; an error for combinations
// no single value shows (--data_dir implies disk, for example).
absl::StatusOr<SuiteOptions> OptionsFromFlags();

}  // namespace ltb
