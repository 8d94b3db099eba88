/* hlo.h - a StableHLO text builder.
 *
 * A module under construction lives in one arena (freed in one call).  A
 * function has typed arguments; every emitter appends one (or a few) lines
 * in the generic MLIR form  %N = "stablehlo.op"(...) {...} : (...) -> ...
 * and returns the SSA value of the result.  Types are tracked, so callers
 * (lowering rules) can ask the type of any value.
 *
 * Errors are sticky (the SQLite/ggml habit): the first failing emitter
 * (bad shapes, bad dims, out of memory) records a status in the function and
 * returns TPU_HLO_NONE; later emitters with a NONE operand return NONE too.
 * tpu_hlo_module_text() / tpu_hlo_func_status() report the first error.
 * So a rule can emit many ops and check once.
 *
 * This layer never includes PJRT headers: a lowering can be tested by text.
 */
#ifndef TPU_HLO_HLO_H_
#define TPU_HLO_HLO_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

typedef struct tpu_hlo_type {
  tpu_dtype_t dtype;
  int rank;
  int64_t dims[TPU_MAX_RANK];
} tpu_hlo_type_t;

typedef int32_t tpu_hlo_value_t; /* SSA value id in its function; < 0 = none */
#define TPU_HLO_NONE ((tpu_hlo_value_t)-1)

typedef struct tpu_hlo_module tpu_hlo_module_t;
typedef struct tpu_hlo_func tpu_hlo_func_t;

/* ---- types --------------------------------------------------------------- */
tpu_hlo_type_t tpu_hlo_type_make(tpu_dtype_t dtype, int rank, const int64_t *dims);
tpu_hlo_type_t tpu_hlo_type_scalar(tpu_dtype_t dtype);
int64_t tpu_hlo_type_numel(const tpu_hlo_type_t *t);
bool tpu_hlo_type_equal(const tpu_hlo_type_t *a, const tpu_hlo_type_t *b);
/* Writes "tensor<2x3xf32>" into buf; returns buf. */
char *tpu_hlo_type_str(const tpu_hlo_type_t *t, char *buf, size_t size);

/* ---- module / function ---------------------------------------------------- */
tpu_status_t tpu_hlo_module_create(const char *name, tpu_hlo_module_t **out_module);
void tpu_hlo_module_destroy(tpu_hlo_module_t *m);
/* Records mhlo.num_replicas / mhlo.num_partitions on the module (0 = leave
 * the attribute out; a replicated program takes its counts from the compile
 * options either way). */
void tpu_hlo_module_set_replicas(tpu_hlo_module_t *m, int num_replicas, int num_partitions);
/* Operand precision of the dot_general / convolution ops emitted after the
 * call: "DEFAULT", "HIGH", "HIGHEST"; NULL (the initial state) leaves the
 * attribute out.  On TPU, f32 at DEFAULT runs bf16 passes; HIGHEST keeps
 * PyTorch's float32 results. */
void tpu_hlo_module_set_precision(tpu_hlo_module_t *m, const char *precision);
/* The public entry is named "main".  Arguments are %arg0..%argN-1. */
tpu_hlo_func_t *tpu_hlo_module_main(tpu_hlo_module_t *m);
tpu_hlo_value_t tpu_hlo_func_arg(tpu_hlo_func_t *f, tpu_hlo_type_t type);
/* Marks argument `arg` as donated to result `result` (tf.aliasing_output). */
void tpu_hlo_func_alias(tpu_hlo_func_t *f, int arg, int result);
/* Sets the results; must be called once before text is produced. */
void tpu_hlo_func_return(tpu_hlo_func_t *f, const tpu_hlo_value_t *values, int n);
int tpu_hlo_func_num_args(const tpu_hlo_func_t *f);
tpu_status_t tpu_hlo_func_status(const tpu_hlo_func_t *f);   /* borrowed; NULL = ok */
/* Records an error (first one wins) from a rule; returns TPU_HLO_NONE. */
tpu_hlo_value_t tpu_hlo_fail(tpu_hlo_func_t *f, tpu_code_t code, const char *fmt, ...) TPU_PRINTF(3, 4);
/* Never NULL: TPU_HLO_NONE (or a foreign id) reads as a 0-d type of dtype
 * TPU_DTYPE_INVALID, so rules may inspect types before checking status. */
const tpu_hlo_type_t *tpu_hlo_type_of(const tpu_hlo_func_t *f, tpu_hlo_value_t v);
/* Produces the whole module text (owned by the module, valid until destroy).
 * Returns the first recorded error instead, if any (caller frees it). */
tpu_status_t tpu_hlo_module_text(tpu_hlo_module_t *m, const char **out_text, size_t *out_len);

/* ---- emitters -------------------------------------------------------------- */
/* Elementwise unary: op is the StableHLO name without prefix: "negate",
 * "abs", "exponential", "exponential_minus_one", "log", "log_plus_one",
 * "sqrt", "rsqrt", "tanh", "logistic", "floor", "ceil", "sign", "not",
 * "round_nearest_even", "round_nearest_afz", "cosine", "sine", "tan",
 * "cbrt", "is_finite" (result i1), "popcnt", "real", "imag" ...
 * A name with a dot is emitted as given with the operand's type, e.g.
 * "chlo.erf", "chlo.lgamma", "chlo.digamma", "chlo.erf_inv" (the plugin
 * lowers CHLO); "chlo.is_inf" and friends return i1. */
tpu_hlo_value_t tpu_hlo_unary(tpu_hlo_func_t *f, const char *op, tpu_hlo_value_t x);
/* Elementwise binary, same shapes and types: "add", "subtract", "multiply",
 * "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or",
 * "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical". */
tpu_hlo_value_t tpu_hlo_binary(tpu_hlo_func_t *f, const char *op, tpu_hlo_value_t a, tpu_hlo_value_t b);
/* direction: "EQ","NE","LT","LE","GT","GE"; result i1.  Compare type is
 * chosen from the element type (FLOAT / SIGNED / UNSIGNED). */
tpu_hlo_value_t tpu_hlo_compare(tpu_hlo_func_t *f, const char *direction, tpu_hlo_value_t a, tpu_hlo_value_t b);
tpu_hlo_value_t tpu_hlo_select(tpu_hlo_func_t *f, tpu_hlo_value_t pred, tpu_hlo_value_t on_true, tpu_hlo_value_t on_false);
tpu_hlo_value_t tpu_hlo_clamp(tpu_hlo_func_t *f, tpu_hlo_value_t lo, tpu_hlo_value_t x, tpu_hlo_value_t hi);
tpu_hlo_value_t tpu_hlo_convert(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t to);
tpu_hlo_value_t tpu_hlo_bitcast_convert(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t to);
/* Splat constant of any shape.  Integer types take `value` rounded;
 * i1 takes value != 0.  inf/nan are spelled as hex where needed. */
tpu_hlo_value_t tpu_hlo_constant(tpu_hlo_func_t *f, tpu_hlo_type_t type, double value);
tpu_hlo_value_t tpu_hlo_constant_i64(tpu_hlo_func_t *f, tpu_hlo_type_t type, int64_t value);
/* Dense 1-D..N-D constant from host values (small tables only). */
tpu_hlo_value_t tpu_hlo_constant_i64s(tpu_hlo_func_t *f, tpu_hlo_type_t type, const int64_t *values);
/* The same from doubles (rounded to the element type; exact bits in text). */
tpu_hlo_value_t tpu_hlo_constant_f64s(tpu_hlo_func_t *f, tpu_hlo_type_t type, const double *values);
tpu_hlo_value_t tpu_hlo_iota(tpu_hlo_func_t *f, tpu_hlo_type_t type, int64_t dim);
tpu_hlo_value_t tpu_hlo_broadcast_in_dim(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_type_t to,
                                         const int64_t *dims /* x.rank entries */);
tpu_hlo_value_t tpu_hlo_reshape(tpu_hlo_func_t *f, tpu_hlo_value_t x, int rank, const int64_t *dims);
tpu_hlo_value_t tpu_hlo_transpose(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *perm);
/* When v is a transpose of u that swaps the last two dims only, u (lowering
 * rules may then read the untransposed value); else TPU_HLO_NONE. */
tpu_hlo_value_t tpu_hlo_swapped_source(const tpu_hlo_func_t *f, tpu_hlo_value_t v);
tpu_hlo_value_t tpu_hlo_slice(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *start,
                              const int64_t *limit, const int64_t *strides);
/* starts: rank scalar (0-d integer) values. */
tpu_hlo_value_t tpu_hlo_dynamic_slice(tpu_hlo_func_t *f, tpu_hlo_value_t x, const tpu_hlo_value_t *starts,
                                      const int64_t *sizes);
tpu_hlo_value_t tpu_hlo_dynamic_update_slice(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t update,
                                             const tpu_hlo_value_t *starts);
tpu_hlo_value_t tpu_hlo_concatenate(tpu_hlo_func_t *f, const tpu_hlo_value_t *xs, int n, int64_t dim);
tpu_hlo_value_t tpu_hlo_pad(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t pad_value,
                            const int64_t *low, const int64_t *high, const int64_t *interior);
tpu_hlo_value_t tpu_hlo_reverse(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *dims, int ndims);

typedef struct tpu_hlo_dot_dims {
  int nbatch, ncontract;
  int64_t lhs_batch[TPU_MAX_RANK], rhs_batch[TPU_MAX_RANK];
  int64_t lhs_contract[TPU_MAX_RANK], rhs_contract[TPU_MAX_RANK];
} tpu_hlo_dot_dims_t;
/* Result: batch dims, lhs free dims, rhs free dims; element type `out`
 * (TPU_DTYPE_INVALID = the operands' type). */
tpu_hlo_value_t tpu_hlo_dot_general(tpu_hlo_func_t *f, tpu_hlo_value_t lhs, tpu_hlo_value_t rhs,
                                    const tpu_hlo_dot_dims_t *dims, tpu_dtype_t out);

/* Reductions.  body: "add", "maximum", "minimum", "multiply", "and", "or".
 * init is a 0-d value of the element type. */
tpu_hlo_value_t tpu_hlo_reduce(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t init,
                               const int64_t *dims, int ndims, const char *body);
/* Variadic (value, index) argmax/argmin reduce over one dim: returns the
 * index (s64) of the max (is_max) or min, first occurrence on ties, NaN wins
 * (as PyTorch).  out_value (optional) receives the value. */
tpu_hlo_value_t tpu_hlo_reduce_argext(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, bool is_max,
                                      tpu_hlo_value_t *out_value);
/* window arrays have rank entries; strides/dilations may be NULL (=1),
 * padding (rank x 2 lo/hi) may be NULL (=0). */
tpu_hlo_value_t tpu_hlo_reduce_window(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t init,
                                      const int64_t *window, const int64_t *strides,
                                      const int64_t *base_dilations, const int64_t *window_dilations,
                                      const int64_t *padding, const char *body);
/* select_and_scatter for max-pool gradients: selects the max of each window
 * of `operand`, scatters `source` there with an add. */
tpu_hlo_value_t tpu_hlo_select_and_scatter(tpu_hlo_func_t *f, tpu_hlo_value_t operand, tpu_hlo_value_t source,
                                           tpu_hlo_value_t init, const int64_t *window,
                                           const int64_t *strides, const int64_t *padding);

typedef struct tpu_hlo_conv_dims {
  /* N-d convolution, nsp spatial dims.  Layouts as dimension indices. */
  int nsp;
  int64_t in_batch, in_feature, in_spatial[TPU_MAX_RANK];
  int64_t k_in_feature, k_out_feature, k_spatial[TPU_MAX_RANK];
  int64_t out_batch, out_feature, out_spatial[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK], padding[2 * TPU_MAX_RANK] /* lo,hi pairs */;
  int64_t lhs_dilation[TPU_MAX_RANK], rhs_dilation[TPU_MAX_RANK];
  int64_t feature_group_count, batch_group_count;
} tpu_hlo_conv_dims_t;
/* A NCHW/OIHW/NCHW convolution descriptor with the given spatial count. */
void tpu_hlo_conv_dims_nchw(tpu_hlo_conv_dims_t *d, int nsp);
tpu_hlo_value_t tpu_hlo_convolution(tpu_hlo_func_t *f, tpu_hlo_value_t lhs, tpu_hlo_value_t rhs,
                                    const tpu_hlo_conv_dims_t *dims);

typedef struct tpu_hlo_gather_dims {
  int noffset, ncollapsed, nstart_map, nbatch;
  int64_t offset_dims[TPU_MAX_RANK], collapsed_slice_dims[TPU_MAX_RANK];
  int64_t start_index_map[TPU_MAX_RANK];
  int64_t operand_batching_dims[TPU_MAX_RANK], start_indices_batching_dims[TPU_MAX_RANK];
  int64_t index_vector_dim;
  int64_t slice_sizes[TPU_MAX_RANK];
  bool indices_are_sorted;
} tpu_hlo_gather_dims_t;
tpu_hlo_value_t tpu_hlo_gather(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t indices,
                               const tpu_hlo_gather_dims_t *dims);
typedef struct tpu_hlo_scatter_dims {
  int nwindow, ninserted, nscatter_map, nbatch;
  int64_t update_window_dims[TPU_MAX_RANK], inserted_window_dims[TPU_MAX_RANK];
  int64_t scatter_dims_to_operand_dims[TPU_MAX_RANK];
  int64_t input_batching_dims[TPU_MAX_RANK], scatter_indices_batching_dims[TPU_MAX_RANK];
  int64_t index_vector_dim;
  bool indices_are_sorted, unique_indices;
} tpu_hlo_scatter_dims_t;
/* body: "add", "maximum", "minimum", "multiply" or "replace" (new value wins). */
tpu_hlo_value_t tpu_hlo_scatter(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t indices,
                                tpu_hlo_value_t updates, const tpu_hlo_scatter_dims_t *dims,
                                const char *body);
/* Sort along dim (stable), returning sorted values and (if out_indices) the
 * s64 permutation indices. */
tpu_hlo_value_t tpu_hlo_sort(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, bool descending,
                             tpu_hlo_value_t *out_indices);
/* rng_bit_generator (THREE_FRY): state is ui64[2]; returns random bits of
 * `type` (an unsigned integer type) and the new state via out_state. */
tpu_hlo_value_t tpu_hlo_rng_bit_generator(tpu_hlo_func_t *f, tpu_hlo_value_t state, tpu_hlo_type_t type,
                                          tpu_hlo_value_t *out_state);
/* Collectives over replica_groups (ngroups x group_size device ids). */
tpu_hlo_value_t tpu_hlo_all_reduce(tpu_hlo_func_t *f, tpu_hlo_value_t x, const char *body,
                                   const int64_t *groups, int ngroups, int group_size);
tpu_hlo_value_t tpu_hlo_all_gather(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim,
                                   const int64_t *groups, int ngroups, int group_size);
tpu_hlo_value_t tpu_hlo_reduce_scatter(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, const char *body,
                                       const int64_t *groups, int ngroups, int group_size);

/* all_to_all: splits `split_dim` into group_size blocks, sends block i to
 * the i-th member of the group and concatenates what arrives along
 * `concat_dim`. */
tpu_hlo_value_t tpu_hlo_all_to_all(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t split_dim, int64_t concat_dim,
                                   const int64_t *groups, int ngroups, int group_size);
/* collective_permute: replica pairs[2k] sends x to replica pairs[2k+1];
 * a replica that receives nothing gets zeros. */
tpu_hlo_value_t tpu_hlo_collective_permute(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *pairs, int npairs);

/* ---- loops (hlo_while.c) --------------------------------------------------
 * stablehlo.while over n carried values, its condition and body built with
 * the emitters above:
 *   tpu_hlo_while_t w;
 *   tpu_hlo_while_begin(f, &w, init, n, cond_args);  // cond_args: n values
 *   ... emit a 0-d i1 `pred` from cond_args ...
 *   tpu_hlo_while_body(f, &w, pred, body_args);      // body_args: n values
 *   ... emit next[n] (the carried types) from body_args ...
 *   tpu_hlo_while_end(f, &w, next, results);          // the final values
 * A region uses only its block arguments and values it defines (pass what
 * it needs as carried values); its values are dead after the region.  Each
 * call returns false (and leaves a sticky error) on failure. */
#define TPU_HLO_WHILE_MAX 32
typedef struct tpu_hlo_while {
  int n, state;
  tpu_hlo_value_t first;
  tpu_hlo_type_t types[TPU_HLO_WHILE_MAX];
} tpu_hlo_while_t;
bool tpu_hlo_while_begin(tpu_hlo_func_t *f, tpu_hlo_while_t *w, const tpu_hlo_value_t *init, int n,
                         tpu_hlo_value_t *out_cond_args);
bool tpu_hlo_while_body(tpu_hlo_func_t *f, tpu_hlo_while_t *w, tpu_hlo_value_t pred, tpu_hlo_value_t *out_body_args);
bool tpu_hlo_while_end(tpu_hlo_func_t *f, tpu_hlo_while_t *w, const tpu_hlo_value_t *next,
                       tpu_hlo_value_t *out_results);

/* stablehlo.fft over the trailing n (1..3) dimensions, `lengths` their
 * transform lengths (hlo_fft.c).  FFT / IFFT: complex -> same type;
 * RFFT: f32/f64 -> complex, last dim lengths[n-1] / 2 + 1; IRFFT: complex
 * (last dim lengths[n-1] / 2 + 1) -> real, last dim lengths[n-1].  IFFT and
 * IRFFT are normalised by 1 / prod(lengths). */
typedef enum { TPU_HLO_FFT = 0, TPU_HLO_IFFT = 1, TPU_HLO_RFFT = 2, TPU_HLO_IRFFT = 3 } tpu_hlo_fft_type_t;
tpu_hlo_value_t tpu_hlo_fft(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_fft_type_t type, const int64_t *lengths,
                            int n);

/* stablehlo.triangular_solve (hlo_linalg.c): solves op(a) x = b (left_side)
 * or x op(a) = b for x, a [*, m, m] triangular (only the `lower` or upper
 * triangle read; its diagonal taken as ones when unit_diagonal), b
 * [*, m, n] (left) or [*, n, m] with the same batch; float or complex.
 * op(a): a, its transpose or its conjugate transpose. -> b's type. */
typedef enum { TPU_HLO_NO_TRANSPOSE = 0, TPU_HLO_TRANSPOSE = 1, TPU_HLO_ADJOINT = 2 } tpu_hlo_transpose_t;
tpu_hlo_value_t tpu_hlo_triangular_solve(tpu_hlo_func_t *f, tpu_hlo_value_t a, tpu_hlo_value_t b, bool left_side,
                                         bool lower, bool unit_diagonal, tpu_hlo_transpose_t transpose_a);

/* ---- calls to module-level functions (hlo_call.c) -----------------------
 * A custom kernel is a function the user wrote; its text (one or more
 * `func.func private @...` definitions, symbols already unique) is defined
 * once per module under `key`, however many calls it gets; the text is
 * copied.  A second define with the same key is a no-op. */
void tpu_hlo_module_define(tpu_hlo_func_t *f, uint64_t key, const char *text, size_t len);
bool tpu_hlo_module_defines(const tpu_hlo_func_t *f, uint64_t key);
/* "func.call" of @callee (a bare symbol) with results of the given types;
 * the results' values go to out_results[nres]; returns the first (NONE on
 * error). */
tpu_hlo_value_t tpu_hlo_call(tpu_hlo_func_t *f, const char *callee, const tpu_hlo_value_t *args, int nargs,
                             const tpu_hlo_type_t *res, int nres, tpu_hlo_value_t *out_results);

/* Helpers most rules need. */
/* Broadcasts x (numpy rules, trailing alignment) to `rank`/`dims`. */
tpu_hlo_value_t tpu_hlo_broadcast_to(tpu_hlo_func_t *f, tpu_hlo_value_t x, int rank, const int64_t *dims);
/* Converts x to dtype if it differs (no-op otherwise). */
tpu_hlo_value_t tpu_hlo_cast(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t dtype);
/* 0-d constant of a dtype. */
tpu_hlo_value_t tpu_hlo_scalar(tpu_hlo_func_t *f, tpu_dtype_t dtype, double value);

#endif /* TPU_HLO_HLO_H_ */
