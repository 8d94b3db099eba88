/* collective.c - collectives across this process's devices.
 *
 * One replicated program (num_replicas = n, replica i on member i's
 * device) holding a single all_reduce / all_gather / reduce_scatter, which
 * the plugin runs with its in-process collectives.  Each member's input is
 * read as a buffer (its device's pending graph runs first); each member's
 * result becomes a new storage on its device.  The program is cached like
 * any other, keyed by the collective, the combiner, the type and the
 * devices in order.
 */
#include <stdint.h>
#include <string.h>

#include "base/hash.h"
#include "hlo/hlo.h"
#include "runtime/event.h"
#include "runtime/runtime_internal.h"

static const char *const k_collective_names[] = {"all_reduce", "all_gather", "reduce_scatter"};

static bool combiner_known(const char *r) {
  static const char *const known[] = {"add", "multiply", "minimum", "maximum", "and", "or"};
  for (size_t i = 0; r && i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(r, known[i])) return true;
  return false;
}

/* The members' arguments, each checked against member 0 and the others'
 * devices.  Lock held. */
static tpu_status_t check_members(tpu_rt_collective_t kind, const char *reduce, tpu_storage_t *const *storages,
                                  const tpu_view_t *views, int n, int *devs) {
  const char *name = (unsigned)kind < 3 ? k_collective_names[kind] : NULL;
  if (!name) return tpu_status_make(TPU_INVALID_ARGUMENT, "collective: unknown kind %d", (int)kind);
  int ndev = tpu_pjrt_client_device_count(R.client);
  if (n < 1 || n > ndev)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "%s over %d tensors: this process has %d tpu devices, one tensor each",
                           name, n, ndev);
  if (kind != TPU_RT_ALL_GATHER && !combiner_known(reduce))
    return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: unknown reduction '%s'", name, reduce ? reduce : "(none)");
  const tpu_view_t *v0 = &views[0];
  if (kind != TPU_RT_ALL_REDUCE && v0->rank < 1)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "%s works on dim 0: a 0-d tensor has none", name);
  if (kind == TPU_RT_REDUCE_SCATTER && v0->sizes[0] % n)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "reduce_scatter: dim 0 of size %lld does not split into %d blocks",
                           (long long)v0->sizes[0], n);
  for (int i = 0; i < n; i++) {
    if (!storages[i]) return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: tensor %d has no storage", name, i);
    devs[i] = storages[i]->device;
    TPU_PROPAGATE(check_started_device(devs[i]));
    for (int j = 0; j < i; j++)
      if (devs[j] == devs[i])
        return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: tensors %d and %d are both on tpu:%d (one tensor per device)",
                               name, j, i, devs[i]);
    const tpu_view_t *v = &views[i];
    bool same = v->dtype == v0->dtype && v->rank == v0->rank;
    for (int d = 0; same && d < v->rank; d++) same = v->sizes[d] == v0->sizes[d];
    if (!same) {
      char a[96], b[96];
      tpu_hlo_type_t ta = tpu_hlo_type_make(v0->dtype, v0->rank, v0->sizes);
      tpu_hlo_type_t tb = tpu_hlo_type_make(v->dtype, v->rank, v->sizes);
      return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: tensor %d is %s but tensor 0 is %s (all must match)", name, i,
                             tpu_hlo_type_str(&tb, b, sizeof b), tpu_hlo_type_str(&ta, a, sizeof a));
    }
  }
  return NULL;
}

/* The replicated program, from the cache or compiled now.  Lock held. */
static tpu_status_t collective_exec(tpu_rt_collective_t kind, const char *reduce, const tpu_hlo_type_t *t,
                                    const int *devs, int n, tpu_pjrt_exec_t **out_exec) {
  uint64_t key = tpu_hash_bytes(TPU_HASH_SEED, "collective", 10);
  key = tpu_hash_u64(key, (uint64_t)kind);
  if (kind != TPU_RT_ALL_GATHER) key = tpu_hash_bytes(key, reduce, strlen(reduce));
  key = tpu_hash_bytes(key, t, sizeof *t);
  for (int i = 0; i < n; i++) key = tpu_hash_u64(key, (uint64_t)devs[i]);
  *out_exec = tpu_cache_lookup(R.cache, key);
  if (*out_exec) return NULL;
  tpu_hlo_module_t *m = NULL;
  TPU_PROPAGATE(tpu_hlo_module_create("collective", &m));
  tpu_hlo_module_set_replicas(m, n, 1);
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t x = tpu_hlo_func_arg(f, *t);
  int64_t group[TPU_PJRT_MAX_DEVICES];
  for (int i = 0; i < n; i++) group[i] = i;
  tpu_hlo_value_t r = kind == TPU_RT_ALL_REDUCE   ? tpu_hlo_all_reduce(f, x, reduce, group, 1, n)
                      : kind == TPU_RT_ALL_GATHER ? tpu_hlo_all_gather(f, x, 0, group, 1, n)
                                                  : tpu_hlo_reduce_scatter(f, x, 0, reduce, group, 1, n);
  tpu_hlo_func_return(f, &r, 1);
  const char *text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_hlo_module_text(m, &text, &len);
  if (!st) {
    tpu_pjrt_compile_options_t co = {.num_replicas = n, .num_partitions = 1, .device_ids = devs, .portable = false};
    st = tpu_cache_compile(R.cache, key, text, len, &co, out_exec);
  }
  tpu_hlo_module_destroy(m);
  return st;
}

tpu_status_t tpu_rt_collective(tpu_rt_collective_t kind, const char *reduce, tpu_storage_t *const *storages,
                               const tpu_view_t *views, int n, tpu_storage_t **out_storages) {
  for (int i = 0; i < n; i++) out_storages[i] = NULL;
  LOCK();
  if (!R.initialized) {
    UNLOCK();
    return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  }
  int devs[TPU_PJRT_MAX_DEVICES];
  tpu_value_t *vals[TPU_PJRT_MAX_DEVICES] = {0};
  tpu_pjrt_buffer_t *args[TPU_PJRT_MAX_DEVICES], *outs[TPU_PJRT_MAX_DEVICES] = {0};
  tpu_pjrt_buffer_t *const *arg_lists[TPU_PJRT_MAX_DEVICES];
  tpu_pjrt_buffer_t **out_lists[TPU_PJRT_MAX_DEVICES];
  tpu_status_t st = check_members(kind, reduce, storages, views, n, devs);
  tpu_hlo_type_t in_t = tpu_hlo_type_make(views[0].dtype, views[0].rank, views[0].sizes);
  tpu_hlo_type_t out_t = in_t;
  if (kind == TPU_RT_ALL_GATHER) out_t.dims[0] *= n;
  if (kind == TPU_RT_REDUCE_SCATTER) out_t.dims[0] /= n;
  tpu_pjrt_exec_t *exec = NULL;
  if (!st) st = collective_exec(kind, reduce, &in_t, devs, n, &exec);
  for (int i = 0; i < n && !st; i++) st = view_value(storages[i], &views[i], false, &vals[i]);
  int64_t out_bytes = tpu_hlo_type_numel(&out_t) * (int64_t)tpu_dtype_size(out_t.dtype);
  for (int i = 0; i < n && !st; i++) st = memory_check(devs[i], out_bytes, k_collective_names[kind]);
  if (!st) {
    for (int i = 0; i < n; i++) {
      args[i] = vals[i]->buffer;
      arg_lists[i] = &args[i];
      out_lists[i] = &outs[i];
    }
    uint64_t seq = tpu_work_issue();
    tpu_pjrt_execute_options_t eo = {.device = devs[0], .wait = R.mode == TPU_MODE_DEBUG,
                                     .on_done = tpu_work_done, .on_done_arg = (void *)(uintptr_t)seq};
    st = tpu_pjrt_execute(exec, arg_lists, (size_t)n, 1, &eo, out_lists);
    R.executions++;
    if (st || R.mode == TPU_MODE_DEBUG) tpu_work_done(NULL, (void *)(uintptr_t)seq);
  }
  for (int i = 0; i < n && !st; i++) {
    out_storages[i] = storage_of_buffer(outs[i], &out_t, devs[i]);
    outs[i] = NULL;
    if (!out_storages[i]) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (int i = 0; i < n; i++) {
    if (vals[i]) value_release(vals[i]);
    if (outs[i]) tpu_pjrt_buffer_destroy(outs[i]);
  }
  UNLOCK();
  for (int i = 0; st && i < n; i++) { /* the lock is taken by release */
    tpu_storage_release(out_storages[i]);
    out_storages[i] = NULL;
  }
  return st;
}
