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
// entry whose every word is in the name wins, where the name's other words
// are all neutral (below). `bench --list_families` prints the table and the
// neutral words, so that tools/pybench divides by the same peaks.
struct KnownGpu {
  std::vector<std::string> words;
  DatasheetPeaks peaks;
};
const std::vector<KnownGpu>& KnownGpus();

// Words a CUDA name may hold beside an entry's own and still be that GPU:
// the maker's and the product line's, the memory's kind and the form factor
// (an entry that names none covers them all, as the A100 40GB's SXM4 and
// PCIe cards), and any memory size ("80GB"). Any other word names another
// part or a share of one: "NVIDIA H100 80GB HBM3 MIG 1g.10gb" is a MIG
// slice with a seventh of the SMs, "NVIDIA GeForce RTX 4090 Laptop GPU" and
// "... RTX 4090 D" smaller chips. The whole GPU's datasheet would overstate
// their peaks and understate mfu and mbu: they are measured instead.
const std::vector<std::string>& NeutralNameWords();

// Matches a CUDA device name ("NVIDIA H100 80GB HBM3") to the table of
// known GPUs (H100, H200, A100, L4, T4, RTX 4090); nullptr for another GPU.
const DatasheetPeaks* LookupDatasheet(const std::string& gpu_name);

// Whether a CUDA device name is a MIG instance's ("NVIDIA A100-SXM4-40GB MIG
// 1g.5gb"): a share of a GPU whose NVML counters (energy, utilisation) are
// the whole board's, every instance's work included.
bool IsMigInstance(const std::string& gpu_name);

// Why a GPU of compute capability major.minor computes `dtype` (with TF32
// for fp32 when `tf32`) in no arithmetic of its own, or "" where it does:
// bf16 and TF32 came with compute capability 8.0 (Ampere). Before it,
// LibTorch emulates bf16 in fp32 (a peak measured on that emulation would
// make an mfu look high), and TF32 does not exist (an fp32 run named /tf32
// would be plain fp32). "" also when the capability is unknown (0).
std::string CudaArithmeticGap(int major, int minor, bool bf16, bool tf32);

}  // namespace ltb
