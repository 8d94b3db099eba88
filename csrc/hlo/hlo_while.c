/* hlo_while.c - stablehlo.while: a loop whose condition and body are built
 * with the ordinary emitters (see hlo.h, "loops").
 *
 * Text produced (n carried values):
 *     %R:n = "stablehlo.while"(%init0, ...) ({
 *     ^bb0(%A0: t0, ...):
 *       ... condition ops ...
 *       "stablehlo.return"(%pred) : (tensor<i1>) -> ()
 *     }, {
 *     ^bb0(%B0: t0, ...):
 *       ... body ops ...
 *       "stablehlo.return"(%next0, ...) : (t0, ...) -> ()
 *     }) : (t0, ...) -> (t0, ...)
 * Block arguments are ordinary values of the function (fresh %N names), so
 * the emitters and tpu_hlo_type_of work on them unchanged.
 */
#include <string.h>

#include "hlo/hlo_internal.h"

static void while_fail(tpu_hlo_func_t *f, tpu_hlo_while_t *w, const char *fmt, const char *what) {
  w->state = -1;
  tpu_hlo_fail(f, TPU_INVALID_ARGUMENT, fmt, what);
}

/* "^bb0(%a: t, ...):\n" with n fresh values of the carried types. */
static bool block_args(tpu_hlo_func_t *f, const tpu_hlo_while_t *w, tpu_hlo_value_t *out) {
  tpu_strbuf_t *sb = &f->body;
  tpu_hlo__puts(sb, "    ^bb0(");
  for (int i = 0; i < w->n; i++) {
    out[i] = tpu_hlo__new_value(f, &w->types[i]);
    if (out[i] < 0) return false;
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__val(sb, f, out[i]);
    tpu_strbuf_append(sb, ": ", 2);
    tpu_hlo__type(sb, &w->types[i]);
  }
  tpu_hlo__puts(sb, "):\n");
  return true;
}

static void region_return(tpu_hlo_func_t *f, const tpu_hlo_value_t *vals, int n) {
  tpu_strbuf_t *sb = &f->body;
  tpu_hlo__puts(sb, "      \"stablehlo.return\"(");
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__val(sb, f, vals[i]);
  }
  tpu_hlo__puts(sb, ") : (");
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, tpu_hlo__t(f, vals[i]));
  }
  tpu_hlo__puts(sb, ") -> ()\n");
}

bool tpu_hlo_while_begin(tpu_hlo_func_t *f, tpu_hlo_while_t *w, const tpu_hlo_value_t *init, int n,
                         tpu_hlo_value_t *out_cond_args) {
  memset(w, 0, sizeof(*w));
  w->first = TPU_HLO_NONE;
  w->state = -1;
  for (int i = 0; i < n && i < TPU_HLO_WHILE_MAX; i++) out_cond_args[i] = TPU_HLO_NONE;
  if (!f || f->status) return false;
  if (n < 1 || n > TPU_HLO_WHILE_MAX) {
    tpu_hlo_fail(f, TPU_INVALID_ARGUMENT, "while: %d carried values (1..%d supported)", n, TPU_HLO_WHILE_MAX);
    return false;
  }
  if (!tpu_hlo__ok(f, "while", init, n)) return false;
  w->n = n;
  for (int i = 0; i < n; i++) w->types[i] = *tpu_hlo__t(f, init[i]);
  w->first = tpu_hlo__begin(f, "while", init, n, w->types, n);
  if (w->first < 0) return false;
  tpu_hlo__puts(&f->body, " ({\n");
  if (!block_args(f, w, out_cond_args)) return false;
  w->state = 1;
  return !f->status;
}

bool tpu_hlo_while_body(tpu_hlo_func_t *f, tpu_hlo_while_t *w, tpu_hlo_value_t pred,
                        tpu_hlo_value_t *out_body_args) {
  for (int i = 0; i < w->n; i++) out_body_args[i] = TPU_HLO_NONE;
  if (!f || f->status) return false;
  if (w->state != 1) {
    while_fail(f, w, "while: %s out of order", "tpu_hlo_while_body");
    return false;
  }
  if (!tpu_hlo__ok(f, "while condition", &pred, 1)) return false;
  const tpu_hlo_type_t *pt = tpu_hlo__t(f, pred);
  if (pt->rank != 0 || pt->dtype != TPU_PRED) {
    while_fail(f, w, "while: the condition must be a 0-d i1 value (%s)", "got another type");
    return false;
  }
  region_return(f, &pred, 1);
  tpu_hlo__puts(&f->body, "    }, {\n");
  if (!block_args(f, w, out_body_args)) return false;
  w->state = 2;
  return !f->status;
}

bool tpu_hlo_while_end(tpu_hlo_func_t *f, tpu_hlo_while_t *w, const tpu_hlo_value_t *next,
                       tpu_hlo_value_t *out_results) {
  for (int i = 0; i < w->n; i++) out_results[i] = TPU_HLO_NONE;
  if (!f || f->status) return false;
  if (w->state != 2) {
    while_fail(f, w, "while: %s out of order", "tpu_hlo_while_end");
    return false;
  }
  if (!tpu_hlo__ok(f, "while body", next, w->n)) return false;
  for (int i = 0; i < w->n; i++) {
    if (!tpu_hlo_type_equal(tpu_hlo__t(f, next[i]), &w->types[i])) {
      char b1[256], b2[256];
      tpu_hlo_fail(f, TPU_INVALID_ARGUMENT, "while: body result %d is %s, the carried value is %s", i,
                   TPU_HLO_TSTR(tpu_hlo__t(f, next[i]), b1), TPU_HLO_TSTR(&w->types[i], b2));
      w->state = -1;
      return false;
    }
  }
  region_return(f, next, w->n);
  tpu_strbuf_t *sb = &f->body;
  tpu_hlo__puts(sb, "    }) : (");
  for (int i = 0; i < w->n; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, &w->types[i]);
  }
  tpu_hlo__puts(sb, ") -> ");
  if (w->n != 1) tpu_strbuf_append(sb, "(", 1);
  for (int i = 0; i < w->n; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, &w->types[i]);
  }
  if (w->n != 1) tpu_strbuf_append(sb, ")", 1);
  tpu_strbuf_append(sb, "\n", 1);
  if (!tpu_strbuf_ok(sb)) {
    tpu_hlo_fail(f, TPU_RESOURCE_EXHAUSTED, "hlo: out of host memory");
    return false;
  }
  for (int i = 0; i < w->n; i++) out_results[i] = w->first + i;
  w->state = 3;
  return true;
}
