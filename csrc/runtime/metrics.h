/* metrics.h - what the engine did, and why it compiled.
 *
 * Counters (always on: a few additions per program run): compiles and
 * their seconds, executions and their device time, host waits, transfers,
 * and the runs of the pending graph by what cut it (tpu_rt_cut_t).  The
 * program cache's own counters (hits per tier) are in tpu_rt_stats.
 *
 * Programs.  Every program the engine compiles or loads (one per cache key)
 * has a record: a name that says which ops it holds, its op count, where it
 * came from (compiled, or loaded from the disk tier), the seconds that took,
 * its executions and their device time.
 *
 * Recompiles.  Each record keeps a descriptor of its graph: the structure
 * (rules and wiring, live outputs, donations, checks), the input types and
 * every op's attributes.  A new program whose structure an earlier program
 * has is a recompile of it; the differences from the nearest such program
 * (the one with the fewest) are its cause: which input's shape or dtype,
 * which op's attribute (a view's offset, a dim).  A new program that starts
 * with the same ops as an earlier one but differs after them is a recompile
 * too, its cause the first op where the two graphs part.  Anything else is
 * a first compile (warm-up).  The log (tpu_rt_metrics_set_log) prints each
 * distinct cause once, to stderr, as torch._dynamo's recompile log does; the
 * counts of every cause are kept (tpu_rt_recompile_causes).
 *
 * Device time of an execution is measured from the completion callbacks:
 * the time from its issue, or from the previous completion if that was
 * later (the device was busy with earlier work until then), to its own
 * completion.  On a device that runs one program at a time that is the
 * program's run time; where programs overlap it is an estimate.
 */
#ifndef TPU_RUNTIME_METRICS_H_
#define TPU_RUNTIME_METRICS_H_

#include <stdint.h>

/* Why the pending graph was run (a program cut there). */
typedef enum tpu_rt_cut {
  TPU_CUT_OP = 0,     /* strict / debug mode: after each op */
  TPU_CUT_HOST_READ,  /* a value was read to the host or copied to another device */
  TPU_CUT_SYNC,       /* synchronize, an event recorded */
  TPU_CUT_LAYER,      /* fused: the end of a layer of a model's stack */
  TPU_CUT_STEP,       /* fused: an optimizer step ended */
  TPU_CUT_SIZE,       /* fused: the graph reached its size bound */
  TPU_CUT_FALLBACK,   /* an op runs on the CPU and needs the values */
  TPU_CUT_COMPILED,   /* the end of a torch.compile graph */
  TPU_CUT_COLLECTIVE, /* a collective reads its inputs */
  TPU_CUT_LOOP,       /* fused: a long loop's window is full, at its period (loop.c) */
  TPU_CUT_WIDE,       /* fused: between the levels of an op wider than one program takes well (cat) */
  TPU_CUT_OTHER,      /* a mode change, an explicit flush */
  TPU_CUT_COUNT
} tpu_rt_cut_t;
const char *tpu_rt_cut_name(tpu_rt_cut_t cut);

typedef struct tpu_rt_metrics {
  int64_t compiles;            /* programs compiled (cache misses in both tiers) */
  double compile_seconds;      /* summed over the compiles (workers compile side by side) */
  double build_wall_seconds;   /* wall time while at least one compile or disk load ran */
  int64_t disk_loads;          /* programs loaded from the disk tier */
  double disk_load_seconds;
  int64_t recompiles;          /* compiles or loads that recompiled an earlier program's structure */
  int64_t executions;
  double execute_seconds;      /* device time (see above) */
  int64_t host_waits;          /* the host waited for device values (reads, synchronize) */
  double host_wait_seconds;
  int64_t to_device, to_device_bytes;   /* host -> device copies */
  int64_t to_host, to_host_bytes;       /* device -> host copies */
  int64_t device_copies, device_copy_bytes; /* device -> device */
  int64_t cuts[TPU_CUT_COUNT];          /* programs run, by what cut the graph */
  int64_t programs;                     /* records kept */
} tpu_rt_metrics_t;

void tpu_rt_metrics(tpu_rt_metrics_t *out);
/* Zeroes the counters and every record's counts (records stay: a later
 * compile still finds its nearest earlier program). */
void tpu_rt_metrics_reset(void);

typedef enum tpu_rt_program_source {
  TPU_PROGRAM_COMPILED = 0,
  TPU_PROGRAM_DISK = 1, /* loaded from the disk tier */
} tpu_rt_program_source_t;

typedef struct tpu_rt_program_info {
  uint64_t key;
  char name[128];     /* "add", or "143 ops: mm+add+softmax+mul+..." */
  int ops;            /* nodes of its graph */
  int inputs;
  int outputs;        /* the graph's values it hands back (live after the cut) */
  tpu_rt_program_source_t source;
  double seconds;     /* compile or load */
  int64_t executions;
  double execute_seconds;
  int recompile;      /* a recompile of an earlier program's structure */
  char cause[256];    /* for a recompile: what differs from the nearest earlier program */
} tpu_rt_program_info_t;
/* Copies up to max records, in the order the programs were first made,
 * starting at the first-th; returns how many were copied. */
int tpu_rt_programs(int first, tpu_rt_program_info_t *out, int max);

typedef struct tpu_rt_recompile_cause {
  char text[448]; /* the first message of this cause */
  int64_t count;
} tpu_rt_recompile_cause_t;
int tpu_rt_recompile_causes(tpu_rt_recompile_cause_t *out, int max);

/* What is printed to stderr (flags OR-ed): each new recompile cause, and
 * every compile or disk load with its time. */
enum { TPU_LOG_RECOMPILES = 1, TPU_LOG_COMPILES = 2 };
void tpu_rt_metrics_set_log(int flags);

#endif /* TPU_RUNTIME_METRICS_H_ */
