/* custom.h - user kernels: StableHLO functions registered at run time.
 *
 * A kernel is module-level text (one or more `func.func private` definitions
 * whose symbols are unique to the kernel: the Python side renames them) with
 * an entry symbol and the entry's argument and result types.  Registering
 * returns an id; the "custom_kernel" rule (attr 0: the id) checks its inputs
 * against the argument types, defines the text once in the module under
 * construction and calls the entry.  The id is part of the node's attrs, so
 * of the program key; the text is part of the program text, so of the disk
 * key.  Equal registrations (name, text, entry, types) return the same id.
 * Kernels live until the process ends (a program may name them any time).
 */
#ifndef TPU_OPS_CUSTOM_H_
#define TPU_OPS_CUSTOM_H_

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "hlo/hlo.h"

#define TPU_CUSTOM_MAX_ARGS 64
#define TPU_CUSTOM_MAX_RESULTS 16

typedef struct tpu_custom_kernel {
  int64_t id;
  char *name;   /* the user's name, for messages ("ns::op") */
  char *entry;  /* the symbol @main calls */
  char *text;   /* the definitions */
  size_t len;
  int nargs, nres;
  tpu_hlo_type_t args[TPU_CUSTOM_MAX_ARGS];
  tpu_hlo_type_t res[TPU_CUSTOM_MAX_RESULTS];
} tpu_custom_kernel_t;

tpu_status_t tpu_custom_kernel_register(const char *name, const char *text, size_t len, const char *entry,
                                        int nargs, const tpu_hlo_type_t *args, int nres,
                                        const tpu_hlo_type_t *res, int64_t *out_id);
/* The kernel (borrowed, valid for the process) or NULL. */
const tpu_custom_kernel_t *tpu_custom_kernel_get(int64_t id);
/* "(tensor<4x8xf32>, tensor<8xf32>)" into buf; returns buf. */
const char *tpu_custom_types_str(const tpu_hlo_type_t *t, int n, char *buf, size_t size);

#endif /* TPU_OPS_CUSTOM_H_ */
