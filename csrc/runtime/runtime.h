/* runtime.h - values, storages, the pending graph, the executor, the cache.
 *
 * The view model
 * --------------
 * A storage (tpu_storage_t) owns the CURRENT value of one base array: a
 * contiguous row-major device array of `numel` elements of `dtype`.  The
 * value's own shape is whatever produced it (numel always matches), since
 * every read goes through a view description relative to the flat layout.
 * PJRT buffers are immutable: a write makes a new value and swaps it in, so
 * every tensor sharing the storage (every alias) sees the write; the version
 * counter lives on the PyTorch side.
 *
 * A tensor = storage + view (sizes, strides, offset, dtype), owned by
 * PyTorch's TensorImpl.  Reading a view is a "view_read" node in the program
 * (identity views cost nothing; contiguous ranges are slice+reshape;
 * permutations add a transpose; anything else is one gather).  Writing a
 * view is a "view_write" node (dynamic_update_slice or scatter into the base).
 *
 * Values are lazy
 * ---------------
 * A value is either materialised (a PJRT buffer, possibly still computing)
 * or pending: an output of a node in the current graph.  Ops append nodes;
 * flush turns the graph into ONE program (cached by its structure + input
 * types), runs it, and gives buffers to the node outputs that are still
 * referenced.  The eager modes differ only in when flush happens:
 *   strict  after every op (one program per op, asynchronous)
 *   debug   after every op, and waits for completion (errors at the op)
 *   fused   when a host read needs a value, on synchronize, after an
 *           optimizer step, at the graph size bound, or before an op
 *           falls back to CPU.
 *
 * All entry points take the runtime lock; the engine is process-wide.
 */
#ifndef TPU_RUNTIME_RUNTIME_H_
#define TPU_RUNTIME_RUNTIME_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "hlo/hlo.h"
#include "ops/ops.h"
#include "pjrt/pjrt.h"
#include "runtime/metrics.h"

typedef enum tpu_eager_mode {
  TPU_MODE_STRICT = 0,
  TPU_MODE_DEBUG = 1,
  TPU_MODE_FUSED = 2,
} tpu_eager_mode_t;

typedef struct tpu_value tpu_value_t;
typedef struct tpu_storage tpu_storage_t;

/* A view of a storage. */
typedef struct tpu_view {
  tpu_dtype_t dtype;
  int rank;
  int64_t sizes[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK];
  int64_t offset;
} tpu_view_t;

/* One input of an op: a view of a storage, or a host scalar. */
typedef struct tpu_rt_input {
  tpu_storage_t *storage; /* NULL for a scalar */
  tpu_view_t view;
  tpu_dtype_t scalar_dtype;
  double scalar_f;     /* floating scalars */
  int64_t scalar_i;    /* integer / bool scalars */
} tpu_rt_input_t;

typedef struct tpu_rt_config {
  const char *plugin_path;        /* required */
  int num_devices;                /* CPU plugin: cpu_device_count; 0 = plugin default */
  tpu_eager_mode_t mode;
  const char *cache_dir;          /* NULL or "" = no disk tier */
  int64_t mem_cache_max_entries;  /* 0 = default 4096 */
  int64_t mem_cache_max_bytes;    /* 0 = default 2 GiB */
  int64_t mem_cache_max_maps;     /* 0 = half of vm.max_map_count, < 0 = no bound (cache.h) */
  int64_t disk_cache_max_entries; /* 0 = no bound on the count */
  int64_t disk_cache_max_bytes;   /* 0 = default 4 GiB */
  int fused_max_nodes;            /* 0 = default 8192 */
  int no_device_checks;           /* 1 = programs compute no error flags (to measure their cost;
                                     bad indices then go unreported) */
  int no_donation;                /* 1 = programs never donate an input buffer (in-place writes
                                     then copy the whole buffer; to measure donation) */
  int no_host_memory_cache;       /* CPU plugin: 1 = leave the C library's malloc as it is
                                     (see tpu_rt_empty_cache) */
  int compile_threads;            /* compile workers (launch.c): 0 = compile on the caller's thread,
                                     -1 = 2 where there are 2 cores, else 1 */
  int64_t host_capacity_bytes;    /* CPU plugin: the device's capacity (TORCH_TPU_CPU_MEMORY);
                                     0 = half the host's RAM, at most 16 GiB (memory.c) */
} tpu_rt_config_t;

typedef struct tpu_rt_stats {
  int64_t mem_hits, mem_misses, disk_hits, disk_misses, disk_writes, disk_errors;
  int64_t compiles, evictions, disk_evictions;
  int64_t map_evictions;    /* of evictions, those for the memory-map bound */
  int64_t memory_evictions; /* of evictions, those after a compile failed for lack of memory */
  int64_t maps;             /* the process's memory maps when the cache last counted them */
  int64_t mem_max_maps;     /* the memory-map bound in force (-1: none) */
  double compile_seconds;
  int64_t mem_entries, mem_bytes, disk_entries, disk_bytes;
  int64_t executions, flushes, ops_recorded;
  int64_t live_buffers, live_values, live_storages;
  int64_t scalar_cache_hits, scalar_cache_misses, scalar_cache_entries;
  int64_t disk_refused; /* untrusted cache directory / entries refused */
  int64_t promotions;   /* tier-0 programs built again fully (beside the work; not in compiles) */
  double promotion_seconds;
} tpu_rt_stats_t;

/* ---- lifetime ----------------------------------------------------------- */
tpu_status_t tpu_rt_init(const tpu_rt_config_t *config);
bool tpu_rt_initialized(void);
/* In a child process forked after the engine started: the device is the
 * parent's; every entry fails (TPU_FAILED_PRECONDITION, TPU_FORKED_MSG), as
 * CUDA's does. */
bool tpu_rt_forked(void);
#define TPU_FORKED_MSG                                                                           \
  "Cannot re-initialize tpu in forked subprocess. To use tpu with multiprocessing, you must use " \
  "the 'spawn' start method"
void tpu_rt_shutdown(void);
int tpu_rt_device_count(void);
const char *tpu_rt_platform(void);
const char *tpu_rt_identity(void);
tpu_eager_mode_t tpu_rt_mode(void);
tpu_status_t tpu_rt_set_mode(tpu_eager_mode_t mode); /* flushes first */
void tpu_rt_stats(tpu_rt_stats_t *out);
void tpu_rt_clear_cache(bool disk_too);

/* ---- storages ------------------------------------------------------------- */
/* Host -> device: a new storage holding a copy of dense row-major data. */
tpu_status_t tpu_rt_storage_from_host(int device, tpu_dtype_t dtype, const int64_t *dims, int rank,
                                      const void *data, tpu_storage_t **out_storage);
void tpu_storage_retain(tpu_storage_t *s);
void tpu_storage_release(tpu_storage_t *s);
int64_t tpu_storage_numel(const tpu_storage_t *s);
tpu_dtype_t tpu_storage_dtype(const tpu_storage_t *s);
int tpu_storage_device(const tpu_storage_t *s);
/* An address the host layer gives a storage's bytes ([address, address +
 * nbytes)), and the way back: the live storage whose range holds `address`
 * and the byte offset into it (a scan of every live storage, for the rare
 * paths that carry only an address: DLPack, from_blob); NULL if none. */
void tpu_storage_set_address(tpu_storage_t *s, uint64_t address);
tpu_storage_t *tpu_storage_find_address(uint64_t address, uint64_t *out_byte_offset);
/* Identity of the current value, for tests of in-place semantics. */
const void *tpu_storage_value_id(const tpu_storage_t *s);

size_t tpu_storage_nbytes(const tpu_storage_t *s);
/* A storage of `nbytes` bytes with no value yet (reads as zeros): untyped,
 * it takes the dtype of the first view that touches it (the allocator's
 * storages, whose dtype PyTorch does not say). */
tpu_status_t tpu_rt_storage_alloc(int device, size_t nbytes, tpu_storage_t **out_storage);
/* A typed storage of `numel` elements with no value yet (torch.empty). */
tpu_status_t tpu_rt_storage_empty(int device, tpu_dtype_t dtype, int64_t numel, tpu_storage_t **out_storage);
/* Resizes in place: the first min(old, new) bytes are kept, the rest reads
 * as zeros; 0 bytes releases the device buffer (FSDP2's resize_(0)). */
tpu_status_t tpu_rt_storage_resize(tpu_storage_t *s, size_t nbytes);

/* Host -> device without waiting for the copy: `data` must stay untouched
 * until done(arg) is called (pinned memory).  The copy is device work:
 * events and synchronize cover it. */
tpu_status_t tpu_rt_storage_from_host_async(int device, tpu_dtype_t dtype, const int64_t *dims, int rank,
                                            const void *data, tpu_pjrt_done_fn done, void *arg,
                                            tpu_storage_t **out_storage);
/* Registers host memory for DMA with the plugin (pinned memory). */
tpu_status_t tpu_rt_dma_map(void *data, size_t size);
tpu_status_t tpu_rt_dma_unmap(void *data);

/* Copies a view to dense row-major host memory (waits). */
tpu_status_t tpu_rt_view_to_host(tpu_storage_t *s, const tpu_view_t *view, void *dst, size_t nbytes);
/* A new storage on `device` holding a dense copy of a view of s (which
 * lives on another device): the view is computed on its own device, then
 * copied device to device.  Asynchronous. */
tpu_status_t tpu_rt_view_to_device(tpu_storage_t *s, const tpu_view_t *view, int device, tpu_storage_t **out_storage);

/* ---- collectives across this process's devices --------------------------------- */
typedef enum tpu_rt_collective {
  TPU_RT_ALL_REDUCE,     /* every member gets the reduction of all inputs */
  TPU_RT_ALL_GATHER,     /* every member gets the inputs concatenated along dim 0 */
  TPU_RT_REDUCE_SCATTER, /* member i gets block i (dim 0) of the reduction */
} tpu_rt_collective_t;
/* One replicated program over n local devices (the plugin's in-process
 * collectives): member i's input is views[i] of storages[i], each on a
 * device of its own, all of one dtype and shape; its result is a new dense
 * storage on that device (out_storages[i], caller owns it).  reduce names
 * the combiner: "add", "multiply", "minimum", "maximum", "and", "or"
 * (ignored by all_gather).  all_gather and reduce_scatter work on dim 0
 * (rank >= 1; reduce_scatter's dim 0 a multiple of n).  Asynchronous:
 * events and synchronize cover it. */
tpu_status_t tpu_rt_collective(tpu_rt_collective_t kind, const char *reduce, tpu_storage_t *const *storages,
                               const tpu_view_t *views, int n, tpu_storage_t **out_storages);

/* ---- ops ---------------------------------------------------------------------- */
/* Records (and in strict/debug mode runs) `rule` on inputs.  Returns one new
 * storage per output (caller owns them) with their shapes/dtypes. */
typedef struct tpu_rt_output {
  tpu_storage_t *storage;
  tpu_hlo_type_t type;
} tpu_rt_output_t;
tpu_status_t tpu_rt_op(const tpu_op_rule_t *rule, const tpu_rt_input_t *inputs, int nin,
                       const tpu_op_attrs_t *attrs, tpu_rt_output_t *outputs, int *out_n);
/* The same for ops that may have no tensor input (factories): they run on
 * `device_if_none` (-1 = device 0).  Tensor inputs decide otherwise. */
tpu_status_t tpu_rt_op_on(int device_if_none, const tpu_op_rule_t *rule, const tpu_rt_input_t *inputs, int nin,
                          const tpu_op_attrs_t *attrs, tpu_rt_output_t *outputs, int *out_n);
/* Writes src (a view, converted to dst's dtype by the caller) into the view
 * `dst_view` of dst: dst's value is replaced (aliases see it). */
tpu_status_t tpu_rt_write(tpu_storage_t *dst, const tpu_view_t *dst_view, const tpu_rt_input_t *src);

/* ---- device memory ------------------------------------------------------------ */
typedef struct tpu_rt_memory_info {
  tpu_pjrt_memory_stats_t stats; /* this process's buffers, and the plugin's figures */
  int64_t total_bytes;           /* the plugin's limit, else host RAM (CPU plugin) */
  int64_t free_bytes;            /* total less what is used (host: MemAvailable) */
  int64_t limit_bytes;           /* what this process may hold (set_memory_limit) */
} tpu_rt_memory_info_t;
tpu_status_t tpu_rt_memory_info(int device, tpu_rt_memory_info_t *out);
/* Allocations that would take this process's device buffers past `bytes`
 * fail with RESOURCE_EXHAUSTED (0 = the device's capacity). */
tpu_status_t tpu_rt_set_memory_limit(int device, int64_t bytes);
void tpu_rt_memory_reset_peak(int device);
void tpu_rt_memory_reset_accumulated(int device);
/* Drops the buffers the engine keeps for reuse (the scalar cache) and, on
 * the CPU plugin, returns the freed host memory malloc kept to the system.
 * There a device buffer is host memory from malloc, and glibc serves large
 * blocks (above 128 KiB, rising to 32 MiB) with fresh mappings: every large
 * buffer (a program's output, a transfer) page-faults all its pages in and
 * gives them back when freed (a 64 MiB upload: ~30 ms instead of ~4).  So
 * the engine, started on the CPU plugin, raises malloc's mmap and trim
 * thresholds (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): freed blocks are reused,
 * as a device's caching allocator reuses its memory, until this call. */
void tpu_rt_empty_cache(void);

/* Runs the pending graph (fused mode); `why` is what cut it (metrics.h). */
tpu_status_t tpu_rt_flush(tpu_rt_cut_t why);
/* One op made of several recorded steps (an in-place or out= kernel: the op,
 * then the write into its target): between hold and release, strict and
 * debug mode do not flush after each step, and release flushes, so the op is
 * one program, in which the target's old value can be donated.  Nests.
 * hold makes a cut that fell due at the end of the last op (fused mode); the
 * hold is taken even when that fails. */
tpu_status_t tpu_rt_hold_flush(void);
tpu_status_t tpu_rt_release_flush(void);
/* Runs the pending graph of one device. */
tpu_status_t tpu_rt_flush_device(int device);
/* Fused mode, at the end of a repeated block (a layer of a model's stack):
 * when at least min_nodes ops were recorded since the previous block ended
 * or the last flush (the block's own size), runs each device's pending
 * graph.  Identical
 * blocks then are one program, compiled once for all of them (for each
 * sequence length a decoding step meets), and the device runs one block
 * while the host records the next.  Other modes (and inside hold_flush):
 * nothing. */
tpu_status_t tpu_rt_flush_block(int min_nodes);
tpu_status_t tpu_rt_synchronize(void);
int tpu_rt_pending_nodes(void);

/* Compiles user kernel `id` (ops/custom.h) alone once, so a kernel that does
 * not parse or compile fails here, naming itself and its input types, not
 * inside a fused program (runtime/custom.c).  Records nothing. */
tpu_status_t tpu_rt_custom_kernel_check(int64_t id);

#endif /* TPU_RUNTIME_RUNTIME_H_ */
