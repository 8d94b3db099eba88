#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_status_s {
  tpu_code_t code;
  char *message;
};

/* Returned when even the status cannot be allocated: never freed. */
static struct tpu_status_s tpu_oom_status = {TPU_RESOURCE_EXHAUSTED,
                                             (char *)"out of host memory"};

static char *tpu_vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  char *s = (char *)malloc((size_t)n + 1);
  if (!s) return NULL;
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

tpu_status_t tpu_status_makev(tpu_code_t code, const char *fmt, va_list ap) {
  if (code == TPU_OK) code = TPU_UNKNOWN;
  tpu_status_t st = (tpu_status_t)malloc(sizeof(*st));
  if (!st) return &tpu_oom_status;
  st->code = code;
  st->message = tpu_vformat(fmt, ap);
  if (!st->message) {
    free(st);
    return &tpu_oom_status;
  }
  return st;
}

tpu_status_t tpu_status_make(tpu_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_status_t st = tpu_status_makev(code, fmt, ap);
  va_end(ap);
  return st;
}

tpu_status_t tpu_status_annotate(tpu_status_t st, const char *fmt, ...) {
  if (!st || st == &tpu_oom_status) return st;
  va_list ap;
  va_start(ap, fmt);
  char *ctx = tpu_vformat(fmt, ap);
  va_end(ap);
  if (!ctx) return st;
  if (!ctx[0]) {
    free(ctx);
    return st;
  }
  size_t a = strlen(ctx), b = strlen(st->message);
  char *msg = (char *)malloc(a + 2 + b + 1);
  if (msg) {
    memcpy(msg, ctx, a);
    memcpy(msg + a, ": ", 2);
    memcpy(msg + a + 2, st->message, b + 1);
    free(st->message);
    st->message = msg;
  }
  free(ctx);
  return st;
}

tpu_code_t tpu_status_code(tpu_status_t st) { return st ? st->code : TPU_OK; }

const char *tpu_status_message(tpu_status_t st) { return st ? st->message : ""; }

const char *tpu_code_name(tpu_code_t code) {
  static const char *const names[] = {
      "OK",          "CANCELLED",        "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if ((int)code < 0 || (int)code > 16) return "UNKNOWN";
  return names[code];
}

void tpu_status_free(tpu_status_t st) {
  if (!st || st == &tpu_oom_status) return;
  free(st->message);
  free(st);
}
