/* runtime_internal.h - what the runtime's files share (not for other layers).
 *
 *   runtime.c   lifetime, modes, statistics; the op and write entry points
 *   storage.c   values, storages (lazy, untyped, resize) and views
 *   graph.c     the pending graphs (one per device): recording, signatures,
 *               inputs, the program text
 *   execute.c   running a graph (flush), the device-side error state,
 *               synchronize
 *   scalar.c    Python numbers as device inputs, and their cache
 *   transfer.c  host <-> device copies, DMA mapping
 *   collective.c  collectives across this process's devices
 *   memory.c    device memory figures, limits, the out-of-memory check
 *   event.c     the record of issued work and events (event.h)
 *   errors.c    the error state's checks and messages (errors.h)
 *   cache.c     the program cache (cache.h)
 *   metrics.c   counters, program records, the recompile log (metrics.h)
 *
 * Every function here expects the runtime lock held (LOCK()), except where
 * its comment says otherwise.
 */
#ifndef TPU_RUNTIME_RUNTIME_INTERNAL_H_
#define TPU_RUNTIME_RUNTIME_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "base/arena.h"
#include "runtime/cache.h"
#include "runtime/metrics.h"
#include "runtime/trace.h"
#include "runtime/runtime.h"

/* ---- values and storages ------------------------------------------------------ */

typedef struct tpu_launch tpu_launch_t;
typedef struct tpu_program_desc tpu_program_desc_t; /* metrics.c */

struct tpu_value {
  int refs;
  tpu_hlo_type_t type;
  int device;
  tpu_pjrt_buffer_t *buffer; /* materialised */
  tpu_launch_t *launch;      /* in flight: its program waits in a queue (launch.c) */
  int node;                  /* pending: producing node in its device's graph; -1 otherwise */
  int64_t made_at;           /* fused mode: the op position that made it (loop.c); -1 otherwise */
  int out_index;
  uint64_t in_epoch; /* graph-input dedupe */
  int in_index;
};

/* A storage's value is NULL until first used: such a storage reads as
 * zeros (a fill node in the graph that reads it), so torch.empty and
 * allocator storages cost nothing until touched.  An untyped storage (made
 * from a byte count by the allocator) takes the dtype of the first view
 * that touches it. */
struct tpu_storage {
  int refs;
  tpu_dtype_t dtype;
  int64_t numel;
  int device;
  bool untyped;
  tpu_value_t *value;
  _Atomic uint64_t address;             /* the host layer's name for its bytes (0: none) */
  tpu_storage_t *live_prev, *live_next; /* R.storages: every live storage */
};

tpu_value_t *value_new(const tpu_hlo_type_t *type, int device);
void value_retain(tpu_value_t *v);
void value_release(tpu_value_t *v);
tpu_storage_t *storage_new(tpu_value_t *value /* ref moved in */);
tpu_storage_t *storage_of_buffer(tpu_pjrt_buffer_t *buf /* moved in */, const tpu_hlo_type_t *t, int device);
tpu_storage_t *storage_new_lazy(int device, tpu_dtype_t dtype, int64_t numel, bool untyped);
/* The bytes a storage with no value holds in the device's accounts
 * (tpu_pjrt_memory_promise): storage_promised before a change of its value
 * or size, storage_repromise(s, before) after it. */
int64_t storage_promised(const tpu_storage_t *s);
void storage_repromise(const tpu_storage_t *s, int64_t before);

/* Views: bounds and dtype checks (an untyped storage takes the view's
 * dtype); identity test. */
tpu_status_t check_view(tpu_storage_t *s, const tpu_view_t *view);
bool view_is_identity(const tpu_view_t *view, const tpu_hlo_type_t *t);

/* The value of a view of s as a materialised value of its own (a view_read
 * node run now, unless the view is the whole value; transfer.c).
 * bytes_only: the caller reads only the bytes (a host copy), so a row-major
 * view of the whole value in another shape is the value itself too. */
tpu_status_t view_value(tpu_storage_t *s, const tpu_view_t *view, bool bytes_only, tpu_value_t **out);

/* ---- the pending graphs --------------------------------------------------------- */

/* A reference inside a graph: >= 0 node output (node * 16 + out), < 0 input -(i+1). */
typedef int32_t tpu_ref_t;
#define TPU_REF_NODE(n, o) ((tpu_ref_t)((n) * TPU_OP_MAX_OUTPUTS + (o)))
#define TPU_REF_INPUT(i) ((tpu_ref_t)(-(i) - 1))

typedef struct tpu_node {
  const tpu_op_rule_t *rule;
  int nin;
  tpu_ref_t *in;
  tpu_op_attrs_t attrs;
  int nout;
  tpu_value_t *outs[TPU_OP_MAX_OUTPUTS];
  int nchecks; /* device-side checks its rule emits (errors.h) */
} tpu_node_t;

/* The work recorded for one device and not yet run. */
typedef struct tpu_loop tpu_loop_t; /* loop.c */

typedef struct tpu_graph {
  bool ready; /* arena initialised */
  tpu_loop_t *loop; /* fused mode: the period of the ops being recorded */
  int device;
  tpu_arena_t arena;
  tpu_value_t **inputs;
  int ninputs, cap_inputs;
  tpu_node_t *nodes;
  int nnodes, cap_nodes;
  uint64_t epoch;
  uint64_t hash;
  /* fused: a size or loop cut fell due at the end of the last op; it is
   * made when the next op starts recording (cut_if_due), when the
   * temporaries of the statement that op ended are gone: cutting inside
   * the op made them outputs too, and XLA recomputed the chain once per
   * output (a 150-op sin chain ran 3x slower fused than strict). */
  int cut_due; /* a tpu_rt_cut_t + 1; 0: none */
  double rec_start; /* while tracing: when its first op was recorded (trace.h) */
  uint64_t rec_tag; /* and the recording thread's tag then */
} tpu_graph_t;

/* Output signature of one op on given input types (shape inference cache). */
typedef struct tpu_sig {
  uint64_t key;
  int nout;
  int nchecks; /* device-side checks the rule emits for these types */
  tpu_hlo_type_t types[TPU_OP_MAX_OUTPUTS];
  struct tpu_sig *next;
} tpu_sig_t;
#define TPU_SIG_BUCKETS 4096
#define TPU_SIG_MAX 65536

tpu_graph_t *graph_of(int device);
void graph_discard(tpu_graph_t *g);      /* drops what is pending (failure, shutdown) */
void graph_free(tpu_graph_t *g);         /* shutdown */
void graph_truncate(tpu_graph_t *g, int nnodes); /* rolls back a failed op's nodes */
tpu_status_t graph_add_node(tpu_graph_t *g, const tpu_op_rule_t *rule, const tpu_ref_t *in, int nin,
                            const tpu_op_attrs_t *attrs, tpu_node_t **out_node);
/* A view_read (refs: the base) or view_write (refs: base, src) node for v.
 * A non-zero offset is a runtime input (a 0-d s64, as a number is):
 * reading or writing the same view at another position
 * (a data set, a KV cache, a rolling buffer) is the same program. */
tpu_status_t view_node(tpu_graph_t *g, const tpu_ref_t *refs, int nrefs, const tpu_view_t *v, tpu_node_t **out_node);
/* A reference to an input's contents (a view read folded in; a number as a
 * 0-d input of its own, one per use). */
tpu_status_t input_ref(tpu_graph_t *g, const tpu_rt_input_t *in, tpu_ref_t *out);
/* A storage's value seen as `dtype` (bitcast when they differ; zeros when
 * it has no value). */
tpu_status_t storage_ref(tpu_graph_t *g, tpu_storage_t *s, tpu_dtype_t dtype, tpu_ref_t *out,
                         const tpu_hlo_type_t **out_type);
/* The StableHLO text of g returning its live outputs (and, with checks, the
 * new error state as one more result); input i is donated to result
 * alias[i] where alias[i] >= 0 (alias may be NULL: none). */
tpu_status_t graph_build_text(tpu_graph_t *g, const int *live_node, const int *live_out, int nlive, int nchecks,
                              const int *alias, tpu_hlo_module_t **out_m, const char **out_text, size_t *out_len);
void sigs_free(void);

/* ---- loops (loop.c): fused mode cuts a long loop's graph at its period ---------------- */
/* Observes a node just added to g (its signature cache key), in fused mode. */
void loop_observe(tpu_graph_t *g, const tpu_node_t *node, uint64_t sig_key);
/* A loop's window is full at a period boundary: cut g now (once per boundary). */
bool loop_cut_due(tpu_graph_t *g);
/* g was cut for another reason (a step, a host read): the loop starts over
 * from here, and what was made before counts as an input. */
void loop_restart(tpu_graph_t *g);
void loop_free(tpu_graph_t *g);

/* ---- execution ---------------------------------------------------------------------- */
/* Runs g as one program; `why` is what cut it there (metrics.h). */
tpu_status_t graph_flush(tpu_graph_t *g, tpu_rt_cut_t why);
tpu_status_t flush_all(tpu_rt_cut_t why);
/* tpu_cache_build, retried once after shedding half the memory tier when it
 * failed for lack of host memory (execute.c); `locked`: R.lock is held. */
tpu_status_t build_program(const char *text, size_t len, const tpu_pjrt_compile_options_t *co, const char *name,
                           uint64_t key, bool locked, tpu_pjrt_exec_t **out_exec, int *out_from_disk);
/* build_program with tiers: `quick` (NULL: none) builds tier 0 unless the
 * disk tier holds the full build (tpu_cache_build_tiered); *out_tier. */
tpu_status_t build_program_tiered(const char *text, size_t len, const tpu_pjrt_compile_options_t *co,
                                  const tpu_pjrt_compile_options_t *quick, const char *name, uint64_t key, bool locked,
                                  tpu_pjrt_exec_t **out_exec, int *out_from_disk, int *out_tier);
/* Runs `exec`, the program of `key`, on dev now: inputs[i]'s buffer is
 * argument i (plus the device's error state when nchecks), outs[i] gets
 * result i (materialised), input i is donated to result alias[i] >= 0. */
tpu_status_t run_program(int dev, tpu_pjrt_exec_t *exec, uint64_t key, tpu_rt_cut_t why, tpu_value_t *const *inputs,
                         int ninputs, tpu_value_t *const *outs, int nlive, const int *alias, int nchecks);

/* ---- launches (launch.c): programs waiting for their compile, in order ----------------- */
/* Compiles go to workers (strict and fused mode, with workers started). */
bool launch_async(void);
bool launch_queue_empty(int dev);
/* A compile of `key` is under way (a launch joins it instead of building). */
bool launch_compiling(uint64_t key);
/* Queues a run of the program of `key` on dev behind the device's queue:
 * `cached` is its executable if the memory tier has it, else text (len
 * bytes, with options co and desc for metrics, moved in) is compiled, or a
 * compile of key under way is joined (text NULL).  The outputs are in
 * flight until it runs. */
tpu_status_t launch_queue(int dev, uint64_t key, tpu_rt_cut_t why, tpu_pjrt_exec_t *cached, const char *text,
                          size_t len, const tpu_pjrt_compile_options_t *co, const tpu_pjrt_compile_options_t *quick,
                          tpu_program_desc_t *desc, tpu_value_t *const *inputs, int ninputs,
                          tpu_value_t *const *outs, int nlive, const int *alias, int nchecks);
/* Compiles text (len bytes) with the full options co when a worker has
 * nothing else to do (one promotion at a time), and hands the build to the
 * memory tier's entry of key (tpu_cache_promoted).  Without workers: nothing
 * (no tiers then). */
bool launch_has_workers(void);
void launch_promote(uint64_t key, const char *text, size_t len, const tpu_pjrt_compile_options_t *co);
/* Waits until v is materialised (its launch ran); an error if it failed. */
tpu_status_t value_wait(tpu_value_t *v);
/* Waits until device dev's queue (every device's: -1) is empty. */
void launch_wait_all(int dev);
/* The message of the last failed launch (for reads of its outputs). */
const char *launch_last_error(void);
/* The workers: nthreads (-1: 2 where there are 2 cores, else 1; 0: none,
 * every compile on the caller's thread).  shutdown waits for the queues. */
void launch_start(int nthreads);
void launch_shutdown(void);
tpu_status_t maybe_flush_after_op(tpu_graph_t *g);
/* Makes the cut maybe_flush_after_op left due, unless a flush hold is on. */
tpu_status_t cut_if_due(tpu_graph_t *g);
/* device-side checks (execute.c): the device's state as an argument, and
 * the new state after a program; read at host waits. */
tpu_status_t err_state_buffer(int dev, tpu_pjrt_buffer_t **out);
void err_state_advance(int dev, tpu_pjrt_buffer_t *b /* moved in */);
tpu_status_t err_check_locked(int dev);
tpu_status_t err_check(int dev); /* without the lock held */
int err_devices(void);
void err_shutdown(void);

/* ---- scalars, memory -------------------------------------------------------------------- */
#define TPU_SCALAR_SLOTS 256
typedef struct tpu_scalar_slot {
  int used;
  tpu_dtype_t dtype;
  int device;
  uint64_t bits;
  tpu_value_t *value;
} tpu_scalar_slot_t;
tpu_status_t scalar_value(const tpu_rt_input_t *in, int device, tpu_value_t **out);
void scalars_clear(void);
int scalars_used(void);

tpu_status_t memory_check(int device, int64_t request, const char *what);
void host_memory_cache_start(void);
void host_memory_trim(void);
/* After the memory tier dropped programs: the heap's free pages back to the system, now and then. */
void memory_release_evicted(void);
tpu_status_t check_started_device(int device);

/* ---- metrics (metrics.c; its own lock, callable from any thread) ----------------------- */
typedef enum tpu_metrics_transfer {
  TPU_XFER_TO_DEVICE,
  TPU_XFER_TO_HOST,
  TPU_XFER_DEVICE_COPY,
} tpu_metrics_transfer_t;
/* What metrics keeps of a program's graph (its name, size and, within a
 * budget, the descriptor recompiles are told from): made from the graph
 * with the live set, checks and donations graph_flush chose, while the
 * graph exists; handed to metrics_program_made once the program is
 * compiled or loaded (which takes it), or freed. */
tpu_program_desc_t *metrics_describe(const tpu_graph_t *g, const int *live_node, const int *live_out, int nlive,
                                     int nchecks, const int *alias);
void metrics_desc_free(tpu_program_desc_t *d);
const char *metrics_desc_name(const tpu_program_desc_t *d); /* NULL: no description */
/* A program was compiled (or loaded from the disk tier) under `key`: its
 * record, and its cause if it recompiles an earlier one.  Any thread. */
void metrics_program_made(uint64_t key, tpu_program_desc_t *d /* moved in */, tpu_rt_program_source_t source,
                          double seconds);
/* A compile or disk load starts / ends (for the wall time spent building). */
void metrics_build_begin(void);
void metrics_build_end(void);
/* The program of `key` was issued as work `seq` at time `issued`. */
void metrics_executed(uint64_t key, uint64_t seq, tpu_rt_cut_t cut, double issued);
void metrics_work_done(uint64_t seq, double t); /* event.c: work seq finished at t */
void metrics_transfer(tpu_metrics_transfer_t kind, int64_t bytes);
void metrics_host_wait(double seconds);
void metrics_shutdown(void);
/* The name and op count of key's program record, if there is one (out_name "" if not). */
void metrics_program_name(uint64_t key, char *out_name, size_t n, int *out_ops);

/* ---- trace (trace.c, trace.h; its own lock, after metrics' one): call only when
 * tpu_rt_trace_on ---------------------------------------------------------------------- */
void trace_flush(int device, uint64_t key, tpu_rt_cut_t cut, int ops, double rec_start, uint64_t rec_tag, int hit);
void trace_execute(int device, uint64_t key, uint64_t seq, const char *name, int ops, double start, double end);
void trace_built(uint64_t key, const char *name, int ops, int from_disk, double seconds);
void trace_shutdown(void);

/* ---- program dumps (dump.c): TORCH_TPU_DUMP_DIR, read once -------------------------- */
const char *dump_dir(void); /* NULL: no dumps */
void dump_program_text(uint64_t key, const char *text, size_t len, const char *xla_flags);
void dump_program_meta(uint64_t key, const char *name, int ops, const char *const *rules, int nrules,
                       const char *source, double seconds);
void dump_program_optimized(uint64_t key, tpu_pjrt_exec_t *exec); /* XLA's program, where the plugin gives it */

/* ---- the process-wide runtime ----------------------------------------------------------- */
typedef struct tpu_runtime {
  int initialized;
  pthread_mutex_t lock;
  tpu_pjrt_client_t *client;
  tpu_cache_t *cache;
  tpu_eager_mode_t mode;
  int fused_max_nodes;
  int no_device_checks;
  int no_donation;
  int64_t host_capacity; /* CPU plugin's device capacity asked for (0: the default) */
  int target_cpu; /* the plugin compiles with XLA's CPU compiler */
  int hold; /* tpu_rt_hold_flush depth */
  int64_t block_mark; /* ops_recorded at the last tpu_rt_flush_block or flush */
  tpu_graph_t graphs[TPU_PJRT_MAX_DEVICES];
  tpu_sig_t *sigs[TPU_SIG_BUCKETS];
  int64_t nsigs;
  tpu_scalar_slot_t scalars[TPU_SCALAR_SLOTS];
  uint64_t scalar_seen[TPU_SCALAR_SLOTS];
  int64_t mem_limit[TPU_PJRT_MAX_DEVICES]; /* bytes; 0 = the device's capacity */
  tpu_storage_t *storages; /* live storages (tpu_storage_find_address) */
  int forked;              /* a child forked after the engine started: no device */
  int64_t executions, flushes, ops_recorded, live_values, live_storages;
  int64_t scalar_hits, scalar_misses;
} tpu_runtime_t;

extern tpu_runtime_t tpu_rt_state;
#define R tpu_rt_state

#define TPU_NOT_STARTED_MSG                                                                        \
  "torch_tpu: no PJRT plugin is loaded, so the tpu device cannot run anything. Set "             \
  "TORCH_TPU_PJRT_PLUGIN=/path/to/a/pjrt_plugin.so or install the CPU plugin with "              \
  "`pip install xla-cpu-pjrt==0.0.1` (torch.tpu.init() shows why loading failed)"

#define LOCK() pthread_mutex_lock(&R.lock)
#define UNLOCK() pthread_mutex_unlock(&R.lock)

#endif /* TPU_RUNTIME_RUNTIME_INTERNAL_H_ */
