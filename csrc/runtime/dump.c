/* dump.c - program dumps: TORCH_TPU_DUMP_DIR=d writes, for every program
 * the engine builds (compiled, or loaded from the disk tier):
 *
 *   d/<key>.mlir  its StableHLO text, as handed to the compiler, with the
 *                 XLA options it was compiled with in a comment at the top
 *   d/<key>.txt   key, name, op count, where it came from, the seconds that
 *                 took, and its op list (rule names in graph order)
 *   d/<key>.<format>.pb  XLA's optimized program where the plugin gives it
 *                 (PJRT_Executable_OptimizedProgram: a serialized
 *                 HloModuleProtoWithConfig on XLA's CPU plugin: <key>.hlo_with_config.pb)
 *
 * <key> is the program's cache key in 16 hex digits (the key metrics(),
 * the trace and torch_tpu.debug.explain name it by).  The text is written
 * when the flush builds it, the op list once the compile or load ended
 * (from any thread: each file is written whole to a temporary name and
 * renamed).  The directory is read once; a failure to write is warned once
 * and the dumps stop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/strbuf.h"
#include "runtime/runtime_internal.h"

static pthread_once_t dump_once = PTHREAD_ONCE_INIT;
static char dir_path[4096];
static int dump_on;
static int dump_failed;

static void dump_read_env(void) {
  const char *d = getenv("TORCH_TPU_DUMP_DIR");
  if (!d || !*d || strlen(d) >= sizeof(dir_path) - 64) return;
  snprintf(dir_path, sizeof(dir_path), "%s", d);
  if (mkdir(dir_path, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "torch_tpu: TORCH_TPU_DUMP_DIR=%s: cannot create it (%s); no program dumps\n", dir_path,
            strerror(errno));
    return;
  }
  dump_on = 1;
}

const char *dump_dir(void) {
  pthread_once(&dump_once, dump_read_env);
  return dump_on && !dump_failed ? dir_path : NULL;
}

/* Writes parts[0..n) to dir/name whole (temporary file + rename). */
static void write_whole(const char *name, const char *const *parts, const size_t *lens, int n) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof(path), "%s/%s", dir_path, name);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%lx", path, (long)getpid(), (unsigned long)pthread_self());
  FILE *f = fopen(tmp, "w");
  int ok = f != NULL;
  for (int i = 0; ok && i < n; i++) ok = fwrite(parts[i], 1, lens[i], f) == lens[i];
  if (f && fclose(f) != 0) ok = 0;
  if (ok && rename(tmp, path) != 0) ok = 0;
  if (!ok) {
    if (f) unlink(tmp);
    if (!__atomic_exchange_n(&dump_failed, 1, __ATOMIC_SEQ_CST))
      fprintf(stderr, "torch_tpu: TORCH_TPU_DUMP_DIR: cannot write %s (%s); no more program dumps\n", path,
              strerror(errno));
  }
}

void dump_program_text(uint64_t key, const char *text, size_t len, const char *xla_flags) {
  if (!dump_dir() || !text) return;
  char name[64], head[2300];
  snprintf(name, sizeof(name), "%016llx.mlir", (unsigned long long)key);
  int h = snprintf(head, sizeof(head), "// torch_tpu program %016llx\n// xla options: %.2000s\n",
                   (unsigned long long)key, xla_flags && *xla_flags ? xla_flags : "(defaults)");
  const char *parts[2] = {head, text};
  size_t lens[2] = {(size_t)h < sizeof(head) ? (size_t)h : sizeof(head) - 1, len};
  write_whole(name, parts, lens, 2);
}

void dump_program_meta(uint64_t key, const char *name, int ops, const char *const *rules, int nrules,
                       const char *source, double seconds) {
  if (!dump_dir()) return;
  tpu_strbuf_t sb;
  tpu_strbuf_init(&sb);
  tpu_strbuf_printf(&sb, "key: %016llx\nname: %s\nops: %d\nsource: %s\nseconds: %.6f\nop_list:", (unsigned long long)key,
                     name ? name : "?", ops, source, seconds);
  for (int i = 0; rules && i < nrules; i++) tpu_strbuf_printf(&sb, " %s", rules[i] ? rules[i] : "?");
  if (!rules) tpu_strbuf_printf(&sb, " (not kept: the descriptor budget is spent)");
  tpu_strbuf_printf(&sb, "\n");
  char fname[64];
  snprintf(fname, sizeof(fname), "%016llx.txt", (unsigned long long)key);
  if (tpu_strbuf_ok(&sb)) {
    const char *parts[1] = {tpu_strbuf_cstr(&sb)};
    size_t lens[1] = {sb.len};
    write_whole(fname, parts, lens, 1);
  }
  tpu_strbuf_free(&sb);
}

void dump_program_optimized(uint64_t key, tpu_pjrt_exec_t *exec) {
  if (!dump_dir() || !exec) return;
  void *bytes = NULL;
  size_t n = 0;
  char format[32];
  tpu_status_t st = tpu_pjrt_exec_optimized_program(exec, &bytes, &n, format, sizeof(format));
  if (!st && n) {
    char name[96];
    int safe = format[0] != 0;
    for (const char *c = format; *c; c++) safe &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
    snprintf(name, sizeof(name), "%016llx.%s%s", (unsigned long long)key,
             safe ? format : "bin", !strncmp(format, "hlo", 3) ? ".pb" : "");
    const char *parts[1] = {(const char *)bytes};
    size_t lens[1] = {n};
    write_whole(name, parts, lens, 1);
  }
  tpu_status_free(st); /* a plugin without it: no file */
  free(bytes);
}
