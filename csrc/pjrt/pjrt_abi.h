/* pjrt_abi.h - the project's own declarations of the part of the PJRT C ABI
 * that torch_tpu calls.  Only csrc/pjrt includes this file.
 *
 * Layout facts (from the public PJRT C API, major 0, minor 81):
 *   - The plugin's GetPjrtApi() returns a table: struct_size, extension
 *     start, a version {struct_size, ext, major, minor}, then function
 *     pointers in a FIXED order.  A slot exists only if its end lies within
 *     the table's struct_size (older plugins have shorter tables).
 *   - Every argument struct begins with struct_size + extension_start.  We
 *     set struct_size = sizeof(our struct); a plugin rejects a smaller size
 *     and ignores trailing fields of a larger one, so these declarations must
 *     be at least as new as the newest plugin we support (0.81 here).
 *   - Every function returns an error object (NULL = success) except the two
 *     error accessors that cannot fail.
 * Unused slots are kept as anonymous `void *` so the offsets stay right; the
 * static assertions at the end pin the offsets of the late slots.
 * Names are ours (pj_ prefix); each notes the PJRT name it mirrors.
 */
#ifndef TPU_PJRT_PJRT_ABI_H_
#define TPU_PJRT_PJRT_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PJ_API_MAJOR 0
#define PJ_API_MINOR 81

/* Opaque plugin objects. */
typedef struct pj_error pj_error_t;
typedef struct pj_event pj_event_t;
typedef struct pj_client pj_client_t;
typedef struct pj_device pj_device_t;
typedef struct pj_device_description pj_device_description_t;
typedef struct pj_memory pj_memory_t;
typedef struct pj_executable pj_executable_t;
typedef struct pj_loaded_executable pj_loaded_executable_t;
typedef struct pj_buffer pj_buffer_t;
typedef struct pj_serialized_executable pj_serialized_executable_t;
typedef struct pj_extension_base pj_extension_base_t;

#define PJ_ARGS_HEAD          \
  size_t struct_size;         \
  pj_extension_base_t *extension_start

/* PJRT_Api_Version */
typedef struct pj_api_version {
  PJ_ARGS_HEAD;
  int major_version;
  int minor_version;
} pj_api_version_t;

/* PJRT_NamedValue */
typedef enum {
  PJ_NAMED_STRING = 0,
  PJ_NAMED_INT64 = 1,
  PJ_NAMED_INT64_LIST = 2,
  PJ_NAMED_FLOAT = 3,
  PJ_NAMED_BOOL = 4,
} pj_named_value_type_t;

typedef struct pj_named_value {
  PJ_ARGS_HEAD;
  const char *name;
  size_t name_size;
  pj_named_value_type_t type;
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  } u;
  size_t value_size; /* elements of a string / list, 1 for a scalar */
} pj_named_value_t;

/* ---- errors ---- */
typedef struct { PJ_ARGS_HEAD; pj_error_t *error; } pj_error_destroy_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  const pj_error_t *error;
  const char *message; /* out, owned by the error */
  size_t message_size; /* out */
} pj_error_message_args_t;
typedef struct { PJ_ARGS_HEAD; const pj_error_t *error; int code; /* out */ } pj_error_get_code_args_t;

/* ---- plugin ---- */
typedef struct { PJ_ARGS_HEAD; } pj_plugin_initialize_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  const pj_named_value_t *attributes; /* out, lives as long as the process */
  size_t num_attributes;              /* out */
} pj_plugin_attributes_args_t;

/* ---- events ---- */
typedef struct { PJ_ARGS_HEAD; pj_event_t *event; } pj_event_destroy_args_t;
typedef struct { PJ_ARGS_HEAD; pj_event_t *event; } pj_event_await_args_t;
typedef struct { PJ_ARGS_HEAD; pj_event_t *event; bool is_ready; /* out */ } pj_event_is_ready_args_t;
/* PJRT_Event_OnReadyCallback: owns `error` (destroy it). */
typedef void (*pj_event_callback_t)(pj_error_t *error, void *user_arg);
typedef struct {
  PJ_ARGS_HEAD;
  pj_event_t *event;
  pj_event_callback_t callback;
  void *user_arg;
} pj_event_on_ready_args_t;

/* ---- client ---- */
typedef struct {
  PJ_ARGS_HEAD;
  const pj_named_value_t *create_options;
  size_t num_options;
  void *kv_get_callback; /* function pointers we never set */
  void *kv_get_user_arg;
  void *kv_put_callback;
  void *kv_put_user_arg;
  pj_client_t *client; /* out */
  void *kv_try_get_callback;
  void *kv_try_get_user_arg;
} pj_client_create_args_t;
typedef struct { PJ_ARGS_HEAD; pj_client_t *client; } pj_client_destroy_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_client_t *client;
  const char *value; /* out: platform name / version, owned by the client */
  size_t value_size; /* out */
} pj_client_string_args_t; /* PJRT_Client_PlatformName_Args and _PlatformVersion_Args */
typedef struct {
  PJ_ARGS_HEAD;
  pj_client_t *client;
  pj_device_t *const *devices; /* out, owned by the client */
  size_t num_devices;          /* out */
} pj_client_devices_args_t; /* PJRT_Client_AddressableDevices_Args */

/* PJRT_Program */
typedef struct {
  PJ_ARGS_HEAD;
  char *code;
  size_t code_size;
  const char *format;
  size_t format_size;
} pj_program_t;

typedef struct {
  PJ_ARGS_HEAD;
  pj_client_t *client;
  const pj_program_t *program;
  const char *compile_options; /* serialized xla.CompileOptionsProto */
  size_t compile_options_size;
  pj_loaded_executable_t *executable; /* out */
} pj_client_compile_args_t;

/* PJRT_HostBufferSemantics */
enum {
  PJ_HOST_IMMUTABLE_ONLY_DURING_CALL = 0,
  PJ_HOST_IMMUTABLE_UNTIL_TRANSFER_COMPLETES = 1,
  PJ_HOST_IMMUTABLE_ZERO_COPY = 2,
  PJ_HOST_MUTABLE_ZERO_COPY = 3,
};

/* PJRT_Buffer_MemoryLayout (+ _Tiled, _Strides) */
typedef struct {
  PJ_ARGS_HEAD;
  const int64_t *minor_to_major;
  size_t minor_to_major_size;
  const int64_t *tile_dims;
  const size_t *tile_dim_sizes;
  size_t num_tiles;
} pj_layout_tiled_t;
typedef struct {
  PJ_ARGS_HEAD;
  const int64_t *byte_strides;
  size_t num_byte_strides;
} pj_layout_strides_t;
enum { PJ_LAYOUT_TILED = 0, PJ_LAYOUT_STRIDES = 1 };
typedef struct {
  PJ_ARGS_HEAD;
  union {
    pj_layout_tiled_t tiled;
    pj_layout_strides_t strides;
  } u;
  int type;
} pj_memory_layout_t;

typedef struct {
  PJ_ARGS_HEAD;
  pj_client_t *client;
  const void *data;
  int type; /* PJRT_Buffer_Type == tpu_dtype_t */
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides; /* NULL = dense row-major */
  size_t num_byte_strides;
  int host_buffer_semantics;
  pj_device_t *device;
  pj_memory_t *memory;
  pj_memory_layout_t *device_layout;
  pj_event_t *done_with_host_buffer; /* out */
  pj_buffer_t *buffer;               /* out */
} pj_buffer_from_host_args_t;

/* ---- devices ---- */
typedef struct {
  PJ_ARGS_HEAD;
  pj_device_t *device;
  pj_device_description_t *device_description; /* out */
} pj_device_get_description_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_device_description_t *device_description;
  int id; /* out */
} pj_device_description_id_args_t;

/* PJRT_Device_MemoryStats_Args: only bytes_in_use is always set. */
typedef struct {
  PJ_ARGS_HEAD;
  pj_device_t *device;
  int64_t bytes_in_use;
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
} pj_device_memory_stats_args_t;

/* PJRT_Client_DmaMap_Args / PJRT_Client_DmaUnmap_Args */
typedef struct { PJ_ARGS_HEAD; pj_client_t *client; void *data; size_t size; } pj_client_dma_map_args_t;
typedef struct { PJ_ARGS_HEAD; pj_client_t *client; void *data; } pj_client_dma_unmap_args_t;

/* ---- executables ---- */
typedef struct {
  PJ_ARGS_HEAD;
  pj_executable_t *executable;
  pj_program_t *program; /* in/out: code NULL asks for code_size; the plugin sets format */
} pj_executable_optimized_program_args_t; /* PJRT_Executable_OptimizedProgram_Args */
typedef struct { PJ_ARGS_HEAD; pj_executable_t *executable; } pj_executable_destroy_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_executable_t *executable;
  size_t value; /* out */
} pj_executable_count_args_t; /* PJRT_Executable_NumReplicas_Args / _NumOutputs_Args */
typedef struct {
  PJ_ARGS_HEAD;
  pj_executable_t *executable;
  int64_t size_in_bytes; /* out */
} pj_executable_code_size_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  const pj_executable_t *executable;
  const char *serialized_bytes;                          /* out */
  size_t serialized_bytes_size;                          /* out */
  pj_serialized_executable_t *serialized_executable;     /* out: pass to the deleter */
  void (*serialized_executable_deleter)(pj_serialized_executable_t *exec); /* out */
} pj_executable_serialize_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_executable_t *executable;
  int *output_types;        /* out, owned by the executable */
  size_t num_output_types;  /* out */
} pj_executable_output_types_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_executable_t *executable;
  size_t num_outputs;       /* out */
  const int64_t *dims;      /* out: all outputs' dims, concatenated */
  const size_t *dim_sizes;  /* out: rank of each output */
} pj_executable_output_dims_args_t;

typedef struct { PJ_ARGS_HEAD; pj_loaded_executable_t *executable; } pj_loaded_executable_destroy_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_loaded_executable_t *loaded_executable;
  pj_executable_t *executable; /* out: destroy with Executable_Destroy */
} pj_loaded_executable_get_executable_args_t;

/* PJRT_ExecuteOptions */
typedef struct {
  PJ_ARGS_HEAD;
  void **send_callbacks;
  void **recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void *context;
  const char *call_location;
  size_t num_tasks;
  int *task_ids;
  int64_t *incarnation_ids;
} pj_execute_options_t;

typedef struct {
  PJ_ARGS_HEAD;
  pj_loaded_executable_t *executable;
  pj_execute_options_t *options;
  pj_buffer_t *const *const *argument_lists; /* [num_devices][num_args] */
  size_t num_devices;
  size_t num_args;
  pj_buffer_t **const *output_lists; /* [num_devices][num_outputs], filled */
  pj_event_t **device_complete_events; /* NULL, or [num_devices], filled */
  pj_device_t *execute_device; /* portable executables: where to run */
} pj_loaded_executable_execute_args_t;

typedef struct {
  PJ_ARGS_HEAD;
  pj_client_t *client;
  const char *serialized_executable;
  size_t serialized_executable_size;
  pj_loaded_executable_t *loaded_executable; /* out */
  const char *overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
} pj_executable_deserialize_args_t;

/* ---- buffers ---- */
typedef struct { PJ_ARGS_HEAD; pj_buffer_t *buffer; } pj_buffer_destroy_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_buffer_t *src;
  pj_memory_layout_t *host_layout; /* NULL = the device layout */
  void *dst;                       /* NULL = query dst_size */
  size_t dst_size;
  pj_event_t *event; /* out */
} pj_buffer_to_host_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_buffer_t *buffer;
  pj_event_t *event; /* out */
} pj_buffer_ready_event_args_t;
typedef struct {
  PJ_ARGS_HEAD;
  pj_buffer_t *buffer;
  pj_device_t *dst_device;
  pj_buffer_t *dst_buffer; /* out */
} pj_buffer_copy_to_device_args_t;

/* ---- the function table (PJRT_Api) ---- */
#define PJ_FN(name, args_t) pj_error_t *(*name)(args_t *args)

typedef struct pj_api {
  PJ_ARGS_HEAD;
  pj_api_version_t pjrt_api_version;

  void (*error_destroy)(pj_error_destroy_args_t *args);
  void (*error_message)(pj_error_message_args_t *args);
  PJ_FN(error_get_code, pj_error_get_code_args_t);

  PJ_FN(plugin_initialize, pj_plugin_initialize_args_t);
  PJ_FN(plugin_attributes, pj_plugin_attributes_args_t);

  PJ_FN(event_destroy, pj_event_destroy_args_t);
  PJ_FN(event_is_ready, pj_event_is_ready_args_t);
  void *event_error_;
  PJ_FN(event_await, pj_event_await_args_t);
  PJ_FN(event_on_ready, pj_event_on_ready_args_t);

  PJ_FN(client_create, pj_client_create_args_t);
  PJ_FN(client_destroy, pj_client_destroy_args_t);
  PJ_FN(client_platform_name, pj_client_string_args_t);
  void *client_process_index_;
  PJ_FN(client_platform_version, pj_client_string_args_t);
  void *client_devices_;
  PJ_FN(client_addressable_devices, pj_client_devices_args_t);
  void *client_lookup_device_;
  void *client_lookup_addressable_device_;
  void *client_addressable_memories_;
  PJ_FN(client_compile, pj_client_compile_args_t);
  void *client_default_device_assignment_;
  PJ_FN(client_buffer_from_host_buffer, pj_buffer_from_host_args_t);

  PJ_FN(device_description_id, pj_device_description_id_args_t);
  void *device_description_unused_[5]; /* ProcessIndex Attributes Kind DebugString ToString */

  PJ_FN(device_get_description, pj_device_get_description_args_t);
  void *device_unused_[4]; /* IsAddressable LocalHardwareId AddressableMemories DefaultMemory */
  PJ_FN(device_memory_stats, pj_device_memory_stats_args_t); /* optional: may answer UNIMPLEMENTED */

  void *memory_unused_[5]; /* Id Kind DebugString ToString AddressableByDevices */

  PJ_FN(executable_destroy, pj_executable_destroy_args_t);
  void *executable_name_;
  PJ_FN(executable_num_replicas, pj_executable_count_args_t);
  void *executable_num_partitions_;
  PJ_FN(executable_num_outputs, pj_executable_count_args_t);
  PJ_FN(executable_size_of_generated_code, pj_executable_code_size_args_t);
  void *executable_get_cost_analysis_;
  void *executable_output_memory_kinds_;
  PJ_FN(executable_optimized_program, pj_executable_optimized_program_args_t);
  PJ_FN(executable_serialize, pj_executable_serialize_args_t);

  PJ_FN(loaded_executable_destroy, pj_loaded_executable_destroy_args_t);
  PJ_FN(loaded_executable_get_executable, pj_loaded_executable_get_executable_args_t);
  void *loaded_executable_addressable_devices_;
  void *loaded_executable_delete_;
  void *loaded_executable_is_deleted_;
  PJ_FN(loaded_executable_execute, pj_loaded_executable_execute_args_t);
  PJ_FN(executable_deserialize_and_load, pj_executable_deserialize_args_t);
  void *loaded_executable_fingerprint_;

  PJ_FN(buffer_destroy, pj_buffer_destroy_args_t);
  void *buffer_unused_a_[10]; /* ElementType .. IsDeleted */
  PJ_FN(buffer_copy_to_device, pj_buffer_copy_to_device_args_t);
  PJ_FN(buffer_to_host_buffer, pj_buffer_to_host_args_t);
  void *buffer_is_on_cpu_;
  PJ_FN(buffer_ready_event, pj_buffer_ready_event_args_t);
  void *buffer_unused_b_[4]; /* UnsafePointer .. OpaqueDeviceMemoryDataPointer */

  void *copy_to_device_stream_unused_[5];
  void *topology_unused_[7];
  void *compile_; /* PJRT_Compile (topology compile) */

  PJ_FN(executable_output_element_types, pj_executable_output_types_args_t);
  PJ_FN(executable_output_dimensions, pj_executable_output_dims_args_t);
  void *later_unused_[18]; /* Buffer_CopyToMemory .. AsyncHostToDeviceTransferManager_AddMetadata */
  PJ_FN(client_dma_map, pj_client_dma_map_args_t);     /* optional (newer plugins) */
  PJ_FN(client_dma_unmap, pj_client_dma_unmap_args_t); /* optional */
  /* later slots are not used */
} pj_api_t;

#undef PJ_FN

/* Offsets of the slots, pinned (slot k lies at 40 + 8k on LP64). */
#if defined(__LP64__)
_Static_assert(offsetof(pj_api_t, error_destroy) == 40, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, client_compile) == 40 + 8 * 20, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, client_buffer_from_host_buffer) == 40 + 8 * 22, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, executable_destroy) == 40 + 8 * 40, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, loaded_executable_execute) == 40 + 8 * 55, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, buffer_destroy) == 40 + 8 * 58, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, buffer_to_host_buffer) == 40 + 8 * 70, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, executable_output_dimensions) == 40 + 8 * 91, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, event_on_ready) == 40 + 8 * 9, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, buffer_copy_to_device) == 40 + 8 * 69, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, device_memory_stats) == 40 + 8 * 34, "PJRT_Api layout");
_Static_assert(offsetof(pj_api_t, client_dma_map) == 40 + 8 * 110, "PJRT_Api layout");
_Static_assert(sizeof(pj_device_memory_stats_args_t) == 192, "MemoryStats_Args layout");
_Static_assert(sizeof(pj_named_value_t) == 56, "PJRT_NamedValue layout");
_Static_assert(sizeof(pj_loaded_executable_execute_args_t) == 80, "Execute_Args layout");
_Static_assert(sizeof(pj_execute_options_t) == 112, "ExecuteOptions layout");
#endif

#endif /* TPU_PJRT_PJRT_ABI_H_ */
