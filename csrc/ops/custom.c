/* custom.c - the "custom_kernel" rule and the kernel registry (custom.h).
 *
 * The rule splices a user kernel into the program under construction:
 *   custom_kernel(inputs...)  attrs: [kernel id]
 *   -> the entry's results, via "func.call"; the kernel's definitions are
 *      written once per module however many nodes call it.
 * Inputs must have exactly the entry's argument types (the Python side
 * picks or exports the kernel variant for the call's shapes and dtypes);
 * a mismatch fails naming the kernel and both type lists.
 */
#include "ops/custom.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "ops/ops.h"

static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_custom_kernel_t **kernels; /* by id - 1 */
static int64_t nkernels, capkernels;

static char *dup_str(const char *s, size_t n) {
  char *d = (char *)malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

static void kernel_free(tpu_custom_kernel_t *k) {
  if (!k) return;
  free(k->name);
  free(k->entry);
  free(k->text);
  free(k);
}

static bool kernel_same(const tpu_custom_kernel_t *k, const char *name, const char *text, size_t len,
                        const char *entry, int nargs, const tpu_hlo_type_t *args, int nres,
                        const tpu_hlo_type_t *res) {
  if (k->len != len || k->nargs != nargs || k->nres != nres) return false;
  if (strcmp(k->name, name) || strcmp(k->entry, entry) || memcmp(k->text, text, len)) return false;
  for (int i = 0; i < nargs; i++)
    if (!tpu_hlo_type_equal(&k->args[i], &args[i])) return false;
  for (int i = 0; i < nres; i++)
    if (!tpu_hlo_type_equal(&k->res[i], &res[i])) return false;
  return true;
}

tpu_status_t tpu_custom_kernel_register(const char *name, const char *text, size_t len, const char *entry,
                                        int nargs, const tpu_hlo_type_t *args, int nres,
                                        const tpu_hlo_type_t *res, int64_t *out_id) {
  *out_id = 0;
  if (!name || !text || !entry || !*entry)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel: name, text and entry symbol are required");
  if (nargs < 0 || nargs > TPU_CUSTOM_MAX_ARGS)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel '%s': %d arguments (at most %d)", name, nargs,
                           TPU_CUSTOM_MAX_ARGS);
  if (nres < 1 || nres > TPU_CUSTOM_MAX_RESULTS)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel '%s': %d results (1 to %d)", name, nres,
                           TPU_CUSTOM_MAX_RESULTS);
  for (int i = 0; i < nargs + nres; i++) {
    const tpu_hlo_type_t *t = i < nargs ? &args[i] : &res[i - nargs];
    if (!tpu_dtype_valid(t->dtype) || t->rank < 0 || t->rank > TPU_MAX_RANK)
      return tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel '%s': %s %d has no valid type", name,
                             i < nargs ? "argument" : "result", i < nargs ? i : i - nargs);
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d] < 0)
        return tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel '%s': dynamic dimensions are not supported",
                               name);
  }
  pthread_mutex_lock(&kernels_lock);
  for (int64_t i = 0; i < nkernels; i++) {
    if (kernel_same(kernels[i], name, text, len, entry, nargs, args, nres, res)) {
      *out_id = kernels[i]->id;
      pthread_mutex_unlock(&kernels_lock);
      return NULL;
    }
  }
  tpu_status_t st = NULL;
  tpu_custom_kernel_t *k = (tpu_custom_kernel_t *)calloc(1, sizeof(*k));
  if (k) {
    k->name = dup_str(name, strlen(name));
    k->entry = dup_str(entry, strlen(entry));
    k->text = dup_str(text, len);
  }
  if (nkernels == capkernels) {
    int64_t cap = capkernels ? capkernels * 2 : 16;
    tpu_custom_kernel_t **nk = (tpu_custom_kernel_t **)realloc(kernels, sizeof(*nk) * (size_t)cap);
    if (nk) {
      kernels = nk;
      capkernels = cap;
    }
  }
  if (!k || !k->name || !k->entry || !k->text || nkernels == capkernels) {
    kernel_free(k);
    st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "custom kernel '%s': out of host memory", name);
  } else {
    k->len = len;
    k->nargs = nargs;
    k->nres = nres;
    memcpy(k->args, args, sizeof(*args) * (size_t)nargs);
    memcpy(k->res, res, sizeof(*res) * (size_t)nres);
    k->id = nkernels + 1;
    kernels[nkernels++] = k;
    *out_id = k->id;
  }
  pthread_mutex_unlock(&kernels_lock);
  return st;
}

const tpu_custom_kernel_t *tpu_custom_kernel_get(int64_t id) {
  pthread_mutex_lock(&kernels_lock);
  const tpu_custom_kernel_t *k = (id >= 1 && id <= nkernels) ? kernels[id - 1] : NULL;
  pthread_mutex_unlock(&kernels_lock);
  return k;
}

const char *tpu_custom_types_str(const tpu_hlo_type_t *t, int n, char *buf, size_t size) {
  size_t k = (size_t)snprintf(buf, size, "(");
  for (int i = 0; i < n && k < size; i++) {
    char one[160];
    tpu_hlo_type_str(&t[i], one, sizeof(one));
    k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? ", " : "", one);
  }
  if (k < size) snprintf(buf + k, size - k, ")");
  return buf;
}

static void rule_custom_kernel(tpu_op_ctx_t *c) {
  int64_t id = tpu_op_int(c, 0);
  const tpu_custom_kernel_t *k = tpu_custom_kernel_get(id);
  if (!k) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "custom_kernel: no kernel with id %lld", (long long)id);
    return;
  }
  if (c->nin > TPU_CUSTOM_MAX_ARGS) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "custom kernel '%s': %d inputs (at most %d)", k->name, c->nin,
                TPU_CUSTOM_MAX_ARGS);
    return;
  }
  tpu_hlo_type_t got[TPU_CUSTOM_MAX_ARGS];
  bool ok = c->nin == k->nargs;
  for (int i = 0; i < c->nin; i++) {
    got[i] = *tpu_op_in_type(c, i);
    if (ok && !tpu_hlo_type_equal(&got[i], &k->args[i])) ok = false;
  }
  if (!ok) {
    char want[1024], have[1024];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "custom kernel '%s': expects inputs %s but got %s", k->name,
                tpu_custom_types_str(k->args, k->nargs, want, sizeof(want)),
                tpu_custom_types_str(got, c->nin, have, sizeof(have)));
    return;
  }
  tpu_hlo_module_define(c->f, tpu_hash_u64(0xC057000000000000ULL, (uint64_t)id), k->text, k->len);
  tpu_hlo_value_t out[TPU_CUSTOM_MAX_RESULTS];
  tpu_hlo_call(c->f, k->entry, c->in, c->nin, k->res, k->nres, out);
  if (out[0] < 0) return; /* the sticky error says why */
  tpu_op_set_outputs(c, k->nres, out);
}

const tpu_op_rule_t tpu_rules_custom[] = {
    {"custom_kernel", rule_custom_kernel, 0, -1},
    {NULL, NULL, 0, 0},
};
