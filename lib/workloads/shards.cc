#include "workloads/shards.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randint.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ltb {
namespace {

constexpr char kMagic[8] = {'L', 'T', 'B', 'S', 'H', 'A', 'R', 'D'};
constexpr uint32_t kVersion = 1;

#pragma pack(push, 1)
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t samples;
  uint64_t sample_tokens;
  uint64_t vocab;
  uint64_t crc32;
  uint8_t reserved[16];
};
#pragma pack(pop)
static_assert(sizeof(Header) == 64, "the shard header is 64 bytes");

uint32_t Crc32(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string ShardName(int64_t i) { return absl::StrFormat("shard_%04d.bin", i); }

std::string ManifestText(const DatasetSpec& s) {
  return absl::StrFormat(
      "format=%d\nsamples=%d\nsample_tokens=%d\nvocab=%d\nshard_mb=%d\nseed=%d\nshards=%"
      "d\n",
      kVersion, s.samples, s.sample_tokens, s.vocab, s.shard_mb, s.seed, s.Shards());
}

}  // namespace

int64_t DatasetSpec::SamplesPerShard() const {
  return std::max<int64_t>(1, (shard_mb << 20) / (sample_tokens * 2));
}

int64_t DatasetSpec::Shards() const {
  return (samples + SamplesPerShard() - 1) / SamplesPerShard();
}

bool DatasetSpec::operator==(const DatasetSpec& o) const {
  return samples == o.samples && sample_tokens == o.sample_tokens && vocab == o.vocab &&
         shard_mb == o.shard_mb && seed == o.seed;
}

at::Tensor GenerateShard(const DatasetSpec& spec, int64_t index) {
  const int64_t first = index * spec.SamplesPerShard();
  const int64_t n = std::min(spec.SamplesPerShard(), spec.samples - first);
  at::Generator gen =
      at::make_generator<at::CPUGeneratorImpl>(spec.seed * 1000003 + index);
  return at::randint(spec.vocab, {n, spec.sample_tokens}, gen, at::kLong);
}

namespace {

// Writes `parts` to `path` and flushes them to storage; on any failure the
// file is removed and the error says why (errno's text: "No space left on
// device", "File too large", ...).
absl::Status WriteFile(const std::string& path,
                       std::initializer_list<std::pair<const void*, size_t>> parts) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(std::strerror(errno));
  int error = 0;
  for (const auto& [data, size] : parts) {
    if (error == 0 && std::fwrite(data, 1, size, f) != size) error = errno ? errno : EIO;
  }
  if (error == 0 && std::fflush(f) != 0) error = errno;
  if (error == 0 && ::fsync(::fileno(f)) != 0) error = errno;
  if (std::fclose(f) != 0 && error == 0) error = errno;
  if (error != 0) {
    std::remove(path.c_str());
    return absl::InternalError(std::strerror(error));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteShard(const std::string& path, const at::Tensor& tokens,
                        int64_t vocab) {
  if (vocab > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shards hold uint16 tokens; a vocabulary of ", vocab, " does not fit"));
  }
  const at::Tensor payload =
      tokens.to(at::kInt).to(at::kShort).contiguous();  // wraps to uint16
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.token_bytes = 2;
  h.samples = tokens.size(0);
  h.sample_tokens = tokens.size(1);
  h.vocab = vocab;
  const size_t bytes = payload.numel() * 2;
  h.crc32 = Crc32(payload.data_ptr(), bytes);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());  // writers may race
  // Written to a temporary name, flushed to storage, then renamed: a shard is
  // complete or absent, whatever stops the writing (a full disk, a crash).
  if (absl::Status s = WriteFile(tmp, {{&h, sizeof(h)}, {payload.data_ptr(), bytes}});
      !s.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write ", path, ": ", s.message()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> ReadShard(const std::string& path, int64_t sample_tokens,
                                     int64_t vocab) {
  const auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(
        "bad shard ", path, ": ", why, "; rewrite the dataset with --regenerate=true"));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // The manifest promised this shard: it was deleted or made unreadable
    // since, and the dataset is rewritten as a corrupt one is.
    return absl::NotFoundError(
        absl::StrCat("cannot open shard ", path, ": ", std::strerror(errno),
                     "; rewrite the dataset with --regenerate=true"));
  }
  Header h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof(h)))
    return bad("shorter than its header");
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0)
    return bad("not a shard (bad magic)");
  if (h.version != kVersion)
    return bad(absl::StrCat("format version ", h.version, ", not ", kVersion));
  if (h.token_bytes != 2)
    return bad(absl::StrCat("token width ", h.token_bytes, ", not 2"));
  if (static_cast<int64_t>(h.sample_tokens) != sample_tokens ||
      static_cast<int64_t>(h.vocab) != vocab) {
    return bad(absl::StrCat("holds samples of ", h.sample_tokens, " tokens below ",
                            h.vocab, ", this run needs ", sample_tokens, " below ",
                            vocab));
  }
  // The sample count is not covered by the checksum: check it against the
  // file's size before allocating anything.
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec || h.samples == 0 || h.samples > (uint64_t{1} << 40) ||
      file_size < sizeof(Header) + h.samples * h.sample_tokens * 2) {
    return bad(absl::StrCat(
        "truncated: the header promises ", h.samples, " samples, the file holds ",
        ec ? 0 : (file_size - std::min<uint64_t>(file_size, sizeof(Header))),
        " bytes of tokens"));
  }
  const size_t bytes = h.samples * h.sample_tokens * 2;
  at::Tensor payload =
      at::empty({static_cast<int64_t>(h.samples), sample_tokens}, at::kShort);
  if (!in.read(static_cast<char*>(payload.data_ptr()),
               static_cast<std::streamsize>(bytes))) {
    return bad(
        absl::StrCat("truncated: the header promises ", bytes, " bytes of tokens"));
  }
  if (in.peek() != std::char_traits<char>::eof())
    return bad("longer than its header says");
  if (Crc32(payload.data_ptr(), bytes) != h.crc32)
    return bad("checksum mismatch (corrupt data)");
  return payload.to(at::kInt).bitwise_and(0xFFFF).to(at::kLong);  // uint16 -> int64
}

absl::StatusOr<std::vector<std::string>> PrepareDataset(const std::string& dir,
                                                        const DatasetSpec& spec,
                                                        bool regenerate, bool* wrote) {
  *wrote = false;
  std::vector<std::string> paths;
  for (int64_t i = 0; i < spec.Shards(); ++i) paths.push_back(dir + "/" + ShardName(i));
  const std::string manifest = dir + "/manifest.txt";
  std::ifstream in(manifest);
  if (in && !regenerate) {
    const std::string have((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    if (have == ManifestText(spec)) return paths;
    // Quoted only when it is text: other bytes in the error entry would make
    // the whole JSON output unreadable, with every result in it.
    const bool text = std::all_of(have.begin(), have.end(), [](char c) {
      return c == '\n' || (c >= 0x20 && c < 0x7f);
    });
    if (!text) {
      return absl::FailedPreconditionError(absl::StrCat(
          manifest, " is not a manifest bench writes (", have.size(),
          " bytes, not all text); add --regenerate=true to rewrite the dataset there, or "
          "choose another --data_dir"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the dataset in ", dir, " was written with other parameters:\n", have,
        "this run needs:\n", ManifestText(spec),
        "add --regenerate=true to rewrite it there, or choose another --data_dir"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::filesystem::remove(manifest, ec);  // no manifest while shards are half written
  for (int64_t i = 0; i < spec.Shards(); ++i) {
    if (absl::Status s = WriteShard(paths[i], GenerateShard(spec, i), spec.vocab);
        !s.ok()) {
      return s;
    }
  }
  // The manifest last: shards without one are rewritten by the next run.
  const std::string text = ManifestText(spec);
  if (absl::Status s = WriteFile(manifest, {{text.data(), text.size()}}); !s.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write ", manifest, ": ", s.message()));
  }
  *wrote = true;
  return paths;
}

}  // namespace ltb
