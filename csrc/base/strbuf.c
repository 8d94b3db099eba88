#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tpu_strbuf_init(tpu_strbuf_t *sb) { memset(sb, 0, sizeof(*sb)); }

void tpu_strbuf_free(tpu_strbuf_t *sb) {
  free(sb->data);
  memset(sb, 0, sizeof(*sb));
}

void tpu_strbuf_reset(tpu_strbuf_t *sb) {
  sb->len = 0;
  sb->failed = 0;
  if (sb->data) sb->data[0] = 0;
}

static int tpu_strbuf_reserve(tpu_strbuf_t *sb, size_t extra) {
  if (sb->failed) return 0;
  size_t need = sb->len + extra + 1;
  if (need <= sb->cap) return 1;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < need) cap *= 2;
  char *p = (char *)realloc(sb->data, cap);
  if (!p) {
    sb->failed = 1;
    return 0;
  }
  sb->data = p;
  sb->cap = cap;
  return 1;
}

void tpu_strbuf_append(tpu_strbuf_t *sb, const char *s, size_t n) {
  if (!tpu_strbuf_reserve(sb, n)) return;
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = 0;
}

void tpu_strbuf_puts(tpu_strbuf_t *sb, const char *s) { tpu_strbuf_append(sb, s, strlen(s)); }

void tpu_strbuf_vprintf(tpu_strbuf_t *sb, const char *fmt, va_list ap) {
  if (sb->failed) return;
  char small[256];
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(small, sizeof(small), fmt, ap2);
  va_end(ap2);
  if (n < 0) return;
  if ((size_t)n < sizeof(small)) {
    tpu_strbuf_append(sb, small, (size_t)n);
    return;
  }
  if (!tpu_strbuf_reserve(sb, (size_t)n)) return;
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void tpu_strbuf_printf(tpu_strbuf_t *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_strbuf_vprintf(sb, fmt, ap);
  va_end(ap);
}

int tpu_strbuf_ok(const tpu_strbuf_t *sb) { return !sb->failed; }

const char *tpu_strbuf_cstr(tpu_strbuf_t *sb) { return sb->data ? sb->data : ""; }

char *tpu_strbuf_detach(tpu_strbuf_t *sb, size_t *out_len) {
  if (out_len) *out_len = sb->len;
  char *p = sb->data;
  if (!p) {
    p = (char *)malloc(1);
    if (p) p[0] = 0;
  }
  memset(sb, 0, sizeof(*sb));
  return p;
}
