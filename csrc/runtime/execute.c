/* execute.c - running a pending graph, the device-side error state, and
 * synchronize.
 *
 * graph_flush turns a device's graph into one program: the live outputs
 * (values referenced beyond the graph) are its results, its cache key is
 * the graph's structural hash plus the live set; a miss builds the text and
 * compiles it (cache.c).  The execution is one piece of issued work
 * (event.h): its completion callback marks it done.  Programs whose rules
 * emit device-side checks take the device's error state as one more
 * argument and return its new value (errors.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/hash.h"
#include "runtime/errors.h"
#include "runtime/event.h"
#include "runtime/runtime_internal.h"

/* ---- device-side checks: the per-device error state ------------------------------
 * (errors.h).  Each device's state is a materialised s64[2] buffer, threaded
 * through every program with checks (argument in, result out: the newest
 * result becomes the state) without the host looking at it; `dirty` says a
 * program with checks ran since the host last read it.  The host reads it
 * where it waits anyway (host reads, synchronize; every flush in debug mode),
 * reports a failed check once and puts a clean state back. */
static struct {
  int ndev;
  tpu_value_t **state; /* per device; NULL = clean, not on the device yet */
  unsigned char *dirty;
} RE;

static tpu_status_t err_ensure(int dev) {
  if (dev < RE.ndev) return NULL;
  int n = tpu_rt_device_count();
  if (n <= dev) n = dev + 1;
  tpu_value_t **s = (tpu_value_t **)realloc(RE.state, sizeof(*s) * (size_t)n);
  if (!s) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  RE.state = s;
  unsigned char *d = (unsigned char *)realloc(RE.dirty, (size_t)n);
  if (!d) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  RE.dirty = d;
  for (int i = RE.ndev; i < n; i++) {
    RE.state[i] = NULL;
    RE.dirty[i] = 0;
  }
  RE.ndev = n;
  return NULL;
}

/* Wraps a new state buffer (moved in) as the device's state. */
static tpu_status_t err_state_set(int dev, tpu_pjrt_buffer_t *b) {
  tpu_hlo_type_t t = tpu_err_state_type();
  tpu_value_t *v = value_new(&t, dev);
  if (!v) {
    tpu_pjrt_buffer_destroy(b);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  v->buffer = b;
  value_release(RE.state[dev]);
  RE.state[dev] = v;
  return NULL;
}

/* The device's current error state (a clean one is uploaded on first use). */
tpu_status_t err_state_buffer(int dev, tpu_pjrt_buffer_t **out) {
  TPU_PROPAGATE(err_ensure(dev));
  if (!RE.state[dev]) {
    int64_t clean[2], two = 2;
    tpu_err_state_clean(clean);
    tpu_pjrt_buffer_t *b;
    TPU_PROPAGATE(tpu_pjrt_buffer_from_host(R.client, dev, TPU_S64, &two, 1, clean, &b));
    TPU_PROPAGATE(err_state_set(dev, b));
  }
  *out = RE.state[dev]->buffer;
  return NULL;
}

/* A program with checks ran: its last result is the new state. */
void err_state_advance(int dev, tpu_pjrt_buffer_t *b /* moved in */) {
  tpu_status_t st = err_state_set(dev, b);
  if (st) { /* out of memory: the state is lost, start clean */
    tpu_status_free(st);
    value_release(RE.state[dev]);
    RE.state[dev] = NULL;
    return;
  }
  RE.dirty[dev] = 1;
}

static const char *err_note(void) {
  return R.mode == TPU_MODE_DEBUG ? NULL
                                  : "(a device-side check: reported at the first host wait after the op; "
                                    "TORCH_TPU_EAGER_MODE=debug or TPU_LAUNCH_BLOCKING=1 raises at the op)";
}

/* Reports a state read from the device; a failed check is reported once:
 * the state goes back to clean (programs issued meanwhile carry the same
 * first error, so whatever state is current is dropped). */
static tpu_status_t err_report(int dev, const int64_t host[2]) {
  tpu_status_t st = tpu_err_status(host, err_note());
  if (st) {
    value_release(RE.state[dev]);
    RE.state[dev] = NULL;
    RE.dirty[dev] = 0;
  }
  return st;
}

/* A state that cannot be read (the program that made it failed on the
 * device) is dropped: the next program starts clean instead of failing on
 * it too. */
static tpu_status_t err_unreadable(int dev, tpu_status_t st) {
  value_release(RE.state[dev]);
  RE.state[dev] = NULL;
  RE.dirty[dev] = 0;
  return st;
}

/* Reads the device's state (waits for it) with the lock held. */
tpu_status_t err_check_locked(int dev) {
  if (dev >= RE.ndev || !RE.dirty[dev] || !RE.state[dev]) return NULL;
  int64_t host[2];
  tpu_status_t st = tpu_pjrt_buffer_to_host(RE.state[dev]->buffer, host, sizeof(host));
  if (st) return err_unreadable(dev, st);
  RE.dirty[dev] = 0;
  return err_report(dev, host);
}

/* The same without holding the lock while the device finishes. */
tpu_status_t err_check(int dev) {
  LOCK();
  if (dev >= RE.ndev || !RE.dirty[dev] || !RE.state[dev]) {
    UNLOCK();
    return NULL;
  }
  tpu_value_t *v = RE.state[dev];
  value_retain(v);
  RE.dirty[dev] = 0;
  UNLOCK();
  int64_t host[2];
  tpu_status_t st = tpu_pjrt_buffer_to_host(v->buffer, host, sizeof(host));
  LOCK();
  if (st) {
    if (RE.state[dev] == v) st = err_unreadable(dev, st);
  } else {
    st = err_report(dev, host);
  }
  value_release(v);
  UNLOCK();
  return st;
}

void err_shutdown(void) {
  for (int i = 0; i < RE.ndev; i++) value_release(RE.state[i]);
  free(RE.state);
  free(RE.dirty);
  RE.state = NULL;
  RE.dirty = NULL;
  RE.ndev = 0;
  tpu_err_table_clear();
}

/* Inputs below this many elements are never donated: a donation is one more
 * program variant (the same graph with and without it), worth it where the
 * copy it saves is large (KV caches, parameters, optimizer state). */
enum { DONATE_MIN_NUMEL = 1 << 16 };

/* tpu_cache_build with one retry when the compile (or load) failed for
 * lack of host memory -- on the CPU plugin the JIT could not map its code,
 * usually because the process is near vm.max_map_count: the least recently
 * used half of the memory tier goes (taking R.lock unless `locked`: no
 * looked-up program may be running meanwhile), and the build runs again.
 * A second failure names the program, the cause and the process's maps. */
tpu_status_t build_program_tiered(const char *text, size_t len, const tpu_pjrt_compile_options_t *co,
                                  const tpu_pjrt_compile_options_t *quick, const char *name, uint64_t key, bool locked,
                                  tpu_pjrt_exec_t **out_exec, int *out_from_disk, int *out_tier) {
  tpu_status_t st = tpu_cache_build_tiered(R.cache, text, len, co, quick, out_exec, out_from_disk, out_tier);
  if (!st || !tpu_cache_failed_for_memory(st)) return st;
  if (!locked) LOCK();
  int64_t held = 0, shed = tpu_cache_shed(R.cache, &held);
  if (!locked) UNLOCK();
  tpu_status_t again = tpu_cache_build_tiered(R.cache, text, len, co, quick, out_exec, out_from_disk, out_tier);
  if (!again) {
    tpu_status_free(st);
    return NULL;
  }
  tpu_status_t named = tpu_status_make(
      TPU_INTERNAL,
      "compiling program %s (%016llx) failed for lack of host memory, and again after %lld of the %lld "
      "programs held in memory were dropped (the process holds %lld memory maps; the program cache's bound is "
      "TORCH_TPU_CACHE_MAX_MAPS, the system's vm.max_map_count): %s",
      name && *name ? name : "(unnamed)", (unsigned long long)key, (long long)shed, (long long)held,
      (long long)tpu_cache_count_maps(), tpu_status_message(again));
  tpu_status_free(st);
  tpu_status_free(again);
  return named;
}

tpu_status_t build_program(const char *text, size_t len, const tpu_pjrt_compile_options_t *co, const char *name,
                           uint64_t key, bool locked, tpu_pjrt_exec_t **out_exec, int *out_from_disk) {
  int tier;
  return build_program_tiered(text, len, co, NULL, name, key, locked, out_exec, out_from_disk, &tier);
}

/* Runs `exec` (the program of `key`) on device dev: inputs[i]'s buffer is
 * argument i (the device's error state one more when nchecks), outs[i]
 * receives result i; input i is donated where alias[i] >= 0.  The outputs
 * become materialised values (their launch, if any, cleared). */
tpu_status_t run_program(int dev, tpu_pjrt_exec_t *exec, uint64_t key, tpu_rt_cut_t why, tpu_value_t *const *inputs,
                         int ninputs, tpu_value_t *const *outs, int nlive, const int *alias, int nchecks) {
  enum { SMALL = 16 };
  tpu_pjrt_buffer_t *err_in = NULL;
  if (nchecks) TPU_PROPAGATE(err_state_buffer(dev, &err_in));
  tpu_pjrt_buffer_t *small_args[SMALL + 1], *small_outs[SMALL + 1];
  tpu_pjrt_buffer_t **args = ninputs <= SMALL ? small_args
                             : (tpu_pjrt_buffer_t **)malloc(sizeof(void *) * (size_t)(ninputs + 1));
  tpu_pjrt_buffer_t **obuf = nlive <= SMALL ? small_outs
                             : (tpu_pjrt_buffer_t **)malloc(sizeof(void *) * (size_t)(nlive + 1));
  tpu_status_t st = NULL;
  if (!args || !obuf) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; !st && i < ninputs; i++) {
    args[i] = inputs[i]->buffer;
    if (!args[i])
      st = tpu_status_make(TPU_FAILED_PRECONDITION, "an input of this program was never computed (%s)",
                           launch_last_error());
  }
  if (!st) {
    if (nchecks) args[ninputs] = err_in;
    tpu_pjrt_buffer_t *const *arg_lists[1] = {args};
    tpu_pjrt_buffer_t **out_lists[1] = {obuf};
    int64_t out_bytes = 0;
    for (int i = 0; i < nlive; i++)
      out_bytes += tpu_hlo_type_numel(&outs[i]->type) * (int64_t)tpu_dtype_size(outs[i]->type.dtype);
    for (int i = 0; alias && i < ninputs; i++) /* a donated input's memory holds its result */
      if (alias[i] >= 0) out_bytes -= tpu_hlo_type_numel(&inputs[i]->type) * (int64_t)tpu_dtype_size(inputs[i]->type.dtype);
    st = memory_check(dev, out_bytes, "running a program");
    if (!st) {
      for (int i = 0; alias && i < ninputs; i++)
        if (alias[i] >= 0) tpu_pjrt_buffer_donate(args[i]);
      uint64_t seq = tpu_work_issue();
      metrics_executed(key, seq, why, tpu_clock_now());
      tpu_pjrt_execute_options_t eo = {.device = dev, .non_donatable = NULL, .num_non_donatable = 0,
                                       .wait = R.mode == TPU_MODE_DEBUG,
                                       .on_done = tpu_work_done, .on_done_arg = (void *)(uintptr_t)seq};
      st = tpu_pjrt_execute(exec, arg_lists, 1, (size_t)ninputs + (nchecks ? 1 : 0), &eo, out_lists);
      R.executions++;
      /* waited (debug) or failed before running: this piece is done now */
      if (st || R.mode == TPU_MODE_DEBUG) tpu_work_done(NULL, (void *)(uintptr_t)seq);
    }
    if (!st) {
      for (int i = 0; i < nlive; i++) {
        outs[i]->buffer = obuf[i];
        outs[i]->node = -1;
        outs[i]->launch = NULL;
      }
      /* ---- device-side checks: the new state; debug mode reports at the op ---- */
      if (nchecks) {
        err_state_advance(dev, obuf[nlive]);
        if (R.mode == TPU_MODE_DEBUG) st = err_check_locked(dev);
      }
    }
  }
  if (args && args != small_args) free(args);
  if (obuf && obuf != small_outs) free(obuf);
  return st;
}

/* XLA options for a program (tpu_pjrt_compile_options_t.xla_flags), chosen
 * per program on the XLA CPU compiler (measured, ARCHITECTURE "Compile
 * options"): LLVM's -O1 everywhere (it compiles faster than the default
 * and ran as fast on every workload measured), and the loop emitters
 * instead of the MLIR fusion emitters for programs on small arrays, which
 * they compile ~40% faster and run as fast; programs on large arrays keep
 * the fusion emitters (an elementwise program on a [1024, 768] array ran
 * 1.4x slower without them).  The user's TORCH_TPU_XLA_FLAGS come last
 * (they win).  Other compilers get the user's flags only. */
enum { SMALL_PROGRAM_NUMEL = 1 << 18 };
/* Tiered compiles (TORCH_TPU_TIERED=1): a program is built at -O0 first (half the compile
 * time of -O1 on XLA's CPU compiler, and code up to 2x slower), and built
 * again at -O1 beside the work at its PROMOTE_RUNS-th run when its largest
 * array has more than PROMOTE_MIN_NUMEL elements (below that the two run
 * alike). */
enum { PROMOTE_RUNS = 3, PROMOTE_MIN_NUMEL = 1 << 14 };

static int64_t graph_largest(const tpu_graph_t *g) {
  int64_t largest = 0;
  for (int n = 0; n < g->nnodes; n++)
    for (int o = 0; o < g->nodes[n].nout; o++) {
      int64_t k = tpu_hlo_type_numel(&g->nodes[n].outs[o]->type);
      if (k > largest) largest = k;
    }
  return largest;
}

/* The XLA options of a program whose largest array has `largest` elements:
 * full optimization (*quick: the tier-0 options, NULL when not tiered). */
static const char *compile_flags(int64_t largest, const char **quick) {
  static int read, tiered;
  static const char *user;
  static char full_small[1024], full_large[1024], quick_small[1024], quick_large[1024];
  if (!read) {
    user = getenv("TORCH_TPU_XLA_FLAGS");
    const char *t = getenv("TORCH_TPU_TIERED");
    /* opt-in (see "Tiered compiles"); the user's own optimization level wins */
    tiered = t && !strcmp(t, "1") && !(user && strstr(user, "xla_backend_optimization_level"));
    const char *sep = user ? " " : "", *u = user ? user : "";
    snprintf(full_small, sizeof(full_small), "xla_backend_optimization_level=1 xla_cpu_use_fusion_emitters=false%s%s",
             sep, u);
    snprintf(full_large, sizeof(full_large), "xla_backend_optimization_level=1%s%s", sep, u);
    snprintf(quick_small, sizeof(quick_small), "xla_backend_optimization_level=0 xla_cpu_use_fusion_emitters=false%s%s",
             sep, u);
    snprintf(quick_large, sizeof(quick_large), "xla_backend_optimization_level=0%s%s", sep, u);
    read = 1;
  }
  *quick = NULL;
  if (!R.target_cpu || getenv("TORCH_TPU_XLA_DEFAULTS")) return user;
  bool small = largest <= SMALL_PROGRAM_NUMEL;
  if (tiered && launch_has_workers()) *quick = small ? quick_small : quick_large;
  return small ? full_small : full_large;
}

tpu_status_t graph_flush(tpu_graph_t *g, tpu_rt_cut_t why) {
  if (R.forked) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_FORKED_MSG);
  if (why != TPU_CUT_LOOP) loop_restart(g);
  if (g->nnodes == 0) {
    if (g->ninputs) graph_discard(g);
    return NULL;
  }
  R.block_mark = R.ops_recorded; /* a block's size counts from here (tpu_rt_flush_block) */
  /* live outputs: referenced by anything besides the graph.  The lists
   * (and the value arrays below) live on the stack for the small graphs
   * strict mode flushes per op; the heap takes larger ones. */
  enum { SMALL = 16 };
  int small_node[SMALL], small_out[SMALL], small_alias[SMALL], *alias = NULL;
  tpu_value_t *small_vals[SMALL];
  int cap = 0, nlive = 0;
  for (int n = 0; n < g->nnodes; n++) cap += g->nodes[n].nout;
  int *live_node = cap <= SMALL ? small_node : (int *)malloc(sizeof(int) * (size_t)cap);
  int *live_out = cap <= SMALL ? small_out : (int *)malloc(sizeof(int) * (size_t)cap);
  tpu_value_t **outs = cap <= SMALL ? small_vals : (tpu_value_t **)malloc(sizeof(void *) * (size_t)cap);
  if (!live_node || !live_out || !outs) {
    if (live_node != small_node) free(live_node);
    if (live_out != small_out) free(live_out);
    if (outs != small_vals) free(outs);
    graph_discard(g);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  uint64_t key = tpu_hash_u64(g->hash, 0x3C);
  for (int n = 0; n < g->nnodes; n++) {
    for (int o = 0; o < g->nodes[n].nout; o++) {
      if (g->nodes[n].outs[o]->refs > 1) {
        live_node[nlive] = n;
        live_out[nlive] = o;
        outs[nlive] = g->nodes[n].outs[o];
        nlive++;
        key = tpu_hash_u64(key, (uint64_t)TPU_REF_NODE(n, o));
      }
    }
  }
  tpu_status_t st = NULL;
  /* ---- device-side checks: part of the program's structure; a graph
   * whose only effect is its checks (an assert_async, an index whose
   * result nothing holds) still runs, for the error state ---- */
  int nchecks = 0;
  for (int n = 0; n < g->nnodes; n++) nchecks += g->nodes[n].nchecks;
  if (nlive == 0 && nchecks == 0) goto done;
  R.flushes++;
  if (nchecks) key = tpu_hash_u64(key, 0xC4EC000000000000ULL + (uint64_t)nchecks);
  int dev = g->device;
  /* ---- donation: an input nothing but this graph holds any more (the old
   * value of a storage written in place: an in-place op, an optimizer
   * update, a KV cache write) is donated to a live output of its type, so
   * XLA can update the buffer in place instead of copying all of it.  The
   * pairs are part of the program's key (and text). */
  if (!R.no_donation && nlive) {
    unsigned char *taken = NULL; /* outputs already aliased */
    for (int i = 0; i < g->ninputs; i++) {
      tpu_value_t *in = g->inputs[i];
      /* held by this graph alone (an input in flight is also held by the
       * launch that makes it, which runs first: launch.c) */
      int holders = in->refs - (in->launch ? 1 : 0);
      if (holders != 1 || (!in->buffer && !in->launch) || tpu_hlo_type_numel(&in->type) < DONATE_MIN_NUMEL)
        continue;
      if (!alias) {
        alias = g->ninputs <= SMALL ? small_alias : (int *)malloc(sizeof(int) * (size_t)g->ninputs);
        taken = (unsigned char *)calloc((size_t)nlive, 1);
        if (!alias || !taken) break; /* no donation this time */
        for (int k = 0; k < g->ninputs; k++) alias[k] = -1;
      }
      for (int k = 0; k < nlive; k++) {
        if (taken[k] || !tpu_hlo_type_equal(&outs[k]->type, &in->type)) continue;
        alias[i] = k;
        taken[k] = 1;
        key = tpu_hash_u64(tpu_hash_u64(key, 0xD0A7E000ULL + (uint64_t)i), (uint64_t)k);
        break;
      }
    }
    if (alias && !taken) { /* out of memory: no donation */
      if (alias != small_alias) free(alias);
      alias = NULL;
    }
    free(taken);
  }
  bool async = launch_async();
  if (!async) launch_wait_all(-1); /* debug mode, or no workers: nothing may stay queued */
  /* a compile of this program under way: join it (no lookup, no miss counted) */
  tpu_pjrt_exec_t *exec = launch_compiling(key) ? NULL : tpu_cache_lookup(R.cache, key);
  if (tpu_rt_trace_on) trace_flush(dev, key, why, g->nnodes, g->rec_start, g->rec_tag, exec != NULL);
  int64_t largest = graph_largest(g);
  const char *quick_flags;
  tpu_pjrt_compile_options_t co = {.num_replicas = 1, .num_partitions = 1, .device_ids = NULL, .portable = true,
                                   .xla_flags = compile_flags(largest, &quick_flags)};
  tpu_pjrt_compile_options_t quick = co;
  quick.xla_flags = quick_flags;
  if (exec && quick_flags && largest > PROMOTE_MIN_NUMEL && tpu_cache_due_for_promotion(R.cache, key, PROMOTE_RUNS)) {
    /* a quick build that keeps running: compile it fully beside the work */
    tpu_hlo_module_t *pm = NULL;
    const char *ptext = NULL;
    size_t plen = 0;
    if (!graph_build_text(g, live_node, live_out, nlive, nchecks, alias, &pm, &ptext, &plen))
      launch_promote(key, ptext, plen, &co);
    if (pm) tpu_hlo_module_destroy(pm);
  }
  if (exec && launch_queue_empty(dev)) {
    st = run_program(dev, exec, key, why, g->inputs, g->ninputs, outs, nlive, alias, nchecks);
    goto done;
  }
  /* The program must be compiled (or wait behind programs that are): built
   * now, while the graph exists, unless a compile of it is under way. */
  tpu_hlo_module_t *m = NULL;
  const char *text = NULL;
  size_t len = 0;
  tpu_program_desc_t *desc = NULL;
  if (!exec && !launch_compiling(key)) {
    st = graph_build_text(g, live_node, live_out, nlive, nchecks, alias, &m, &text, &len);
    if (st) goto done;
    if (dump_dir()) dump_program_text(key, text, len, co.xla_flags);
    desc = metrics_describe(g, live_node, live_out, nlive, nchecks, alias);
  }
  if (async) {
    /* the outputs are in flight; the program runs when compiled, in order */
    st = launch_queue(dev, key, why, exec, text, len, &co, quick_flags ? &quick : NULL, desc, g->inputs, g->ninputs,
                      outs, nlive, alias, nchecks);
  } else {
    double t0 = tpu_clock_now();
    int from_disk = 0, tier = 1;
    metrics_build_begin();
    st = build_program_tiered(text, len, &co, quick_flags ? &quick : NULL, metrics_desc_name(desc), key, true, &exec,
                              &from_disk, &tier);
    metrics_build_end();
    if (!st) {
      metrics_program_made(key, desc, from_disk ? TPU_PROGRAM_DISK : TPU_PROGRAM_COMPILED, tpu_clock_now() - t0);
      desc = NULL;
      if (dump_dir()) dump_program_optimized(key, exec);
      tpu_cache_insert_tier(R.cache, key, exec, len, tier);
      memory_release_evicted();
      st = run_program(dev, exec, key, why, g->inputs, g->ninputs, outs, nlive, alias, nchecks);
    } else if (getenv("TORCH_TPU_DUMP_ON_ERROR")) {
      fprintf(stderr, "%s\n", text);
    }
    metrics_desc_free(desc);
  }
  if (m) tpu_hlo_module_destroy(m);
done:
  if (alias != small_alias) free(alias);
  if (live_node != small_node) free(live_node);
  if (live_out != small_out) free(live_out);
  if (outs != small_vals) free(outs);
  graph_discard(g);
  return st;
}

tpu_status_t flush_all(tpu_rt_cut_t why) {
  tpu_status_t first = NULL;
  for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++) {
    tpu_graph_t *g = &R.graphs[d];
    if (!g->ready || (!g->nnodes && !g->ninputs)) continue;
    tpu_status_t st = graph_flush(g, why);
    if (st && !first) first = st;
    else tpu_status_free(st);
  }
  return first;
}

tpu_status_t maybe_flush_after_op(tpu_graph_t *g) {
  if (R.mode != TPU_MODE_FUSED && !R.hold) return graph_flush(g, TPU_CUT_OP);
  if (g->nnodes >= R.fused_max_nodes) g->cut_due = TPU_CUT_SIZE + 1;
  else if (!R.hold && loop_cut_due(g)) g->cut_due = TPU_CUT_LOOP + 1;
  return NULL;
}

tpu_status_t cut_if_due(tpu_graph_t *g) {
  if (!g->cut_due || (R.hold && g->cut_due != TPU_CUT_SIZE + 1)) return NULL;
  tpu_rt_cut_t why = (tpu_rt_cut_t)(g->cut_due - 1);
  g->cut_due = 0;
  return R.mode == TPU_MODE_FUSED ? graph_flush(g, why) : NULL;
}

tpu_status_t tpu_rt_hold_flush(void) {
  LOCK();
  tpu_status_t st = NULL;
  if (!R.hold && R.initialized) /* a cut due at the end of the last op is made before this one */
    for (int d = 0; d < TPU_PJRT_MAX_DEVICES && !st; d++)
      if (R.graphs[d].ready) st = cut_if_due(&R.graphs[d]);
  R.hold++;
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_release_flush(void) {
  LOCK();
  tpu_status_t st = NULL;
  if (R.hold > 0 && --R.hold == 0 && R.initialized) {
    if (R.mode != TPU_MODE_FUSED) {
      st = flush_all(TPU_CUT_OP);
    } else { /* a loop of in-place ops (randn, add_) is cut where it ends (at the next op) */
      for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++)
        if (R.graphs[d].ready && loop_cut_due(&R.graphs[d])) R.graphs[d].cut_due = TPU_CUT_LOOP + 1;
    }
  }
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_flush(tpu_rt_cut_t why) {
  LOCK();
  tpu_status_t st = flush_all(why);
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_flush_device(int device) {
  LOCK();
  tpu_status_t st = device >= 0 && device < TPU_PJRT_MAX_DEVICES && R.graphs[device].ready
                        ? graph_flush(&R.graphs[device], TPU_CUT_SYNC) : NULL;
  if (!st && device >= 0 && device < TPU_PJRT_MAX_DEVICES) launch_wait_all(device); /* issued, not only queued */
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_flush_block(int min_nodes) {
  if (R.forked) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_FORKED_MSG);
  LOCK();
  tpu_status_t first = NULL;
  /* The block's size is what was recorded since the previous block ended
   * (or the last flush), so every layer of a stack is cut, or none is. */
  int64_t recorded = R.ops_recorded - R.block_mark;
  R.block_mark = R.ops_recorded;
  for (int d = 0; recorded >= min_nodes && R.initialized && R.mode == TPU_MODE_FUSED && !R.hold &&
                  d < TPU_PJRT_MAX_DEVICES; d++) {
    tpu_graph_t *g = &R.graphs[d];
    if (!g->ready || !g->nnodes) continue;
    tpu_status_t st = graph_flush(g, TPU_CUT_LAYER);
    if (st && !first) first = st;
    else tpu_status_free(st);
  }
  UNLOCK();
  return first;
}

int tpu_rt_pending_nodes(void) {
  int n = 0;
  for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++) n += R.graphs[d].nnodes;
  return n;
}


tpu_status_t tpu_rt_synchronize(void) {
  if (R.forked) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_FORKED_MSG);
  LOCK();
  tpu_status_t st = flush_all(TPU_CUT_SYNC);
  launch_wait_all(-1); /* every queued program issued */
  int ndev = RE.ndev;
  UNLOCK();
  /* PJRT has no device-wide barrier: wait for every piece of work issued */
  double t0 = tpu_clock_now();
  tpu_status_t wst = tpu_work_wait_all();
  metrics_host_wait(tpu_clock_now() - t0);
  if (st) {
    tpu_status_free(wst);
    return st;
  }
  /* a host wait: a failed device-side check raises here (errors.h) */
  for (int d = 0; d < ndev && !wst; d++) wst = err_check(d);
  return wst;
}
