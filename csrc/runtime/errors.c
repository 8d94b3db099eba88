/* errors.c - device-side checks: the error-state fold emitted into programs
 * and the host table from check ids to messages (see errors.h).  Called with
 * the runtime lock held. */
#include "runtime/errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

typedef struct tpu_err_entry {
  int64_t id; /* 0 = empty slot (ids are >= 1) */
  tpu_code_t code;
  char *msg;
} tpu_err_entry_t;

static struct {
  tpu_err_entry_t *slots;
  size_t cap, n; /* cap: power of two */
} T;

static int64_t tpu_err_id(tpu_code_t code, const char *msg) {
  uint64_t h = tpu_hash_bytes(tpu_hash_u64(TPU_HASH_SEED, (uint64_t)code), msg, strlen(msg));
  int64_t id = (int64_t)(h & 0x3fffffffffffffffULL);
  return id ? id : 1;
}

static tpu_err_entry_t *tpu_err_find(int64_t id) {
  if (!T.cap) return NULL;
  for (size_t i = (size_t)id & (T.cap - 1);; i = (i + 1) & (T.cap - 1)) {
    if (T.slots[i].id == id) return &T.slots[i];
    if (!T.slots[i].id) return NULL;
  }
}

/* Registers (code, msg) under its id; returns the id (the table keeps the
 * first message of an id; a lost registration only makes the report
 * generic). */
static int64_t tpu_err_register(tpu_code_t code, const char *msg) {
  int64_t id = tpu_err_id(code, msg);
  if (tpu_err_find(id)) return id;
  if ((T.n + 1) * 2 > T.cap) {
    size_t cap = T.cap ? T.cap * 2 : 256;
    tpu_err_entry_t *s = (tpu_err_entry_t *)calloc(cap, sizeof(*s));
    if (!s) return id;
    for (size_t i = 0; i < T.cap; i++) {
      if (!T.slots[i].id) continue;
      size_t j = (size_t)T.slots[i].id & (cap - 1);
      while (s[j].id) j = (j + 1) & (cap - 1);
      s[j] = T.slots[i];
    }
    free(T.slots);
    T.slots = s;
    T.cap = cap;
  }
  char *m = strdup(msg);
  if (!m) return id;
  size_t j = (size_t)id & (T.cap - 1);
  while (T.slots[j].id) j = (j + 1) & (T.cap - 1);
  T.slots[j] = (tpu_err_entry_t){id, code, m};
  T.n++;
  return id;
}

void tpu_err_table_clear(void) {
  for (size_t i = 0; i < T.cap; i++) free(T.slots[i].msg);
  free(T.slots);
  T.slots = NULL;
  T.cap = T.n = 0;
}

tpu_hlo_type_t tpu_err_state_type(void) {
  int64_t two = 2;
  return tpu_hlo_type_make(TPU_S64, 1, &two);
}

void tpu_err_state_clean(int64_t out[2]) {
  out[0] = TPU_ERR_NONE;
  out[1] = 0;
}

tpu_hlo_value_t tpu_err_fold(tpu_hlo_func_t *f, tpu_hlo_value_t state, const tpu_op_checks_t *checks) {
  if (!checks || checks->n == 0) return state;
  int64_t lo0 = 0, hi1 = 1, lo1 = 1, hi2 = 2, step = 1, one = 1;
  tpu_hlo_type_t s64 = tpu_hlo_type_scalar(TPU_S64);
  tpu_hlo_value_t id = tpu_hlo_reshape(f, tpu_hlo_slice(f, state, &lo0, &hi1, &step), 0, NULL);
  tpu_hlo_value_t pay = tpu_hlo_reshape(f, tpu_hlo_slice(f, state, &lo1, &hi2, &step), 0, NULL);
  tpu_hlo_value_t none = tpu_hlo_constant_i64(f, s64, TPU_ERR_NONE);
  for (int k = 0; k < checks->n; k++) {
    const tpu_op_check_t *c = &checks->v[k];
    int64_t cid = tpu_err_register(c->code, c->msg);
    tpu_hlo_value_t fire = tpu_hlo_binary(f, "and", tpu_hlo_unary(f, "not", c->ok), tpu_hlo_compare(f, "EQ", id, none));
    id = tpu_hlo_select(f, fire, tpu_hlo_constant_i64(f, s64, cid), id);
    pay = tpu_hlo_select(f, fire, c->payload, pay);
  }
  tpu_hlo_value_t parts[2] = {tpu_hlo_reshape(f, id, 1, &one), tpu_hlo_reshape(f, pay, 1, &one)};
  return tpu_hlo_concatenate(f, parts, 2, 0);
}

tpu_status_t tpu_err_status(const int64_t state[2], const char *note) {
  if (state[0] == TPU_ERR_NONE) return NULL;
  const tpu_err_entry_t *e = tpu_err_find(state[0]);
  if (!e)
    return tpu_status_make(TPU_INTERNAL, "a device-side check failed (check %lld, value %lld)%s%s",
                           (long long)state[0], (long long)state[1], note ? " " : "", note ? note : "");
  /* the message with TPU_OP_PAYLOAD replaced by the payload */
  char buf[TPU_OP_CHECK_MSG_MAX + 64];
  size_t k = 0;
  const char *p = e->msg, *ph = TPU_OP_PAYLOAD;
  size_t phn = strlen(ph);
  while (*p && k + 1 < sizeof(buf)) {
    if (!strncmp(p, ph, phn)) {
      int w = snprintf(buf + k, sizeof(buf) - k, "%lld", (long long)state[1]);
      if (w < 0 || (size_t)w >= sizeof(buf) - k) break;
      k += (size_t)w;
      p += phn;
    } else {
      buf[k++] = *p++;
    }
  }
  buf[k] = 0;
  return tpu_status_make(e->code, "%s%s%s", buf, note ? " " : "", note ? note : "");
}
