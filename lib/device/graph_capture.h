// Captures steps as graphs through a device's graph API in the order
// PyTorch's CUDAGraph requires, kept apart from CUDA so that a fake API can
// check that order on any machine. Devices with graphs implement GraphApi;
// the harness sees StepGraphs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "device/backend.h"

namespace ltb {

// One device's graphs, captured on a stream of their own into one memory
// pool and replayed on the current stream (at::cuda::CUDAGraph on CUDA).
class GraphApi {
 public:
  virtual ~GraphApi() = default;
  // Waits for everything queued on the device.
  virtual void Synchronize() = 0;
  // Makes the capture stream current (true), or the stream that was current
  // before (false), after the capture stream's work; false never throws (it
  // also runs on the way out of an error).
  virtual void UseCaptureStream(bool on) = 0;
  // Makes the memory pool every later graph shares (at::cuda::graph_pool_handle()).
  virtual void NewPool() = 0;
  // Starts a new graph capturing into the pool.
  virtual void BeginCapture() = 0;
  // Runs `step` under the capture: the device records what it queues.
  virtual void Record(const std::function<void()>& step) = 0;
  // Ends the capture; the graph can then be replayed.
  virtual void EndCapture() = 0;
  // Ends a capture an error left open and forgets its graph, so that the
  // device stays usable; nothing when no capture is open.
  virtual void AbortCapture() = 0;
  virtual void Replay(size_t graph) = 0;
  // Bytes the pool holds beyond the live tensors in it: the activations the
  // replays write, which no allocation made after the capture accounts for.
  virtual int64_t PoolBytes() const = 0;
};

// StepGraphs over a GraphApi: before the first capture the step runs twice
// eagerly on the capture stream (lazy initialisation, such as cuBLAS's
// per-stream workspace, cannot be captured) and the pool is made, since
// CUDAGraph::pool() may only be asked once a capture has ended; a capture
// that fails is ended before the error goes on, so that it costs one
// benchmark and not the rest of the run.
class CapturedSteps final : public StepGraphs {
 public:
  explicit CapturedSteps(std::unique_ptr<GraphApi> api) : api_(std::move(api)) {}

  size_t Capture(const std::function<void()>& step) override {
    api_->Synchronize();
    {
      CaptureStream on(api_.get());
      if (!pool_made_) {
        for (int i = 0; i < 2; ++i) step();
        api_->Synchronize();
        api_->NewPool();
        pool_made_ = true;
      }
      try {
        api_->BeginCapture();
        api_->Record(step);
        api_->EndCapture();
      } catch (...) {
        api_->AbortCapture();
        throw;
      }
    }
    api_->Synchronize();
    return captured_++;
  }

  void Replay(size_t graph) override { api_->Replay(graph); }
  int64_t PoolBytes() const override { return pool_made_ ? api_->PoolBytes() : 0; }

 private:
  // The capture stream is current while it lives, whatever is thrown.
  class CaptureStream {
   public:
    explicit CaptureStream(GraphApi* api) : api_(api) { api_->UseCaptureStream(true); }
    ~CaptureStream() { api_->UseCaptureStream(false); }

   private:
    GraphApi* api_;
  };

  std::unique_ptr<GraphApi> api_;
  bool pool_made_ = false;
  size_t captured_ = 0;
};

}  // namespace ltb
