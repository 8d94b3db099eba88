/* trace_py.c - the engine's timeline (runtime/trace.h) for Python:
 * trace_start(), trace_stop(), trace_take() -> [event tuples],
 * trace_mark(kind, name, start, end, bytes), clock_now(), and the kinds
 * as TRACE_* constants.  torch_tpu/profiler.py and debug.py read them.
 */
#define PY_SSIZE_T_CLEAN
#include <stdlib.h>

#include "base/clock.h"
#include "python/module.h"
#include "runtime/metrics.h"
#include "runtime/trace.h"

static PyObject *py_trace_start(PyObject *self, PyObject *unused) {
  tpu_rt_trace_start();
  Py_RETURN_NONE;
}

static PyObject *py_trace_stop(PyObject *self, PyObject *unused) {
  tpu_rt_trace_stop();
  Py_RETURN_NONE;
}

static PyObject *py_trace_active(PyObject *self, PyObject *unused) { return PyBool_FromLong(tpu_rt_trace_on); }

/* (kind, device, cut, ops, start, end, rec_start, rec_end, key, seq, tag, bytes, name, first_tag) per event */
static PyObject *py_trace_take(PyObject *self, PyObject *unused) {
  enum { CHUNK = 4096 };
  tpu_rt_trace_event_t *buf = (tpu_rt_trace_event_t *)malloc(sizeof(*buf) * CHUNK);
  if (!buf) return PyErr_NoMemory();
  PyObject *l = PyList_New(0);
  int n;
  while (l && (n = tpu_rt_trace_take(buf, CHUNK)) > 0) {
    for (int i = 0; i < n; i++) {
      const tpu_rt_trace_event_t *e = &buf[i];
      PyObject *t = Py_BuildValue("(siiiddddKKKLsK)", tpu_rt_trace_kind_name(e->kind), e->device, e->cut, e->ops,
                                  e->start, e->end, e->rec_start, e->rec_end, (unsigned long long)e->key,
                                  (unsigned long long)e->seq, (unsigned long long)e->tag, (long long)e->bytes,
                                  e->name, (unsigned long long)e->first_tag);
      if (!t || PyList_Append(l, t) < 0) {
        Py_XDECREF(t);
        Py_CLEAR(l);
        break;
      }
      Py_DECREF(t);
    }
    if (n < CHUNK) break;
  }
  free(buf);
  return l;
}

static PyObject *py_trace_mark(PyObject *self, PyObject *args) {
  int kind;
  const char *name;
  double start, end;
  long long bytes = 0;
  if (!PyArg_ParseTuple(args, "isdd|L", &kind, &name, &start, &end, &bytes)) return NULL;
  if (kind < 0 || kind >= TPU_TRACE_KIND_COUNT) {
    PyErr_Format(PyExc_ValueError, "trace_mark: no event kind %d", kind);
    return NULL;
  }
  if (tpu_rt_trace_on) tpu_rt_trace_mark((tpu_rt_trace_kind_t)kind, name, start, end, (int64_t)bytes);
  Py_RETURN_NONE;
}

static PyObject *py_trace_dropped(PyObject *self, PyObject *unused) {
  return PyLong_FromLongLong((long long)tpu_rt_trace_dropped());
}

static PyObject *py_clock_now(PyObject *self, PyObject *unused) { return PyFloat_FromDouble(tpu_clock_now()); }

static PyObject *py_cut_names(PyObject *self, PyObject *unused) {
  PyObject *l = PyList_New(TPU_CUT_COUNT);
  if (!l) return NULL;
  for (int i = 0; i < TPU_CUT_COUNT; i++) PyList_SetItem(l, i, PyUnicode_FromString(tpu_rt_cut_name((tpu_rt_cut_t)i)));
  return l;
}

static PyMethodDef trace_methods[] = {
    {"trace_start", py_trace_start, METH_NOARGS, "start the engine's timeline (drops untaken events)"},
    {"trace_stop", py_trace_stop, METH_NOARGS, "stop it (events stay until taken)"},
    {"trace_active", py_trace_active, METH_NOARGS, ""},
    {"trace_take", py_trace_take, METH_NOARGS,
     "[(kind, device, cut, ops, start, end, rec_start, rec_end, key, seq, tag, bytes, name, first_tag)]"},
    {"trace_mark", py_trace_mark, METH_VARARGS, "trace_mark(kind, name, start, end[, bytes])"},
    {"trace_dropped", py_trace_dropped, METH_NOARGS, "events dropped (buffer full)"},
    {"clock_now", py_clock_now, METH_NOARGS, "the engine's clock (CLOCK_MONOTONIC seconds)"},
    {"cut_names", py_cut_names, METH_NOARGS, "what cut a program, by code"},
    {NULL, NULL, 0, NULL},
};

int tpu_py_trace_add(PyObject *m) {
  if (PyModule_AddFunctions(m, trace_methods) < 0) return -1;
  static const struct { const char *name; int code; } kinds[] = {
      {"TRACE_EXECUTE", TPU_TRACE_EXECUTE}, {"TRACE_FLUSH", TPU_TRACE_FLUSH}, {"TRACE_CACHE_HIT", TPU_TRACE_CACHE_HIT},
      {"TRACE_COMPILE", TPU_TRACE_COMPILE}, {"TRACE_DISK_LOAD", TPU_TRACE_DISK_LOAD},
      {"TRACE_TO_DEVICE", TPU_TRACE_TO_DEVICE}, {"TRACE_TO_HOST", TPU_TRACE_TO_HOST},
      {"TRACE_DEVICE_COPY", TPU_TRACE_DEVICE_COPY}, {"TRACE_HOST_WAIT", TPU_TRACE_HOST_WAIT},
      {"TRACE_FALLBACK", TPU_TRACE_FALLBACK}};
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (PyModule_AddIntConstant(m, kinds[i].name, kinds[i].code) < 0) return -1;
  return 0;
}
