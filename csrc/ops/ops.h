/* ops.h - lowering rules: one rule per operation, StableHLO out.
 *
 * How a rule is written
 * ---------------------
 * A rule is a C function that appends the ops computing one operation to a
 * function under construction (csrc/hlo/hlo.h) and reports its results:
 *
 *   static void rule_add(tpu_op_ctx_t *c) {
 *     tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);     // attr 0: result dtype
 *     ... broadcast, convert, emit ...
 *     tpu_op_set_outputs(c, 1, &result);
 *   }
 *
 * Inputs are SSA values already in the function (their types via
 * tpu_hlo_type_of).  Python scalars arrive as 0-d inputs (runtime values,
 * never constants) so a changing learning rate never recompiles.  Non-tensor
 * attributes (dims, flags, dtypes, sizes) arrive as integers and, rarely,
 * doubles in `attrs`; they are part of the program-cache key.  Each rule's
 * comment documents its inputs and attrs: that comment is the contract with
 * the Python adapter (torch_tpu/ops/ files) that calls it.
 *
 * Errors: a rule that meets bad input calls tpu_op_fail() (sticky; first
 * error wins) with a message naming the op, shapes and dtypes, using
 * TPU_INVALID_ARGUMENT (RuntimeError/ValueError in Python) and TPU_OUT_OF_RANGE
 * (IndexError).  It never aborts.  Errors that only the data can show (an
 * index out of range, an integer divisor of zero) are device-side checks:
 * tpu_op_check() below.
 *
 * The same rules serve strict eager (one program per op), fused eager (many
 * ops in one program) and torch.compile (one program per graph): a rule
 * never assumes it is alone in its function.
 *
 * Registry: every rules file exports a NULL-terminated table; ops.c lists the
 * tables.  tpu_op_rule_find() answers "can lower?" with one hash lookup;
 * tpu_op_rule_index() (hashed by the rule's address) is O(1) too.
 *
 * The helpers rule files share (dtype rules, emit shorthand, take / put
 * along an axis, the shared elementwise formulas) are in toolkit.h.
 */
#ifndef TPU_OPS_OPS_H_
#define TPU_OPS_OPS_H_

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "hlo/hlo.h"

#define TPU_OP_MAX_INPUTS 64
#define TPU_OP_MAX_OUTPUTS 16

typedef struct tpu_op_attrs {
  int nints;
  const int64_t *ints;
  int nfloats;
  const double *floats;
} tpu_op_attrs_t;

/* ---- device-side checks ------------------------------------------------------
 * Some bad input only the data shows: an index out of range, an integer
 * divisor of zero.  A rule states the condition with tpu_op_check(): `ok` is
 * an i1 value of any shape (all true = fine) computed in the program, and
 * `payload` an integer 0-d value to report (the bad index or divisor).  The
 * check becomes part of the program: the runtime folds the checks of a
 * program into a small per-device error state (the first failing check wins)
 * that the host reads only when it waits anyway (a host read, synchronize;
 * after every op in debug mode), and raises there.  Nothing is synced while
 * nothing is wrong, and the device keeps working after the report.
 *
 * The message is formatted when the rule is lowered (name the op, the shapes,
 * the dim); TPU_OP_PAYLOAD in it is replaced by the payload's value when the
 * error is reported:
 *   tpu_op_check_index(c, idx, 0, n, TPU_INVALID_ARGUMENT,
 *                      "gather(): index " TPU_OP_PAYLOAD " is out of bounds for dimension %d with size %lld",
 *                      d, (long long)n);
 * code: TPU_OUT_OF_RANGE raises IndexError in Python, anything else
 * RuntimeError (use what PyTorch's CPU kernel raises).  A rule emits the same
 * checks for the same attrs and input types (they are program structure). */
#define TPU_OP_PAYLOAD "{}"
#define TPU_OP_CHECK_MSG_MAX 384

typedef struct tpu_op_check {
  tpu_hlo_value_t ok;      /* i1 0-d: true = fine */
  tpu_hlo_value_t payload; /* s64 0-d */
  tpu_code_t code;
  char msg[TPU_OP_CHECK_MSG_MAX];
} tpu_op_check_t;

/* The checks collected while lowering (caller-owned; zero-initialise). */
typedef struct tpu_op_checks {
  tpu_op_check_t *v;
  int n, cap;
} tpu_op_checks_t;
void tpu_op_checks_free(tpu_op_checks_t *cs);

typedef struct tpu_op_ctx {
  tpu_hlo_func_t *f;
  const char *name;             /* the rule's name, for messages */
  const tpu_hlo_value_t *in;
  int nin;
  const tpu_op_attrs_t *attrs;
  tpu_hlo_value_t out[TPU_OP_MAX_OUTPUTS];
  int nout;
  tpu_op_checks_t *checks;      /* where tpu_op_check() appends; NULL = checks are not wanted */
} tpu_op_ctx_t;

typedef void (*tpu_op_lower_fn)(tpu_op_ctx_t *c);

typedef struct tpu_op_rule {
  const char *name;     /* unique; usually the ATen base name ("add", "mm") */
  tpu_op_lower_fn lower;
  int min_inputs;       /* checked before lower() is called */
  int max_inputs;       /* -1 = any */
} tpu_op_rule_t;

/* Lookup by name (NULL if none); O(1) after the first call. */
const tpu_op_rule_t *tpu_op_rule_find(const char *name);
int tpu_op_rule_count(void);
const tpu_op_rule_t *tpu_op_rule_at(int i);
int tpu_op_rule_index(const tpu_op_rule_t *rule);

/* The compiler the programs go to, where a lowering depends on it: the XLA
 * CPU compiler (set by the runtime at start, before anything is lowered;
 * false until then).  tpu_op_mm_nt (toolkit.h) lowers few-row products by
 * a weight's transpose differently for it. */
void tpu_op_set_target_cpu(bool cpu);
bool tpu_op_target_cpu(void);

/* Runs a rule in function f: checks the input count, calls lower(), checks
 * that it produced outputs.  Errors are returned (and left sticky in f). */
tpu_status_t tpu_op_lower(const tpu_op_rule_t *rule, tpu_hlo_func_t *f, const tpu_hlo_value_t *in,
                          int nin, const tpu_op_attrs_t *attrs, tpu_hlo_value_t *out, int *out_n);
/* The same, appending the rule's device-side checks to `checks` (NULL: the
 * checks are dropped, as tpu_op_lower does).  On error nothing is appended. */
tpu_status_t tpu_op_lower_checked(const tpu_op_rule_t *rule, tpu_hlo_func_t *f, const tpu_hlo_value_t *in,
                                  int nin, const tpu_op_attrs_t *attrs, tpu_op_checks_t *checks,
                                  tpu_hlo_value_t *out, int *out_n);

/* ---- the context's accessors (more helpers: toolkit.h) ----------------------- */
/* Attr access with bounds checks (missing -> fails the rule, returns 0). */
int64_t tpu_op_int(tpu_op_ctx_t *c, int i);
double tpu_op_float(tpu_op_ctx_t *c, int i);
int tpu_op_nints(const tpu_op_ctx_t *c);
const tpu_hlo_type_t *tpu_op_in_type(tpu_op_ctx_t *c, int i);
void tpu_op_set_outputs(tpu_op_ctx_t *c, int n, const tpu_hlo_value_t *vals);
void tpu_op_set_output(tpu_op_ctx_t *c, tpu_hlo_value_t v); /* one output */
void tpu_op_fail(tpu_op_ctx_t *c, tpu_code_t code, const char *fmt, ...) TPU_PRINTF(3, 4);
/* Broadcast shape of several inputs (numpy rules); fails on mismatch with a
 * message like PyTorch's ("The size of tensor a (3) must match the size of
 * tensor b (4) at non-singleton dimension 1"). Returns rank, -1 on error. */
int tpu_op_broadcast_shape(tpu_op_ctx_t *c, const tpu_hlo_value_t *vals, int n, int64_t *out_dims);
/* The type of v by value (an invalid 0-d type for TPU_HLO_NONE). */
tpu_hlo_type_t tpu_op_type(tpu_op_ctx_t *c, tpu_hlo_value_t v);
/* "[2, 3]" for messages; returns buf. */
const char *tpu_op_shape_str(const tpu_hlo_type_t *t, char *buf, size_t n);
/* Normalises a possibly negative dim for rank (fails with IndexError text
 * "Dimension out of range (expected to be in range of [-r, r-1], but got d)"). */
int64_t tpu_op_dim(tpu_op_ctx_t *c, int64_t dim, int rank);

/* Device-side checks (see above).  ok: i1 of any shape, all true = fine;
 * payload: an integer 0-d value or TPU_HLO_NONE (reported as 0). */
void tpu_op_check(tpu_op_ctx_t *c, tpu_hlo_value_t ok, tpu_hlo_value_t payload, tpu_code_t code,
                  const char *fmt, ...) TPU_PRINTF(5, 6);
/* Every element of the integer value idx lies in [lo, hi); the payload is the
 * first index (row-major) that does not.  No check for an empty idx. */
void tpu_op_check_index(tpu_op_ctx_t *c, tpu_hlo_value_t idx, int64_t lo, int64_t hi, tpu_code_t code,
                        const char *fmt, ...) TPU_PRINTF(6, 7);
/* Every element of the integer value divisor is non-zero (integer division
 * and remainder; PyTorch's CPU raises RuntimeError "ZeroDivisionError").  The
 * payload is the divisor (0).  No check for floating types or an empty value. */
void tpu_op_check_nonzero(tpu_op_ctx_t *c, tpu_hlo_value_t divisor, const char *fmt, ...) TPU_PRINTF(3, 4);

/* Rule tables (one per family file, each ends with a {NULL} entry). */
extern const tpu_op_rule_t tpu_rules_core[];          /* core.c: view read/write, bitcast, identity */
extern const tpu_op_rule_t tpu_rules_factory[];       /* factory.c: full, arange, eye, linspace */
extern const tpu_op_rule_t tpu_rules_elementwise[];   /* elementwise.c: arithmetic, compare, select, convert */
extern const tpu_op_rule_t tpu_rules_math[];          /* math.c: exp/log/trig, rounding, erf, gamma ... */
extern const tpu_op_rule_t tpu_rules_activation[];    /* activation.c: relu, gelu, silu ... and backward */
extern const tpu_op_rule_t tpu_rules_reduce[];        /* reduce.c: reductions, softmax, scans, sort/topk */
extern const tpu_op_rule_t tpu_rules_linalg[];        /* linalg.c: mm/bmm/addmm/baddbmm/dot, grouped mm */
extern const tpu_op_rule_t tpu_rules_convolution[];   /* convolution.c: convolution, im2col/col2im */
extern const tpu_op_rule_t tpu_rules_pooling[];       /* pooling.c: max/avg/adaptive/fractional pools, unpool */
extern const tpu_op_rule_t tpu_rules_normalization[]; /* normalization.c: batch norm, layer norm */
extern const tpu_op_rule_t tpu_rules_embedding[];     /* embedding.c: embedding and its backward */
extern const tpu_op_rule_t tpu_rules_loss[];          /* loss.c: nll, mse, smooth_l1, huber, bce */
extern const tpu_op_rule_t tpu_rules_upsample[];      /* upsample.c: nearest/linear/cubic resampling */
extern const tpu_op_rule_t tpu_rules_padding[];       /* padding.c: constant, reflection, replication */
extern const tpu_op_rule_t tpu_rules_index[];         /* index.c: gather/scatter/index/index_put/cat/tril */
extern const tpu_op_rule_t tpu_rules_random[];        /* random.c: rng_bit_generator based sampling */
extern const tpu_op_rule_t tpu_rules_optim[];         /* optim.c: fused optimizer steps, AMP scaling */
extern const tpu_op_rule_t tpu_rules_foreach[];       /* foreach.c: several rule calls as one node */
extern const tpu_op_rule_t tpu_rules_search[];        /* search.c: isin, searchsorted, histc */
extern const tpu_op_rule_t tpu_rules_rnn[];           /* rnn.c: fused LSTM / GRU cells */
extern const tpu_op_rule_t tpu_rules_rnn_layer[];     /* rnn_layer.c: LSTM / GRU / RNN layers as loops */
extern const tpu_op_rule_t tpu_rules_nonzero[];       /* nonzero.c: coordinates of non-zero elements */
extern const tpu_op_rule_t tpu_rules_cholesky[];      /* cholesky.c: Cholesky factorization with info */
extern const tpu_op_rule_t tpu_rules_lu[];            /* lu.c: LU factorization with pivots and info */
extern const tpu_op_rule_t tpu_rules_fft[];           /* fft.c: _fft_c2c / _fft_r2c / _fft_c2r as stablehlo.fft */
extern const tpu_op_rule_t tpu_rules_complex[];       /* complex.c: abs/angle/conj/real/imag/sgn, complex from parts */
extern const tpu_op_rule_t tpu_rules_custom[];        /* custom.c: user kernels (StableHLO functions), custom.h */

#endif /* TPU_OPS_OPS_H_ */
