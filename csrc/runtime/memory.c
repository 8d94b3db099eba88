/* memory.c - device memory: what this process holds (counted by the pjrt
 * layer for every plugin), what the device has (the plugin's figures, or
 * host RAM and MemAvailable for the CPU plugin, which reports none), and the
 * limit an allocation is checked against before it reaches the plugin.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "runtime/runtime_internal.h"

/* ---- the CPU plugin's memory is malloc's (see tpu_rt_empty_cache) ------------------------- */
static int host_cache_on;

void host_memory_cache_start(void) {
#ifdef __GLIBC__
  if (host_cache_on) return;
  /* blocks up to 1 GiB come from the heap and are reused; up to 512 MiB
   * free at its top is kept */
  host_cache_on = mallopt(M_MMAP_THRESHOLD, 1 << 30) && mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

void host_memory_trim(void) {
#ifdef __GLIBC__
  if (host_cache_on) malloc_trim(0);
#endif
}

/* A program the memory tier drops (its bounds: entries, bytes, memory maps)
 * frees its code and XLA's structures into malloc's heap, which keeps the
 * pages: holes below the heap's top are never returned, and with the host
 * memory cache up to 512 MiB at the top is kept.  A process compiling new
 * shapes for days grew by ~0.08 MB per evicted program, without bound
 * (five-op fused programs, the map bound at 3000: RSS 392 -> 445 MB over 700
 * programs, malloc's in-use bytes flat at ~140 MB).  Every TRIM_EVERY
 * evictions the heap's free pages go back to the system (malloc_trim walks
 * every arena, ~1 ms): 391 -> 410 MB over the same programs. */
#define TRIM_EVERY 32

void memory_release_evicted(void) {
#ifdef __GLIBC__
  static _Atomic int64_t trimmed_at;
  tpu_cache_stats_t cs;
  tpu_cache_get_stats(R.cache, &cs);
  int64_t last = atomic_load(&trimmed_at);
  if (cs.evictions - last >= TRIM_EVERY && atomic_compare_exchange_strong(&trimmed_at, &last, cs.evictions)) {
    malloc_trim(0);
  }
#endif
}

/* Host memory stands for device memory on the CPU plugin, which reports no
 * capacity of its own.  The device gets a capacity of its own so that what
 * sizes itself from a device's memory (vLLM's and SGLang's KV caches,
 * accelerate's device map) takes a share of the machine, not all of it:
 * TORCH_TPU_CPU_MEMORY (R.host_capacity), else half the host's RAM, at most
 * 16 GiB.  Allocations past it raise torch.OutOfMemoryError, as on a device
 * whose memory is full.  Free: the capacity less what this process holds,
 * and never more than the host's MemAvailable. */
#define HOST_CAPACITY_MAX ((int64_t)16 << 30)

static void host_memory(int64_t *total, int64_t *avail) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  int64_t ram = pages > 0 && psize > 0 ? (int64_t)pages * psize : 0;
  int64_t cap = R.host_capacity > 0 ? R.host_capacity : ram / 2;
  if (R.host_capacity <= 0 && cap > HOST_CAPACITY_MAX) cap = HOST_CAPACITY_MAX;
  *total = cap;
  *avail = ram;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return;
  char line[256];
  long long kb;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
      *avail = (int64_t)kb * 1024;
      break;
    }
  }
  fclose(f);
}

static void memory_info_locked(int device, tpu_rt_memory_info_t *out) {
  memset(out, 0, sizeof(*out));
  tpu_pjrt_memory_stats(R.client, device, &out->stats);
  int64_t total = out->stats.plugin_bytes_limit, free_b;
  if (total > 0) {
    int64_t used = out->stats.plugin_bytes_in_use >= 0 ? out->stats.plugin_bytes_in_use : out->stats.bytes_in_use;
    free_b = total - used;
  } else {
    int64_t avail;
    host_memory(&total, &avail);
    free_b = total - out->stats.bytes_in_use;
    if (free_b > avail) free_b = avail;
  }
  out->total_bytes = total;
  out->free_bytes = free_b < 0 ? 0 : free_b;
  out->limit_bytes = R.mem_limit[device] > 0 ? R.mem_limit[device] : total;
}

tpu_status_t tpu_rt_memory_info(int device, tpu_rt_memory_info_t *out) {
  memset(out, 0, sizeof(*out));
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) memory_info_locked(device, out);
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_set_memory_limit(int device, int64_t bytes) {
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) R.mem_limit[device] = bytes > 0 ? bytes : 0;
  UNLOCK();
  return st;
}

static void fmt_bytes(int64_t b, char *buf, size_t n) {
  double v = (double)b;
  const char *u[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (v >= 1024 && i < 5) {
    v /= 1024;
    i++;
  }
  if (i == 0) snprintf(buf, n, "%lld bytes", (long long)b);
  else snprintf(buf, n, "%.2f %s", v, u[i]);
}

/* The device's capacity, asked once (it does not change): the check below
 * runs on every allocation and flush. */
static int64_t capacity_locked(int device) {
  static int64_t capacity[TPU_PJRT_MAX_DEVICES];
  if (capacity[device] == 0) {
    tpu_rt_memory_info_t mi;
    memory_info_locked(device, &mi);
    capacity[device] = mi.total_bytes > 0 ? mi.total_bytes : -1;
  }
  return capacity[device];
}

/* " Largest live allocations: 64.0 MiB at 0x..., ..." (the five largest
 * storages of device holding a value, by the address PyTorch sees as
 * data_ptr()), or "" (runtime lock held). */
static void largest_live(int device, char *out, size_t n) {
  enum { TOP = 5 };
  size_t size[TOP] = {0};
  uint64_t addr[TOP] = {0};
  int k = 0;
  for (tpu_storage_t *s = R.storages; s; s = s->live_next) {
    if (s->device != device || !s->value) continue;
    size_t b = (size_t)s->numel * tpu_dtype_size(s->dtype);
    int at = k < TOP ? k : TOP;
    while (at > 0 && size[at - 1] < b) at--;
    if (at >= TOP) continue;
    int last = k < TOP ? k : TOP - 1;
    for (int j = last; j > at; j--) {
      size[j] = size[j - 1];
      addr[j] = addr[j - 1];
    }
    size[at] = b;
    addr[at] = atomic_load_explicit(&s->address, memory_order_relaxed);
    if (k < TOP) k++;
  }
  out[0] = 0;
  if (!k) return;
  size_t len = (size_t)snprintf(out, n, " Largest live allocations:");
  for (int i = 0; i < k && len < n; i++) {
    char b[32];
    fmt_bytes((int64_t)size[i], b, sizeof(b));
    len += (size_t)snprintf(out + len, n - len, "%s %s at 0x%llx", i ? "," : "", b, (unsigned long long)addr[i]);
  }
  if (len < n) snprintf(out + len, n - len, " (torch.tpu.memory._snapshot() names where each was made).");
}

/* Refuses an allocation of `request` bytes that would pass the device's
 * limit (set_per_process_memory_fraction, or its whole capacity), with
 * CUDA's message shape; the engine maps it to torch.OutOfMemoryError. */
tpu_status_t memory_check(int device, int64_t request, const char *what) {
  if (request <= 0 || device < 0 || device >= TPU_PJRT_MAX_DEVICES) return NULL;
  tpu_pjrt_memory_stats_t ms;
  tpu_pjrt_memory_stats(NULL, device, &ms);
  int64_t limit = R.mem_limit[device];
  if (limit <= 0 && ms.bytes_in_use + request < ((int64_t)1 << 30)) return NULL; /* the common case */
  int64_t total = capacity_locked(device);
  if (limit <= 0) limit = total;
  if (limit <= 0 || ms.bytes_in_use + request <= limit) return NULL;
  char a[32], b[32], c[32], d[32];
  fmt_bytes(request, a, sizeof(a));
  fmt_bytes(total, b, sizeof(b));
  fmt_bytes(ms.bytes_in_use, c, sizeof(c));
  fmt_bytes(limit, d, sizeof(d));
  char largest[400];
  largest_live(device, largest, sizeof(largest));
  return tpu_status_make(TPU_RESOURCE_EXHAUSTED,
                         "tpu out of memory (%s). Tried to allocate %s. tpu:%d has a total capacity of %s; this "
                         "process holds %s in device buffers and may use %s.%s%s",
                         what, a, device, b, c, d, largest,
                         R.target_cpu ? " On the XLA CPU plugin the capacity is a share of the host's RAM: "
                                        "TORCH_TPU_CPU_MEMORY=<bytes, or e.g. 20GiB> sets it." : "");
}

void tpu_rt_memory_reset_peak(int device) { tpu_pjrt_memory_reset_peak(device); }
void tpu_rt_memory_reset_accumulated(int device) { tpu_pjrt_memory_reset_accumulated(device); }

