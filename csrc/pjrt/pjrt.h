/* pjrt.h - the engine's view of a PJRT plugin.
 *
 * This layer is the ONLY code that touches the PJRT C ABI (declared, for
 * what we call only, in pjrt_abi.h).  It knows nothing of PyTorch.  Every
 * PJRT error is converted into a tpu_status_t (code + message + context) and
 * destroyed here; every PJRT event is awaited or destroyed here.
 *
 * Objects:
 *   tpu_pjrt_client_t  one loaded plugin + one client + its devices
 *   tpu_pjrt_buffer_t  one device array (owns one PJRT_Buffer)
 *   tpu_pjrt_exec_t    one loaded executable + its output signature
 * The client must outlive every buffer and executable made from it.
 * Functions are thread-compatible: callers serialise access to one client
 * (the runtime holds the process-wide lock).
 */
#ifndef TPU_PJRT_PJRT_H_
#define TPU_PJRT_PJRT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

typedef struct tpu_pjrt_client tpu_pjrt_client_t;
typedef struct tpu_pjrt_buffer tpu_pjrt_buffer_t;
typedef struct tpu_pjrt_exec tpu_pjrt_exec_t;

/* ---- plugin discovery / client ------------------------------------------ */

/* A named client-create option (PJRT_NamedValue). */
typedef enum { TPU_PJRT_OPT_INT64, TPU_PJRT_OPT_STRING, TPU_PJRT_OPT_BOOL, TPU_PJRT_OPT_FLOAT } tpu_pjrt_opt_kind_t;
typedef struct tpu_pjrt_option {
  const char *name;
  tpu_pjrt_opt_kind_t kind;
  int64_t i;        /* INT64 / BOOL */
  const char *s;    /* STRING */
  double f;         /* FLOAT */
} tpu_pjrt_option_t;

/* Loads the plugin at `plugin_path` (dlopen + GetPjrtApi), checks its
 * version and that every slot we call is present (error names the slot and
 * both versions), initialises it and creates a client with `options`.
 * Errors: NOT_FOUND (no file), INVALID_ARGUMENT (not a PJRT plugin),
 * FAILED_PRECONDITION (too old), or the plugin's own error. */
tpu_status_t tpu_pjrt_client_create(const char *plugin_path,
                                    const tpu_pjrt_option_t *options, size_t num_options,
                                    tpu_pjrt_client_t **out_client);
/* Destroys the client.  All its buffers/executables must be destroyed first. */
void tpu_pjrt_client_destroy(tpu_pjrt_client_t *client);

/* Searches for a plugin when none is given: $TORCH_TPU_PJRT_PLUGIN, then
 * libtpu when a TPU is present (/dev/accel* or /dev/vfio), then the XLA CPU
 * plugin inside an installed `xla-cpu-pjrt` (`xla_plugins/xla_cpu_pjrt/
 * xla_cpu_pjrt.so` under each entry of `search_dirs`, a ':'-separated list of
 * site-packages folders; may be NULL).  The path is written into out_path. */
tpu_status_t tpu_pjrt_find_plugin(const char *search_dirs, char *out_path, size_t out_size);

int tpu_pjrt_client_device_count(const tpu_pjrt_client_t *client);
/* "cpu", "cuda", "tpu" ... (lowercase); owned by the client. */
const char *tpu_pjrt_client_platform(const tpu_pjrt_client_t *client);
/* Plugin identity for cache keys: "platform|platform_version|api 0.N|xla_version|path". */
const char *tpu_pjrt_client_identity(const tpu_pjrt_client_t *client);
int tpu_pjrt_client_api_minor(const tpu_pjrt_client_t *client);
const char *tpu_pjrt_client_plugin_path(const tpu_pjrt_client_t *client);

/* ---- buffers -------------------------------------------------------------- */

/* Copies dense row-major host data to device `device` (0..count-1).  The
 * host memory may be reused when this returns.  rank 0 and zero-size work. */
tpu_status_t tpu_pjrt_buffer_from_host(tpu_pjrt_client_t *client, int device,
                                       tpu_dtype_t dtype, const int64_t *dims, int rank,
                                       const void *data, tpu_pjrt_buffer_t **out_buffer);
/* Copies the whole buffer to dense row-major host memory (waits).
 * dst_size must equal the buffer's byte size. */
tpu_status_t tpu_pjrt_buffer_to_host(tpu_pjrt_buffer_t *buffer, void *dst, size_t dst_size);
/* Completion callback: called once, on a plugin thread, when the work it
 * was registered for has finished; it owns `st` (NULL = success).  It must
 * not call back into this layer. */
typedef void (*tpu_pjrt_done_fn)(tpu_status_t st, void *arg);

/* Like tpu_pjrt_buffer_from_host, but returns before the copy has finished:
 * `data` must stay untouched until done(arg) is called (pinned host memory,
 * non_blocking copies).  done is called exactly once, also on failure after
 * the buffer was created; on an error return it is never called. */
tpu_status_t tpu_pjrt_buffer_from_host_async(tpu_pjrt_client_t *client, int device, tpu_dtype_t dtype,
                                             const int64_t *dims, int rank, const void *data,
                                             tpu_pjrt_done_fn done, void *arg,
                                             tpu_pjrt_buffer_t **out_buffer);
/* A copy of the buffer on another device of the same client (asynchronous:
 * the copy is ordered after the buffer's value is computed). */
tpu_status_t tpu_pjrt_buffer_copy_to_device(tpu_pjrt_buffer_t *buffer, int device, tpu_pjrt_buffer_t **out_buffer);
/* Waits until the buffer's value is computed; returns a failed computation's error. */
tpu_status_t tpu_pjrt_buffer_await(tpu_pjrt_buffer_t *buffer);
void tpu_pjrt_buffer_destroy(tpu_pjrt_buffer_t *buffer);
/* The buffer is donated to an execution about to be issued (the program
 * aliases it to a result): from now on its bytes count as the result's in
 * the memory statistics, and its handle is only destroyed. */
void tpu_pjrt_buffer_donate(tpu_pjrt_buffer_t *buffer);

tpu_dtype_t tpu_pjrt_buffer_dtype(const tpu_pjrt_buffer_t *buffer);
int tpu_pjrt_buffer_rank(const tpu_pjrt_buffer_t *buffer);
const int64_t *tpu_pjrt_buffer_dims(const tpu_pjrt_buffer_t *buffer);
int64_t tpu_pjrt_buffer_numel(const tpu_pjrt_buffer_t *buffer);
size_t tpu_pjrt_buffer_nbytes(const tpu_pjrt_buffer_t *buffer);
int tpu_pjrt_buffer_device(const tpu_pjrt_buffer_t *buffer);
/* Number of live tpu_pjrt_buffer_t in the process (for leak tests). */
int64_t tpu_pjrt_live_buffers(void);

/* ---- device memory -------------------------------------------------------- */

/* What this process holds in device buffers on one device (counted here,
 * for every plugin), and what the plugin reports of the device (-1 where it
 * reports nothing: the CPU plugin answers UNIMPLEMENTED). */
typedef struct tpu_pjrt_memory_stats {
  int64_t bytes_in_use, peak_bytes_in_use; /* live buffers; peak since reset */
  int64_t bytes_allocated, bytes_freed;     /* cumulative */
  int64_t num_buffers, peak_num_buffers, num_allocs, num_frees;
  int64_t plugin_bytes_in_use, plugin_bytes_limit, plugin_peak_bytes_in_use;
} tpu_pjrt_memory_stats_t;
#define TPU_PJRT_MAX_DEVICES 64
void tpu_pjrt_memory_stats(tpu_pjrt_client_t *client, int device, tpu_pjrt_memory_stats_t *out);
void tpu_pjrt_memory_reset_peak(int device);
/* Bytes promised to storages that hold no buffer yet (an allocator's
 * storage before its first write), counted in bytes_in_use and its peak as
 * the buffer will be, so what a process holds moves at allocation, as on
 * CUDA; a negative delta gives them back.  Buffer counts and the
 * cumulative figures count buffers only. */
void tpu_pjrt_memory_promise(int device, int64_t delta);
void tpu_pjrt_memory_reset_accumulated(int device);

/* Registers host memory with the plugin for DMA (pinned memory); returns
 * UNIMPLEMENTED when the plugin has no PJRT_Client_DmaMap. */
tpu_status_t tpu_pjrt_dma_map(tpu_pjrt_client_t *client, void *data, size_t size);
tpu_status_t tpu_pjrt_dma_unmap(tpu_pjrt_client_t *client, void *data);

/* ---- compile / execute ---------------------------------------------------- */

typedef struct tpu_pjrt_compile_options {
  int num_replicas;            /* 0 or 1 = single device */
  int num_partitions;          /* 0 = 1 */
  /* Replica r runs on device_ids[r] (addressable index); NULL = 0..n-1. */
  const int *device_ids;
  /* Single-device programs: compile portable, the device chosen at execute. */
  bool portable;
  /* XLA options for this compile, as XLA_FLAGS spells them without the
   * dashes: "xla_backend_optimization_level=1 xla_cpu_use_fusion_emitters=false"
   * (NULL or "" = the plugin's defaults).  They travel as the compile
   * options' env_option_overrides, applied over the plugin's defaults;
   * true/false become bools, integers ints, the rest strings. */
  const char *xla_flags;
} tpu_pjrt_compile_options_t;

/* Compiles StableHLO text (MLIR).  A malformed program returns
 * INVALID_ARGUMENT carrying the plugin's parser diagnostic. */
tpu_status_t tpu_pjrt_compile(tpu_pjrt_client_t *client, const char *mlir, size_t mlir_size,
                              const tpu_pjrt_compile_options_t *options,
                              tpu_pjrt_exec_t **out_exec);
void tpu_pjrt_exec_destroy(tpu_pjrt_exec_t *exec);

/* Output signature, read once at compile/load time. */
int tpu_pjrt_exec_num_outputs(const tpu_pjrt_exec_t *exec);
int tpu_pjrt_exec_num_replicas(const tpu_pjrt_exec_t *exec);
tpu_dtype_t tpu_pjrt_exec_output_dtype(const tpu_pjrt_exec_t *exec, int i);
int tpu_pjrt_exec_output_rank(const tpu_pjrt_exec_t *exec, int i);
const int64_t *tpu_pjrt_exec_output_dims(const tpu_pjrt_exec_t *exec, int i);
/* Size of the generated code in bytes as the plugin reports it
 * (PJRT_Executable_SizeOfGeneratedCodeInBytes), a proxy for the memory an
 * executable holds; 0 if unknown. */
size_t tpu_pjrt_exec_code_size(const tpu_pjrt_exec_t *exec);

typedef struct tpu_pjrt_execute_options {
  /* Portable single-device executables: the device to run on. */
  int device;
  /* Inputs that must NOT be donated even if the program declares aliasing. */
  const int64_t *non_donatable;
  size_t num_non_donatable;
  /* Wait for completion before returning (debug mode). */
  bool wait;
  /* Without wait: called once when every device's part has finished
   * (see tpu_pjrt_done_fn); not called when execute returns an error. */
  tpu_pjrt_done_fn on_done;
  void *on_done_arg;
} tpu_pjrt_execute_options_t;

/* Runs `exec`.  args[d][i]: input i for device list d (num_lists lists of
 * num_args each; num_lists = number of replicas, 1 for single-device).
 * out_outputs[d][o] receives new buffers, num_outputs per list; the caller
 * owns them.  Checks count, dtype and dims of every argument against the
 * program and returns INVALID_ARGUMENT naming the argument on mismatch. */
tpu_status_t tpu_pjrt_execute(tpu_pjrt_exec_t *exec, tpu_pjrt_buffer_t *const *const *args,
                              size_t num_lists, size_t num_args,
                              const tpu_pjrt_execute_options_t *options,
                              tpu_pjrt_buffer_t **const *out_outputs);

/* The program the compiler made (PJRT_Executable_OptimizedProgram): its
 * bytes (free() them) and format ("hlo": a serialized HloModuleProto;
 * "hlo_with_config", the XLA CPU plugin's, with its compile options).
 * UNIMPLEMENTED where the plugin has no such entry. */
tpu_status_t tpu_pjrt_exec_optimized_program(tpu_pjrt_exec_t *exec, void **out_bytes, size_t *out_size,
                                             char *out_format, size_t format_cap);
/* Serialize to bytes (free() them) / load bytes made by the same plugin. */
tpu_status_t tpu_pjrt_exec_serialize(tpu_pjrt_exec_t *exec, void **out_bytes, size_t *out_size);
tpu_status_t tpu_pjrt_exec_deserialize(tpu_pjrt_client_t *client, const void *bytes, size_t size,
                                       tpu_pjrt_exec_t **out_exec);

/* ---- host kernels (pjrt_ffi.c) ------------------------------------------------
 * C functions a program on the CPU plugin calls as a typed XLA FFI custom
 * call (`stablehlo.custom_call @name(...) {api_version = 4 : i32}`).  A
 * handler receives XLA's call frame and passes it to tpu_pjrt_ffi_decode:
 * false means the frame was a query answered there (return NULL, no work);
 * true fills `out` with the call's operand and result buffers.  A handler
 * returns NULL (no error). */
#define TPU_PJRT_FFI_MAX_BUFFERS 16
typedef struct tpu_pjrt_ffi_buffer {
  tpu_dtype_t dtype;
  void *data;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int64_t numel;
} tpu_pjrt_ffi_buffer_t;
typedef struct tpu_pjrt_ffi_call {
  int num_args, num_rets;
  tpu_pjrt_ffi_buffer_t args[TPU_PJRT_FFI_MAX_BUFFERS];
  tpu_pjrt_ffi_buffer_t rets[TPU_PJRT_FFI_MAX_BUFFERS];
} tpu_pjrt_ffi_call_t;
typedef void *(*tpu_pjrt_ffi_handler_t)(void *call_frame);
bool tpu_pjrt_ffi_decode(void *call_frame, tpu_pjrt_ffi_call_t *out);
/* Registers `handler` as the host kernel `name` (once per process; again is
 * OK).  UNIMPLEMENTED on a plugin whose programs do not run in host memory
 * or that has no FFI extension. */
tpu_status_t tpu_pjrt_ffi_register(tpu_pjrt_client_t *client, const char *name, tpu_pjrt_ffi_handler_t handler);
/* Whether `name` was registered in this process. */
bool tpu_pjrt_ffi_registered(const char *name);

#endif /* TPU_PJRT_PJRT_H_ */
