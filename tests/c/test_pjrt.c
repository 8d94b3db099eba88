/* test_pjrt.c - the PJRT layer against the real plugin (the XLA CPU plugin
 * here: tt_client() has 2 CPU devices).  Every value is compared against a
 * value computed in the test; every test ends with no live buffer of its own.
 * Programs are StableHLO text in the generic form.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pjrt/pjrt_internal.h"
#include "tinytest.h"

/* ---- helpers ---------------------------------------------------------------- */

static int msg_has(const char *msg, const char *needle) { return !needle || strstr(msg, needle) != NULL; }

#define CHECK_CODE(expr, want_code, needle)                                             \
  do {                                                                                  \
    tpu_status_t st__ = (expr);                                                         \
    TT_CHECK(st__ != NULL);                                                             \
    if (st__) {                                                                         \
      if (tpu_status_code(st__) != (want_code) ||                                       \
          !msg_has(tpu_status_message(st__), (needle))) {                              \
        fprintf(stderr, "  %s:%d: got %s: %s (wanted %s containing \"%s\")\n", __FILE__, \
                __LINE__, tpu_code_name(tpu_status_code(st__)), tpu_status_message(st__), \
                tpu_code_name(want_code), (needle) ? (needle) : "");                    \
        tt_failed_checks++;                                                             \
      }                                                                                 \
      tpu_status_free(st__);                                                            \
    }                                                                                   \
  } while (0)

static tpu_pjrt_buffer_t *up(tpu_pjrt_client_t *c, int dev, tpu_dtype_t dt, const int64_t *dims, int rank,
                             const void *data) {
  tpu_pjrt_buffer_t *b = NULL;
  tpu_status_t st = tpu_pjrt_buffer_from_host(c, dev, dt, dims, rank, data, &b);
  if (st) {
    fprintf(stderr, "  upload failed: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
  }
  return b;
}

static tpu_pjrt_exec_t *compile_text(tpu_pjrt_client_t *c, const char *mlir, const tpu_pjrt_compile_options_t *o) {
  tpu_pjrt_exec_t *e = NULL;
  tpu_status_t st = tpu_pjrt_compile(c, mlir, strlen(mlir), o, &e);
  if (st) {
    fprintf(stderr, "  compile failed: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
  }
  return e;
}

/* Runs a single-list program; returns 1 on success. */
static int run1(tpu_pjrt_exec_t *e, tpu_pjrt_buffer_t **in, size_t nin, tpu_pjrt_buffer_t **out,
                const tpu_pjrt_execute_options_t *o) {
  tpu_pjrt_buffer_t *const *lists[1] = {in};
  tpu_pjrt_buffer_t **outs[1] = {out};
  tpu_status_t st = tpu_pjrt_execute(e, lists, 1, nin, o, outs);
  if (st) {
    fprintf(stderr, "  execute failed: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
    return 0;
  }
  return 1;
}

static const char *k_add4 =
    "module @add4 {\n"
    "  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* ---- loading --------------------------------------------------------------- */

TT_TEST(pjrt_client_loads_cpu_plugin_with_two_devices) {
  tpu_pjrt_client_t *c = tt_client();
  TT_CHECK(c != NULL);
  if (!c) return;
  TT_CHECK(strcmp(tpu_pjrt_client_platform(c), "cpu") == 0);
  TT_CHECK(tpu_pjrt_client_device_count(c) == 2);
  TT_CHECK(tpu_pjrt_client_api_minor(c) >= 1);
  TT_CHECK(strstr(tpu_pjrt_client_identity(c), "|api 0.") != NULL);
  TT_CHECK(strstr(tpu_pjrt_client_identity(c), tpu_pjrt_client_plugin_path(c)) != NULL);
}

TT_TEST(pjrt_same_plugin_path_loads_once_and_serves_a_second_client) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  tpu_pjrt_option_t o = {.name = "cpu_device_count", .kind = TPU_PJRT_OPT_INT64, .i = 1};
  tpu_pjrt_client_t *c2 = NULL;
  TT_CHECK_OK(tpu_pjrt_client_create(tt_plugin_path(), &o, 1, &c2));
  TT_CHECK(tpu_pjrt_client_device_count(c2) == 1);
  TT_CHECK(strcmp(tpu_pjrt_client_plugin_path(c2), tpu_pjrt_client_plugin_path(c)) == 0);
  float x = 2.5f, y = 0;
  int64_t none[1] = {0};
  tpu_pjrt_buffer_t *b = up(c2, 0, TPU_F32, none, 0, &x);
  if (b) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(b, &y, sizeof(y)));
    TT_CHECK(y == 2.5f);
    tpu_pjrt_buffer_destroy(b);
  }
  tpu_pjrt_client_destroy(c2);
}

TT_TEST(pjrt_missing_plugin_file_is_not_found) {
  tpu_pjrt_client_t *c = NULL;
  CHECK_CODE(tpu_pjrt_client_create("/no/such/dir/plugin.so", NULL, 0, &c), TPU_NOT_FOUND, "/no/such/dir/plugin.so");
  TT_CHECK(c == NULL);
}

TT_TEST(pjrt_file_that_is_not_a_plugin_is_invalid_argument) {
  tpu_pjrt_client_t *c = NULL;
  CHECK_CODE(tpu_pjrt_client_create("/bin/ls", NULL, 0, &c), TPU_INVALID_ARGUMENT, "not a PJRT plugin");
  char path[] = "/tmp/tpu_pjrt_textXXXXXX";
  int fd = mkstemp(path);
  TT_CHECK(fd >= 0);
  if (fd >= 0) {
    const char text[] = "this is not a shared library\n";
    TT_CHECK(write(fd, text, sizeof(text) - 1) == (ssize_t)(sizeof(text) - 1));
    close(fd);
    CHECK_CODE(tpu_pjrt_client_create(path, NULL, 0, &c), TPU_INVALID_ARGUMENT, "not a PJRT plugin");
    unlink(path);
  }
  /* A real shared library without GetPjrtApi.  One the plugin does not
   * itself depend on: re-opening a loaded dependency under another path
   * makes glibc's ld.so drop a 56-byte dependency list (valgrind: definite). */
  const char *libs[] = {"/usr/lib/x86_64-linux-gnu/libresolv.so.2", "/lib/x86_64-linux-gnu/libresolv.so.2",
                        "/usr/lib/aarch64-linux-gnu/libresolv.so.2", "/lib64/libresolv.so.2"};
  for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
    if (access(libs[i], R_OK) != 0) continue;
    CHECK_CODE(tpu_pjrt_client_create(libs[i], NULL, 0, &c), TPU_INVALID_ARGUMENT, "GetPjrtApi");
    break;
  }
  CHECK_CODE(tpu_pjrt_client_create("/tmp", NULL, 0, &c), TPU_INVALID_ARGUMENT, NULL);
  TT_CHECK(c == NULL);
}

static pj_error_t *fake_fn(void *args) { (void)args; return NULL; }

TT_TEST(pjrt_too_old_plugin_names_missing_slot_and_versions) {
  pj_api_t api;
  void *fn;
  memset(&api, 0, sizeof(api));
  fn = (void *)(uintptr_t)&fake_fn;
  /* every slot filled, then the table cut short before OutputElementTypes */
  for (size_t off = offsetof(pj_api_t, error_destroy); off + sizeof(void *) <= sizeof(api); off += sizeof(void *))
    memcpy((char *)&api + off, &fn, sizeof(fn));
  api.pjrt_api_version.major_version = 0;
  api.pjrt_api_version.minor_version = 40;
  api.struct_size = offsetof(pj_api_t, executable_output_element_types);
  CHECK_CODE(tpu_pjrt_check_api(&api, "old.so"), TPU_FAILED_PRECONDITION, "PJRT_Executable_OutputElementTypes");
  tpu_status_t st = tpu_pjrt_check_api(&api, "old.so");
  TT_CHECK(st && strstr(tpu_status_message(st), "0.40") && strstr(tpu_status_message(st), "0.81"));
  tpu_status_free(st);
  api.struct_size = sizeof(api);
  TT_CHECK_OK(tpu_pjrt_check_api(&api, "new.so"));
  api.pjrt_api_version.major_version = 1;
  CHECK_CODE(tpu_pjrt_check_api(&api, "major.so"), TPU_FAILED_PRECONDITION, "1.40");
}

TT_TEST(pjrt_find_plugin_env_and_search_dirs) {
  char out[4096];
  const char *plugin = tt_plugin_path(); /* found before the variable is changed */
  const char *old = getenv("TORCH_TPU_PJRT_PLUGIN");
  char *saved = old ? strdup(old) : NULL;
  setenv("TORCH_TPU_PJRT_PLUGIN", "/no/such/plugin.so", 1);
  CHECK_CODE(tpu_pjrt_find_plugin(NULL, out, sizeof(out)), TPU_NOT_FOUND, "TORCH_TPU_PJRT_PLUGIN");
  if (plugin[0]) {
    setenv("TORCH_TPU_PJRT_PLUGIN", plugin, 1);
    TT_CHECK_OK(tpu_pjrt_find_plugin(NULL, out, sizeof(out)));
    TT_CHECK(strcmp(out, plugin) == 0);
  }
  unsetenv("TORCH_TPU_PJRT_PLUGIN");
  CHECK_CODE(tpu_pjrt_find_plugin("/no/such/site:/also/not", out, sizeof(out)), TPU_NOT_FOUND,
             "pip install xla-cpu-pjrt==0.0.1");
  CHECK_CODE(tpu_pjrt_find_plugin(NULL, out, sizeof(out)), TPU_NOT_FOUND, "TORCH_TPU_PJRT_PLUGIN");
  const char *site = getenv("TORCH_TPU_SITE_DIRS");
  if (site) {
    char dirs[8192];
    snprintf(dirs, sizeof(dirs), "/nonexistent::%s", site);
    TT_CHECK_OK(tpu_pjrt_find_plugin(dirs, out, sizeof(out)));
    TT_CHECK(strstr(out, "xla_cpu_pjrt.so") != NULL);
  }
  if (saved) {
    setenv("TORCH_TPU_PJRT_PLUGIN", saved, 1);
    free(saved);
  }
}

/* ---- buffers ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint8_t rng_byte(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint8_t)(rng_state >> 24);
}

/* Random bytes that are valid, finite values of dt (bit patterns kept). */
static void fill_values(tpu_dtype_t dt, uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = rng_byte();
  size_t es = tpu_dtype_size(dt);
  for (size_t i = 0; i < n; i += es) {
    switch (dt) {
      case TPU_PRED: p[i] &= 1; break;
      case TPU_F16: case TPU_BF16: p[i + 1] &= 0xBF; break;  /* clear top exponent bit */
      case TPU_F32: p[i + 3] &= 0xBF; break;
      case TPU_F64: p[i + 7] &= 0xBF; break;
      case TPU_C64: p[i + 3] &= 0xBF; p[i + 7] &= 0xBF; break;
      case TPU_C128: p[i + 7] &= 0xBF; p[i + 15] &= 0xBF; break;
      default: break;
    }
  }
}

TT_TEST(pjrt_round_trip_every_dtype_bit_exact) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  int64_t live = tpu_pjrt_live_buffers();
  int64_t dims[2] = {3, 5};
  for (int code = TPU_PRED; code <= TPU_C128; code++) {
    tpu_dtype_t dt = (tpu_dtype_t)code;
    size_t n = 15 * tpu_dtype_size(dt);
    uint8_t src[15 * 16], dst[15 * 16];
    fill_values(dt, src, n);
    memset(dst, 0xAA, sizeof(dst));
    for (int dev = 0; dev < 2; dev++) {
      tpu_pjrt_buffer_t *b = up(c, dev, dt, dims, 2, src);
      if (!b) continue;
      TT_CHECK(tpu_pjrt_buffer_dtype(b) == dt);
      TT_CHECK(tpu_pjrt_buffer_rank(b) == 2);
      TT_CHECK(tpu_pjrt_buffer_dims(b)[0] == 3 && tpu_pjrt_buffer_dims(b)[1] == 5);
      TT_CHECK(tpu_pjrt_buffer_numel(b) == 15);
      TT_CHECK(tpu_pjrt_buffer_nbytes(b) == n);
      TT_CHECK(tpu_pjrt_buffer_device(b) == dev);
      TT_CHECK(tpu_pjrt_live_buffers() == live + 1);
      TT_CHECK_OK(tpu_pjrt_buffer_await(b));
      tpu_status_t st = tpu_pjrt_buffer_to_host(b, dst, n);
      if (st) {
        fprintf(stderr, "  dtype %s: %s\n", tpu_dtype_name(dt), tpu_status_message(st));
        tpu_status_free(st);
        tt_failed_checks++;
      } else if (memcmp(src, dst, n) != 0) {
        fprintf(stderr, "  dtype %s: round trip not bit-exact\n", tpu_dtype_name(dt));
        tt_failed_checks++;
      }
      tpu_pjrt_buffer_destroy(b);
    }
  }
  TT_CHECK(tpu_pjrt_live_buffers() == live);
}

TT_TEST(pjrt_bf16_f16_special_values_round_trip) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  /* 1.0, -2.0, max, smallest denormal, -0, +inf, a NaN */
  uint16_t bf[7] = {0x3F80, 0xC000, 0x7F7F, 0x0001, 0x8000, 0x7F80, 0x7FC1};
  uint16_t f16[7] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x7E01};
  int64_t d[1] = {7};
  uint16_t out[7];
  tpu_pjrt_buffer_t *b = up(c, 0, TPU_BF16, d, 1, bf);
  if (b) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(b, out, sizeof(out)));
    TT_CHECK(memcmp(out, bf, sizeof(out)) == 0);
    tpu_pjrt_buffer_destroy(b);
  }
  b = up(c, 1, TPU_F16, d, 1, f16);
  if (b) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(b, out, sizeof(out)));
    TT_CHECK(memcmp(out, f16, sizeof(out)) == 0);
    tpu_pjrt_buffer_destroy(b);
  }
}

TT_TEST(pjrt_rank0_and_zero_size_buffers) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  int64_t live = tpu_pjrt_live_buffers();
  double x = -1.25, y = 0;
  tpu_pjrt_buffer_t *b = up(c, 0, TPU_F64, NULL, 0, &x);
  if (b) {
    TT_CHECK(tpu_pjrt_buffer_rank(b) == 0 && tpu_pjrt_buffer_numel(b) == 1 && tpu_pjrt_buffer_nbytes(b) == 8);
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(b, &y, sizeof(y)));
    TT_CHECK(y == -1.25);
    CHECK_CODE(tpu_pjrt_buffer_to_host(b, &y, 4), TPU_INVALID_ARGUMENT, "bytes");
    tpu_pjrt_buffer_destroy(b);
  }
  int64_t z1[2] = {0, 4}, z2[3] = {3, 0, 2};
  b = up(c, 1, TPU_F32, z1, 2, NULL);
  if (b) {
    TT_CHECK(tpu_pjrt_buffer_numel(b) == 0 && tpu_pjrt_buffer_nbytes(b) == 0);
    TT_CHECK(tpu_pjrt_buffer_dims(b)[0] == 0 && tpu_pjrt_buffer_dims(b)[1] == 4);
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(b, NULL, 0));
    tpu_pjrt_buffer_destroy(b);
  }
  int32_t dummy = 7;
  b = up(c, 0, TPU_S32, z2, 3, &dummy);
  if (b) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(b, &dummy, 0));
    TT_CHECK(dummy == 7);
    tpu_pjrt_buffer_destroy(b);
  }
  /* bad requests are refused, not crashed on */
  tpu_pjrt_buffer_t *bad = NULL;
  int64_t neg[1] = {-3};
  CHECK_CODE(tpu_pjrt_buffer_from_host(c, 0, TPU_F32, neg, 1, &x, &bad), TPU_INVALID_ARGUMENT, "negative");
  CHECK_CODE(tpu_pjrt_buffer_from_host(c, 5, TPU_F32, NULL, 0, &x, &bad), TPU_INVALID_ARGUMENT, "device 5");
  CHECK_CODE(tpu_pjrt_buffer_from_host(c, 0, (tpu_dtype_t)99, NULL, 0, &x, &bad), TPU_INVALID_ARGUMENT, "dtype");
  TT_CHECK(bad == NULL);
  TT_CHECK(tpu_pjrt_live_buffers() == live);
}

/* ---- compile / execute ----------------------------------------------------------- */

TT_TEST(pjrt_compile_and_execute_add) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  int64_t live = tpu_pjrt_live_buffers();
  tpu_pjrt_exec_t *e = compile_text(c, k_add4, NULL);
  if (!e) return;
  TT_CHECK(tpu_pjrt_exec_num_outputs(e) == 1);
  TT_CHECK(tpu_pjrt_exec_num_replicas(e) == 1);
  TT_CHECK(tpu_pjrt_exec_output_dtype(e, 0) == TPU_F32);
  TT_CHECK(tpu_pjrt_exec_output_rank(e, 0) == 1 && tpu_pjrt_exec_output_dims(e, 0)[0] == 4);
  float a[4] = {1, 2, 3, 4}, b[4] = {0.5f, -2, 10, 1e6f}, r[4];
  int64_t d[1] = {4};
  tpu_pjrt_buffer_t *in[2] = {up(c, 0, TPU_F32, d, 1, a), up(c, 0, TPU_F32, d, 1, b)};
  tpu_pjrt_buffer_t *out[1] = {NULL};
  for (int wait = 0; wait < 2 && in[0] && in[1]; wait++) {
    tpu_pjrt_execute_options_t o = {.wait = wait != 0};
    if (!run1(e, in, 2, out, &o)) break;
    TT_CHECK(tpu_pjrt_buffer_dtype(out[0]) == TPU_F32 && tpu_pjrt_buffer_numel(out[0]) == 4);
    TT_CHECK(tpu_pjrt_buffer_device(out[0]) == 0);
    TT_CHECK_OK(tpu_pjrt_buffer_await(out[0]));
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)));
    for (int i = 0; i < 4; i++) TT_CHECK(r[i] == a[i] + b[i]);
    tpu_pjrt_buffer_destroy(out[0]);
  }
  tpu_pjrt_buffer_destroy(in[0]);
  tpu_pjrt_buffer_destroy(in[1]);
  tpu_pjrt_exec_destroy(e);
  TT_CHECK(tpu_pjrt_live_buffers() == live);
}

TT_TEST(pjrt_several_inputs_and_outputs_mixed_dtypes) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  const char *prog =
      "module @multi {\n"
      "  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>, %arg2: tensor<i32>,"
      " %arg3: tensor<3xbf16>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<i32>, tensor<3xf32>, tensor<2x3xi1>) {\n"
      "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    %1 = \"stablehlo.multiply\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    %2 = \"stablehlo.multiply\"(%arg2, %arg2) : (tensor<i32>, tensor<i32>) -> tensor<i32>\n"
      "    %3 = \"stablehlo.convert\"(%arg3) : (tensor<3xbf16>) -> tensor<3xf32>\n"
      "    %4 = \"stablehlo.compare\"(%arg0, %arg1) {comparison_direction = #stablehlo<comparison_direction GT>}"
      " : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>\n"
      "    \"func.return\"(%0, %1, %2, %3, %4) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<i32>, tensor<3xf32>,"
      " tensor<2x3xi1>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_pjrt_exec_t *e = compile_text(c, prog, NULL);
  if (!e) return;
  TT_CHECK(tpu_pjrt_exec_num_outputs(e) == 5);
  TT_CHECK(tpu_pjrt_exec_output_dtype(e, 2) == TPU_S32 && tpu_pjrt_exec_output_rank(e, 2) == 0);
  TT_CHECK(tpu_pjrt_exec_output_dtype(e, 4) == TPU_PRED && tpu_pjrt_exec_output_dims(e, 4)[1] == 3);
  float a[6] = {1, -2, 3, 4, 5.5f, -6}, b[6] = {2, 2, 2, -1, 5.5f, 0.25f};
  int32_t k = -7;
  uint16_t h[3] = {0x3F80, 0xC040, 0x3E00}; /* 1, -3, 0.125 */
  int64_t d23[2] = {2, 3}, d3[1] = {3};
  tpu_pjrt_buffer_t *in[4] = {up(c, 0, TPU_F32, d23, 2, a), up(c, 0, TPU_F32, d23, 2, b),
                              up(c, 0, TPU_S32, NULL, 0, &k), up(c, 0, TPU_BF16, d3, 1, h)};
  tpu_pjrt_buffer_t *out[5] = {0};
  if (in[0] && in[1] && in[2] && in[3] && run1(e, in, 4, out, NULL)) {
    float s[6], p[6], f[3];
    int32_t kk;
    uint8_t gt[6];
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], s, sizeof(s)));
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[1], p, sizeof(p)));
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[2], &kk, sizeof(kk)));
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[3], f, sizeof(f)));
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[4], gt, sizeof(gt)));
    for (int i = 0; i < 6; i++) {
      TT_CHECK(s[i] == a[i] + b[i]);
      TT_CHECK(p[i] == a[i] * b[i]);
      TT_CHECK(gt[i] == (a[i] > b[i] ? 1 : 0));
    }
    TT_CHECK(kk == k * k);
    TT_CHECK(f[0] == 1.0f && f[1] == -3.0f && f[2] == 0.125f);
  }
  for (int i = 0; i < 5; i++) tpu_pjrt_buffer_destroy(out[i]);
  for (int i = 0; i < 4; i++) tpu_pjrt_buffer_destroy(in[i]);
  tpu_pjrt_exec_destroy(e);
}

TT_TEST(pjrt_zero_size_program) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  const char *prog =
      "module @z {\n"
      "  func.func public @main(%arg0: tensor<0x3xf32>) -> tensor<0x3xf32> {\n"
      "    %0 = \"stablehlo.negate\"(%arg0) : (tensor<0x3xf32>) -> tensor<0x3xf32>\n"
      "    \"func.return\"(%0) : (tensor<0x3xf32>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_pjrt_exec_t *e = compile_text(c, prog, NULL);
  if (!e) return;
  int64_t d[2] = {0, 3};
  tpu_pjrt_buffer_t *in[1] = {up(c, 0, TPU_F32, d, 2, NULL)}, *out[1] = {0};
  tpu_pjrt_execute_options_t o = {.wait = true};
  if (in[0] && run1(e, in, 1, out, &o)) {
    TT_CHECK(tpu_pjrt_buffer_nbytes(out[0]) == 0 && tpu_pjrt_buffer_dims(out[0])[1] == 3);
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], NULL, 0));
  }
  tpu_pjrt_buffer_destroy(out[0]);
  tpu_pjrt_buffer_destroy(in[0]);
  tpu_pjrt_exec_destroy(e);
}

TT_TEST(pjrt_portable_executable_runs_on_chosen_device) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  tpu_pjrt_compile_options_t co = {.portable = true};
  tpu_pjrt_exec_t *e = compile_text(c, k_add4, &co);
  if (!e) return;
  float a[4] = {1, 2, 3, 4}, b[4] = {4, 3, 2, 1}, r[4];
  int64_t d[1] = {4};
  for (int dev = 0; dev < 2; dev++) {
    tpu_pjrt_buffer_t *in[2] = {up(c, dev, TPU_F32, d, 1, a), up(c, dev, TPU_F32, d, 1, b)}, *out[1] = {0};
    tpu_pjrt_execute_options_t o = {.device = dev};
    if (in[0] && in[1] && run1(e, in, 2, out, &o)) {
      TT_CHECK(tpu_pjrt_buffer_device(out[0]) == dev);
      TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)));
      for (int i = 0; i < 4; i++) TT_CHECK(r[i] == 5.0f);
      tpu_pjrt_buffer_destroy(out[0]);
      /* arguments on the other device are refused by name */
      tpu_pjrt_execute_options_t o2 = {.device = 1 - dev};
      tpu_pjrt_buffer_t *const lists0[2] = {in[0], in[1]};
      tpu_pjrt_buffer_t *const *lists[1] = {lists0};
      tpu_pjrt_buffer_t **outs[1] = {out};
      CHECK_CODE(tpu_pjrt_execute(e, lists, 1, 2, &o2, outs), TPU_INVALID_ARGUMENT, "argument 0");
      TT_CHECK(out[0] == NULL);
    }
    tpu_pjrt_buffer_destroy(in[0]);
    tpu_pjrt_buffer_destroy(in[1]);
  }
  /* still portable after a serialize round trip: runs on device 1 */
  void *bytes = NULL;
  size_t n = 0;
  tpu_pjrt_exec_t *e2 = NULL;
  TT_CHECK_OK(tpu_pjrt_exec_serialize(e, &bytes, &n));
  tpu_status_t st = tpu_pjrt_exec_deserialize(c, bytes, n, &e2);
  free(bytes);
  TT_CHECK(st == NULL);
  if (st) fprintf(stderr, "  deserialize: %s\n", tpu_status_message(st));
  tpu_status_free(st);
  if (e2) {
    tpu_pjrt_buffer_t *in[2] = {up(c, 1, TPU_F32, d, 1, a), up(c, 1, TPU_F32, d, 1, b)}, *out[1] = {0};
    tpu_pjrt_execute_options_t o = {.device = 1, .wait = true};
    if (in[0] && in[1] && run1(e2, in, 2, out, &o)) {
      TT_CHECK(tpu_pjrt_buffer_device(out[0]) == 1);
      TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)));
      for (int i = 0; i < 4; i++) TT_CHECK(r[i] == 5.0f);
      tpu_pjrt_buffer_destroy(out[0]);
    }
    tpu_pjrt_buffer_destroy(in[0]);
    tpu_pjrt_buffer_destroy(in[1]);
    tpu_pjrt_exec_destroy(e2);
  }
  tpu_pjrt_exec_destroy(e);
}

static const char *k_allreduce =
    "module @ar attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.all_reduce\"(%arg0) ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = \"stablehlo.add\"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
    "      \"stablehlo.return\"(%s) : (tensor<f32>) -> ()\n"
    "    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

static void run_allreduce(tpu_pjrt_client_t *c, tpu_pjrt_exec_t *e, const int *devs) {
  float x[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40.5f}}, r[4];
  int64_t d[1] = {4};
  tpu_pjrt_buffer_t *in0[1] = {up(c, devs[0], TPU_F32, d, 1, x[0])};
  tpu_pjrt_buffer_t *in1[1] = {up(c, devs[1], TPU_F32, d, 1, x[1])};
  tpu_pjrt_buffer_t *out0[1] = {0}, *out1[1] = {0};
  tpu_pjrt_buffer_t *const *lists[2] = {in0, in1};
  tpu_pjrt_buffer_t **outs[2] = {out0, out1};
  tpu_pjrt_execute_options_t o = {.wait = true};
  if (in0[0] && in1[0]) {
    tpu_status_t st = tpu_pjrt_execute(e, lists, 2, 1, &o, outs);
    if (st) {
      fprintf(stderr, "  all_reduce: %s\n", tpu_status_message(st));
      tpu_status_free(st);
      tt_failed_checks++;
    } else {
      for (int rep = 0; rep < 2; rep++) {
        tpu_pjrt_buffer_t *ob = rep ? out1[0] : out0[0];
        TT_CHECK(tpu_pjrt_buffer_device(ob) == devs[rep]);
        TT_CHECK_OK(tpu_pjrt_buffer_to_host(ob, r, sizeof(r)));
        for (int i = 0; i < 4; i++) TT_CHECK(r[i] == x[0][i] + x[1][i]);
      }
    }
    /* one list for a 2-replica program is refused (its outputs are set NULL) */
    tpu_pjrt_buffer_t *junk[1] = {in0[0]};
    tpu_pjrt_buffer_t **junk_outs[1] = {junk};
    CHECK_CODE(tpu_pjrt_execute(e, lists, 1, 1, &o, junk_outs), TPU_INVALID_ARGUMENT, "2 device");
    TT_CHECK(junk[0] == NULL);
  }
  tpu_pjrt_buffer_destroy(out0[0]);
  tpu_pjrt_buffer_destroy(out1[0]);
  tpu_pjrt_buffer_destroy(in0[0]);
  tpu_pjrt_buffer_destroy(in1[0]);
}

TT_TEST(pjrt_all_reduce_over_two_replicas_sums_on_both) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  int64_t live = tpu_pjrt_live_buffers();
  tpu_pjrt_compile_options_t co = {.num_replicas = 2};
  tpu_pjrt_exec_t *e = compile_text(c, k_allreduce, &co);
  if (e) {
    TT_CHECK(tpu_pjrt_exec_num_replicas(e) == 2);
    int devs[2] = {0, 1};
    run_allreduce(c, e, devs);
    tpu_pjrt_exec_destroy(e);
  }
  /* a swapped device assignment: replica 0 on device 1 */
  int swapped[2] = {1, 0};
  co.device_ids = swapped;
  e = compile_text(c, k_allreduce, &co);
  if (e) {
    run_allreduce(c, e, swapped);
    /* and after a serialize round trip */
    void *bytes = NULL;
    size_t n = 0;
    tpu_pjrt_exec_t *e2 = NULL;
    TT_CHECK_OK(tpu_pjrt_exec_serialize(e, &bytes, &n));
    tpu_status_t st = tpu_pjrt_exec_deserialize(c, bytes, n, &e2);
    free(bytes);
    TT_CHECK(st == NULL);
    tpu_status_free(st);
    if (e2) {
      TT_CHECK(tpu_pjrt_exec_num_replicas(e2) == 2);
      run_allreduce(c, e2, swapped);
      tpu_pjrt_exec_destroy(e2);
    }
    tpu_pjrt_exec_destroy(e);
  }
  int bad[2] = {1, 1};
  co.device_ids = bad;
  tpu_pjrt_exec_t *none = NULL;
  CHECK_CODE(tpu_pjrt_compile(c, k_allreduce, strlen(k_allreduce), &co, &none), TPU_INVALID_ARGUMENT, "device 1");
  co.num_replicas = 3;
  co.device_ids = NULL;
  CHECK_CODE(tpu_pjrt_compile(c, k_allreduce, strlen(k_allreduce), &co, &none), TPU_INVALID_ARGUMENT, "3 replicas");
  TT_CHECK(none == NULL);
  TT_CHECK(tpu_pjrt_live_buffers() == live);
}

TT_TEST(pjrt_serialize_deserialize_runs_with_same_result_and_checks_args) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  tpu_pjrt_exec_t *e = compile_text(c, k_add4, NULL);
  if (!e) return;
  void *bytes = NULL;
  size_t n = 0;
  TT_CHECK_OK(tpu_pjrt_exec_serialize(e, &bytes, &n));
  TT_CHECK(n > 16 && memcmp(bytes, "TPUPJRTX", 8) == 0);
  tpu_pjrt_exec_t *e2 = NULL;
  tpu_status_t st = tpu_pjrt_exec_deserialize(c, bytes, n, &e2);
  if (st) {
    fprintf(stderr, "  deserialize: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
  }
  float a[4] = {1.5f, 2, -3, 4}, b[4] = {1, 1, 1, 1}, r1[4] = {0}, r2[4] = {0};
  int64_t d[1] = {4};
  tpu_pjrt_buffer_t *in[2] = {up(c, 0, TPU_F32, d, 1, a), up(c, 0, TPU_F32, d, 1, b)}, *out[1] = {0};
  if (e2 && in[0] && in[1]) {
    TT_CHECK(tpu_pjrt_exec_num_outputs(e2) == 1 && tpu_pjrt_exec_output_dims(e2, 0)[0] == 4);
    if (run1(e, in, 2, out, NULL)) {
      TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r1, sizeof(r1)));
      tpu_pjrt_buffer_destroy(out[0]);
    }
    if (run1(e2, in, 2, out, NULL)) {
      TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r2, sizeof(r2)));
      tpu_pjrt_buffer_destroy(out[0]);
    }
    for (int i = 0; i < 4; i++) TT_CHECK(r1[i] == a[i] + b[i] && r2[i] == r1[i]);
    /* the signature travelled in the envelope */
    tpu_pjrt_buffer_t *const one[1] = {in[0]};
    tpu_pjrt_buffer_t *const *lists[1] = {one};
    tpu_pjrt_buffer_t **outs[1] = {out};
    CHECK_CODE(tpu_pjrt_execute(e2, lists, 1, 1, NULL, outs), TPU_INVALID_ARGUMENT, "2 argument");
  }

  /* foreign / damaged envelopes are refused, never crashed on */
  tpu_pjrt_exec_t *bad = NULL;
  unsigned char junk[64];
  for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)(i * 37 + 11);
  CHECK_CODE(tpu_pjrt_exec_deserialize(c, junk, sizeof(junk), &bad), TPU_INVALID_ARGUMENT, "magic");
  CHECK_CODE(tpu_pjrt_exec_deserialize(c, "", 0, &bad), TPU_INVALID_ARGUMENT, NULL);
  CHECK_CODE(tpu_pjrt_exec_deserialize(c, bytes, n / 2, &bad), TPU_INVALID_ARGUMENT, NULL);
  CHECK_CODE(tpu_pjrt_exec_deserialize(c, bytes, 20, &bad), TPU_INVALID_ARGUMENT, NULL);
  unsigned char *copy = (unsigned char *)malloc(n);
  if (copy) {
    memcpy(copy, bytes, n);
    copy[n / 2] ^= 0x40;
    CHECK_CODE(tpu_pjrt_exec_deserialize(c, copy, n, &bad), TPU_INVALID_ARGUMENT, "checksum");
    memcpy(copy, bytes, n);
    copy[8] = 99; /* format version */
    CHECK_CODE(tpu_pjrt_exec_deserialize(c, copy, n, &bad), TPU_INVALID_ARGUMENT, NULL);
    free(copy);
  }
  TT_CHECK(bad == NULL);
  free(bytes);
  for (int i = 0; i < 2; i++) tpu_pjrt_buffer_destroy(in[i]);
  tpu_pjrt_exec_destroy(e2);
  tpu_pjrt_exec_destroy(e);
}

TT_TEST(pjrt_malformed_program_carries_parser_diagnostic) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  const char *bad_op =
      "module @bad {\n"
      "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %0 = \"stablehlo.no_such_op\"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
      "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
      "  }\n"
      "}\n";
  const char *bad_syntax = "module @bad { func.func public @main(%arg0: tensor<4xf32> -> tensor<4xf32> { } }";
  const char *bad_types =
      "module @bad {\n"
      "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %0 = \"stablehlo.add\"(%arg0, %arg0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>\n"
      "    \"func.return\"(%0) : (tensor<5xf32>) -> ()\n"
      "  }\n"
      "}\n";
  const char *progs[3] = {bad_op, bad_syntax, bad_types};
  const char *needles[3] = {"no_such_op", "error", "error"};
  for (int i = 0; i < 3; i++) {
    tpu_pjrt_exec_t *e = NULL;
    tpu_status_t st = tpu_pjrt_compile(c, progs[i], strlen(progs[i]), NULL, &e);
    TT_CHECK(st != NULL && e == NULL);
    if (!st) { tpu_pjrt_exec_destroy(e); continue; }
    TT_CHECK(tpu_status_code(st) == TPU_INVALID_ARGUMENT);
    if (!strstr(tpu_status_message(st), needles[i])) {
      fprintf(stderr, "  program %d: diagnostic lacks \"%s\": %s\n", i, needles[i], tpu_status_message(st));
      tt_failed_checks++;
    }
    tpu_status_free(st);
  }
}

TT_TEST(pjrt_wrong_argument_count_dtype_shape_named) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  int64_t live = tpu_pjrt_live_buffers();
  tpu_pjrt_exec_t *e = compile_text(c, k_add4, NULL);
  if (!e) return;
  float a[4] = {0};
  int32_t ai[4] = {0};
  int64_t d4[1] = {4}, d3[1] = {3}, d22[2] = {2, 2};
  tpu_pjrt_buffer_t *f4 = up(c, 0, TPU_F32, d4, 1, a), *i4 = up(c, 0, TPU_S32, d4, 1, ai),
                    *f3 = up(c, 0, TPU_F32, d3, 1, a), *f22 = up(c, 0, TPU_F32, d22, 2, a);
  tpu_pjrt_buffer_t *out[1] = {0};
  tpu_pjrt_buffer_t **outs[1] = {out};
  if (f4 && i4 && f3 && f22) {
    tpu_pjrt_buffer_t *const one[1] = {f4};
    tpu_pjrt_buffer_t *const *l1[1] = {one};
    CHECK_CODE(tpu_pjrt_execute(e, l1, 1, 1, NULL, outs), TPU_INVALID_ARGUMENT, "takes 2 argument(s), 1 given");
    tpu_pjrt_buffer_t *const dt[2] = {f4, i4};
    tpu_pjrt_buffer_t *const *l2[1] = {dt};
    CHECK_CODE(tpu_pjrt_execute(e, l2, 1, 2, NULL, outs), TPU_INVALID_ARGUMENT,
               "argument 1: expected float32[4], got int32[4]");
    tpu_pjrt_buffer_t *const sh[2] = {f3, f4};
    tpu_pjrt_buffer_t *const *l3[1] = {sh};
    CHECK_CODE(tpu_pjrt_execute(e, l3, 1, 2, NULL, outs), TPU_INVALID_ARGUMENT,
               "argument 0: expected float32[4], got float32[3]");
    tpu_pjrt_buffer_t *const rk[2] = {f4, f22};
    tpu_pjrt_buffer_t *const *l4[1] = {rk};
    CHECK_CODE(tpu_pjrt_execute(e, l4, 1, 2, NULL, outs), TPU_INVALID_ARGUMENT, "got float32[2,2]");
    tpu_pjrt_buffer_t *const nul[2] = {f4, NULL};
    tpu_pjrt_buffer_t *const *l5[1] = {nul};
    CHECK_CODE(tpu_pjrt_execute(e, l5, 1, 2, NULL, outs), TPU_INVALID_ARGUMENT, "argument 1");
    TT_CHECK(out[0] == NULL);
  }
  tpu_pjrt_buffer_destroy(f4);
  tpu_pjrt_buffer_destroy(i4);
  tpu_pjrt_buffer_destroy(f3);
  tpu_pjrt_buffer_destroy(f22);
  tpu_pjrt_exec_destroy(e);
  TT_CHECK(tpu_pjrt_live_buffers() == live);
}

TT_TEST(pjrt_donation_happens_only_when_allowed) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  const char *prog =
      "module @donate {\n"
      "  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>)"
      " -> tensor<4xf32> {\n"
      "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
      "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_pjrt_exec_t *e = compile_text(c, prog, NULL);
  if (!e) return;
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 10, 10, 10}, r[4];
  int64_t d[1] = {4};
  /* kept: non_donatable = {0} -> the input still holds its value */
  tpu_pjrt_buffer_t *in[2] = {up(c, 0, TPU_F32, d, 1, a), up(c, 0, TPU_F32, d, 1, b)}, *out[1] = {0};
  int64_t keep[1] = {0};
  tpu_pjrt_execute_options_t o = {.non_donatable = keep, .num_non_donatable = 1, .wait = true};
  if (in[0] && in[1] && run1(e, in, 2, out, &o)) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)));
    for (int i = 0; i < 4; i++) TT_CHECK(r[i] == a[i] + b[i]);
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(in[0], r, sizeof(r)));
    for (int i = 0; i < 4; i++) TT_CHECK(r[i] == a[i]);
    tpu_pjrt_buffer_destroy(out[0]);
  }
  /* donated: the input is dead afterwards, the output is right */
  o.non_donatable = NULL;
  o.num_non_donatable = 0;
  if (in[0] && in[1] && run1(e, in, 2, out, &o)) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)));
    for (int i = 0; i < 4; i++) TT_CHECK(r[i] == a[i] + b[i]);
    tpu_status_t st = tpu_pjrt_buffer_to_host(in[0], r, sizeof(r));
    TT_CHECK(st != NULL); /* reading a donated buffer is an error, not a crash */
    tpu_status_free(st);
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(in[1], r, sizeof(r)));
    TT_CHECK(r[0] == 10);
    tpu_pjrt_buffer_destroy(out[0]);
  }
  tpu_pjrt_buffer_destroy(in[0]);
  tpu_pjrt_buffer_destroy(in[1]);
  tpu_pjrt_exec_destroy(e);
}

TT_TEST(pjrt_signature_parser_handles_attributes_and_scalars) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  /* attributes with strings and braces after an argument; i1 and ui8 args */
  const char *prog =
      "module @sig {\n"
      "  func.func public @main(%arg0: tensor<2xi1> {mhlo.sharding = \"{replicated}\", jax.arg_info = \"x)\"},"
      " %arg1: tensor<ui8> loc(\"a\"), %arg2: tensor<2xui8>) -> (tensor<2xui8> {jax.result_info = \"\"}) {\n"
      "    %0 = \"stablehlo.broadcast_in_dim\"(%arg1) {broadcast_dimensions = array<i64>} : (tensor<ui8>) -> tensor<2xui8>\n"
      "    %1 = \"stablehlo.add\"(%0, %arg2) : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>\n"
      "    %2 = \"stablehlo.select\"(%arg0, %1, %arg2) : (tensor<2xi1>, tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>\n"
      "    \"func.return\"(%2) : (tensor<2xui8>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_pjrt_exec_t *e = compile_text(c, prog, NULL);
  if (!e) return;
  uint8_t m[2] = {1, 0}, s = 5, v[2] = {250, 7}, r[2];
  int64_t d[1] = {2};
  tpu_pjrt_buffer_t *in[3] = {up(c, 0, TPU_PRED, d, 1, m), up(c, 0, TPU_U8, NULL, 0, &s), up(c, 0, TPU_U8, d, 1, v)};
  tpu_pjrt_buffer_t *out[1] = {0};
  if (in[0] && in[1] && in[2] && run1(e, in, 3, out, NULL)) {
    TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)));
    TT_CHECK(r[0] == (uint8_t)(250 + 5) && r[1] == 7);
    tpu_pjrt_buffer_destroy(out[0]);
    /* swapping pred and ui8 is caught by our check */
    tpu_pjrt_buffer_t *const sw[3] = {in[2], in[1], in[0]};
    tpu_pjrt_buffer_t *const *l[1] = {sw};
    tpu_pjrt_buffer_t **outs[1] = {out};
    CHECK_CODE(tpu_pjrt_execute(e, l, 1, 3, NULL, outs), TPU_INVALID_ARGUMENT, "expected bool[2], got uint8[2]");
  }
  for (int i = 0; i < 3; i++) tpu_pjrt_buffer_destroy(in[i]);
  tpu_pjrt_exec_destroy(e);
}
