/* status.h - the one status type of the engine.
 *
 * Every fallible function returns tpu_status_t.  NULL means OK; anything else
 * is a heap object carrying an absl-style code and a message.  Context is
 * prepended on the way up ("compiling add: parse error ...").  The caller that
 * receives a non-NULL status owns it and must either return it upward or
 * free it with tpu_status_free().  The Python layer converts it to an
 * exception in exactly one place (csrc/python).
 */
#ifndef TPU_BASE_STATUS_H_
#define TPU_BASE_STATUS_H_

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes follow absl::StatusCode (the same numbers PJRT uses). */
typedef enum tpu_code {
  TPU_OK = 0,
  TPU_CANCELLED = 1,
  TPU_UNKNOWN = 2,
  TPU_INVALID_ARGUMENT = 3,
  TPU_DEADLINE_EXCEEDED = 4,
  TPU_NOT_FOUND = 5,
  TPU_ALREADY_EXISTS = 6,
  TPU_PERMISSION_DENIED = 7,
  TPU_RESOURCE_EXHAUSTED = 8,
  TPU_FAILED_PRECONDITION = 9,
  TPU_ABORTED = 10,
  TPU_OUT_OF_RANGE = 11,
  TPU_UNIMPLEMENTED = 12,
  TPU_INTERNAL = 13,
  TPU_UNAVAILABLE = 14,
  TPU_DATA_LOSS = 15,
  TPU_UNAUTHENTICATED = 16,
} tpu_code_t;

typedef struct tpu_status_s *tpu_status_t;

#define TPU_OK_STATUS ((tpu_status_t)NULL)

#if defined(__GNUC__)
#define TPU_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TPU_MUST_USE __attribute__((warn_unused_result))
#else
#define TPU_PRINTF(a, b)
#define TPU_MUST_USE
#endif

/* Creates a status with a printf-style message.  code must not be TPU_OK. */
tpu_status_t tpu_status_make(tpu_code_t code, const char *fmt, ...) TPU_PRINTF(2, 3);
tpu_status_t tpu_status_makev(tpu_code_t code, const char *fmt, va_list ap);
/* Prepends "context: " to the message; returns the same status (NULL stays NULL). */
tpu_status_t tpu_status_annotate(tpu_status_t st, const char *fmt, ...) TPU_PRINTF(2, 3);
tpu_code_t tpu_status_code(tpu_status_t st);
const char *tpu_status_message(tpu_status_t st); /* "" for OK */
const char *tpu_code_name(tpu_code_t code);
void tpu_status_free(tpu_status_t st);

/* Returns the status of expr upward, with context, if it is not OK. */
#define TPU_RETURN_IF_ERROR(expr, ...)                   \
  do {                                                   \
    tpu_status_t tpu_st__ = (expr);                      \
    if (tpu_st__) return tpu_status_annotate(tpu_st__, __VA_ARGS__); \
  } while (0)

/* The same without added context. */
#define TPU_PROPAGATE(expr)                              \
  do {                                                   \
    tpu_status_t tpu_st__ = (expr);                      \
    if (tpu_st__) return tpu_st__;                       \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPU_BASE_STATUS_H_ */
