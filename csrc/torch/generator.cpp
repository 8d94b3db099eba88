// generator.cpp - torch.Generator(device="tpu") over the engine's RNG.
//
// The engine samples with a counter-based generator (StableHLO
// rng_bit_generator, THREE_FRY) whose state is a ui64[2] array on the
// device: a random rule takes the state as input 0 and returns the advanced
// state as its last output, so sampling never waits for the host.  A
// Generator keeps its seed and, once used, the current state (an engine
// storage).  Seeding sets the state to {seed, 0}; the state as bytes is the
// two words, little-endian (get_state / set_state: 16 bytes, as CUDA's).
#include <mutex>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/core/TensorBase.h>
#include <ATen/ops/empty.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include "torch/tpu_torch.h"

namespace torch_tpu {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default_rng_seed_val
constexpr size_t kStateBytes = 16;

struct TpuGenerator final : c10::GeneratorImpl {
  explicit TpuGenerator(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  ~TpuGenerator() override { drop_state(); }

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
    drop_state();
  }
  void set_offset(uint64_t offset) override {
    uint64_t words[2];
    read_words(words);
    words[1] = offset;
    set_words(words);
  }
  uint64_t get_offset() const override {
    uint64_t words[2];
    read_words(words);
    return words[1];
  }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/false);
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK_TYPE(new_state.device().is_cpu() && new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                     "RNG state must be a torch.ByteTensor");
    TORCH_CHECK(new_state.numel() == static_cast<int64_t>(kStateBytes) && new_state.is_contiguous(),
                "RNG state is wrong size: a tpu generator state is ", kStateBytes, " bytes (from get_state()), got ",
                new_state.numel());
    uint64_t words[2];
    memcpy(words, new_state.data(), kStateBytes);
    seed_ = words[0];
    set_words(words);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    uint64_t words[2];
    read_words(words);
    at::Tensor t = at::empty({static_cast<int64_t>(kStateBytes)}, at::TensorOptions().dtype(at::kByte));
    memcpy(t.data_ptr(), words, kStateBytes);
    return t.getIntrusivePtr();
  }
  TpuGenerator* clone_impl() const override {
    auto* g = new TpuGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    if (state_) {
      tpu_storage_retain(state_);
      g->state_ = state_;
    }
    return g;
  }
  static c10::DeviceType device_type() { return kTpu; }

  // The state as an engine storage (uploaded from the seed on first use).
  tpu_storage_t* state() {
    if (!state_) {
      ensure_started();
      uint64_t words[2] = {seed_, offset_};
      int64_t two = 2;
      check(tpu_rt_storage_from_host(device().index(), TPU_U64, &two, 1, words, &state_));
    }
    return state_;
  }
  void advance(tpu_storage_t* next /* ref moved in */) {
    drop_state();
    state_ = next;
  }

 private:
  void drop_state() {
    if (state_) tpu_storage_release(state_);
    state_ = nullptr;
  }
  void read_words(uint64_t* words) const {
    if (!state_) {
      words[0] = seed_;
      words[1] = offset_;
      return;
    }
    tpu_view_t v{};
    v.dtype = TPU_U64;
    v.rank = 1;
    v.sizes[0] = 2;
    v.strides[0] = 1;
    check(tpu_rt_view_to_host(state_, &v, words, kStateBytes));
  }
  void set_words(const uint64_t* words) {
    drop_state();
    seed_ = words[0];
    offset_ = words[1];
  }

  uint64_t seed_ = kDefaultSeed;
  uint64_t offset_ = 0;
  tpu_storage_t* state_ = nullptr;
};

// ---- default generators, one per device (made on first use, no plugin needed) ----
static std::mutex g_defaults_lock;
static std::vector<at::Generator> g_defaults(TPU_PJRT_MAX_DEVICES);

const at::Generator& default_generator(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < TPU_PJRT_MAX_DEVICES, "tpu: invalid device index ", static_cast<int>(index));
  std::lock_guard<std::mutex> g(g_defaults_lock);
  at::Generator& gen = g_defaults[static_cast<size_t>(index)];
  if (!gen.defined()) gen = at::make_generator<TpuGenerator>(index);
  return gen;
}

at::Generator new_generator(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < TPU_PJRT_MAX_DEVICES, "tpu: invalid device index ", static_cast<int>(index));
  return at::make_generator<TpuGenerator>(index);
}

void run_random(const tpu_op_rule_t* rule, const at::Generator& gen, tpu_rt_input_t* inputs, int nin,
                const tpu_op_attrs_t* attrs, tpu_rt_output_t* outputs, int* out_n) {
  auto* g = at::check_generator<TpuGenerator>(gen);
  std::lock_guard<std::mutex> lock(g->mutex_);
  tpu_storage_t* st = g->state();
  memset(&inputs[0], 0, sizeof(inputs[0]));
  inputs[0].storage = st;
  inputs[0].view.dtype = TPU_U64;
  inputs[0].view.rank = 1;
  inputs[0].view.sizes[0] = 2;
  inputs[0].view.strides[0] = 1;
  check(tpu_rt_op(rule, inputs, nin, attrs, outputs, out_n));
  TORCH_CHECK(*out_n >= 1, "tpu: random rule ", rule->name, " returned no state");
  g->advance(outputs[*out_n - 1].storage);
  (*out_n)--;
}

}  // namespace torch_tpu
