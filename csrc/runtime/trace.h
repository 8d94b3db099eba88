/* trace.h - a timeline of what the engine did, kept only while tracing is on.
 *
 * While tpu_rt_trace_start() .. tpu_rt_trace_stop() is in force, the
 * engine appends one event per thing it does that a profile shows: each
 * flush of the pending graph (why it was cut, how many ops, the window in
 * which they were recorded), each cache lookup that hit the memory tier,
 * each compile or disk-tier load (its seconds), each program execution
 * (its span from the completion callbacks: from its issue, or the previous
 * completion if later, to its own completion: the same span metrics.h
 * counts as device time), each transfer with its bytes, each host wait,
 * and marks from above (CPU fallbacks).  Off, every hook is one load and
 * one branch (tpu_rt_trace_on).
 *
 * Times are tpu_clock_now() seconds (CLOCK_MONOTONIC).  Each event carries
 * the tag its thread set (tpu_rt_trace_set_tag: the C++ layer sets the
 * profiler's correlation id of the op being run), and an execution carries
 * the tag, op count and recording window of the flush that made it (the
 * k-th execution of a program is the k-th flush of it: launches run in
 * order).
 */
#ifndef TPU_RUNTIME_TRACE_H_
#define TPU_RUNTIME_TRACE_H_

#include <stdint.h>

typedef enum tpu_rt_trace_kind {
  TPU_TRACE_EXECUTE = 0, /* a program ran: start..end */
  TPU_TRACE_FLUSH,       /* the pending graph became a program: cut, ops, recorded start..end */
  TPU_TRACE_CACHE_HIT,   /* the memory tier held the program */
  TPU_TRACE_COMPILE,     /* compiled (both tiers missed): start..end */
  TPU_TRACE_DISK_LOAD,   /* loaded from the disk tier: start..end */
  TPU_TRACE_TO_DEVICE,   /* host -> device copy issued (bytes) */
  TPU_TRACE_TO_HOST,     /* device -> host copy done (bytes) */
  TPU_TRACE_DEVICE_COPY, /* device -> device copy issued (bytes) */
  TPU_TRACE_HOST_WAIT,   /* the host waited for device values: start..end */
  TPU_TRACE_FALLBACK,    /* an op ran on the CPU (name) */
  TPU_TRACE_KIND_COUNT
} tpu_rt_trace_kind_t;
const char *tpu_rt_trace_kind_name(tpu_rt_trace_kind_t kind);

typedef struct tpu_rt_trace_event {
  tpu_rt_trace_kind_t kind;
  int device;
  int cut;          /* flush, execute: tpu_rt_cut_t */
  int ops;          /* flush, execute, compile: the program's op count */
  double start, end;
  double rec_start; /* execute: when its graph's first op was recorded (its flush is rec end) */
  double rec_end;
  uint64_t key;     /* the program (0: none) */
  uint64_t seq;     /* execute: the work number */
  uint64_t tag;     /* the thread's tag (execute: its flush's) */
  uint64_t first_tag; /* flush, execute: the tag when the graph's first op was recorded */
  int64_t bytes;    /* transfers */
  char name[128];   /* the program's name, or the fallback op's */
} tpu_rt_trace_event_t;

/* Nonzero while tracing: the hooks' one check. */
extern volatile int tpu_rt_trace_on;

/* Starts tracing (events of an earlier session not yet taken are dropped). */
void tpu_rt_trace_start(void);
/* Stops tracing; the events stay until taken. */
void tpu_rt_trace_stop(void);
/* Moves up to max events out, oldest first; returns how many.  Executions
 * are handed out once complete (those in flight stay until done or the
 * next start); program names are filled in. */
int tpu_rt_trace_take(tpu_rt_trace_event_t *out, int max);
/* Events dropped because the buffer was full (bounded at 4M). */
int64_t tpu_rt_trace_dropped(void);
/* The calling thread's tag (0: none). */
void tpu_rt_trace_set_tag(uint64_t tag);
uint64_t tpu_rt_trace_tag(void);
/* An event from above (fallbacks, marks); start..end in tpu_clock_now seconds. */
void tpu_rt_trace_mark(tpu_rt_trace_kind_t kind, const char *name, double start, double end, int64_t bytes);

#endif /* TPU_RUNTIME_TRACE_H_ */
