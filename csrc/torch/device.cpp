// device.cpp - the PrivateUse1 hooks and the device guard: device index,
// streams and events, device synchronize.
//
// Streams.  PJRT has no streams: the plugin orders work by data
// dependencies, and the engine keeps one ordered record of the work it
// issued (runtime/event.h).  A stream here is a name (an id per device) so
// that code written for CUDA streams runs; all streams share that one
// order, which is a valid (if conservative) schedule of any stream program:
// "wait for event" is always satisfied by the time later work is issued, and
// an event completes when the work recorded before it has completed.
#include <atomic>
#include <mutex>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "torch/tpu_torch.h"

namespace torch_tpu {

// ---- streams --------------------------------------------------------------------------
constexpr int kMaxDevices = TPU_PJRT_MAX_DEVICES;
static std::atomic<c10::StreamId> g_next_stream[kMaxDevices];
static thread_local c10::StreamId t_stream[kMaxDevices];  // 0 = the default stream

static c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, device), id);
}

static c10::DeviceIndex index_of(c10::Device d) {
  TORCH_CHECK(d.type() == kTpu, "tpu: expected a tpu device, got ", d);
  c10::DeviceIndex i = d.has_index() ? d.index() : current_device();
  check_device_index(i);
  return i;
}

static tpu_rt_event_t* as_event(void* e) { return static_cast<tpu_rt_event_t*>(e); }

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override { set_current_device(index_of(d)); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index() && d.index() >= 0 && d.index() < kMaxDevices) set_current_device(d.index());
  }

  c10::Stream getStream(c10::Device d) const override {
    c10::DeviceIndex i = index_of(d);
    return make_stream(i, t_stream[i]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(index_of(d), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getNewStream(d, 0); }
  c10::Stream getNewStream(c10::Device d, int) const override {
    c10::DeviceIndex i = index_of(d);
    return make_stream(i, g_next_stream[i].fetch_add(1) + 1);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::DeviceIndex i = index_of(s.device());
    c10::Stream old = make_stream(i, t_stream[i]);
    t_stream[i] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return device_count();
    } catch (...) {
      return 0;
    }
  }
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    index_of(d);
    c10::DeviceCapability cap;  // the dtypes the engine holds and converts between
    cap.capability_data.capability_bits = 0;
#define TPU_CAPABLE(_1, n) \
  if (dtype_code(c10::ScalarType::n) != TPU_DTYPE_INVALID) cap.capability_data.supported_scalar_types.has_##n = 1;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TPU_CAPABLE)
#undef TPU_CAPABLE
    return cap;
  }

  // ---- events ----
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override { tpu_rt_event_destroy(as_event(event)); }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    ensure_started();
    if (*event == nullptr) {
      tpu_rt_event_t* e = nullptr;
      check(tpu_rt_event_create(&e));
      *event = e;
    }
    check(tpu_rt_event_record(as_event(*event), stream.device_index()));
  }
  void block(void* event, const c10::Stream&) const override {
    // work issued after this point is ordered after the event's work by the
    // engine's single queue; nothing to wait for on the host
    (void)event;
  }
  bool queryEvent(void* event) const override { return event == nullptr || tpu_rt_event_query(as_event(event)); }
  void synchronizeEvent(void* event) const override {
    if (event) check(tpu_rt_event_synchronize(as_event(event)));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    double ms = 0;
    check(tpu_rt_event_elapsed_ms(as_event(start), as_event(end), &ms));
    return ms;
  }

  // ---- streams: all of a device's work is one queue ----
  bool queryStream(const c10::Stream&) const override { return !started() || tpu_work_in_flight() == 0; }
  void synchronizeStream(const c10::Stream&) const override {
    if (started()) check(tpu_rt_synchronize());
  }
  void synchronizeDevice(const c10::DeviceIndex) const override {
    if (started()) check(tpu_rt_synchronize());
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

// ---- hooks -------------------------------------------------------------------------------------
struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return plugin_available() && device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index < 0 ? current_device() : device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    c10::DeviceIndex i = device_index < 0 ? current_device() : device_index;
    check_device_index(i);  // torch.Generator(device="tpu:7") on one device raises, as CUDA
    return new_generator(i);
  }
  at::Device getDeviceFromPtr(void* data) const override { return device_from_ptr(data); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return started(); }
  void init() const override { ensure_started(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage(storage, newsize);
  }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_device_index(device);
    set_current_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = current_device();
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
};

static TpuHooks g_hooks;

}  // namespace torch_tpu

C10_REGISTER_GUARD_IMPL(PrivateUse1, torch_tpu::TpuGuardImpl);

extern "C" void tpu_torch_register_hooks(void) {
  static std::once_flag once;
  std::call_once(once, [] { at::RegisterPrivateUse1HooksInterface(&torch_tpu::g_hooks); });
}
