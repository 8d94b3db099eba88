/* strbuf.h - a growable string builder.
 * Appends never fail visibly: on allocation failure the buffer is marked
 * failed (tpu_strbuf_ok() returns 0) and later appends are ignored, so a
 * builder can append freely and check once at the end (the SQLite StrAccum
 * habit).
 */
#ifndef TPU_BASE_STRBUF_H_
#define TPU_BASE_STRBUF_H_

#include <stdarg.h>
#include <stddef.h>

#include "base/status.h"

typedef struct tpu_strbuf {
  char *data;  /* always NUL-terminated when len > 0 or after the first append */
  size_t len;
  size_t cap;
  int failed;
} tpu_strbuf_t;

void tpu_strbuf_init(tpu_strbuf_t *sb);
void tpu_strbuf_free(tpu_strbuf_t *sb);
void tpu_strbuf_reset(tpu_strbuf_t *sb); /* len = 0, keeps memory */
void tpu_strbuf_append(tpu_strbuf_t *sb, const char *s, size_t n);
void tpu_strbuf_puts(tpu_strbuf_t *sb, const char *s);
void tpu_strbuf_printf(tpu_strbuf_t *sb, const char *fmt, ...) TPU_PRINTF(2, 3);
void tpu_strbuf_vprintf(tpu_strbuf_t *sb, const char *fmt, va_list ap);
int tpu_strbuf_ok(const tpu_strbuf_t *sb);
const char *tpu_strbuf_cstr(tpu_strbuf_t *sb); /* "" when empty */
/* Hands the buffer to the caller (free() it); the builder is reset. */
char *tpu_strbuf_detach(tpu_strbuf_t *sb, size_t *out_len);

#endif /* TPU_BASE_STRBUF_H_ */
