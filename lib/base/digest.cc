#include "base/digest.h"

#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {

namespace fs = std::filesystem;

absl::StatusOr<std::string> FileSha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read it"));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                              &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("OpenSSL could not start a SHA-256");
  }
  std::vector<char> buffer(8 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) {
      EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(in.gcount()));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": a read failed"));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &size);
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    absl::StrAppend(&hex, absl::Hex(digest[i], absl::kZeroPad2));
  }
  return hex;
}

absl::StatusOr<std::string> CheckpointSha256(const std::string& path) {
  std::error_code error;
  fs::path folder = path;
  if (!fs::is_directory(folder, error)) {
    const std::string name = folder.filename().string();
    if (!absl::EndsWith(name, ".index.json") && name != "model.safetensors") {
      return FileSha256(path);
    }
    folder = folder.parent_path();
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() &&
        (absl::EndsWith(name, ".safetensors") || absl::EndsWith(name, ".index.json"))) {
      files.push_back(name);
    }
  }
  if (error) return absl::NotFoundError(absl::StrCat(path, ": ", error.message()));
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat(folder.string(), " holds no .safetensors file"));
  }
  std::sort(files.begin(), files.end());
  if (files.size() == 1) return FileSha256((folder / files.front()).string());
  std::vector<std::string> parts;
  for (const std::string& name : files) {
    absl::StatusOr<std::string> hex = FileSha256((folder / name).string());
    if (!hex.ok()) return hex.status();
    parts.push_back(absl::StrCat(name, "=", *hex));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace ltb
