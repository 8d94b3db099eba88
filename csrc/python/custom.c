/* custom.c - torch_tpu._C's entry points for user kernels (ops/custom.h):
 *   custom_kernel(name, text, entry, arg_types, result_types) -> id
 *       types: sequences of (dtype code, dims sequence)
 *   custom_kernel_check(id): compiles the kernel alone (runtime/custom.c)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ops/custom.h"
#include "python/module.h"
#include "runtime/runtime.h"

static int parse_types(PyObject *seq, const char *what, tpu_hlo_type_t *out, int max, int *out_n) {
  Py_ssize_t n = PySequence_Size(seq);
  if (n < 0) return -1;
  if (n > max) {
    PyErr_Format(PyExc_ValueError, "custom_kernel: %zd %s (at most %d)", n, what, max);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_GetItem(seq, i);
    if (!item) return -1;
    PyObject *dims = NULL;
    long code = 0;
    int ok = PyArg_ParseTuple(item, "lO", &code, &dims);
    Py_ssize_t rank = ok ? PySequence_Size(dims) : -1;
    if (ok && rank > TPU_MAX_RANK) {
      PyErr_Format(PyExc_ValueError, "custom_kernel: rank %zd (at most %d)", rank, TPU_MAX_RANK);
      rank = -1;
    }
    int64_t d[TPU_MAX_RANK];
    for (Py_ssize_t k = 0; k < rank; k++) {
      PyObject *dk = PySequence_GetItem(dims, k);
      d[k] = dk ? PyLong_AsLongLong(dk) : -1;
      Py_XDECREF(dk);
      if (d[k] == -1 && PyErr_Occurred()) {
        rank = -1;
        break;
      }
    }
    Py_DECREF(item);
    if (rank < 0) return -1;
    out[i] = tpu_hlo_type_make((tpu_dtype_t)code, (int)rank, d);
  }
  *out_n = (int)n;
  return 0;
}

static PyObject *py_custom_kernel(PyObject *self, PyObject *args) {
  const char *name, *text, *entry;
  Py_ssize_t len;
  PyObject *arg_types, *res_types;
  if (!PyArg_ParseTuple(args, "ss#sOO", &name, &text, &len, &entry, &arg_types, &res_types)) return NULL;
  tpu_hlo_type_t at[TPU_CUSTOM_MAX_ARGS], rt[TPU_CUSTOM_MAX_RESULTS];
  int na = 0, nr = 0;
  if (parse_types(arg_types, "arguments", at, TPU_CUSTOM_MAX_ARGS, &na)) return NULL;
  if (parse_types(res_types, "results", rt, TPU_CUSTOM_MAX_RESULTS, &nr)) return NULL;
  int64_t id = 0;
  tpu_status_t st = tpu_custom_kernel_register(name, text, (size_t)len, entry, na, at, nr, rt, &id);
  if (st) return tpu_py_raise_status(st);
  return PyLong_FromLongLong(id);
}

static PyObject *py_custom_kernel_check(PyObject *self, PyObject *arg) {
  long long id = PyLong_AsLongLong(arg);
  if (id == -1 && PyErr_Occurred()) return NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_custom_kernel_check(id);
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyMethodDef custom_methods[] = {
    {"custom_kernel", py_custom_kernel, METH_VARARGS,
     "custom_kernel(name, text, entry, arg_types, result_types) -> id; types: [(dtype code, dims)]"},
    {"custom_kernel_check", py_custom_kernel_check, METH_O, "custom_kernel_check(id): compile the kernel alone"},
    {NULL, NULL, 0, NULL},
};

int tpu_py_custom_add(PyObject *m) { return PyModule_AddFunctions(m, custom_methods); }
