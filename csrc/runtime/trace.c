/* trace.c - the engine's timeline while tracing is on (trace.h).
 *
 * One growable array of events under its own lock (executions complete on
 * plugin threads; compiles end on worker threads).  The lock order is
 * metrics' lock, then this one: metrics.c calls in with its lock held, so
 * tpu_rt_trace_take fills program names only after letting this one go.
 *
 * An execution is matched to its flush by key: flushes wait in a small
 * list until the first execution of their key completes (launches run in
 * order, so the k-th execution of a key is its k-th flush).
 */
#include "runtime/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "runtime/runtime_internal.h"

#define TRACE_MAX ((size_t)4 << 20)
#define PENDING_MAX 4096

volatile int tpu_rt_trace_on;

typedef struct pending_flush {
  uint64_t key, tag, first_tag;
  int device, ops, cut;
  double rec_start, rec_end;
} pending_flush_t;

static struct {
  pthread_mutex_t lock;
  tpu_rt_trace_event_t *ev;
  size_t n, cap, taken;
  int64_t dropped;
  pending_flush_t pending[PENDING_MAX];
  int npending;
  double started;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local uint64_t thread_tag;

static const char *const kind_names[TPU_TRACE_KIND_COUNT] = {
    "execute", "flush", "cache_hit", "compile", "disk_load", "to_device", "to_host", "device_copy",
    "host_wait", "fallback"};

const char *tpu_rt_trace_kind_name(tpu_rt_trace_kind_t kind) {
  return kind >= 0 && kind < TPU_TRACE_KIND_COUNT ? kind_names[kind] : "?";
}

void tpu_rt_trace_set_tag(uint64_t tag) { thread_tag = tag; }
uint64_t tpu_rt_trace_tag(void) { return thread_tag; }

void tpu_rt_trace_start(void) {
  pthread_mutex_lock(&T.lock);
  T.n = T.taken = 0;
  T.dropped = 0;
  T.npending = 0;
  T.started = tpu_clock_now();
  tpu_rt_trace_on = 1;
  pthread_mutex_unlock(&T.lock);
}

void tpu_rt_trace_stop(void) {
  pthread_mutex_lock(&T.lock);
  tpu_rt_trace_on = 0;
  pthread_mutex_unlock(&T.lock);
}

int64_t tpu_rt_trace_dropped(void) {
  pthread_mutex_lock(&T.lock);
  int64_t d = T.dropped;
  pthread_mutex_unlock(&T.lock);
  return d;
}

/* A new event (zeroed, kind and tag set), or NULL when full or off; the
 * caller fills it and unlocks. */
static tpu_rt_trace_event_t *event_new_locked(tpu_rt_trace_kind_t kind) {
  if (!tpu_rt_trace_on) return NULL;
  if (T.n == T.cap) {
    size_t cap = T.cap ? T.cap * 2 : 4096;
    if (cap > TRACE_MAX) cap = TRACE_MAX;
    tpu_rt_trace_event_t *ev = cap > T.cap ? (tpu_rt_trace_event_t *)realloc(T.ev, sizeof(*ev) * cap) : NULL;
    if (!ev) {
      T.dropped++;
      return NULL;
    }
    T.ev = ev;
    T.cap = cap;
  }
  tpu_rt_trace_event_t *e = &T.ev[T.n++];
  memset(e, 0, sizeof(*e));
  e->kind = kind;
  e->tag = thread_tag;
  e->device = -1;
  e->cut = -1;
  return e;
}

void tpu_rt_trace_mark(tpu_rt_trace_kind_t kind, const char *name, double start, double end, int64_t bytes) {
  pthread_mutex_lock(&T.lock);
  tpu_rt_trace_event_t *e = event_new_locked(kind);
  if (e) {
    e->start = start;
    e->end = end;
    e->bytes = bytes;
    if (name) snprintf(e->name, sizeof(e->name), "%s", name);
  }
  pthread_mutex_unlock(&T.lock);
}

void trace_flush(int device, uint64_t key, tpu_rt_cut_t cut, int ops, double rec_start, uint64_t rec_tag, int hit) {
  double now = tpu_clock_now();
  pthread_mutex_lock(&T.lock);
  tpu_rt_trace_event_t *e = event_new_locked(TPU_TRACE_FLUSH);
  if (e) {
    e->device = device;
    e->key = key;
    e->cut = (int)cut;
    e->ops = ops;
    int fresh = rec_start >= T.started; /* recorded while tracing (else: the window's start is unknown) */
    e->start = e->rec_start = fresh ? rec_start : now;
    e->first_tag = fresh ? rec_tag : 0;
    e->end = e->rec_end = now;
    if (T.npending == PENDING_MAX) { /* executions that never came (failures): forget the oldest */
      memmove(T.pending, T.pending + 1, sizeof(T.pending[0]) * (PENDING_MAX - 1));
      T.npending--;
    }
    T.pending[T.npending++] = (pending_flush_t){key, thread_tag, e->first_tag, device, ops, (int)cut, e->rec_start, now};
  }
  if (hit) {
    tpu_rt_trace_event_t *h = event_new_locked(TPU_TRACE_CACHE_HIT);
    if (h) {
      h->device = device;
      h->key = key;
      h->ops = ops;
      h->start = h->end = now;
    }
  }
  pthread_mutex_unlock(&T.lock);
}

void trace_execute(int device, uint64_t key, uint64_t seq, const char *name, int ops, double start, double end) {
  pthread_mutex_lock(&T.lock);
  /* issued before the trace started (its completion came after): not this trace's */
  tpu_rt_trace_event_t *e = start >= T.started ? event_new_locked(TPU_TRACE_EXECUTE) : NULL;
  if (e) {
    e->device = device;
    e->key = key;
    e->seq = seq;
    e->ops = ops;
    e->start = start;
    e->end = end;
    e->tag = 0;
    if (name) snprintf(e->name, sizeof(e->name), "%s", name);
    for (int i = 0; i < T.npending; i++) {
      if (T.pending[i].key != key) continue;
      e->tag = T.pending[i].tag;
      e->first_tag = T.pending[i].first_tag;
      if (e->device < 0) e->device = T.pending[i].device; /* metrics' record has no device; the flush has */
      e->cut = T.pending[i].cut;
      e->rec_start = T.pending[i].rec_start;
      e->rec_end = T.pending[i].rec_end;
      if (!e->ops) e->ops = T.pending[i].ops;
      memmove(T.pending + i, T.pending + i + 1, sizeof(T.pending[0]) * (size_t)(T.npending - i - 1));
      T.npending--;
      break;
    }
  }
  pthread_mutex_unlock(&T.lock);
}

void trace_built(uint64_t key, const char *name, int ops, int from_disk, double seconds) {
  double now = tpu_clock_now();
  pthread_mutex_lock(&T.lock);
  tpu_rt_trace_event_t *e = event_new_locked(from_disk ? TPU_TRACE_DISK_LOAD : TPU_TRACE_COMPILE);
  if (e) {
    e->key = key;
    e->ops = ops;
    e->start = now - seconds;
    e->end = now;
    if (name) snprintf(e->name, sizeof(e->name), "%s", name);
  }
  pthread_mutex_unlock(&T.lock);
}

int tpu_rt_trace_take(tpu_rt_trace_event_t *out, int max) {
  pthread_mutex_lock(&T.lock);
  size_t n = T.n - T.taken;
  if (n > (size_t)max) n = (size_t)max;
  if (n) memcpy(out, T.ev + T.taken, sizeof(*out) * n);
  T.taken += n;
  if (T.taken == T.n) T.n = T.taken = 0;
  pthread_mutex_unlock(&T.lock);
  for (size_t i = 0; i < n; i++) /* names known now (a flush precedes its compile) */
    if (out[i].key && !out[i].name[0]) metrics_program_name(out[i].key, out[i].name, sizeof(out[i].name), &out[i].ops);
  return (int)n;
}

void trace_shutdown(void) {
  pthread_mutex_lock(&T.lock);
  tpu_rt_trace_on = 0;
  free(T.ev);
  T.ev = NULL;
  T.n = T.cap = T.taken = 0;
  T.npending = 0;
  pthread_mutex_unlock(&T.lock);
}
