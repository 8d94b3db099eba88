/* custom.c - checking a user kernel (ops/custom.h) before it joins a graph.
 *
 * A kernel's text is the user's: it may not parse, or not compile.  Inside
 * a fused program that failure would fail the whole program and every value
 * of it, far from the call.  So each kernel is compiled once on its own
 * (a module whose main calls it on its argument types; through the program
 * cache's build half, so the disk tier keeps it for the next process) when
 * the Python side first makes it, and an error there names the kernel and
 * its types.  Nothing is recorded; the executable is dropped.
 */
#include <stdio.h>

#include "ops/custom.h"
#include "ops/ops.h"
#include "runtime/cache.h"
#include "runtime/runtime.h"
#include "runtime/runtime_internal.h"

tpu_status_t tpu_rt_custom_kernel_check(int64_t id) {
  if (!tpu_rt_initialized()) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  if (R.forked) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_FORKED_MSG);
  const tpu_custom_kernel_t *k = tpu_custom_kernel_get(id);
  if (!k) return tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel: no kernel with id %lld", (long long)id);
  const tpu_op_rule_t *rule = tpu_op_rule_find("custom_kernel");
  tpu_hlo_module_t *m = NULL;
  tpu_status_t st = tpu_hlo_module_create("custom_kernel_check", &m);
  if (st) return st;
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t in[TPU_CUSTOM_MAX_ARGS], out[TPU_OP_MAX_OUTPUTS];
  for (int i = 0; i < k->nargs; i++) in[i] = tpu_hlo_func_arg(f, k->args[i]);
  int64_t attr = id;
  tpu_op_attrs_t attrs = {1, &attr, 0, NULL};
  int nout = 0;
  const char *text = NULL;
  size_t len = 0;
  st = tpu_op_lower(rule, f, in, k->nargs, &attrs, out, &nout);
  if (!st) {
    tpu_hlo_func_return(f, out, nout);
    st = tpu_hlo_module_text(m, &text, &len);
  }
  if (!st) {
    tpu_pjrt_compile_options_t co = {.num_replicas = 1, .num_partitions = 1, .device_ids = NULL,
                                     .portable = true, .xla_flags = NULL};
    tpu_pjrt_exec_t *exec = NULL;
    int from_disk = 0;
    st = build_program(text, len, &co, k->name, 0, false, &exec, &from_disk);
    if (exec) tpu_pjrt_exec_destroy(exec);
  }
  if (st) {
    char types[1024];
    tpu_status_t wrapped =
        tpu_status_make(TPU_INVALID_ARGUMENT, "custom kernel '%s' for inputs %s does not compile: %s", k->name,
                        tpu_custom_types_str(k->args, k->nargs, types, sizeof(types)), tpu_status_message(st));
    tpu_status_free(st);
    st = wrapped;
  }
  tpu_hlo_module_destroy(m);
  return st;
}
