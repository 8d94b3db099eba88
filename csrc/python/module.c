/* module.c - the engine's CPython face: the functions of torch_tpu._C that
 * control the engine (start, modes, flush, synchronize, statistics, the
 * program cache) and the one place a status becomes a Python exception.
 * The module itself is made by csrc/torch/python.cpp, which adds the entry
 * points that touch tensors (they need PyTorch's C++ API).
 */
#define PY_SSIZE_T_CLEAN
#include "python/module.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ops/ops.h"
#include "runtime/runtime.h"

/* ---- errors ---------------------------------------------------------------- */

static PyObject *NotTpuError; /* an input is not a tpu tensor: Python slow path */
static PyObject *Unsupported; /* TPU_UNIMPLEMENTED: a case the engine cannot lower; kernels fall back to CPU */
static PyObject *OutOfMemory; /* torch.OutOfMemoryError, handed over by the C++ layer */

void tpu_py_set_oom_error(PyObject *cls) { OutOfMemory = cls; }

static tpu_py_oom_note_fn oom_note;
void tpu_py_set_oom_note(tpu_py_oom_note_fn fn) { oom_note = fn; }

/* The exception PyTorch raises for the same mistake on CPU (and CUDA, for
 * running out of device memory). */
PyObject *tpu_py_raise_status(tpu_status_t st) {
  PyObject *exc;
  switch (tpu_status_code(st)) {
    case TPU_OUT_OF_RANGE: exc = PyExc_IndexError; break;
    case TPU_UNIMPLEMENTED: exc = Unsupported; break;
    case TPU_RESOURCE_EXHAUSTED: exc = OutOfMemory ? OutOfMemory : PyExc_MemoryError; break;
    default: exc = PyExc_RuntimeError; break;
  }
  char note[1024];
  note[0] = 0;
  if (tpu_status_code(st) == TPU_RESOURCE_EXHAUSTED && oom_note) oom_note(tpu_status_message(st), note, sizeof(note));
  if (note[0]) PyErr_Format(exc, "%s%s", tpu_status_message(st), note);
  else PyErr_SetString(exc, tpu_status_message(st));
  tpu_status_free(st);
  return NULL;
}
#define raise_status tpu_py_raise_status

/* ---- module functions ---------------------------------------------------------------------- */

static PyObject *py_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"plugin", "num_devices", "mode", "cache_dir", "fused_max_nodes",
                           "mem_max_entries", "mem_max_bytes", "disk_max_entries", "disk_max_bytes",
                           "device_checks", "donation", "host_memory_cache", "compile_threads", "mem_max_maps",
                           "host_capacity", NULL};
  const char *plugin, *cache_dir = NULL;
  int ndev = 0, mode = 0, fmax = 0, checks = 1, donation = 1, host_cache = 1, threads = -1;
  long long me = 0, mb = 0, de = 0, db = 0, mm = 0, hc = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|iiziLLLLpppiLL", kwlist, &plugin, &ndev, &mode, &cache_dir, &fmax,
                                   &me, &mb, &de, &db, &checks, &donation, &host_cache, &threads, &mm, &hc))
    return NULL;
  tpu_rt_config_t cfg = {.plugin_path = plugin, .num_devices = ndev, .mode = (tpu_eager_mode_t)mode,
                         .cache_dir = cache_dir, .fused_max_nodes = fmax, .mem_cache_max_entries = me,
                         .mem_cache_max_bytes = mb, .mem_cache_max_maps = mm, .disk_cache_max_entries = de, .disk_cache_max_bytes = db,
                         .no_device_checks = !checks, .no_donation = !donation,
                         .no_host_memory_cache = !host_cache, .compile_threads = threads,
                         .host_capacity_bytes = hc};
  tpu_status_t st = tpu_rt_init(&cfg);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_find_plugin(PyObject *self, PyObject *args) {
  const char *dirs = NULL;
  if (!PyArg_ParseTuple(args, "|z", &dirs)) return NULL;
  char path[4096];
  tpu_status_t st = tpu_pjrt_find_plugin(dirs, path, sizeof(path));
  if (st) return raise_status(st);
  return PyUnicode_FromString(path);
}

static PyObject *py_flush(PyObject *self, PyObject *args) {
  int why = TPU_CUT_OTHER;
  if (!PyArg_ParseTuple(args, "|i", &why)) return NULL;
  if (why < 0 || why >= TPU_CUT_COUNT) why = TPU_CUT_OTHER;
  tpu_status_t st = tpu_rt_flush((tpu_rt_cut_t)why);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_flush_block(PyObject *self, PyObject *arg) {
  long min_nodes = PyLong_AsLong(arg);
  if (min_nodes == -1 && PyErr_Occurred()) return NULL;
  tpu_status_t st = tpu_rt_flush_block((int)min_nodes);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_hold_flush(PyObject *self, PyObject *unused) {
  tpu_status_t st = tpu_rt_hold_flush();
  if (st) { /* the hold is taken: the caller's release still balances it */
    PyObject *r = raise_status(st);
    tpu_status_free(tpu_rt_release_flush());
    return r;
  }
  Py_RETURN_NONE;
}

static PyObject *py_release_flush(PyObject *self, PyObject *unused) {
  tpu_status_t st = tpu_rt_release_flush();
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_synchronize(PyObject *self, PyObject *unused) {
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_synchronize();
  Py_END_ALLOW_THREADS
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_set_mode(PyObject *self, PyObject *arg) {
  long m = PyLong_AsLong(arg);
  if (m == -1 && PyErr_Occurred()) return NULL;
  if (m < 0 || m > 2) {
    PyErr_SetString(PyExc_ValueError, "mode must be 0 (strict), 1 (debug) or 2 (fused)");
    return NULL;
  }
  tpu_status_t st = tpu_rt_set_mode((tpu_eager_mode_t)m);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_get_mode(PyObject *self, PyObject *unused) { return PyLong_FromLong(tpu_rt_mode()); }

static PyObject *py_stats(PyObject *self, PyObject *unused) {
  tpu_rt_stats_t s;
  tpu_rt_stats(&s);
  return Py_BuildValue(
      "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:i,"
      "s:L,s:L,s:d}",
      "mem_hits", (long long)s.mem_hits, "mem_misses", (long long)s.mem_misses, "disk_hits", (long long)s.disk_hits,
      "disk_misses", (long long)s.disk_misses, "disk_writes", (long long)s.disk_writes, "disk_errors",
      (long long)s.disk_errors, "compiles", (long long)s.compiles, "evictions", (long long)s.evictions,
      "disk_evictions", (long long)s.disk_evictions, "map_evictions", (long long)s.map_evictions,
      "memory_evictions", (long long)s.memory_evictions, "maps", (long long)s.maps, "mem_max_maps",
      (long long)s.mem_max_maps, "compile_seconds", s.compile_seconds, "mem_entries",
      (long long)s.mem_entries, "mem_bytes", (long long)s.mem_bytes, "disk_entries", (long long)s.disk_entries,
      "disk_bytes", (long long)s.disk_bytes, "executions", (long long)s.executions, "flushes", (long long)s.flushes,
      "ops_recorded", (long long)s.ops_recorded, "live_buffers", (long long)s.live_buffers, "live_values",
      (long long)s.live_values, "live_storages", (long long)s.live_storages, "scalar_cache_hits",
      (long long)s.scalar_cache_hits, "scalar_cache_misses", (long long)s.scalar_cache_misses,
      "scalar_cache_entries", (long long)s.scalar_cache_entries, "pending_nodes",
      tpu_rt_pending_nodes(), "disk_refused", (long long)s.disk_refused, "promotions", (long long)s.promotions,
      "promotion_seconds", s.promotion_seconds);
}

/* ---- metrics (runtime/metrics.h) ------------------------------------------------------------ */

static PyObject *py_metrics(PyObject *self, PyObject *unused) {
  tpu_rt_metrics_t m;
  tpu_rt_metrics(&m);
  PyObject *cuts = PyDict_New();
  if (!cuts) return NULL;
  for (int i = 0; i < TPU_CUT_COUNT; i++) {
    PyObject *v = PyLong_FromLongLong(m.cuts[i]);
    if (!v || PyDict_SetItemString(cuts, tpu_rt_cut_name((tpu_rt_cut_t)i), v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(cuts);
      return NULL;
    }
    Py_DECREF(v);
  }
  return Py_BuildValue("{s:L,s:d,s:d,s:L,s:d,s:L,s:L,s:d,s:L,s:d,s:L,s:L,s:L,s:L,s:L,s:L,s:N,s:L}",
                       "compiles", (long long)m.compiles, "compile_seconds", m.compile_seconds,
                       "build_wall_seconds", m.build_wall_seconds, "disk_loads",
                       (long long)m.disk_loads, "disk_load_seconds", m.disk_load_seconds, "recompiles",
                       (long long)m.recompiles, "executions", (long long)m.executions, "execute_seconds",
                       m.execute_seconds, "host_waits", (long long)m.host_waits, "host_wait_seconds",
                       m.host_wait_seconds, "to_device", (long long)m.to_device, "to_device_bytes",
                       (long long)m.to_device_bytes, "to_host", (long long)m.to_host, "to_host_bytes",
                       (long long)m.to_host_bytes, "device_copies", (long long)m.device_copies,
                       "device_copy_bytes", (long long)m.device_copy_bytes, "cuts", cuts, "programs",
                       (long long)m.programs);
}

static PyObject *py_programs(PyObject *self, PyObject *args) {
  int first = 0;
  if (!PyArg_ParseTuple(args, "|i", &first)) return NULL;
  PyObject *l = PyList_New(0);
  if (!l) return NULL;
  tpu_rt_program_info_t buf[64];
  for (;;) {
    int n = tpu_rt_programs(first, buf, 64);
    for (int i = 0; i < n; i++) {
      tpu_rt_program_info_t *p = &buf[i];
      PyObject *d = Py_BuildValue("{s:K,s:s,s:i,s:i,s:i,s:s,s:d,s:L,s:d,s:O,s:s}", "key", (unsigned long long)p->key,
                                  "name", p->name, "ops", p->ops, "inputs", p->inputs, "outputs", p->outputs, "source",
                                  p->source == TPU_PROGRAM_DISK ? "disk" : "compiled", "seconds", p->seconds,
                                  "executions", (long long)p->executions, "execute_seconds", p->execute_seconds,
                                  "recompile", p->recompile ? Py_True : Py_False, "cause", p->cause);
      if (!d || PyList_Append(l, d) < 0) {
        Py_XDECREF(d);
        Py_DECREF(l);
        return NULL;
      }
      Py_DECREF(d);
    }
    if (n < 64) break;
    first += n;
  }
  return l;
}

static PyObject *py_recompile_causes(PyObject *self, PyObject *unused) {
  enum { MAX = 4096 };
  tpu_rt_recompile_cause_t *buf = (tpu_rt_recompile_cause_t *)PyMem_Malloc(sizeof(*buf) * MAX);
  if (!buf) return PyErr_NoMemory();
  int n = tpu_rt_recompile_causes(buf, MAX);
  PyObject *l = PyList_New(0);
  for (int i = 0; l && i < n; i++) {
    PyObject *t = Py_BuildValue("(sL)", buf[i].text, (long long)buf[i].count);
    if (!t || PyList_Append(l, t) < 0) {
      Py_XDECREF(t);
      Py_CLEAR(l);
    } else {
      Py_DECREF(t);
    }
  }
  PyMem_Free(buf);
  return l;
}

static PyObject *py_metrics_reset(PyObject *self, PyObject *unused) {
  tpu_rt_metrics_reset();
  Py_RETURN_NONE;
}

static PyObject *py_set_log(PyObject *self, PyObject *arg) {
  long flags = PyLong_AsLong(arg);
  if (flags == -1 && PyErr_Occurred()) return NULL;
  tpu_rt_metrics_set_log((int)flags);
  Py_RETURN_NONE;
}

static PyObject *py_clear_cache(PyObject *self, PyObject *arg) {
  tpu_rt_clear_cache(PyObject_IsTrue(arg) == 1);
  Py_RETURN_NONE;
}

static PyObject *py_platform(PyObject *self, PyObject *unused) { return PyUnicode_FromString(tpu_rt_platform()); }
static PyObject *py_identity(PyObject *self, PyObject *unused) { return PyUnicode_FromString(tpu_rt_identity()); }
static PyObject *py_initialized(PyObject *self, PyObject *unused) { return PyBool_FromLong(tpu_rt_initialized()); }
static PyObject *py_in_bad_fork(PyObject *self, PyObject *unused) { return PyBool_FromLong(tpu_rt_forked()); }

static PyObject *py_host_kernel(PyObject *self, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!name) return NULL;
  return PyBool_FromLong(tpu_kernels_available(name));
}

static PyObject *py_host_kernel_stats(PyObject *self, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!name) return NULL;
  int64_t calls, ns;
  tpu_kernels_stats(name, &calls, &ns);
  return Py_BuildValue("(Ld)", (long long)calls, (double)ns * 1e-9);
}

static PyObject *py_has_rule(PyObject *self, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!name) return NULL;
  return PyBool_FromLong(tpu_op_rule_find(name) != NULL);
}

static PyObject *py_rules(PyObject *self, PyObject *unused) {
  int n = tpu_op_rule_count();
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (int i = 0; i < n; i++) PyList_SetItem(l, i, PyUnicode_FromString(tpu_op_rule_at(i)->name));
  return l;
}

static PyObject *py_shutdown(PyObject *self, PyObject *unused) {
  tpu_rt_shutdown();
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))py_init, METH_VARARGS | METH_KEYWORDS, "initialise the runtime"},
    {"find_plugin", py_find_plugin, METH_VARARGS, "find_plugin(site_dirs) -> path"},
    {"flush", py_flush, METH_VARARGS, "flush([why]): run pending (fused) work; why: a CUT_* code"},
    {"flush_block", py_flush_block, METH_O, "flush_block(min_nodes): fused mode's cut after a repeated block"},
    {"hold_flush", py_hold_flush, METH_NOARGS, "the steps recorded until release_flush are one program"},
    {"release_flush", py_release_flush, METH_NOARGS, "ends hold_flush (strict/debug: runs what it held)"},
    {"synchronize", py_synchronize, METH_NOARGS, "run pending work and wait"},
    {"set_mode", py_set_mode, METH_O, "set eager mode"},
    {"get_mode", py_get_mode, METH_NOARGS, "eager mode"},
    {"stats", py_stats, METH_NOARGS, "runtime and cache counters"},
    {"clear_cache", py_clear_cache, METH_O, "clear_cache(disk_too)"},
    {"metrics", py_metrics, METH_NOARGS, "counters: compiles, executions, host waits, transfers, cuts"},
    {"programs", py_programs, METH_VARARGS, "programs([first]): one dict per program made"},
    {"recompile_causes", py_recompile_causes, METH_NOARGS, "[(first message, count)] per recompile cause"},
    {"metrics_reset", py_metrics_reset, METH_NOARGS, "zero the counters"},
    {"set_log", py_set_log, METH_O, "set_log(flags): 1 = recompiles, 2 = every compile"},
    {"platform", py_platform, METH_NOARGS, ""},
    {"identity", py_identity, METH_NOARGS, ""},
    {"initialized", py_initialized, METH_NOARGS, ""},
    {"in_bad_fork", py_in_bad_fork, METH_NOARGS, "a child forked after the device started (it cannot use it)"},
    {"has_rule", py_has_rule, METH_O, ""},
    {"host_kernel", py_host_kernel, METH_O, "whether programs can call the host kernel of this name (kernels.h)"},
    {"host_kernel_stats", py_host_kernel_stats, METH_O, "(calls, seconds) of the host kernel of this name"},
    {"rules", py_rules, METH_NOARGS, ""},
    {"shutdown", py_shutdown, METH_NOARGS, ""},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "torch_tpu._C", "torch_tpu engine", -1, methods};

PyObject *tpu_py_engine_module(void) {
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Unsupported = PyErr_NewException("torch_tpu._C.Unsupported", PyExc_NotImplementedError, NULL);
  NotTpuError = PyErr_NewException("torch_tpu._C.NotTpuError", PyExc_TypeError, NULL);
  if (!Unsupported || !NotTpuError) return NULL;
  Py_INCREF(Unsupported);
  PyModule_AddObject(m, "Unsupported", Unsupported);
  Py_INCREF(NotTpuError);
  PyModule_AddObject(m, "NotTpuError", NotTpuError);
  if (tpu_py_custom_add(m)) return NULL;
  if (tpu_py_trace_add(m)) return NULL;
  /* what cut a program (flush(why)), as metrics() names them */
  static const struct { const char *name; int code; } cuts[] = {
      {"CUT_OP", TPU_CUT_OP}, {"CUT_HOST_READ", TPU_CUT_HOST_READ}, {"CUT_SYNC", TPU_CUT_SYNC},
      {"CUT_LAYER", TPU_CUT_LAYER}, {"CUT_STEP", TPU_CUT_STEP}, {"CUT_SIZE", TPU_CUT_SIZE},
      {"CUT_FALLBACK", TPU_CUT_FALLBACK}, {"CUT_COMPILED", TPU_CUT_COMPILED},
      {"CUT_COLLECTIVE", TPU_CUT_COLLECTIVE}, {"CUT_LOOP", TPU_CUT_LOOP}, {"CUT_WIDE", TPU_CUT_WIDE}, {"CUT_OTHER", TPU_CUT_OTHER}};
  for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) PyModule_AddIntConstant(m, cuts[i].name, cuts[i].code);
  return m;
}
