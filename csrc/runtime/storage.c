/* storage.c - values, storages and views.
 *
 * A value is one device array, materialised (a PJRT buffer) or pending (an
 * output of a node of its device's graph).  A storage holds the CURRENT
 * value of one base array; writes swap in a new value, so every alias sees
 * them.  A storage may have no value yet (reads as zeros) and, made from a
 * byte count, no dtype yet (the first view gives it one).  A view is
 * (sizes, strides, offset, dtype) relative to its storage's flat layout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime_internal.h"
#include "runtime/storage_list.h"

/* ---- values ------------------------------------------------------------------ */

tpu_value_t *value_new(const tpu_hlo_type_t *type, int device) {
  tpu_value_t *v = (tpu_value_t *)calloc(1, sizeof(*v));
  if (!v) return NULL;
  v->refs = 1;
  v->type = *type;
  v->device = device;
  v->node = -1;
  v->made_at = -1;
  R.live_values++;
  return v;
}

void value_retain(tpu_value_t *v) { v->refs++; }

void value_release(tpu_value_t *v) {
  if (!v || --v->refs > 0) return;
  if (v->buffer && !R.forked) tpu_pjrt_buffer_destroy(v->buffer); /* a forked child leaves the parent's */
  R.live_values--;
  free(v);
}

/* ---- storages ------------------------------------------------------------------ */

static void storage_link(tpu_storage_t *s) {
  s->live_next = R.storages;
  if (R.storages) R.storages->live_prev = s;
  R.storages = s;
  R.live_storages++;
}

static void storage_unlink(tpu_storage_t *s) {
  if (s->live_prev) s->live_prev->live_next = s->live_next;
  else R.storages = s->live_next;
  if (s->live_next) s->live_next->live_prev = s->live_prev;
  R.live_storages--;
}

int64_t storage_promised(const tpu_storage_t *s) { return s->value ? 0 : (int64_t)tpu_storage_nbytes(s); }

void storage_repromise(const tpu_storage_t *s, int64_t before) {
  tpu_pjrt_memory_promise(s->device, storage_promised(s) - before);
}

tpu_storage_t *storage_new(tpu_value_t *value /* ref moved in */) {
  tpu_storage_t *s = (tpu_storage_t *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->refs = 1;
  s->dtype = value->type.dtype;
  s->numel = tpu_hlo_type_numel(&value->type);
  s->device = value->device;
  s->value = value;
  storage_link(s);
  return s;
}

/* A storage holding a device buffer of type t (the buffer moved in; on
 * failure, NULL, and the buffer is destroyed). */
tpu_storage_t *storage_of_buffer(tpu_pjrt_buffer_t *buf, const tpu_hlo_type_t *t, int device) {
  tpu_value_t *v = value_new(t, device);
  tpu_storage_t *s = v ? storage_new(v) : NULL;
  if (!s) {
    if (v) value_release(v);
    tpu_pjrt_buffer_destroy(buf);
    return NULL;
  }
  v->buffer = buf;
  return s;
}

tpu_storage_t *storage_new_lazy(int device, tpu_dtype_t dtype, int64_t numel, bool untyped) {
  tpu_storage_t *s = (tpu_storage_t *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->refs = 1;
  s->dtype = dtype;
  s->numel = numel;
  s->device = device;
  s->untyped = untyped;
  storage_link(s);
  storage_repromise(s, 0);
  return s;
}

void tpu_storage_retain(tpu_storage_t *s) {
  LOCK();
  s->refs++;
  UNLOCK();
}

void tpu_storage_release(tpu_storage_t *s) {
  if (!s) return;
  LOCK();
  if (--s->refs == 0) {
    if (s->value) value_release(s->value);
    else tpu_pjrt_memory_promise(s->device, -storage_promised(s));
    storage_unlink(s);
    free(s);
  }
  UNLOCK();
}

/* Once per result tensor, so no lock: a storage being named is not yet
 * reachable through any address, and the scan below reads the field
 * atomically. */
void tpu_storage_set_address(tpu_storage_t *s, uint64_t address) {
  atomic_store_explicit(&s->address, address, memory_order_relaxed);
}

tpu_storage_t *tpu_storage_find_address(uint64_t address, uint64_t *out_byte_offset) {
  tpu_storage_t *found = NULL;
  LOCK();
  for (tpu_storage_t *s = R.storages; s && !found; s = s->live_next) {
    uint64_t n = (uint64_t)s->numel * (uint64_t)tpu_dtype_size(s->dtype);
    uint64_t base = atomic_load_explicit(&s->address, memory_order_relaxed);
    if (base && address >= base && (address - base < n || address == base)) {
      found = s;
      *out_byte_offset = address - base;
    }
  }
  UNLOCK();
  if (!found) *out_byte_offset = 0;
  return found;
}

int64_t tpu_storage_numel(const tpu_storage_t *s) { return s->numel; }
tpu_dtype_t tpu_storage_dtype(const tpu_storage_t *s) { return s->dtype; }
int tpu_storage_device(const tpu_storage_t *s) { return s->device; }
const void *tpu_storage_value_id(const tpu_storage_t *s) { return s->value; }
size_t tpu_storage_nbytes(const tpu_storage_t *s) { return (size_t)s->numel * tpu_dtype_size(s->dtype); }

tpu_status_t check_started_device(int device) {
  if (R.forked) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_FORKED_MSG);
  if (!R.initialized) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  int n = tpu_pjrt_client_device_count(R.client);
  if (device < 0 || device >= n || device >= TPU_PJRT_MAX_DEVICES)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "invalid device tpu:%d (%d device%s available)", device, n,
                           n == 1 ? "" : "s");
  return NULL;
}

tpu_status_t tpu_rt_storage_alloc(int device, size_t nbytes, tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) st = memory_check(device, (int64_t)nbytes, "allocating");
  if (!st) {
    *out_storage = storage_new_lazy(device, TPU_U8, (int64_t)nbytes, true);
    if (!*out_storage) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_storage_empty(int device, tpu_dtype_t dtype, int64_t numel, tpu_storage_t **out_storage) {
  *out_storage = NULL;
  if (!tpu_dtype_valid((int)dtype) || numel < 0)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "storage of %lld elements of dtype code %d", (long long)numel,
                           (int)dtype);
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) st = memory_check(device, numel * (int64_t)tpu_dtype_size(dtype), "allocating");
  if (!st) {
    *out_storage = storage_new_lazy(device, dtype, numel, false);
    if (!*out_storage) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_storage_resize(tpu_storage_t *s, size_t nbytes) {
  LOCK();
  int64_t promised = storage_promised(s);
  size_t isz = tpu_dtype_size(s->dtype);
  tpu_dtype_t dt = nbytes % isz == 0 ? s->dtype : TPU_U8;
  size_t esz = tpu_dtype_size(dt);
  int64_t numel = (int64_t)(nbytes / esz);
  size_t keep = tpu_storage_nbytes(s) < nbytes ? tpu_storage_nbytes(s) : nbytes;
  keep -= keep % esz;
  tpu_status_t st = NULL;
  if (!s->value || keep == 0) {
    if (s->value) value_release(s->value);
    s->value = NULL;
  } else {
    /* new value = the old one's first `keep` bytes, zeros after */
    tpu_storage_t tmp = {.refs = 1, .dtype = dt, .numel = numel, .device = s->device};
    tpu_view_t v = {.dtype = dt, .rank = 1, .sizes = {(int64_t)(keep / esz)}, .strides = {1}, .offset = 0};
    tpu_rt_input_t src;
    memset(&src, 0, sizeof(src));
    src.storage = s;
    src.view = v;
    tpu_graph_t *g = graph_of(s->device);
    int mark = g->nnodes;
    tpu_ref_t refs[2];
    const tpu_hlo_type_t *bt;
    st = storage_ref(g, &tmp, dt, &refs[0], &bt);
    if (!st) st = input_ref(g, &src, &refs[1]);
    tpu_node_t *node = NULL;
    if (!st) st = view_node(g, refs, 2, &v, &node);
    if (st) {
      graph_truncate(g, mark);
      if (R.mode != TPU_MODE_FUSED) graph_discard(g);
    } else {
      value_retain(node->outs[0]);
      value_release(s->value);
      s->value = node->outs[0];
    }
    if (!st) {
      s->dtype = dt;
      s->numel = numel;
      st = maybe_flush_after_op(g);
    }
    storage_repromise(s, promised);
    UNLOCK();
    return st;
  }
  s->dtype = dt;
  s->numel = numel;
  storage_repromise(s, promised);
  UNLOCK();
  return st;
}

/* ---- views ---------------------------------------------------------------------------- */

bool view_is_identity(const tpu_view_t *view, const tpu_hlo_type_t *t) {
  if (view->offset != 0 || view->rank != t->rank || view->dtype != t->dtype) return false;
  int64_t expect = 1;
  for (int d = view->rank - 1; d >= 0; d--) {
    if (view->sizes[d] != t->dims[d]) return false;
    if (view->sizes[d] != 1 && view->strides[d] != expect) return false;
    expect *= view->sizes[d];
  }
  return true;
}

tpu_status_t view_node(tpu_graph_t *g, const tpu_ref_t *refs, int nrefs, const tpu_view_t *v, tpu_node_t **out_node) {
  static const tpu_op_rule_t *rules[2];
  if (!rules[0]) {
    rules[0] = tpu_op_rule_find("view_read");
    rules[1] = tpu_op_rule_find("view_write");
  }
  int64_t ints[2 + 2 * TPU_MAX_RANK + 1];
  int n = 0;
  ints[n++] = v->rank;
  for (int d = 0; d < v->rank; d++) ints[n++] = v->sizes[d];
  for (int d = 0; d < v->rank; d++) ints[n++] = v->strides[d];
  ints[n++] = 0; /* the offset: a runtime input below, so the program does not depend on it */
  tpu_ref_t in[3] = {refs[0], nrefs > 1 ? refs[1] : 0, 0};
  int nin = nrefs;
  if (v->offset != 0) {
    tpu_rt_input_t off;
    memset(&off, 0, sizeof(off));
    off.scalar_dtype = TPU_S64;
    off.scalar_i = v->offset;
    off.scalar_f = (double)v->offset;
    TPU_PROPAGATE(input_ref(g, &off, &in[nin++]));
  }
  tpu_op_attrs_t a = {n, ints, 0, NULL};
  return graph_add_node(g, rules[nrefs > 1], in, nin, &a, out_node);
}

static const char *dims_str(const int64_t *d, int n, char *buf, size_t size) {
  size_t k = 0;
  buf[k++] = '[';
  for (int i = 0; i < n && k + 24 < size; i++)
    k += (size_t)snprintf(buf + k, size - k, i ? ", %lld" : "%lld", (long long)d[i]);
  snprintf(buf + k, size - k, "]");
  return buf;
}

tpu_status_t check_view(tpu_storage_t *s, const tpu_view_t *view) {
  if (view->rank < 0 || view->rank > TPU_MAX_RANK)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "tensors of rank %d are not supported (max %d)", view->rank,
                           TPU_MAX_RANK);
  size_t isz = tpu_dtype_size(view->dtype);
  int64_t extent = 0; /* elements of view dtype the view reaches, 0 if empty */
  bool empty = false;
  for (int d = 0; d < view->rank; d++) empty |= view->sizes[d] == 0;
  if (!empty) {
    extent = view->offset + 1;
    for (int d = 0; d < view->rank; d++) extent += (view->sizes[d] - 1) * view->strides[d];
  }
  if (isz && (size_t)extent * isz > tpu_storage_nbytes(s)) {
    char a[256], b[256];
    return tpu_status_make(TPU_INVALID_ARGUMENT,
                           "setStorage: sizes %s, strides %s, storage offset %lld, and itemsize %zu requiring a "
                           "storage size of %lld are out of bounds for storage of size %zu",
                           dims_str(view->sizes, view->rank, a, sizeof(a)),
                           dims_str(view->strides, view->rank, b, sizeof(b)), (long long)view->offset, isz,
                           (long long)((size_t)extent * isz), tpu_storage_nbytes(s));
  }
  if (s->untyped && !s->value && view->dtype != s->dtype && isz && tpu_storage_nbytes(s) % isz == 0) {
    s->numel = (int64_t)(tpu_storage_nbytes(s) / isz);
    s->dtype = view->dtype;
    s->untyped = false;
  }
  if (view->dtype != s->dtype) {
    size_t a = tpu_dtype_size(s->dtype), b = tpu_dtype_size(view->dtype);
    if (!a || !b || ((size_t)s->numel * a) % b)
      return tpu_status_make(TPU_INVALID_ARGUMENT, "a %s view of a %s storage of %lld elements is not possible",
                             tpu_dtype_name(view->dtype), tpu_dtype_name(s->dtype), (long long)s->numel);
  }
  return NULL;
}

/* ---- the live storages (storage_list.h) ---- */
int tpu_rt_storages_live(tpu_rt_storage_info_t *out, int max) {
  int n = 0;
  LOCK();
  for (tpu_storage_t *s = R.storages; s; s = s->live_next) {
    uint64_t a = atomic_load_explicit(&s->address, memory_order_relaxed);
    if (!a) continue;
    if (n < max)
      out[n] = (tpu_rt_storage_info_t){a, (size_t)s->numel * tpu_dtype_size(s->dtype), s->device, s->value != NULL};
    n++;
  }
  UNLOCK();
  return n;
}
