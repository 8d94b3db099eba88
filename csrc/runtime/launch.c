/* launch.c - programs that wait for their compile: the compile workers
 * and each device's queue of launches.
 *
 * graph_flush of a program the memory tier does not hold builds its text
 * and hands it to a compile worker (a thread of a small pool) instead of
 * compiling on the caller's thread.  The program's outputs are then "in
 * flight" (tpu_value.launch set: no buffer yet, but usable as an input of
 * later graphs), and the caller goes on: fused mode records the next layer
 * while this one compiles, strict mode the next op, whose own compile runs
 * beside this one on the other worker.
 *
 * A launch is one program run waiting in its device's queue.  Launches run
 * in the order they were made: once one waits, every later program of the
 * device queues behind it, compiled or cached, so the inputs earlier
 * launches make always exist when a launch runs, and donations and the
 * device-side error state are threaded in program order.  A compile (a job)
 * is shared by every launch of its key; it owns its executable until its
 * last launch has run, then gives it to the memory tier.  A queued launch
 * of a cached program pins it there, so no eviction takes it meanwhile.
 *
 * Whoever needs a value's buffer waits for it (value_wait): host reads,
 * copies to another device, collectives; synchronize and events wait for
 * the queues to empty.  Workers run ready launches when their compile
 * ends; a flush runs what is ready before queueing.  A failed compile or
 * run fails its launch: the outputs are never computed, reading one raises
 * the failure, and the next synchronize reports it once (event.h).
 *
 * Debug mode, and TORCH_TPU_COMPILE_THREADS=0, compile on the caller's
 * thread as before (errors at the op).  All of it under the runtime lock,
 * except the compiles themselves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/event.h"
#include "runtime/runtime_internal.h"

#define LAUNCH_QUEUE_MAX 512 /* launches queued per device before a flush waits */
#define JOB_BUCKETS 256

typedef struct tpu_job tpu_job_t;
struct tpu_job {
  uint64_t key;
  char *text;
  size_t len;
  char *flags, *quick_flags;
  tpu_pjrt_compile_options_t co, quick; /* quick: the tier-0 options when quick_flags */
  int tier;                             /* of the build (tpu_cache_build_tiered) */
  tpu_program_desc_t *desc;
  int launches; /* queued launches that run it */
  int state;    /* 0 waiting for a worker, 1 compiling, 2 done */
  tpu_pjrt_exec_t *exec;
  tpu_status_t st;
  tpu_job_t *next_pending; /* the workers' queue */
  tpu_job_t *hnext;        /* by key */
};

struct tpu_launch {
  int device;
  uint64_t key;
  tpu_rt_cut_t why;
  tpu_job_t *job; /* its compile; NULL: the program is in the memory tier, pinned */
  tpu_pjrt_exec_t *exec; /* with no job: that program */
  int ninputs, nlive, nchecks;
  tpu_value_t **inputs, **outs; /* references held */
  int *alias;                   /* NULL or ninputs entries */
  tpu_launch_t *next;
};

static struct {
  int nthreads;
  pthread_t *threads;
  int stop;
  pthread_cond_t work; /* a job is pending, or stop */
  pthread_cond_t done; /* a job finished or a launch ran */
  tpu_job_t *pending_head, *pending_tail;
  tpu_job_t *promote_head, *promote_tail; /* promotions (launch_promote): when no compile waits */
  int promoting;                          /* a worker compiles a promotion */
  tpu_job_t *jobs[JOB_BUCKETS];
  tpu_launch_t *head[TPU_PJRT_MAX_DEVICES], *tail[TPU_PJRT_MAX_DEVICES];
  int queued[TPU_PJRT_MAX_DEVICES];
  int total_queued;
  char last_error[512];
} L = {.work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

bool launch_async(void) { return L.nthreads > 0 && R.mode != TPU_MODE_DEBUG; }

bool launch_queue_empty(int dev) { return dev < 0 || dev >= TPU_PJRT_MAX_DEVICES || !L.head[dev]; }

const char *launch_last_error(void) { return L.last_error[0] ? L.last_error : "an earlier error discarded it"; }

static tpu_job_t *job_find(uint64_t key) {
  for (tpu_job_t *j = L.jobs[key % JOB_BUCKETS]; j; j = j->hnext)
    if (j->key == key) return j;
  return NULL;
}

bool launch_compiling(uint64_t key) { return job_find(key) != NULL; }

static void job_unlink_free(tpu_job_t *j) {
  tpu_job_t **p = &L.jobs[j->key % JOB_BUCKETS];
  while (*p && *p != j) p = &(*p)->hnext;
  if (*p) *p = j->hnext;
  if (j->exec) tpu_pjrt_exec_destroy(j->exec);
  tpu_status_free(j->st);
  metrics_desc_free(j->desc);
  free(j->text);
  free(j->flags);
  free(j->quick_flags);
  free(j);
}

static void launch_free(tpu_launch_t *l) {
  for (int i = 0; i < l->ninputs; i++) value_release(l->inputs[i]);
  for (int i = 0; i < l->nlive; i++) value_release(l->outs[i]);
  free(l->inputs);
  free(l->outs);
  free(l->alias);
  free(l);
}

/* The launch failed: its outputs are never computed; the failure is kept
 * for the next synchronize (the first one) and for reads of the outputs. */
static void launch_fail(tpu_launch_t *l, tpu_status_t st /* moved in */) {
  for (int i = 0; i < l->nlive; i++) {
    l->outs[i]->launch = NULL;
    l->outs[i]->node = -1;
  }
  snprintf(L.last_error, sizeof(L.last_error), "%s", tpu_status_message(st));
  tpu_work_fail(st);
}

/* Runs the ready launches at the head of dev's queue, in order. */
static void drain(int dev) {
  tpu_launch_t *l;
  while ((l = L.head[dev]) != NULL) {
    tpu_job_t *j = l->job;
    if (j && j->state != 2) break;
    L.head[dev] = l->next;
    if (!L.head[dev]) L.tail[dev] = NULL;
    L.queued[dev]--;
    L.total_queued--;
    tpu_pjrt_exec_t *exec = j ? j->exec : l->exec;
    tpu_status_t st = NULL;
    if (j && j->st) st = tpu_status_make(tpu_status_code(j->st), "%s", tpu_status_message(j->st));
    else if (!exec) st = tpu_status_make(TPU_INTERNAL, "a queued program left the cache");
    else st = run_program(dev, exec, l->key, l->why, l->inputs, l->ninputs, l->outs, l->nlive, l->alias, l->nchecks);
    if (st) launch_fail(l, st);
    if (j) {
      if (--j->launches == 0) { /* its last launch ran: the memory tier owns the program now */
        if (j->exec && !j->st) {
          tpu_cache_insert_tier(R.cache, j->key, j->exec, j->len, j->tier);
          memory_release_evicted();
          j->exec = NULL;
        }
        job_unlink_free(j);
      }
    } else {
      tpu_cache_pin(R.cache, l->key, -1);
    }
    launch_free(l);
  }
}

static void drain_all(void) {
  for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++)
    if (L.head[d]) drain(d);
  pthread_cond_broadcast(&L.done);
}

/* A promotion's compile, on a worker with the runtime lock released. */
static void promote(tpu_job_t *j) {
  tpu_pjrt_exec_t *exec = NULL;
  tpu_status_t st = tpu_cache_build_promotion(R.cache, j->text, j->len, &j->co, &exec);
  LOCK();
  if (!st) tpu_cache_promoted(R.cache, j->key, exec); /* the quick build stays when it failed */
  UNLOCK();
  tpu_status_free(st);
  free(j->text);
  free(j->flags);
  free(j);
}

static void *worker(void *arg) {
  (void)arg;
  LOCK();
  for (;;) {
    while (!L.pending_head && !(L.promote_head && !L.promoting) && !L.stop) pthread_cond_wait(&L.work, &R.lock);
    if (L.stop) break;
    if (!L.pending_head) { /* nothing waits for a compile: a promotion */
      tpu_job_t *p = L.promote_head;
      L.promote_head = p->next_pending;
      if (!L.promote_head) L.promote_tail = NULL;
      L.promoting = 1;
      UNLOCK();
      promote(p);
      LOCK();
      L.promoting = 0;
      if (L.promote_head) pthread_cond_signal(&L.work);
      continue;
    }
    tpu_job_t *j = L.pending_head;
    L.pending_head = j->next_pending;
    if (!L.pending_head) L.pending_tail = NULL;
    j->state = 1;
    UNLOCK();
    double t0 = tpu_clock_now();
    int from_disk = 0, tier = 1;
    tpu_pjrt_exec_t *exec = NULL;
    metrics_build_begin();
    tpu_status_t st = build_program_tiered(j->text, j->len, &j->co, j->quick_flags ? &j->quick : NULL,
                                           metrics_desc_name(j->desc), j->key, false, &exec, &from_disk, &tier);
    metrics_build_end();
    double seconds = tpu_clock_now() - t0;
    if (!st) metrics_program_made(j->key, j->desc, from_disk ? TPU_PROGRAM_DISK : TPU_PROGRAM_COMPILED, seconds);
    if (!st && dump_dir()) dump_program_optimized(j->key, exec);
    else if (getenv("TORCH_TPU_DUMP_ON_ERROR")) fprintf(stderr, "%s\n", j->text);
    LOCK();
    if (!st) j->desc = NULL;
    j->exec = exec;
    j->st = st;
    j->tier = tier;
    j->state = 2;
    drain_all();
  }
  UNLOCK();
  return NULL;
}

bool launch_has_workers(void) { return L.nthreads > 0; }

void launch_promote(uint64_t key, const char *text, size_t len, const tpu_pjrt_compile_options_t *co) {
  if (L.nthreads == 0) return; /* no workers: no tiers (see execute.c) */
  tpu_job_t *j = (tpu_job_t *)calloc(1, sizeof(*j));
  if (!j) return;
  j->text = (char *)malloc(len + 1);
  j->flags = co->xla_flags && *co->xla_flags ? strdup(co->xla_flags) : NULL;
  if (!j->text || (co->xla_flags && *co->xla_flags && !j->flags)) {
    free(j->text);
    free(j->flags);
    free(j);
    return;
  }
  memcpy(j->text, text, len);
  j->text[len] = 0;
  j->len = len;
  j->key = key;
  j->co = *co;
  j->co.xla_flags = j->flags;
  if (L.promote_tail) L.promote_tail->next_pending = j;
  else L.promote_head = j;
  L.promote_tail = j;
  pthread_cond_signal(&L.work);
}

tpu_status_t launch_queue(int dev, uint64_t key, tpu_rt_cut_t why, tpu_pjrt_exec_t *cached, const char *text, size_t len,
                          const tpu_pjrt_compile_options_t *co, const tpu_pjrt_compile_options_t *quick,
                          tpu_program_desc_t *desc /* moved in */, tpu_value_t *const *inputs, int ninputs,
                          tpu_value_t *const *outs, int nlive, const int *alias, int nchecks) {
  while (L.queued[dev] >= LAUNCH_QUEUE_MAX) {
    drain(dev);
    if (L.queued[dev] >= LAUNCH_QUEUE_MAX) pthread_cond_wait(&L.done, &R.lock);
  }
  /* the compile the caller saw under way may have finished meanwhile (its
   * last launch ran): the program is in the memory tier then */
  if (!cached && !text && !job_find(key)) cached = tpu_cache_lookup(R.cache, key);
  if (!cached && !text && !job_find(key)) {
    metrics_desc_free(desc);
    return tpu_status_make(TPU_INTERNAL, "queueing a program neither compiling nor cached");
  }
  tpu_launch_t *l = (tpu_launch_t *)calloc(1, sizeof(*l));
  tpu_job_t *j = NULL;
  if (l) {
    l->inputs = (tpu_value_t **)malloc(sizeof(void *) * (size_t)(ninputs + 1));
    l->outs = (tpu_value_t **)malloc(sizeof(void *) * (size_t)(nlive + 1));
    l->alias = alias ? (int *)malloc(sizeof(int) * (size_t)(ninputs + 1)) : NULL;
  }
  if (!cached && l) {
    j = job_find(key);
    if (!j && text) {
      j = (tpu_job_t *)calloc(1, sizeof(*j));
      if (j) {
        j->text = (char *)malloc(len + 1);
        j->flags = co->xla_flags && *co->xla_flags ? strdup(co->xla_flags) : NULL;
        j->quick_flags = quick && quick->xla_flags ? strdup(quick->xla_flags) : NULL;
        if (j->text) memcpy(j->text, text, len);
        if (!j->text || (co->xla_flags && *co->xla_flags && !j->flags) ||
            (quick && quick->xla_flags && !j->quick_flags)) {
          free(j->text);
          free(j->flags);
          free(j->quick_flags);
          free(j);
          j = NULL;
        } else {
          j->text[len] = 0;
          j->len = len;
          j->key = key;
          j->co = *co;
          j->co.xla_flags = j->flags;
          if (quick) {
            j->quick = *quick;
            j->quick.xla_flags = j->quick_flags;
          }
          j->desc = desc;
          desc = NULL;
          j->hnext = L.jobs[key % JOB_BUCKETS];
          L.jobs[key % JOB_BUCKETS] = j;
          if (L.pending_tail) L.pending_tail->next_pending = j;
          else L.pending_head = j;
          L.pending_tail = j;
          pthread_cond_signal(&L.work);
        }
      }
    }
  }
  metrics_desc_free(desc);
  if (!l || !l->inputs || !l->outs || (alias && !l->alias) || (!cached && !j)) {
    if (l) {
      free(l->inputs);
      free(l->outs);
      free(l->alias);
      free(l);
    }
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory queueing a program");
  }
  l->device = dev;
  l->key = key;
  l->why = why;
  l->job = j;
  l->exec = cached;
  l->ninputs = ninputs;
  l->nlive = nlive;
  l->nchecks = nchecks;
  for (int i = 0; i < ninputs; i++) {
    value_retain(inputs[i]);
    l->inputs[i] = inputs[i];
  }
  for (int i = 0; i < nlive; i++) {
    value_retain(outs[i]);
    l->outs[i] = outs[i];
    outs[i]->launch = l;
    outs[i]->node = -1;
  }
  if (alias) memcpy(l->alias, alias, sizeof(int) * (size_t)ninputs);
  if (j) j->launches++;
  else tpu_cache_pin(R.cache, key, +1);
  if (L.tail[dev]) L.tail[dev]->next = l;
  else L.head[dev] = l;
  L.tail[dev] = l;
  L.queued[dev]++;
  L.total_queued++;
  drain(dev); /* a cached program queued behind nothing runs now */
  return NULL;
}

tpu_status_t value_wait(tpu_value_t *v) {
  while (v->launch) {
    drain(v->launch->device);
    if (v->launch) pthread_cond_wait(&L.done, &R.lock);
  }
  if (!v->buffer)
    return tpu_status_make(TPU_FAILED_PRECONDITION, "tensor value was never computed: the program making it failed (%s)",
                           launch_last_error());
  return NULL;
}

void launch_wait_all(int dev) {
  for (;;) {
    bool busy = false;
    for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++) {
      if ((dev >= 0 && d != dev) || !L.head[d]) continue;
      drain(d);
      busy |= L.head[d] != NULL;
    }
    if (!busy) return;
    pthread_cond_wait(&L.done, &R.lock);
  }
}

void launch_start(int nthreads) {
  if (nthreads < 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = n >= 2 ? 2 : 1;
  }
  L.stop = 0;
  L.last_error[0] = 0;
  if (nthreads == 0) return;
  L.threads = (pthread_t *)calloc((size_t)nthreads, sizeof(pthread_t));
  if (!L.threads) return;
  for (int i = 0; i < nthreads; i++) {
    if (pthread_create(&L.threads[i], NULL, worker, NULL) != 0) break;
    L.nthreads++;
  }
}

void launch_shutdown(void) {
  launch_wait_all(-1);
  while (L.promote_head) { /* promotions not started: dropped (the quick builds stay) */
    tpu_job_t *p = L.promote_head;
    L.promote_head = p->next_pending;
    free(p->text);
    free(p->flags);
    free(p);
  }
  L.promote_tail = NULL;
  L.stop = 1;
  pthread_cond_broadcast(&L.work);
  int n = L.nthreads;
  L.nthreads = 0;
  UNLOCK();
  for (int i = 0; i < n; i++) pthread_join(L.threads[i], NULL);
  LOCK();
  free(L.threads);
  L.threads = NULL;
  L.stop = 0;
}
