/* hlo_internal.h - what the csrc/hlo sources share; not for rules.
 *
 * Representation.  A function keeps a dense table of SSA values (type + how
 * the value is spelled) and one growable text buffer for its body, so an
 * emitter costs one append of one line and no per-op allocation.  A value
 * is spelled
 *   %argK     argument K
 *   %N        the single result of the op that defined value N
 *   %N#i      result i of a multi-result op whose first value is N
 * Region-local names (block arguments and ops inside reduce bodies, sort
 * comparators ...) are %tK from a separate per-function counter, so they
 * never collide with the values of the enclosing function.
 */
#ifndef TPU_HLO_HLO_INTERNAL_H_
#define TPU_HLO_HLO_INTERNAL_H_

#include "base/arena.h"
#include "base/strbuf.h"
#include "hlo/hlo.h"

typedef struct tpu_hlo_val {
  tpu_hlo_type_t type;
  int32_t name;  /* first value id of the defining op, or the arg index */
  int16_t res;   /* result index in a multi-result op; -1 = single result */
  uint8_t is_arg;
  int32_t swap_of; /* a transpose's operand when it swaps the last two dims only, else -1 */
} tpu_hlo_val_t;

struct tpu_hlo_func {
  tpu_hlo_module_t *module;
  tpu_hlo_val_t *vals;
  int32_t nvals, capvals;
  int32_t *args;     /* value id of each argument */
  int32_t *alias;    /* result index each argument is donated to, -1 none */
  int32_t nargs, capargs;
  tpu_hlo_value_t *rets;
  int32_t nrets;
  bool returned;
  int32_t next_tmp;  /* region-local %tK names */
  tpu_strbuf_t body;
  tpu_status_t status;
};

struct tpu_hlo_module {
  tpu_arena_t arena;
  char *name;
  int num_replicas, num_partitions; /* 0 = attribute omitted */
  const char *precision;             /* static string or NULL */
  tpu_hlo_func_t main;
  tpu_strbuf_t text;
  struct tpu_hlo_def *defs; /* module-level definitions after main (hlo_call.c), newest first */
};

/* Text defined once at module level (a custom kernel's functions), keyed. */
typedef struct tpu_hlo_def {
  struct tpu_hlo_def *next;
  uint64_t key;
  size_t len;
  char *text; /* in the module's arena */
} tpu_hlo_def_t;
/* Appends the definitions, oldest first (module text). */
void tpu_hlo__defs_text(tpu_strbuf_t *sb, const tpu_hlo_module_t *m);

/* ---- shared helpers (hlo.c) ---------------------------------------------- */
/* True when the function has no error and every operand is a live value;
 * records an error naming `op` for a NONE operand otherwise. */
bool tpu_hlo__ok(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *vs, int n);
static inline bool tpu_hlo__same_shape(const tpu_hlo_type_t *a, const tpu_hlo_type_t *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}
static inline const tpu_hlo_type_t *tpu_hlo__t(const tpu_hlo_func_t *f, tpu_hlo_value_t v) {
  return &f->vals[v].type;
}
/* A fresh value of type t with no defining text (block arguments). */
tpu_hlo_value_t tpu_hlo__new_value(tpu_hlo_func_t *f, const tpu_hlo_type_t *t);
/* Starts a line "    %N = \"<op>\"(operands)" defining nres results of the given
 * types; returns the first new value id (NONE on OOM). */
tpu_hlo_value_t tpu_hlo__begin(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *operands,
                               int nops, const tpu_hlo_type_t *res, int nres);
/* Ends the line: " : (operand types) -> result type(s)\n". */
void tpu_hlo__end(tpu_hlo_func_t *f, const tpu_hlo_value_t *operands, int nops, tpu_hlo_value_t first,
                  int nres);
/* One-line op with no regions; attrs (may be NULL) is the text between the
 * braces. */
tpu_hlo_value_t tpu_hlo__simple(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *operands,
                                int nops, const tpu_hlo_type_t *res, const char *attrs);

void tpu_hlo__puts(tpu_strbuf_t *sb, const char *s);
void tpu_hlo__val(tpu_strbuf_t *sb, const tpu_hlo_func_t *f, tpu_hlo_value_t v);
void tpu_hlo__type(tpu_strbuf_t *sb, const tpu_hlo_type_t *t);
void tpu_hlo__i64(tpu_strbuf_t *sb, int64_t v);
/* "1, 2, 3" */
void tpu_hlo__i64s(tpu_strbuf_t *sb, const int64_t *v, int n);
/* "name = array<i64: 1, 2>" */
void tpu_hlo__array_attr(tpu_strbuf_t *sb, const char *name, const int64_t *v, int n);
/* "name = dense<[[lo, hi], ...]> : tensor<nx2xi64>" from n lo,hi pairs */
void tpu_hlo__pairs_attr(tpu_strbuf_t *sb, const char *name, const int64_t *pairs, int n);
/* "replica_groups = dense<[[0, 1], ...]> : tensor<GxSxi64>" */
void tpu_hlo__groups_attr(tpu_strbuf_t *sb, const int64_t *groups, int ngroups, int group_size);
/* Appends a one-block region "{ ^bb0(...): ... \"stablehlo.return\"(...) }"
 * (the caller writes the surrounding "(" region, region ")" list)
 * whose block takes `nargs` 0-d arguments of the given dtypes (their %tK
 * names are passed to `body`).  body emits the region's ops with
 * tpu_hlo__rop / tpu_hlo__rcompare and fills the names and dtypes of the
 * values to return; it returns how many. */
typedef int (*tpu_hlo__region_fn)(tpu_hlo_func_t *f, const int32_t *args, const tpu_dtype_t *dtypes,
                                  int32_t *rets, tpu_dtype_t *ret_dtypes, void *ctx);
void tpu_hlo__region(tpu_hlo_func_t *f, const tpu_dtype_t *arg_dtypes, int nargs,
                     tpu_hlo__region_fn body, void *ctx);
/* One 0-d op inside a region; returns its new %tK name. */
int32_t tpu_hlo__rop(tpu_hlo_func_t *f, const char *op, const int32_t *ins, int nins,
                     const tpu_dtype_t *in_dtypes, tpu_dtype_t out, const char *attrs);
int32_t tpu_hlo__rcompare(tpu_hlo_func_t *f, const char *dir, int32_t a, int32_t b, tpu_dtype_t dt);
/* A scalar binary reduction body ("add", "maximum", ...; "replace" returns
 * the second argument).  Returns false on an unknown name. */
bool tpu_hlo__binary_body_ok(const char *body);
void tpu_hlo__binary_region(tpu_hlo_func_t *f, tpu_dtype_t dt, const char *body);
/* ", precision_config = [...]" when the module sets a precision. */
void tpu_hlo__precision_attr(tpu_strbuf_t *sb, const tpu_hlo_func_t *f);
/* compare_type for a dtype: "FLOAT", "SIGNED", "UNSIGNED". */
const char *tpu_hlo__compare_type(tpu_dtype_t dt);
/* Appends the splat/element literal of `value` in dtype (hex bits for floats). */
void tpu_hlo__literal(tpu_strbuf_t *sb, tpu_dtype_t dt, double value);
/* "tensor<2x3xf32>" of a type into a message buffer */
#define TPU_HLO_TSTR(t, buf) tpu_hlo_type_str((t), (buf), sizeof(buf))

#endif /* TPU_HLO_HLO_INTERNAL_H_ */
