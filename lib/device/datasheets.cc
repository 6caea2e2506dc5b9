#include "device/datasheets.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ltb {

// Dense (non-sparse) peaks from NVIDIA's datasheets: fp32, bf16, fp16, TF32
// (half the "with sparsity" figure the datasheets print), bandwidth.
const std::vector<KnownGpu>& KnownGpus() {
  static const auto* table = new std::vector<KnownGpu>{
      {{"H100", "NVL"},
       {60e12, 835e12, 835e12, 417.5e12, 3.9e12, "NVIDIA H100 NVL",
        "NVIDIA H100 Tensor Core GPU datasheet"}},
      {{"H100", "PCIe"},
       {51.2e12, 756e12, 756e12, 378e12, 2.0e12, "NVIDIA H100 PCIe",
        "NVIDIA H100 Tensor Core GPU datasheet"}},
      {{"H100"},
       {67e12, 989.4e12, 989.4e12, 494.7e12, 3.35e12, "NVIDIA H100 SXM5",
        "NVIDIA H100 Tensor Core GPU datasheet"}},
      {{"H200", "NVL"},
       {60e12, 835e12, 835e12, 417.5e12, 4.8e12, "NVIDIA H200 NVL",
        "NVIDIA H200 Tensor Core GPU datasheet"}},
      {{"H200"},
       {67e12, 989.4e12, 989.4e12, 494.7e12, 4.8e12, "NVIDIA H200 SXM",
        "NVIDIA H200 Tensor Core GPU datasheet"}},
      {{"A100", "80GB", "PCIE"},
       {19.5e12, 312e12, 312e12, 156e12, 1.935e12, "NVIDIA A100 80GB PCIe",
        "NVIDIA A100 Tensor Core GPU datasheet"}},
      {{"A100", "80GB"},
       {19.5e12, 312e12, 312e12, 156e12, 2.039e12, "NVIDIA A100 80GB SXM",
        "NVIDIA A100 Tensor Core GPU datasheet"}},
      {{"A100"},
       {19.5e12, 312e12, 312e12, 156e12, 1.555e12, "NVIDIA A100 40GB",
        "NVIDIA A100 Tensor Core GPU datasheet"}},
      {{"L4"},
       {30.3e12, 121e12, 121e12, 60e12, 300e9, "NVIDIA L4",
        "NVIDIA L4 Tensor Core GPU datasheet"}},
      {{"T4"},
       {8.1e12, 0, 65e12, 0, 320e9, "NVIDIA T4", "NVIDIA T4 Tensor Core GPU datasheet"}},
      {{"RTX", "4090"},
       {82.6e12, 165.2e12, 165.2e12, 82.6e12, 1008e9, "NVIDIA GeForce RTX 4090",
        "NVIDIA Ada Lovelace GPU architecture whitepaper"}},
  };
  return *table;
}

const std::vector<std::string>& NeutralNameWords() {
  static const auto* words =
      new std::vector<std::string>{"NVIDIA", "Tesla", "GeForce", "HBM2", "HBM2e", "HBM3",
                                   "HBM3e",  "PCIe",  "SXM",     "SXM2", "SXM4",  "SXM5"};
  return *words;
}

namespace {

// A name's words: split at spaces, hyphens and underscores.
std::vector<std::string> NameWords(const std::string& gpu_name) {
  return absl::StrSplit(gpu_name, absl::ByAnyChar(" -_"), absl::SkipEmpty());
}

bool HasWord(const std::vector<std::string>& words, const std::string& word) {
  return std::any_of(words.begin(), words.end(), [&](const std::string& w) {
    return absl::EqualsIgnoreCase(w, word);
  });
}

// "80GB", "141GB": a memory size, which tells no part from another here.
bool IsMemorySize(const std::string& word) {
  if (word.size() < 3 || !absl::EndsWithIgnoreCase(word, "GB")) return false;
  return std::all_of(word.begin(), word.end() - 2,
                     [](char c) { return absl::ascii_isdigit(c); });
}

}  // namespace

const DatasheetPeaks* LookupDatasheet(const std::string& gpu_name) {
  // Whole words only: "L4" must not match "RTX A4000", nor "T4" "RTX 4090".
  const std::vector<std::string> words = NameWords(gpu_name);
  for (const KnownGpu& e : KnownGpus()) {
    const bool all = std::all_of(e.words.begin(), e.words.end(),
                                 [&](const std::string& w) { return HasWord(words, w); });
    const bool rest_neutral =
        std::all_of(words.begin(), words.end(), [&](const std::string& w) {
          return HasWord(e.words, w) || HasWord(NeutralNameWords(), w) || IsMemorySize(w);
        });
    if (all && rest_neutral) return &e.peaks;
  }
  return nullptr;
}

std::string CudaArithmeticGap(int major, int minor, bool bf16, bool tf32) {
  if (major <= 0 || major >= 8 || (!bf16 && !tf32)) return "";
  return absl::StrCat("this GPU (compute capability ", major, ".", minor, ") has no ",
                      bf16 ? "bf16 arithmetic (LibTorch emulates it in fp32)" : "TF32",
                      ", which came with compute capability 8.0 (Ampere)");
}

bool IsMigInstance(const std::string& gpu_name) {
  return HasWord(NameWords(gpu_name), "MIG");
}

}  // namespace ltb
