/* hlo_call.c - module-level definitions and calls to them.
 *
 * A custom kernel (csrc/ops/custom.c) is StableHLO the user wrote: one or
 * more func.func definitions.  The module text puts them after @main, each
 * key once however many nodes call it; @main reaches them with func.call:
 *   %7:2 = "func.call"(%3, %5) {callee = @k1_rmsnorm} : (...) -> (...)
 */
#include <string.h>

#include "hlo/hlo_internal.h"

bool tpu_hlo_module_defines(const tpu_hlo_func_t *f, uint64_t key) {
  if (!f || !f->module) return false;
  for (const tpu_hlo_def_t *d = f->module->defs; d; d = d->next)
    if (d->key == key) return true;
  return false;
}

void tpu_hlo_module_define(tpu_hlo_func_t *f, uint64_t key, const char *text, size_t len) {
  if (!f || f->status || tpu_hlo_module_defines(f, key)) return;
  tpu_hlo_module_t *m = f->module;
  if (!m) {
    tpu_hlo_fail(f, TPU_INTERNAL, "module define: the function belongs to no module");
    return;
  }
  tpu_hlo_def_t *d = (tpu_hlo_def_t *)tpu_arena_alloc(&m->arena, sizeof(*d));
  char *t = d ? (char *)tpu_arena_alloc(&m->arena, len + 1) : NULL;
  if (!t) {
    tpu_hlo_fail(f, TPU_RESOURCE_EXHAUSTED, "module define: out of host memory (%zu bytes)", len);
    return;
  }
  memcpy(t, text, len);
  t[len] = 0;
  d->key = key;
  d->len = len;
  d->text = t;
  d->next = m->defs;
  m->defs = d;
}

static void defs_rev(tpu_strbuf_t *sb, const tpu_hlo_def_t *d) {
  if (!d) return;
  defs_rev(sb, d->next);
  tpu_strbuf_append(sb, d->text, d->len);
  if (d->len && d->text[d->len - 1] != '\n') tpu_strbuf_append(sb, "\n", 1);
}

void tpu_hlo__defs_text(tpu_strbuf_t *sb, const tpu_hlo_module_t *m) { defs_rev(sb, m->defs); }

tpu_hlo_value_t tpu_hlo_call(tpu_hlo_func_t *f, const char *callee, const tpu_hlo_value_t *args, int nargs,
                             const tpu_hlo_type_t *res, int nres, tpu_hlo_value_t *out_results) {
  for (int i = 0; i < nres; i++) out_results[i] = TPU_HLO_NONE;
  if (!tpu_hlo__ok(f, "func.call", args, nargs)) return TPU_HLO_NONE;
  if (nres < 1) return tpu_hlo_fail(f, TPU_INVALID_ARGUMENT, "func.call @%s: no results", callee);
  tpu_hlo_value_t first = tpu_hlo__begin(f, "func.call", args, nargs, res, nres);
  if (first < 0) return TPU_HLO_NONE;
  tpu_strbuf_append(&f->body, " {callee = @", 12);
  tpu_hlo__puts(&f->body, callee);
  tpu_strbuf_append(&f->body, "}", 1);
  tpu_hlo__end(f, args, nargs, first, nres);
  if (f->status) return TPU_HLO_NONE;
  for (int i = 0; i < nres; i++) out_results[i] = first + i;
  return first;
}
