/* event.c - the record of issued device work, and events over it.
 * The model is described at the top of event.h. */
#include "runtime/event.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"

#include "runtime/runtime_internal.h"

/* Work in flight is bounded: the host may run this far ahead of the device
 * (the ring holds twice as many completion flags). */
#define TPU_WORK_MAX_IN_FLIGHT 128
#define TPU_WORK_RING 256

struct tpu_rt_event {
  uint64_t seq;   /* work up to here; 0 = never recorded */
  int device;
  bool timed;     /* time is known */
  double time;    /* seconds, CLOCK_MONOTONIC, when the work finished */
  tpu_rt_event_t *next_waiting; /* on W.waiting while not complete */
  bool waiting;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t issued;    /* last seq handed out */
  uint64_t done_upto; /* every seq <= done_upto has finished */
  unsigned char done[TPU_WORK_RING];
  tpu_status_t error; /* first asynchronous failure, until reported */
  tpu_rt_event_t *waiting;
} W = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, {0}, NULL, NULL};

uint64_t tpu_work_issue(void) {
  pthread_mutex_lock(&W.lock);
  while (W.issued - W.done_upto >= TPU_WORK_MAX_IN_FLIGHT) pthread_cond_wait(&W.cond, &W.lock);
  uint64_t seq = ++W.issued;
  W.done[seq % TPU_WORK_RING] = 0;
  pthread_mutex_unlock(&W.lock);
  return seq;
}

void tpu_work_done(tpu_status_t st, void *arg) {
  uint64_t seq = (uint64_t)(uintptr_t)arg;
  double t = tpu_clock_now();
  metrics_work_done(seq, t);
  pthread_mutex_lock(&W.lock);
  if (st && !W.error) W.error = st;
  else tpu_status_free(st);
  W.done[seq % TPU_WORK_RING] = 1;
  uint64_t before = W.done_upto;
  while (W.done_upto < W.issued && W.done[(W.done_upto + 1) % TPU_WORK_RING]) W.done_upto++;
  if (W.done_upto != before) {
    tpu_rt_event_t **p = &W.waiting;
    while (*p) {
      tpu_rt_event_t *e = *p;
      if (e->seq <= W.done_upto) {
        e->time = t;
        e->timed = true;
        e->waiting = false;
        *p = e->next_waiting;
        e->next_waiting = NULL;
      } else {
        p = &e->next_waiting;
      }
    }
    pthread_cond_broadcast(&W.cond);
  }
  pthread_mutex_unlock(&W.lock);
}

tpu_status_t tpu_work_wait_all(void) {
  pthread_mutex_lock(&W.lock);
  uint64_t target = W.issued;
  while (W.done_upto < target) pthread_cond_wait(&W.cond, &W.lock);
  tpu_status_t st = W.error;
  W.error = NULL;
  pthread_mutex_unlock(&W.lock);
  return st;
}

void tpu_work_fail(tpu_status_t st) {
  pthread_mutex_lock(&W.lock);
  if (!W.error) W.error = st;
  else tpu_status_free(st);
  pthread_mutex_unlock(&W.lock);
}

int64_t tpu_work_in_flight(void) {
  pthread_mutex_lock(&W.lock);
  int64_t n = (int64_t)(W.issued - W.done_upto);
  pthread_mutex_unlock(&W.lock);
  return n;
}

void tpu_work_after_fork_child(void) {
  pthread_mutex_init(&W.lock, NULL);
  pthread_cond_init(&W.cond, NULL);
  W.done_upto = W.issued;
  W.error = NULL; /* the parent's to report */
  W.waiting = NULL;
}

/* ---- events ---------------------------------------------------------------------- */

tpu_status_t tpu_rt_event_create(tpu_rt_event_t **out_event) {
  *out_event = (tpu_rt_event_t *)calloc(1, sizeof(tpu_rt_event_t));
  if (!*out_event) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  (*out_event)->device = -1;
  return NULL;
}

static void unlink_waiting_locked(tpu_rt_event_t *event) {
  if (!event->waiting) return;
  for (tpu_rt_event_t **p = &W.waiting; *p; p = &(*p)->next_waiting) {
    if (*p == event) {
      *p = event->next_waiting;
      break;
    }
  }
  event->waiting = false;
  event->next_waiting = NULL;
}

void tpu_rt_event_destroy(tpu_rt_event_t *event) {
  if (!event) return;
  pthread_mutex_lock(&W.lock);
  unlink_waiting_locked(event);
  pthread_mutex_unlock(&W.lock);
  free(event);
}

tpu_status_t tpu_rt_event_record(tpu_rt_event_t *event, int device) {
  /* the device's pending graph is work recorded before the event: issue it */
  TPU_PROPAGATE(tpu_rt_flush_device(device));
  pthread_mutex_lock(&W.lock);
  unlink_waiting_locked(event);
  event->device = device;
  event->seq = W.issued ? W.issued : 1;
  if (W.issued == 0 || event->seq <= W.done_upto) {
    event->timed = true;
    event->time = tpu_clock_now();
    if (W.issued == 0) event->seq = 0; /* nothing ever issued: complete */
  } else {
    event->timed = false;
    event->waiting = true;
    event->next_waiting = W.waiting;
    W.waiting = event;
  }
  pthread_mutex_unlock(&W.lock);
  event->device = device;
  return NULL;
}

bool tpu_rt_event_recorded(const tpu_rt_event_t *event) { return event->device >= 0; }
int tpu_rt_event_device(const tpu_rt_event_t *event) { return event->device; }

bool tpu_rt_event_query(const tpu_rt_event_t *event) {
  pthread_mutex_lock(&W.lock);
  bool done = event->seq <= W.done_upto;
  pthread_mutex_unlock(&W.lock);
  return done;
}

tpu_status_t tpu_rt_event_synchronize(tpu_rt_event_t *event) {
  pthread_mutex_lock(&W.lock);
  while (event->seq > W.done_upto) pthread_cond_wait(&W.cond, &W.lock);
  tpu_status_t st = W.error;
  W.error = NULL;
  pthread_mutex_unlock(&W.lock);
  return st;
}

tpu_status_t tpu_rt_event_elapsed_ms(const tpu_rt_event_t *start, const tpu_rt_event_t *end, double *out_ms) {
  *out_ms = 0;
  if (start->device < 0 || end->device < 0)
    return tpu_status_make(TPU_INVALID_ARGUMENT,
                           "Both events must be recorded before calculating elapsed time.");
  pthread_mutex_lock(&W.lock);
  bool ok = start->timed && end->timed;
  double a = start->time, b = end->time;
  pthread_mutex_unlock(&W.lock);
  if (!ok)
    return tpu_status_make(TPU_INVALID_ARGUMENT,
                           "Both events must be completed before calculating elapsed time.");
  *out_ms = (b - a) * 1e3;
  return NULL;
}
