/* pjrt_ffi.c - host kernels: C functions a program calls on a host-memory
 * plugin (XLA CPU), as typed XLA FFI custom calls.
 *
 * A kernel is registered once per process under a target name through the
 * plugin's FFI extension (PJRT_Extension_Type_FFI, PJRT_FFI_Register_Handler)
 * for XLA's host platform; a program calls it with
 *   stablehlo.custom_call @name(%a, %b, ...) {api_version = 4 : i32}
 * and XLA hands the handler a call frame (XLA_FFI_CallFrame) holding its
 * operand and result buffers.  Only the CPU plugin runs its programs in this
 * process's memory, so only it gets host kernels; a caller asks
 * tpu_pjrt_ffi_registered() before emitting a call.
 *
 * The declarations below are this project's own, of the layouts of XLA's
 * FFI C ABI (xla/ffi/api/c_api.h, API major 0) that a handler touches:
 *   XLA_FFI_Extension_Base  {size_t struct_size; int type; next*}
 *   XLA_FFI_Api_Version     {size_t struct_size; ext*; int major, minor}
 *   XLA_FFI_Api             {size_t struct_size; ext*; XLA_FFI_Api_Version; ...}
 *   XLA_FFI_Buffer          {size_t struct_size; ext*; int dtype; void *data;
 *                            int64_t rank; int64_t *dims}
 *   XLA_FFI_Args / _Rets    {size_t struct_size; ext*; int64_t size;
 *                            int *types; void **values}
 *   XLA_FFI_CallFrame       {size_t struct_size; ext*; const XLA_FFI_Api *api;
 *                            ctx*; int stage; Args; Rets; Attrs; future*}
 *   XLA_FFI_Metadata        {size_t struct_size; XLA_FFI_Api_Version; u32 traits}
 *   XLA_FFI_Metadata_Extension {XLA_FFI_Extension_Base; XLA_FFI_Metadata *}
 * XLA first calls a handler with a metadata extension in the frame's
 * extension chain (registration asks for the handler's API version); the
 * handler answers the framework's own version and returns no error.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pjrt/pjrt_internal.h"

typedef struct ffi_ext {
  size_t struct_size;
  int type;
  struct ffi_ext *next;
} ffi_ext_t;

typedef struct {
  size_t struct_size;
  ffi_ext_t *extension_start;
  int major_version;
  int minor_version;
} ffi_api_version_t;

typedef struct {
  size_t struct_size;
  ffi_ext_t *extension_start;
  ffi_api_version_t api_version;
} ffi_api_head_t;

typedef struct {
  size_t struct_size;
  ffi_ext_t *extension_start;
  int dtype;
  void *data;
  int64_t rank;
  int64_t *dims;
} ffi_buffer_t;

typedef struct {
  size_t struct_size;
  ffi_ext_t *extension_start;
  int64_t size;
  int *types;
  void **values;
} ffi_list_t;

typedef struct {
  size_t struct_size;
  ffi_ext_t *extension_start;
  const ffi_api_head_t *api;
  void *ctx;
  int stage;
  ffi_list_t args;
  ffi_list_t rets;
  /* attrs and future follow; not read */
} ffi_call_frame_t;

typedef struct {
  size_t struct_size;
  ffi_api_version_t api_version;
  uint32_t traits;
} ffi_metadata_t;

typedef struct {
  ffi_ext_t base;
  ffi_metadata_t *metadata;
} ffi_metadata_ext_t;

#define FFI_EXTENSION_METADATA 1
#define FFI_STAGE_EXECUTE 3
#define FFI_BUFFER 1

/* PJRT's side: the FFI extension of the plugin's API table. */
typedef struct {
  size_t struct_size;
  const char *target_name;
  size_t target_name_size;
  void *handler;
  const char *platform_name;
  size_t platform_name_size;
  uint32_t traits;
} pj_ffi_register_args_t;

typedef struct {
  ffi_ext_t base; /* PJRT_Extension_Base has the same layout */
  void *type_id_register;
  void *user_data_add;
  pj_error_t *(*register_handler)(pj_ffi_register_args_t *args);
} pj_ffi_extension_t;

#define PJ_EXTENSION_FFI 5

static tpu_dtype_t dtype_of(int code) {
  switch (code) {
    case 1: return TPU_PRED;
    case 2: return TPU_S8;
    case 3: return TPU_S16;
    case 4: return TPU_S32;
    case 5: return TPU_S64;
    case 6: return TPU_U8;
    case 10: return TPU_F16;
    case 11: return TPU_F32;
    case 12: return TPU_F64;
    case 16: return TPU_BF16;
    default: return TPU_DTYPE_INVALID;
  }
}

static int fill(const ffi_list_t *list, tpu_pjrt_ffi_buffer_t *out, int max) {
  int n = 0;
  for (int64_t i = 0; i < list->size && n < max; i++) {
    if (list->types[i] != FFI_BUFFER) continue;
    const ffi_buffer_t *b = (const ffi_buffer_t *)list->values[i];
    tpu_pjrt_ffi_buffer_t *o = &out[n++];
    o->dtype = dtype_of(b->dtype);
    o->data = b->data;
    o->rank = (int)b->rank;
    o->numel = 1;
    for (int64_t d = 0; d < b->rank && d < TPU_MAX_RANK; d++) {
      o->dims[d] = b->dims[d];
      o->numel *= b->dims[d];
    }
  }
  return n;
}

bool tpu_pjrt_ffi_decode(void *frame, tpu_pjrt_ffi_call_t *out) {
  ffi_call_frame_t *f = (ffi_call_frame_t *)frame;
  for (ffi_ext_t *e = f->extension_start; e; e = e->next) {
    if (e->type == FFI_EXTENSION_METADATA) {
      ffi_metadata_t *m = ((ffi_metadata_ext_t *)e)->metadata;
      m->api_version.major_version = f->api->api_version.major_version;
      m->api_version.minor_version = f->api->api_version.minor_version;
      m->traits = 0;
      return false;
    }
  }
  if (f->stage != FFI_STAGE_EXECUTE) return false;
  memset(out, 0, sizeof(*out));
  out->num_args = fill(&f->args, out->args, TPU_PJRT_FFI_MAX_BUFFERS);
  out->num_rets = fill(&f->rets, out->rets, TPU_PJRT_FFI_MAX_BUFFERS);
  return true;
}

/* Names registered in this process: XLA's registry is process-wide and a
 * second registration of a name fails, so each name goes once. */
static pthread_mutex_t ffi_mu = PTHREAD_MUTEX_INITIALIZER;
#define MAX_FFI 16
static char ffi_names[MAX_FFI][64];
static int ffi_count;

static int ffi_known_locked(const char *name) {
  for (int i = 0; i < ffi_count; i++)
    if (!strcmp(ffi_names[i], name)) return 1;
  return 0;
}

bool tpu_pjrt_ffi_registered(const char *name) {
  pthread_mutex_lock(&ffi_mu);
  int known = ffi_known_locked(name);
  pthread_mutex_unlock(&ffi_mu);
  return known != 0;
}

tpu_status_t tpu_pjrt_ffi_register(tpu_pjrt_client_t *client, const char *name, tpu_pjrt_ffi_handler_t handler) {
  if (strcmp(client->platform, "cpu"))
    return tpu_status_make(TPU_UNIMPLEMENTED, "host kernel %s: the %s plugin does not run programs in host memory",
                           name, client->platform);
  if (strlen(name) >= sizeof(ffi_names[0]))
    return tpu_status_make(TPU_INVALID_ARGUMENT, "host kernel name too long: %s", name);
  const pj_ffi_extension_t *ext = NULL;
  for (const ffi_ext_t *e = (const ffi_ext_t *)client->api->extension_start; e; e = e->next)
    if (e->type == PJ_EXTENSION_FFI) ext = (const pj_ffi_extension_t *)e;
  if (!ext || ext->base.struct_size < sizeof(pj_ffi_extension_t) || !ext->register_handler)
    return tpu_status_make(TPU_UNIMPLEMENTED, "host kernel %s: the plugin has no FFI handler registration", name);
  pthread_mutex_lock(&ffi_mu);
  tpu_status_t st = NULL;
  if (!ffi_known_locked(name)) {
    if (ffi_count == MAX_FFI) {
      st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "host kernel %s: more than %d host kernels", name, MAX_FFI);
    } else {
      pj_ffi_register_args_t args = {.struct_size = sizeof(args),
                                     .target_name = name,
                                     .target_name_size = strlen(name),
                                     .handler = (void *)handler,
                                     .platform_name = "Host",
                                     .platform_name_size = 4};
      st = tpu_pjrt_status_from_error(client->api, ext->register_handler(&args), "registering a host kernel");
      if (!st) snprintf(ffi_names[ffi_count++], sizeof(ffi_names[0]), "%s", name);
    }
  }
  pthread_mutex_unlock(&ffi_mu);
  return st;
}
