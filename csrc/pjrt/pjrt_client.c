/* pjrt_client.c - loading a PJRT plugin, errors and events, the client.
 *
 * A plugin is dlopen'ed (RTLD_LOCAL) once per resolved path per process and
 * never unloaded: plugins keep threads and static state, and the CPU plugin
 * must not be initialised twice.  The table of loaded plugins is the one
 * piece of global mutable state here, guarded by a mutex.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/strbuf.h"
#include "pjrt/pjrt_internal.h"

/* ---- errors and events ------------------------------------------------------ */

tpu_status_t tpu_pjrt_status_from_error(const pj_api_t *api, pj_error_t *err, const char *what) {
  if (!err) return TPU_OK_STATUS;
  pj_error_message_args_t m = {.struct_size = sizeof(m), .error = err};
  api->error_message(&m);
  pj_error_get_code_args_t c = {.struct_size = sizeof(c), .error = err};
  int code = TPU_UNKNOWN;
  pj_error_t *cerr = api->error_get_code(&c);
  if (!cerr) code = c.code;
  else {
    pj_error_destroy_args_t d = {.struct_size = sizeof(d), .error = cerr};
    api->error_destroy(&d);
  }
  if (code <= 0 || code > 16) code = TPU_UNKNOWN;
  tpu_status_t st = tpu_status_make((tpu_code_t)code, "%s: %.*s", what ? what : "PJRT",
                                    (int)(m.message ? m.message_size : 0),
                                    m.message ? m.message : "");
  pj_error_destroy_args_t d = {.struct_size = sizeof(d), .error = err};
  api->error_destroy(&d);
  return st;
}

void tpu_pjrt_event_destroy(const pj_api_t *api, pj_event_t *event) {
  if (!event) return;
  pj_event_destroy_args_t d = {.struct_size = sizeof(d), .event = event};
  tpu_status_free(tpu_pjrt_status_from_error(api, api->event_destroy(&d), "destroying event"));
}

tpu_status_t tpu_pjrt_event_await_destroy(const pj_api_t *api, pj_event_t *event, const char *what) {
  if (!event) return TPU_OK_STATUS;
  pj_event_await_args_t a = {.struct_size = sizeof(a), .event = event};
  tpu_status_t st = tpu_pjrt_status_from_error(api, api->event_await(&a), what);
  tpu_pjrt_event_destroy(api, event);
  return st;
}

/* The plugin calls this on one of its threads when the event is ready. */
typedef struct pj_ready {
  const pj_api_t *api;
  tpu_pjrt_done_fn done;
  void *arg;
} pj_ready_t;

static void pj_on_ready_trampoline(pj_error_t *error, void *user_arg) {
  pj_ready_t *r = (pj_ready_t *)user_arg;
  tpu_status_t st = tpu_pjrt_status_from_error(r->api, error, "device work");
  tpu_pjrt_done_fn done = r->done;
  void *arg = r->arg;
  free(r);
  done(st, arg);
}

tpu_status_t tpu_pjrt_event_on_ready(const pj_api_t *api, pj_event_t *event, tpu_pjrt_done_fn done, void *arg) {
  if (!event) {
    done(TPU_OK_STATUS, arg);
    return TPU_OK_STATUS;
  }
  pj_ready_t *r = (pj_ready_t *)malloc(sizeof(*r));
  if (!r) {
    tpu_pjrt_event_destroy(api, event);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  r->api = api;
  r->done = done;
  r->arg = arg;
  pj_event_on_ready_args_t a = {.struct_size = sizeof(a), .event = event, .callback = pj_on_ready_trampoline,
                                .user_arg = r};
  tpu_status_t st = tpu_pjrt_status_from_error(api, api->event_on_ready(&a), "registering a completion callback");
  if (st) free(r);
  /* The callback holds the plugin's own reference to the completion. */
  tpu_pjrt_event_destroy(api, event);
  return st;
}

bool tpu_pjrt_has_slot(const pj_api_t *api, size_t offset) {
  void *fn = NULL;
  if (offset + sizeof(void *) <= api->struct_size) memcpy(&fn, (const char *)api + offset, sizeof(fn));
  return fn != NULL;
}

/* ---- slot check ----------------------------------------------------------------- */

typedef struct { const char *name; size_t offset; } pj_slot_t;
#define PJ_SLOT(field, pjrt_name) {pjrt_name, offsetof(pj_api_t, field)}
static const pj_slot_t pj_slots[] = {
    PJ_SLOT(error_destroy, "PJRT_Error_Destroy"),
    PJ_SLOT(error_message, "PJRT_Error_Message"),
    PJ_SLOT(error_get_code, "PJRT_Error_GetCode"),
    PJ_SLOT(plugin_initialize, "PJRT_Plugin_Initialize"),
    PJ_SLOT(plugin_attributes, "PJRT_Plugin_Attributes"),
    PJ_SLOT(event_destroy, "PJRT_Event_Destroy"),
    PJ_SLOT(event_await, "PJRT_Event_Await"),
    PJ_SLOT(event_is_ready, "PJRT_Event_IsReady"),
    PJ_SLOT(event_on_ready, "PJRT_Event_OnReady"),
    PJ_SLOT(client_create, "PJRT_Client_Create"),
    PJ_SLOT(client_destroy, "PJRT_Client_Destroy"),
    PJ_SLOT(client_platform_name, "PJRT_Client_PlatformName"),
    PJ_SLOT(client_platform_version, "PJRT_Client_PlatformVersion"),
    PJ_SLOT(client_addressable_devices, "PJRT_Client_AddressableDevices"),
    PJ_SLOT(client_compile, "PJRT_Client_Compile"),
    PJ_SLOT(client_buffer_from_host_buffer, "PJRT_Client_BufferFromHostBuffer"),
    PJ_SLOT(device_description_id, "PJRT_DeviceDescription_Id"),
    PJ_SLOT(device_get_description, "PJRT_Device_GetDescription"),
    PJ_SLOT(executable_destroy, "PJRT_Executable_Destroy"),
    PJ_SLOT(executable_num_replicas, "PJRT_Executable_NumReplicas"),
    PJ_SLOT(executable_num_outputs, "PJRT_Executable_NumOutputs"),
    PJ_SLOT(executable_size_of_generated_code, "PJRT_Executable_SizeOfGeneratedCodeInBytes"),
    PJ_SLOT(executable_serialize, "PJRT_Executable_Serialize"),
    PJ_SLOT(loaded_executable_destroy, "PJRT_LoadedExecutable_Destroy"),
    PJ_SLOT(loaded_executable_get_executable, "PJRT_LoadedExecutable_GetExecutable"),
    PJ_SLOT(loaded_executable_execute, "PJRT_LoadedExecutable_Execute"),
    PJ_SLOT(executable_deserialize_and_load, "PJRT_Executable_DeserializeAndLoad"),
    PJ_SLOT(buffer_destroy, "PJRT_Buffer_Destroy"),
    PJ_SLOT(buffer_to_host_buffer, "PJRT_Buffer_ToHostBuffer"),
    PJ_SLOT(buffer_ready_event, "PJRT_Buffer_ReadyEvent"),
    PJ_SLOT(buffer_copy_to_device, "PJRT_Buffer_CopyToDevice"),
    PJ_SLOT(executable_output_element_types, "PJRT_Executable_OutputElementTypes"),
    PJ_SLOT(executable_output_dimensions, "PJRT_Executable_OutputDimensions"),
};

tpu_status_t tpu_pjrt_check_api(const pj_api_t *api, const char *path) {
  if (!api)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: GetPjrtApi() returned NULL", path);
  int major = api->pjrt_api_version.major_version, minor = api->pjrt_api_version.minor_version;
  if (major != PJ_API_MAJOR)
    return tpu_status_make(TPU_FAILED_PRECONDITION,
                           "%s: PJRT API version %d.%d is not supported (torch_tpu is built for %d.%d)",
                           path, major, minor, PJ_API_MAJOR, PJ_API_MINOR);
  for (size_t i = 0; i < sizeof(pj_slots) / sizeof(pj_slots[0]); i++) {
    size_t end = pj_slots[i].offset + sizeof(void *);
    void *fn = NULL;
    if (end <= api->struct_size) memcpy(&fn, (const char *)api + pj_slots[i].offset, sizeof(fn));
    if (!fn)
      return tpu_status_make(TPU_FAILED_PRECONDITION,
                             "%s: the plugin (PJRT API %d.%d) lacks %s, which torch_tpu (built for "
                             "PJRT API %d.%d) calls; use a newer plugin",
                             path, major, minor, pj_slots[i].name, PJ_API_MAJOR, PJ_API_MINOR);
  }
  return TPU_OK_STATUS;
}

/* ---- plugin table --------------------------------------------------------------- */

#define PJ_MAX_PLUGINS 8
static pthread_mutex_t pj_plugins_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_pjrt_plugin_t pj_plugins[PJ_MAX_PLUGINS];
static int pj_num_plugins;

static char *pj_strndup(const char *s, size_t n) {
  char *r = (char *)malloc(n + 1);
  if (!r) return NULL;
  if (n) memcpy(r, s, n);
  r[n] = 0;
  return r;
}

/* The plugin's xla_version attribute, as text ("?" when absent). */
static void pj_read_xla_version(const pj_api_t *api, char *out, size_t out_size) {
  snprintf(out, out_size, "?");
  pj_plugin_attributes_args_t a = {.struct_size = sizeof(a)};
  tpu_status_t st = tpu_pjrt_status_from_error(api, api->plugin_attributes(&a), "attributes");
  if (st) {
    tpu_status_free(st);
    return;
  }
  for (size_t i = 0; i < a.num_attributes; i++) {
    const pj_named_value_t *v = &a.attributes[i];
    if (v->name_size != strlen("xla_version") || memcmp(v->name, "xla_version", v->name_size)) continue;
    switch (v->type) {
      case PJ_NAMED_STRING: snprintf(out, out_size, "%.*s", (int)v->value_size, v->u.string_value); break;
      case PJ_NAMED_INT64: snprintf(out, out_size, "%lld", (long long)v->u.int64_value); break;
      case PJ_NAMED_BOOL: snprintf(out, out_size, "%d", (int)v->u.bool_value); break;
      case PJ_NAMED_FLOAT: snprintf(out, out_size, "%g", (double)v->u.float_value); break;
      default: snprintf(out, out_size, "list"); break;
    }
    return;
  }
}

static tpu_status_t pj_plugin_load_locked(const char *plugin_path, tpu_pjrt_plugin_t **out) {
  struct stat sb;
  if (stat(plugin_path, &sb) != 0)
    return tpu_status_make(TPU_NOT_FOUND, "PJRT plugin %s: %s", plugin_path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return tpu_status_make(TPU_INVALID_ARGUMENT, "PJRT plugin %s is not a regular file", plugin_path);
  char real[PATH_MAX];
  if (!realpath(plugin_path, real))
    return tpu_status_make(TPU_NOT_FOUND, "PJRT plugin %s: %s", plugin_path, strerror(errno));
  for (int i = 0; i < pj_num_plugins; i++) {
    if (strcmp(pj_plugins[i].path, real) == 0) {
      *out = &pj_plugins[i];
      return TPU_OK_STATUS;
    }
  }
  if (pj_num_plugins == PJ_MAX_PLUGINS)
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "too many PJRT plugins loaded (%d)", PJ_MAX_PLUGINS);

  dlerror();
  void *handle = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *e = dlerror();
    return tpu_status_make(TPU_INVALID_ARGUMENT, "%s is not a PJRT plugin (dlopen failed: %s)",
                           plugin_path, e ? e : "unknown error");
  }
  typedef const pj_api_t *(*get_api_fn)(void);
  get_api_fn get_api;
  void *sym = dlsym(handle, "GetPjrtApi");
  memcpy(&get_api, &sym, sizeof(get_api));
  if (!sym) {
    dlclose(handle);
    return tpu_status_make(TPU_INVALID_ARGUMENT,
                           "%s is not a PJRT plugin (it has no GetPjrtApi symbol)", plugin_path);
  }
  const pj_api_t *api = get_api();
  tpu_status_t st = tpu_pjrt_check_api(api, plugin_path);
  if (st) {
    /* Keep the library mapped: it may have started threads in GetPjrtApi. */
    return st;
  }
  pj_plugin_initialize_args_t ia = {.struct_size = sizeof(ia)};
  st = tpu_pjrt_status_from_error(api, api->plugin_initialize(&ia), "initialising the PJRT plugin");
  if (st) return tpu_status_annotate(st, "%s", plugin_path);

  tpu_pjrt_plugin_t *p = &pj_plugins[pj_num_plugins];
  snprintf(p->path, sizeof(p->path), "%s", real);
  p->handle = handle;
  p->api = api;
  p->api_major = api->pjrt_api_version.major_version;
  p->api_minor = api->pjrt_api_version.minor_version;
  pj_read_xla_version(api, p->xla_version, sizeof(p->xla_version));
  pj_num_plugins++;
  *out = p;
  return TPU_OK_STATUS;
}

static tpu_status_t pj_plugin_load(const char *plugin_path, tpu_pjrt_plugin_t **out) {
  *out = NULL;
  if (!plugin_path || !plugin_path[0])
    return tpu_status_make(TPU_INVALID_ARGUMENT, "no PJRT plugin path given");
  pthread_mutex_lock(&pj_plugins_lock);
  tpu_status_t st = pj_plugin_load_locked(plugin_path, out);
  pthread_mutex_unlock(&pj_plugins_lock);
  return st;
}

/* ---- client ------------------------------------------------------------------------ */

static void pj_client_free(tpu_pjrt_client_t *c) {
  if (!c) return;
  if (c->client) {
    pj_client_destroy_args_t d = {.struct_size = sizeof(d), .client = c->client};
    tpu_status_free(tpu_pjrt_status_from_error(c->api, c->api->client_destroy(&d), "client destroy"));
  }
  free(c->devices);
  free(c->device_ids);
  free(c->platform);
  free(c->platform_version);
  free(c->identity);
  free(c);
}

void tpu_pjrt_client_destroy(tpu_pjrt_client_t *client) { pj_client_free(client); }

tpu_status_t tpu_pjrt_client_create(const char *plugin_path, const tpu_pjrt_option_t *options,
                                    size_t num_options, tpu_pjrt_client_t **out_client) {
  *out_client = NULL;
  tpu_pjrt_plugin_t *plugin;
  TPU_PROPAGATE(pj_plugin_load(plugin_path, &plugin));
  const pj_api_t *api = plugin->api;

  tpu_pjrt_client_t *c = (tpu_pjrt_client_t *)calloc(1, sizeof(*c));
  pj_named_value_t *nv = num_options ? (pj_named_value_t *)calloc(num_options, sizeof(*nv)) : NULL;
  if (!c || (num_options && !nv)) {
    free(c);
    free(nv);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  c->plugin = plugin;
  c->api = api;
  for (size_t i = 0; i < num_options; i++) {
    const tpu_pjrt_option_t *o = &options[i];
    nv[i].struct_size = sizeof(nv[i]);
    nv[i].name = o->name ? o->name : "";
    nv[i].name_size = strlen(nv[i].name);
    nv[i].value_size = 1;
    switch (o->kind) {
      case TPU_PJRT_OPT_INT64: nv[i].type = PJ_NAMED_INT64; nv[i].u.int64_value = o->i; break;
      case TPU_PJRT_OPT_BOOL: nv[i].type = PJ_NAMED_BOOL; nv[i].u.bool_value = o->i != 0; break;
      case TPU_PJRT_OPT_FLOAT: nv[i].type = PJ_NAMED_FLOAT; nv[i].u.float_value = (float)o->f; break;
      case TPU_PJRT_OPT_STRING:
        nv[i].type = PJ_NAMED_STRING;
        nv[i].u.string_value = o->s ? o->s : "";
        nv[i].value_size = strlen(nv[i].u.string_value);
        break;
      default:
        free(nv);
        free(c);
        return tpu_status_make(TPU_INVALID_ARGUMENT, "client option %s: unknown kind %d",
                               nv[i].name, (int)o->kind);
    }
  }
  pj_client_create_args_t ca = {.struct_size = sizeof(ca), .create_options = nv, .num_options = num_options};
  tpu_status_t st = tpu_pjrt_status_from_error(api, api->client_create(&ca), "creating the PJRT client");
  free(nv);
  if (st) {
    free(c);
    return tpu_status_annotate(st, "%s", plugin->path);
  }
  c->client = ca.client;

  pj_client_string_args_t pn = {.struct_size = sizeof(pn), .client = c->client};
  st = tpu_pjrt_status_from_error(api, api->client_platform_name(&pn), "platform name");
  if (!st) {
    c->platform = pj_strndup(pn.value ? pn.value : "", pn.value ? pn.value_size : 0);
    if (c->platform)
      for (char *q = c->platform; *q; q++) *q = (char)tolower((unsigned char)*q);
    pj_client_string_args_t pv = {.struct_size = sizeof(pv), .client = c->client};
    st = tpu_pjrt_status_from_error(api, api->client_platform_version(&pv), "platform version");
    if (!st) c->platform_version = pj_strndup(pv.value ? pv.value : "", pv.value ? pv.value_size : 0);
  }
  if (!st) {
    pj_client_devices_args_t da = {.struct_size = sizeof(da), .client = c->client};
    st = tpu_pjrt_status_from_error(api, api->client_addressable_devices(&da), "addressable devices");
    if (!st) {
      c->num_devices = (int)da.num_devices;
      c->devices = (pj_device_t **)calloc(da.num_devices ? da.num_devices : 1, sizeof(pj_device_t *));
      c->device_ids = (int *)calloc(da.num_devices ? da.num_devices : 1, sizeof(int));
      if (!c->devices || !c->device_ids)
        st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
      for (size_t i = 0; !st && i < da.num_devices; i++) {
        c->devices[i] = da.devices[i];
        pj_device_get_description_args_t g = {.struct_size = sizeof(g), .device = da.devices[i]};
        st = tpu_pjrt_status_from_error(api, api->device_get_description(&g), "device description");
        if (st) break;
        pj_device_description_id_args_t ida = {.struct_size = sizeof(ida),
                                               .device_description = g.device_description};
        st = tpu_pjrt_status_from_error(api, api->device_description_id(&ida), "device id");
        if (!st) c->device_ids[i] = ida.id;
      }
    }
  }
  if (!st) {
    if (!c->platform || !c->platform_version) {
      st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
    } else {
      tpu_strbuf_t sb;
      tpu_strbuf_init(&sb);
      tpu_strbuf_printf(&sb, "%s|%s|api %d.%d|%s|%s", c->platform, c->platform_version,
                        plugin->api_major, plugin->api_minor, plugin->xla_version, plugin->path);
      if (!tpu_strbuf_ok(&sb)) {
        tpu_strbuf_free(&sb);
        st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
      } else {
        c->identity = tpu_strbuf_detach(&sb, NULL);
      }
    }
  }
  if (st) {
    pj_client_free(c);
    return st;
  }
  *out_client = c;
  return TPU_OK_STATUS;
}

int tpu_pjrt_client_device_count(const tpu_pjrt_client_t *client) { return client->num_devices; }
const char *tpu_pjrt_client_platform(const tpu_pjrt_client_t *client) { return client->platform; }
const char *tpu_pjrt_client_identity(const tpu_pjrt_client_t *client) { return client->identity; }
int tpu_pjrt_client_api_minor(const tpu_pjrt_client_t *client) { return client->plugin->api_minor; }
const char *tpu_pjrt_client_plugin_path(const tpu_pjrt_client_t *client) { return client->plugin->path; }

/* ---- discovery ---------------------------------------------------------------------- */

static int pj_is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int pj_tpu_present(void) {
  struct stat sb;
  if (stat("/dev/accel0", &sb) == 0) return 1;
  DIR *d = opendir("/dev/vfio");
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (isdigit((unsigned char)e->d_name[0])) {
      found = 1;
      break;
    }
  }
  closedir(d);
  return found;
}

/* Looks for `suffix` under each ':'-separated entry of dirs. */
static int pj_search(const char *dirs, const char *suffix, char *out, size_t out_size) {
  if (!dirs) return 0;
  const char *p = dirs;
  while (*p) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > 0) {
      char cand[PATH_MAX];
      int w = snprintf(cand, sizeof(cand), "%.*s/%s", (int)n, p, suffix);
      if (w > 0 && (size_t)w < sizeof(cand) && pj_is_file(cand) && (size_t)w < out_size) {
        memcpy(out, cand, (size_t)w + 1);
        return 1;
      }
    }
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

tpu_status_t tpu_pjrt_find_plugin(const char *search_dirs, char *out_path, size_t out_size) {
  if (out_size) out_path[0] = 0;
  const char *env = getenv("TORCH_TPU_PJRT_PLUGIN");
  if (env && env[0]) {
    if (!pj_is_file(env))
      return tpu_status_make(TPU_NOT_FOUND,
                             "TORCH_TPU_PJRT_PLUGIN=%s: no such file (set it to the path of a PJRT "
                             "plugin .so, or unset it to use the XLA CPU plugin)", env);
    if (strlen(env) >= out_size)
      return tpu_status_make(TPU_INVALID_ARGUMENT, "plugin path too long: %s", env);
    memcpy(out_path, env, strlen(env) + 1);
    return TPU_OK_STATUS;
  }
  if (pj_tpu_present() && pj_search(search_dirs, "libtpu/libtpu.so", out_path, out_size))
    return TPU_OK_STATUS;
  if (pj_search(search_dirs, "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so", out_path, out_size))
    return TPU_OK_STATUS;
  return tpu_status_make(TPU_NOT_FOUND,
                         "no PJRT plugin found (searched %s): set TORCH_TPU_PJRT_PLUGIN to the "
                         "path of a PJRT plugin, or `pip install xla-cpu-pjrt==0.0.1` for the "
                         "XLA CPU plugin",
                         search_dirs && search_dirs[0] ? search_dirs : "no site-packages given");
}
