/* errors.h - device-side checks, the runtime's half (internal to runtime/).
 *
 * A program whose rules emitted checks (ops.h: tpu_op_check) takes one extra
 * argument and returns one extra result: the device's error state, an
 * s64[2] = {id of the first failing check or -1, its payload}.  The state of
 * a device is threaded from program to program without the host looking at
 * it; the host reads it (16 bytes) only where it waits anyway, and then maps
 * the id back to the check's message through the table kept here.
 *
 * Ids are a hash of (code, message), so the same program text is produced in
 * every process (the disk tier keys programs by their text).
 */
#ifndef TPU_RUNTIME_ERRORS_H_
#define TPU_RUNTIME_ERRORS_H_

#include <stdint.h>

#include "base/status.h"
#include "hlo/hlo.h"
#include "ops/ops.h"

#define TPU_ERR_NONE ((int64_t)-1)

/* The type of the error state: s64[2]. */
tpu_hlo_type_t tpu_err_state_type(void);
/* Host contents of a clean error state. */
void tpu_err_state_clean(int64_t out[2]);

/* Emits, in f, the new error state after `checks` (in order; the first
 * failing check wins, an error already in `state` wins over all) and
 * registers each check's message.  Returns the new state's value. */
tpu_hlo_value_t tpu_err_fold(tpu_hlo_func_t *f, tpu_hlo_value_t state, const tpu_op_checks_t *checks);

/* The status an error state read from the device reports (NULL when clean):
 * the check's code and message with the payload filled in. */
tpu_status_t tpu_err_status(const int64_t state[2], const char *note /* appended if non-NULL */);

/* Forgets every registered message (runtime shutdown). */
void tpu_err_table_clear(void);

#endif /* TPU_RUNTIME_ERRORS_H_ */
