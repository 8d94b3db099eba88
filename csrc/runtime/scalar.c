/* scalar.c - Python numbers as 0-d device inputs.
 *
 * A number reaches a program as a runtime input, never as a constant, so a
 * changing learning rate never recompiles.  A small direct-mapped cache keeps
 * the device buffers of the numbers that recur (lr, eps, alpha); a number is
 * admitted on its second sighting, so those that change every step (bias
 * corrections) never fill it.
 */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "runtime/runtime_internal.h"

tpu_status_t scalar_value(const tpu_rt_input_t *in, int device, tpu_value_t **out) {
  unsigned char host[16];
  memset(host, 0, sizeof(host));
  tpu_dtype_t dt = in->scalar_dtype;
  switch (dt) {
    case TPU_F32: { float x = (float)in->scalar_f; memcpy(host, &x, 4); break; }
    case TPU_F64: { memcpy(host, &in->scalar_f, 8); break; }
    case TPU_F16: case TPU_BF16: {
      /* round-to-nearest-even from f32 bits */
      float x = (float)in->scalar_f;
      uint32_t b;
      memcpy(&b, &x, 4);
      uint16_t h;
      if (dt == TPU_BF16) {
        if ((b & 0x7fffffffu) > 0x7f800000u) h = (uint16_t)((b >> 16) | 0x40);
        else h = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
      } else {
        /* f32 -> f16 */
        uint32_t sign = (b >> 16) & 0x8000u, mant = b & 0x7fffffu;
        int32_t exp = (int32_t)((b >> 23) & 0xff) - 127 + 15;
        if (((b >> 23) & 0xff) == 0xff) h = (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
        else if (exp >= 31) h = (uint16_t)(sign | 0x7c00u);
        else if (exp <= 0) {
          if (exp < -10) h = (uint16_t)sign;
          else {
            mant |= 0x800000u;
            uint32_t shift = (uint32_t)(14 - exp);
            uint32_t hm = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
            if (rem > half || (rem == half && (hm & 1))) hm++;
            h = (uint16_t)(sign | hm);
          }
        } else {
          uint32_t hm = mant >> 13, rem = mant & 0x1fffu;
          uint32_t hv = sign | ((uint32_t)exp << 10) | hm;
          if (rem > 0x1000u || (rem == 0x1000u && (hm & 1))) hv++;
          h = (uint16_t)hv;
        }
      }
      memcpy(host, &h, 2);
      break;
    }
    case TPU_F8E5M2: case TPU_F8E4M3FN: case TPU_F8E5M2FNUZ: case TPU_F8E4M3FNUZ:
      host[0] = tpu_dtype_f8_bits(dt, in->scalar_f);
      break;
    case TPU_PRED: host[0] = in->scalar_i != 0; break;
    case TPU_S8: case TPU_U8: { int8_t x = (int8_t)in->scalar_i; memcpy(host, &x, 1); break; }
    case TPU_S16: case TPU_U16: { int16_t x = (int16_t)in->scalar_i; memcpy(host, &x, 2); break; }
    case TPU_S32: case TPU_U32: { int32_t x = (int32_t)in->scalar_i; memcpy(host, &x, 4); break; }
    case TPU_S64: case TPU_U64: { memcpy(host, &in->scalar_i, 8); break; }
    default:
      return tpu_status_make(TPU_INVALID_ARGUMENT, "scalar of unsupported dtype %s", tpu_dtype_name(dt));
  }
  uint64_t bits;
  memcpy(&bits, host, 8);
  uint64_t h = tpu_hash_u64(tpu_hash_u64(bits, (uint64_t)dt), (uint64_t)device);
  tpu_scalar_slot_t *slot = &R.scalars[h & (TPU_SCALAR_SLOTS - 1)];
  if (slot->used && slot->dtype == dt && slot->bits == bits && slot->device == device) {
    R.scalar_hits++;
    value_retain(slot->value);
    *out = slot->value;
    return NULL;
  }
  R.scalar_misses++;
  tpu_pjrt_buffer_t *buf;
  TPU_PROPAGATE(tpu_pjrt_buffer_from_host(R.client, device, dt, NULL, 0, host, &buf));
  tpu_hlo_type_t t = tpu_hlo_type_scalar(dt);
  tpu_value_t *v = value_new(&t, device);
  if (!v) {
    tpu_pjrt_buffer_destroy(buf);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  v->buffer = buf;
  uint64_t *seen = &R.scalar_seen[h & (TPU_SCALAR_SLOTS - 1)];
  if (*seen != h) { /* first sighting: remember it, do not cache yet */
    *seen = h;
    *out = v;
    return NULL;
  }
  if (slot->used) value_release(slot->value);
  slot->used = 1;
  slot->dtype = dt;
  slot->bits = bits;
  slot->device = device;
  slot->value = v;
  value_retain(v);
  *out = v;
  return NULL;
}


void scalars_clear(void) {
  for (int i = 0; i < TPU_SCALAR_SLOTS; i++) {
    if (R.scalars[i].used) value_release(R.scalars[i].value);
    R.scalars[i].used = 0;
    R.scalar_seen[i] = 0;
  }
}

int scalars_used(void) {
  int n = 0;
  for (int i = 0; i < TPU_SCALAR_SLOTS; i++) n += R.scalars[i].used;
  return n;
}

/* Drops the device buffers the engine keeps for reuse (the scalar cache). */
void tpu_rt_empty_cache(void) {
  LOCK();
  scalars_clear();
  UNLOCK();
  host_memory_trim();
}
