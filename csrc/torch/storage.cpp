// storage.cpp - tpu storages as PyTorch storages: DataPtrs over engine
// storages, the device allocator and its memory statistics, storage resize,
// and the pinned host allocator.
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <atomic>
#include <map>
#include <mutex>

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/TensorBase.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include "torch/memory_history.h"
#include "torch/tpu_torch.h"

namespace torch_tpu {

// ---- fake device addresses ------------------------------------------------------------
// Device d's storages get addresses from [(d+1) << 52, (d+2) << 52): never
// reused, never overlapping, never a host address (they lie above the
// 47-bit user space), so data_ptr() comparisons and range checks made by
// PyTorch, DDP and safetensors behave as on a real device.
constexpr int kAddressShift = 52;
constexpr uint64_t kAlign = 512;
static std::atomic<uint64_t> g_next_offset[TPU_PJRT_MAX_DEVICES];

static void* fake_address(c10::DeviceIndex device, size_t nbytes) {
  uint64_t span = (static_cast<uint64_t>(nbytes) + kAlign - 1) / kAlign * kAlign;
  if (span == 0) span = kAlign;
  uint64_t off = g_next_offset[device].fetch_add(span);
  return reinterpret_cast<void*>((static_cast<uint64_t>(device) + 1) << kAddressShift | (off + kAlign));
}

c10::Device device_from_ptr(const void* p) {
  uint64_t a = reinterpret_cast<uint64_t>(p) >> kAddressShift;
  TORCH_CHECK(a >= 1 && a <= TPU_PJRT_MAX_DEVICES, "tpu: ", p, " is not a tpu device address");
  return c10::Device(kTpu, static_cast<c10::DeviceIndex>(a - 1));
}

static void release_storage(void* ctx) {
  if (g_memory_history_on.load(std::memory_order_relaxed)) memory_history_free(ctx);
  tpu_storage_release(static_cast<tpu_storage_t*>(ctx));
}

c10::DataPtr make_data_ptr(tpu_storage_t* s, c10::DeviceIndex device, size_t nbytes) {
  void* address = fake_address(device, nbytes);
  tpu_storage_set_address(s, reinterpret_cast<uint64_t>(address));
  if (g_memory_history_on.load(std::memory_order_relaxed))
    memory_history_alloc(s, reinterpret_cast<uint64_t>(address), nbytes, device);
  return c10::DataPtr(address, s, &release_storage, c10::Device(kTpu, device));
}

tpu_storage_t* storage_of(const c10::Storage& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.get_deleter() != &release_storage) return nullptr;
  return static_cast<tpu_storage_t*>(dp.get_context());
}

tpu_storage_t* tensor_storage(const c10::TensorImpl* impl, int64_t* out_offset) {
  *out_offset = 0;
  if (!impl->has_storage()) return nullptr;
  const c10::Storage& storage = impl->unsafe_storage();
  tpu_storage_t* s = storage_of(storage);
  if (s) {
    *out_offset = impl->storage_offset();
    return s;
  }
  // A storage PyTorch built around one of our addresses (torch.from_dlpack,
  // from_blob in legacy serialization): the engine storage whose range
  // holds that address; the tensor's offset counts from where it starts.
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.device().type() != kTpu || dp.get() == nullptr) return nullptr;
  uint64_t byte_offset = 0;
  s = tpu_storage_find_address(reinterpret_cast<uint64_t>(dp.get()), &byte_offset);
  int64_t item = static_cast<int64_t>(impl->itemsize());
  if (!s || item == 0 || byte_offset % static_cast<uint64_t>(item) != 0) return nullptr;
  *out_offset = static_cast<int64_t>(byte_offset) / item + impl->storage_offset();
  return s;
}

at::Tensor make_tensor(tpu_storage_t* s, int rank, const int64_t* dims, tpu_dtype_t dtype) {
  auto device = static_cast<c10::DeviceIndex>(tpu_storage_device(s));
  size_t nbytes = tpu_storage_nbytes(s);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, make_data_ptr(s, device, nbytes), device_allocator(),
                       /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          caffe2::TypeMeta::fromScalarType(scalar_type(dtype)));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(c10::IntArrayRef(dims, static_cast<size_t>(rank)));
  return t;
}

void resize_storage(const c10::Storage& storage, size_t nbytes) {
  tpu_storage_t* s = storage_of(storage);
  TORCH_CHECK(s != nullptr, "tpu: resize of a storage that is not a tpu storage");
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  check(tpu_rt_storage_resize(s, nbytes));
  // a new address range: the grown storage must not overlap later ones
  tpu_storage_retain(s);
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(make_data_ptr(s, static_cast<c10::DeviceIndex>(tpu_storage_device(s)), nbytes));
  impl->set_nbytes(nbytes);
}

// ---- the device allocator -------------------------------------------------------------------
// allocate(n) makes an untyped engine storage with no device buffer yet
// (it reads as zeros; the first view that touches it gives its dtype).  The
// engine allocates device buffers as programs produce values, so "memory
// allocated" is what this process holds in device buffers (counted by the
// engine for every plugin); there is no cache to reserve beyond it.

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

static void fill_stat(c10::CachingAllocator::StatArray& a, int64_t current, int64_t peak, int64_t allocated,
                      int64_t freed) {
  auto& s = a[static_cast<size_t>(StatType::AGGREGATE)];
  s.current = current;
  s.peak = peak;
  s.allocated = allocated;
  s.freed = freed;
  auto& l = a[static_cast<size_t>(StatType::LARGE_POOL)];
  l = s;
}

struct TpuAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    ensure_started();
    c10::DeviceIndex device = current_device();
    check_device_index(device);
    tpu_storage_t* s = nullptr;
    check(tpu_rt_storage_alloc(device, nbytes, &s));
    return make_data_ptr(s, device, nbytes);
  }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu: device memory cannot be copied through a host pointer; copy tensors instead");
  }
  bool initialized() override { return started(); }
  void emptyCache(c10::MempoolId_t) override {
    if (started()) tpu_rt_empty_cache();
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {
    // one ordered queue of work: a buffer is never reused under a stream
  }
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats out;
    if (!started()) return out;
    tpu_rt_memory_info_t mi;
    check(tpu_rt_memory_info(device, &mi));
    const tpu_pjrt_memory_stats_t& m = mi.stats;
    fill_stat(out.allocated_bytes, m.bytes_in_use, m.peak_bytes_in_use, m.bytes_allocated, m.bytes_freed);
    fill_stat(out.reserved_bytes, m.bytes_in_use, m.peak_bytes_in_use, m.bytes_allocated, m.bytes_freed);
    fill_stat(out.active_bytes, m.bytes_in_use, m.peak_bytes_in_use, m.bytes_allocated, m.bytes_freed);
    fill_stat(out.requested_bytes, m.bytes_in_use, m.peak_bytes_in_use, m.bytes_allocated, m.bytes_freed);
    fill_stat(out.allocation, m.num_buffers, m.peak_num_buffers, m.num_allocs, m.num_frees);
    fill_stat(out.segment, m.num_buffers, m.peak_num_buffers, m.num_allocs, m.num_frees);
    fill_stat(out.active, m.num_buffers, m.peak_num_buffers, m.num_allocs, m.num_frees);
    out.num_device_alloc = m.num_allocs;
    out.num_device_free = m.num_frees;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (started()) tpu_rt_memory_reset_accumulated(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    if (started()) tpu_rt_memory_reset_peak(device);
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    ensure_started();
    check_device_index(device);
    tpu_rt_memory_info_t mi;
    check(tpu_rt_memory_info(device, &mi));
    return {static_cast<size_t>(mi.free_bytes), static_cast<size_t>(mi.total_bytes)};
  }
};

static TpuAllocator g_allocator;
c10::Allocator* device_allocator() { return &g_allocator; }

// ---- pinned host memory --------------------------------------------------------------------
// Page-aligned host blocks, locked in RAM where the process may (mlock) and
// registered with the plugin for DMA where it can (PJRT_Client_DmaMap; the
// CPU plugin cannot).  What makes them "pinned" for PyTorch is that the
// hooks' isPinnedPtr knows them and copies from them may be asynchronous: a
// block freed while a copy still reads it is freed when the copy is done.

struct PinnedBlock {
  size_t size;
  int pending;  // asynchronous copies reading it
  bool freed;
  bool locked;
  bool mapped;
};
static std::mutex g_pinned_lock;
static std::map<uintptr_t, PinnedBlock> g_pinned;

static void pinned_free_now(void* p, const PinnedBlock& b) {
  if (b.mapped && started()) tpu_status_free(tpu_rt_dma_unmap(p));
  if (b.locked) munlock(p, b.size);
  free(p);
}

static void pinned_delete(void* p) {
  if (!p) return;
  PinnedBlock b{};
  {
    std::lock_guard<std::mutex> g(g_pinned_lock);
    auto it = g_pinned.find(reinterpret_cast<uintptr_t>(p));
    if (it == g_pinned.end()) return;
    if (it->second.pending > 0) {
      it->second.freed = true;  // the last copy frees it
      return;
    }
    b = it->second;
    g_pinned.erase(it);
  }
  pinned_free_now(p, b);
}

static std::map<uintptr_t, PinnedBlock>::iterator find_block_locked(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return g_pinned.end();
  --it;
  if (a >= it->first && a < it->first + (it->second.size ? it->second.size : 1)) return it;
  return g_pinned.end();
}

bool is_pinned_ptr(const void* p) {
  std::lock_guard<std::mutex> g(g_pinned_lock);
  return find_block_locked(p) != g_pinned.end();
}

// Also tpu's host allocator for torch.accelerator (empty_host_cache,
// host_memory_stats: vLLM calls the first at shutdown): it caches nothing (a
// block is freed when its last user is done), so emptying is a no-op.
struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nullptr;
    size_t size = nbytes ? nbytes : 1;
    if (posix_memalign(&p, 4096, size) != 0 || !p)
      TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu: cannot allocate ", nbytes, " bytes of pinned host memory");
    PinnedBlock b{size, 0, false, false, false};
    b.locked = mlock(p, size) == 0;
    if (started()) {
      tpu_status_t st = tpu_rt_dma_map(p, size);
      b.mapped = st == nullptr;
      tpu_status_free(st);
    }
    {
      std::lock_guard<std::mutex> g(g_pinned_lock);
      g_pinned[reinterpret_cast<uintptr_t>(p)] = b;
    }
    return c10::DataPtr(p, p, &pinned_delete, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { memcpy(dest, src, count); }
  // copies from a block keep it alive themselves (PinnedBlock.pending)
  bool record_event(void*, void*, c10::Stream) override { return false; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

static PinnedAllocator g_pinned_allocator;
c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

static void pinned_copy_done(tpu_status_t st, void* arg) {
  tpu_status_free(st);  // a failed copy reports itself through the buffer
  void* block = arg;
  PinnedBlock b{};
  bool free_it = false;
  {
    std::lock_guard<std::mutex> g(g_pinned_lock);
    auto it = g_pinned.find(reinterpret_cast<uintptr_t>(block));
    if (it == g_pinned.end()) return;
    if (--it->second.pending == 0 && it->second.freed) {
      b = it->second;
      g_pinned.erase(it);
      free_it = true;
    }
  }
  if (free_it) pinned_free_now(block, b);
}

tpu_storage_t* upload_pinned(c10::DeviceIndex device, tpu_dtype_t dtype, const int64_t* dims, int rank,
                             const void* data) {
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> g(g_pinned_lock);
    auto it = find_block_locked(data);
    if (it == g_pinned.end()) return nullptr;
    it->second.pending++;
    block = reinterpret_cast<void*>(it->first);
  }
  tpu_storage_t* s = nullptr;
  tpu_status_t st = tpu_rt_storage_from_host_async(device, dtype, dims, rank, data, pinned_copy_done, block, &s);
  if (st) {
    pinned_copy_done(nullptr, block);
    throw_status(st);
  }
  return s;
}

}  // namespace torch_tpu

// The allocator PyTorch uses for tpu storages (torch.empty through ATen,
// UntypedStorage(n, device="tpu"), storage.resize_, torch.load).
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &torch_tpu::g_allocator);
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &torch_tpu::g_pinned_allocator);
