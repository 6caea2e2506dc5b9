// The serve phase of the families whose own workloads run only the inputs
// they were built with: Encoder's and EncDec's forward and Whisper's encode,
// built here through the models' public interfaces exactly as their phases
// build them (the same model, seed order and inputs), with inputs batch
// first so that the batcher can gather samples; and the Model family's
// files, whose workload serves as it is (workloads/model_file.cc).
#include <torch/torch.h>

#include "family/registry.h"
#include "layers/prepare.h"
#include "models/encdec.h"
#include "models/encoder.h"
#include "models/whisper.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

std::unique_ptr<Workload> ServedEncoder(const BenchSpec& s) {
  const EncoderOptions o = EncoderSizeOptions(s.size).value();
  Encoder model(o);
  PrepareModel(*model, s);
  const at::Tensor x = RandomInput({s.seq, s.batch, o.d_model()}, s);  // (T, B, d)
  ModelFns fns;
  fns.module = model.ptr();
  fns.forward = [model, x]() mutable { return model(x); };
  // LibTorch's encoder reads (T, B, d): a batch first buffer, read transposed.
  fns.inputs = x.transpose(0, 1).contiguous();  // (B, T, d)
  fns.forward_on = [model](const at::Tensor& batch) mutable {
    return model(batch.transpose(0, 1)).transpose(0, 1);  // (B, T, d)
  };
  return MakePhaseWorkload(s, std::move(fns));
}

std::unique_ptr<Workload> ServedEncDec(const BenchSpec& s) {
  const EncDecOptions o = EncDecSizeOptions(s.size).value();
  EncDec model(o);
  PrepareModel(*model, s);
  const int64_t src = s.seq;
  // A sample is its source then its target, as the family's forward reads them.
  const at::Tensor pairs = torch::randint(0, o.vocab(), {s.batch, 2 * src},
                                          torch::dtype(torch::kLong).device(s.device));
  auto forward_on = [model, src](const at::Tensor& batch) mutable {
    return model(batch.narrow(1, 0, src), batch.narrow(1, src, src - 1));  // (B, T, V)
  };
  ModelFns fns;
  fns.module = model.ptr();
  fns.forward = [forward_on, pairs]() mutable { return forward_on(pairs); };
  fns.logits = true;
  fns.inputs = pairs;
  fns.forward_on = forward_on;
  return MakePhaseWorkload(s, std::move(fns));
}

std::unique_ptr<Workload> ServedWhisperEncode(const BenchSpec& s) {
  const WhisperOptions o = WhisperSizeOptions(s.size).value();
  Whisper model(o);
  PrepareModel(*model, s);
  const at::Tensor mel = RandomInput({s.batch, o.mels(), o.frames()}, s);
  ModelFns fns;
  fns.module = model.ptr();
  fns.forward = [model, mel]() mutable { return model->Encode(mel); };
  fns.inputs = mel;  // (B, mels, frames)
  fns.forward_on = [model](const at::Tensor& batch) mutable {
    return model->Encode(batch);  // (B, audio_ctx, width)
  };
  return MakePhaseWorkload(s, std::move(fns));
}

const bool kServing = RegisterServing({"Encoder", "forward", ServedEncoder}) &&
                      RegisterServing({"EncDec", "forward", ServedEncDec}) &&
                      RegisterServing({"Whisper", "encode", ServedWhisperEncode}) &&
                      RegisterServing({"Model", "forward", nullptr});

}  // namespace
}  // namespace ltb
