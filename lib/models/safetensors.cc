#include "models/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {

// The safetensors format's own limit on the header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  static absl::StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::NotFoundError(
          absl::StrCat(path, ": cannot open the checkpoint: ", std::strerror(errno)));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    }
    auto file = std::shared_ptr<MappedFile>(new MappedFile());
    file->size_ = static_cast<size_t>(st.st_size);
    if (file->size_ > 0) {
      // Private and writable: a tensor written in place (a parameter being
      // trained) gets its own copy of the pages; the file never changes.
      void* p = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return absl::InternalError(
            absl::StrCat(path, ": cannot map the checkpoint: ", std::strerror(errno)));
      }
      file->data_ = p;
    }
    ::close(fd);
    return file;
  }
  const char* data() const { return static_cast<const char*>(data_); }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

namespace {

struct DtypeInfo {
  c10::ScalarType type;
  int64_t bytes;
};

const std::map<std::string, DtypeInfo>& Dtypes() {
  static const auto* dtypes = new std::map<std::string, DtypeInfo>{
      {"F64", {c10::kDouble, 8}},    {"F32", {c10::kFloat, 4}}, {"F16", {c10::kHalf, 2}},
      {"BF16", {c10::kBFloat16, 2}}, {"I64", {c10::kLong, 8}},  {"I32", {c10::kInt, 4}},
      {"I16", {c10::kShort, 2}},     {"I8", {c10::kChar, 1}},   {"U8", {c10::kByte, 1}},
      {"BOOL", {c10::kBool, 1}},
  };
  return *dtypes;
}

std::string Names(const std::map<std::string, DtypeInfo>& m) {
  std::vector<std::string> names;
  for (const auto& [name, info] : m) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<std::map<std::string, SafetensorsEntry>> ParseSafetensorsHeader(
    const std::string& path, const char* bytes, size_t size, int64_t* data_start) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a valid safetensors file: ", why));
  };
  if (size < 8)
    return bad(
        absl::StrCat("it has ", size, " bytes, fewer than the 8 of its header length"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > kMaxHeaderBytes) {
    return bad(absl::StrCat("its header length says ", n,
                            " bytes, over the format's limit of ", kMaxHeaderBytes));
  }
  if (8 + n > size) {
    return bad(absl::StrCat("its header length says ", n,
                            " bytes, but the file has only ", size - 8,
                            " after it (truncated?)"));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    return bad(absl::StrCat("its header is not JSON (", e.what(), ")"));
  }
  if (!header.is_object()) return bad("its header is not a JSON object");
  const int64_t data_size = static_cast<int64_t>(size - 8 - n);
  std::map<std::string, SafetensorsEntry> out;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    const auto tensor_bad = [&](const std::string& why) {
      return bad(absl::StrCat("tensor '", name, "' ", why));
    };
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets")) {
      return tensor_bad("lacks dtype, shape or data_offsets");
    }
    SafetensorsEntry e;
    if (!value["dtype"].is_string())
      return tensor_bad("has a dtype that is not a string");
    e.dtype_name = value["dtype"].get<std::string>();
    const auto dt = Dtypes().find(e.dtype_name);
    if (dt == Dtypes().end()) {
      return tensor_bad(
          absl::StrCat("has dtype ", e.dtype_name, "; readable: ", Names(Dtypes())));
    }
    e.dtype = dt->second.type;
    int64_t numel = 1;
    if (!value["shape"].is_array()) return tensor_bad("has a shape that is not a list");
    constexpr uint64_t kMaxElements = uint64_t{1} << 50;
    for (const auto& d : value["shape"]) {
      if (!d.is_number_unsigned()) return tensor_bad("has a shape that is not sizes");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > kMaxElements ||
          (dim != 0 && static_cast<uint64_t>(numel) > kMaxElements / dim)) {
        return tensor_bad("is too large");
      }
      e.shape.push_back(static_cast<int64_t>(dim));
      numel *= static_cast<int64_t>(dim);
    }
    const auto& off = value["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return tensor_bad("has data_offsets that are not [begin, end]");
    }
    // Unsigned, and checked against the data before any arithmetic.
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_size)) {
      return tensor_bad(absl::StrCat("lies at [", begin, ", ", end, "), outside the ",
                                     data_size, " bytes of data"));
    }
    e.begin = static_cast<int64_t>(begin);
    e.end = static_cast<int64_t>(end);
    if (e.end - e.begin != numel * dt->second.bytes) {
      return tensor_bad(absl::StrCat("holds ", e.end - e.begin,
                                     " bytes, but its shape and ", e.dtype_name, " need ",
                                     numel * dt->second.bytes));
    }
    ranges.emplace_back(e.begin, e.end);
    out.emplace(name, std::move(e));
  }
  // The tensors tile the data: sorted, each starts where the last ended.
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin < at)
      return bad(absl::StrCat("two tensors overlap at byte ", begin, " of the data"));
    if (begin > at) {
      return bad(
          absl::StrCat("bytes ", at, " to ", begin, " of the data are no tensor's"));
    }
    at = end;
  }
  if (at != data_size) {
    return bad(
        absl::StrCat("bytes ", at, " to ", data_size, " of the data are no tensor's"));
  }
  *data_start = static_cast<int64_t>(8 + n);
  return out;
}

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path index;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "model.safetensors.index.json")) {
      index = fs::path(path) / "model.safetensors.index.json";
    } else if (fs::exists(fs::path(path) / "model.safetensors")) {
      files.push_back((fs::path(path) / "model.safetensors").string());
    } else {
      return absl::NotFoundError(absl::StrCat(
          path, " holds neither model.safetensors nor model.safetensors.index.json"));
    }
  } else if (absl::EndsWith(path, ".index.json")) {
    index = path;
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint file or folder"));
  }
  // The index's shards, each tensor's named.
  std::map<std::string, std::string> shard_of;
  if (!index.empty()) {
    std::ifstream in(index);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), " is not JSON: ", e.what()));
    }
    if (!doc.is_object() || !doc.contains("weight_map") ||
        !doc["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          index.string(), " has no weight_map of tensor names to shard files"));
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : doc["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            index.string(), ": the weight_map entry of '", name, "' is not a file name"));
      }
      const std::string shard = file.get<std::string>();
      // A file beside the index, never elsewhere.
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
          shard == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(index.string(), ": tensor '", name, "' is placed in '", shard,
                         "', which is not a file name beside the index"));
      }
      shard_of[name] = shard;
      shards.insert(shard);
    }
    for (const std::string& shard : shards) {
      files.push_back((index.parent_path() / shard).string());
    }
  }
  Checkpoint c;
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<std::shared_ptr<MappedFile>> file = MappedFile::Open(files[i]);
    if (!file.ok()) return file.status();
    int64_t start = 0;
    absl::StatusOr<std::map<std::string, SafetensorsEntry>> entries =
        ParseSafetensorsHeader(files[i], (*file)->data(), (*file)->size(), &start);
    if (!entries.ok()) return entries.status();
    for (auto& [name, e] : *entries) {
      if (!shard_of.empty()) {
        const auto it = shard_of.find(name);
        if (it == shard_of.end() || fs::path(files[i]).filename() != it->second) {
          return absl::InvalidArgumentError(absl::StrCat(
              files[i], " holds tensor '", name, "', which the index places ",
              it == shard_of.end() ? "nowhere" : absl::StrCat("in ", it->second)));
        }
      }
      if (c.entries_.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(files[i], " holds tensor '", name, "' a second time"));
      }
      e.file = i;
      e.begin += start;
      e.end += start;
      c.entries_.emplace(name, std::move(e));
    }
    c.mapped_.push_back(*std::move(file));
    c.files_.push_back(files[i]);
  }
  for (const auto& [name, shard] : shard_of) {
    if (!c.entries_.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          index.string(), " places tensor '", name, "' in ", shard, ", which lacks it"));
    }
  }
  return c;
}

bool Checkpoint::Mapped(const std::string& name, c10::ScalarType dtype) const {
  const auto it = entries_.find(name);
  return it != entries_.end() && it->second.dtype == dtype;
}

absl::StatusOr<at::Tensor> Checkpoint::Load(const std::string& name,
                                            c10::ScalarType dtype) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat(absl::StrJoin(files_, ", "), ": no tensor named '", name, "'"));
  }
  const SafetensorsEntry& e = it->second;
  std::shared_ptr<MappedFile> file = mapped_[e.file];
  // The mapping stays while any tensor viewing it lives.
  at::Tensor view = at::from_blob(
      const_cast<char*>(file->data()) + e.begin, e.shape, [file](void*) {},
      at::TensorOptions().dtype(e.dtype));
  if (e.dtype == dtype) return view;
  return view.to(dtype);
}

}  // namespace ltb
