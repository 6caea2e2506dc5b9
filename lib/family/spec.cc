#include "family/spec.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device/device.h"

namespace ltb {

std::string WeightsName(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  std::string name = p.filename().string();
  if (absl::EndsWith(name, ".index.json") || name == "model.safetensors") {
    name = p.parent_path().filename().string();
  } else if (absl::EndsWith(name, ".safetensors")) {
    name.resize(name.size() - std::string(".safetensors").size());
  }
  return name.empty() ? "checkpoint" : name;
}

std::string Quant::Name() const {
  const char* name = kQuantNames[static_cast<int>(kind)];
  return kind == QuantKind::kInt4 ? absl::StrCat(name, ":g", group) : name;
}

int64_t OfflineQuerySamples(const ServeSettings& serve) {
  // As LoadGen: seconds of a duration in whole milliseconds, then
  // (kSlack * seconds) * rate, truncated.
  const double seconds =
      static_cast<double>(static_cast<uint64_t>(serve.min_s * 1000)) / 1000;
  const auto expected = static_cast<uint64_t>(1.1 * seconds * serve.target_qps);
  return std::max<int64_t>(serve.min_queries, static_cast<int64_t>(expected));
}

std::string BenchSpec::Name() const {
  std::string name;
  if (phase_before_device) {
    name = absl::StrCat(family, "/", size, "/", phase, "/", DeviceName(device), "/",
                        DtypeName(dtype));
  } else {
    name = absl::StrCat(family, "/", size, "/", DeviceName(device), "/", phase);
    if (serving()) {
      absl::StrAppend(&name, "/scenario:", serve.scenario);
      if (serve.scenario == "Server") {
        absl::StrAppend(&name,
                        serve.find_peak ? "/find_peak_from:" : "/qps:", serve.target_qps);
      }
      // What Offline's one query holds sets every latency.
      if (serve.scenario == "Offline") {
        const int64_t samples = OfflineQuerySamples(serve);
        if (samples != OfflineQuerySamples(ServeSettings{})) {
          absl::StrAppend(&name, "/samples:", samples);
        }
      }
      absl::StrAppend(&name, "/max_batch:", serve.max_batch);
      if (serve.scenario == "MultiStream" && serve.samples_per_query > 0 &&
          serve.samples_per_query != kLoadGenSamplesPerQuery) {
        absl::StrAppend(&name, "/samples_per_query:", serve.samples_per_query);
      }
      // Served forwards wait to fill a batch (SingleStream's hold one sample).
      if (prompt == 0 && serve.scenario != "SingleStream" &&
          serve.batch_timeout_us != kDefaultBatchTimeoutUs) {
        absl::StrAppend(&name, "/batch_timeout_us:", serve.batch_timeout_us);
      }
    } else if (batch > 0) {
      absl::StrAppend(&name, "/batch:", batch);
    }
    if (seq > 0) absl::StrAppend(&name, "/seq:", seq);
    if (prompt > 0 && serving()) {
      const auto range = [](int64_t lo, int64_t hi) {
        return lo > 0 && lo != hi ? absl::StrCat(lo, ":", hi) : absl::StrCat(hi);
      };
      absl::StrAppend(&name, "/prompt:", range(serve.prompt_min, prompt),
                      "/output:", range(serve.output_min, new_tokens));
      if (serve.prefill_chunk > 0) {
        absl::StrAppend(&name, "/prefill_chunk:", serve.prefill_chunk);
      }
    } else if (prompt > 0) {
      absl::StrAppend(&name, "/prompt:", prompt, "/new:", new_tokens);
    }
    // Server's p99 bounds decide its validity, its goodput and the peak its
    // search finds.
    if (serving() && serve.scenario == "Server") {
      const auto bound = [&name](const char* part, double ms) {
        if (ms > 0 && ms != kLoadGenBoundMs) absl::StrAppend(&name, "/", part, ":", ms);
      };
      if (prompt > 0) {
        bound("ttft_bound_ms", serve.ttft_bound_ms);
        bound("tpot_bound_ms", serve.tpot_bound_ms);
      } else {
        bound("latency_bound_ms", serve.latency_bound_ms);
      }
    }
    if (depth > 0) absl::StrAppend(&name, "/depth:", depth);
    absl::StrAppend(&name, "/", DtypeName(dtype));
  }
  if (tf32) absl::StrAppend(&name, "/tf32");
  if (channels_last) absl::StrAppend(&name, "/channels_last");
  if (!quant.none()) absl::StrAppend(&name, "/", quant.Name());
  if (pack_cpu_linears) absl::StrAppend(&name, "/onednn");
  if (!backend.empty()) absl::StrAppend(&name, "/", backend);
  if (graph) absl::StrAppend(&name, "/graph");
  // Buckets exist only in a process group.
  if (process_group && bucket_mb != 25) absl::StrAppend(&name, "/bucket_mb:", bucket_mb);
  if (iterations == Iterations::kEpochs) {  // train_epoch
    if (epochs.dataset_samples != kDefaultDatasetSamples) {
      absl::StrAppend(&name, "/dataset_samples:", epochs.dataset_samples);
    }
    if (epochs.data == "disk") {
      absl::StrAppend(&name, "/data:disk");
      // How the reads from storage are cut: a file of each shard.
      if (epochs.shard_mb != kDefaultShardMb) {
        absl::StrAppend(&name, "/shard_mb:", epochs.shard_mb);
      }
    }
  }
  if (!weights.empty()) absl::StrAppend(&name, "/weights:", WeightsName(weights));
  if (!inputs.empty()) absl::StrAppend(&name, "/inputs:", inputs);
  if (!sync) absl::StrAppend(&name, "/nosync");
  // Where tools/scaling names the world size of its merged files; one rank
  // in a process group (--force_process_group) averages through it, which
  // a run without one does not.
  if (data_parallel && (world_size > 1 || process_group)) {
    absl::StrAppend(&name, "/ranks:", world_size);
  }
  return name;
}

}  // namespace ltb
