// GPUs' datasheet peaks: dense (not sparse) matmul FLOP/s per dtype and
// memory bandwidth, matched to the name the CUDA runtime reports.
#pragma once

#include <string>
#include <vector>

namespace ltb {

// A GPU's datasheet peaks (dense tensor-core rates, no sparsity).
struct DatasheetPeaks {
  double fp32 = 0, bf16 = 0, fp16 = 0;  // FLOP/s; 0: not supported
  double tf32 = 0;                      // fp32 matmuls as TF32; 0: none
  double bandwidth = 0;                 // bytes/s
  std::string model;                    // "NVIDIA H100 SXM5"
  std::string source;                   // the datasheet it comes from
};

// A known GPU: the words its CUDA name holds (whole words, any case) and its
// peaks. The table is in match order, more specific names first: the first
// entry whose every word is in the name wins. `bench --list_families`
// prints it, so that tools/pybench divides by the same peaks.
struct KnownGpu {
  std::vector<std::string> words;
  DatasheetPeaks peaks;
};
const std::vector<KnownGpu>& KnownGpus();

// Matches a CUDA device name ("NVIDIA H100 80GB HBM3") to the table of
// known GPUs (H100, H200, A100, L4, T4, RTX 4090).
const DatasheetPeaks* LookupDatasheet(const std::string& gpu_name);

}  // namespace ltb
