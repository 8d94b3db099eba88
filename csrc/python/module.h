/* module.h - the engine's CPython face, for the module's maker
 * (csrc/torch/python.cpp): the engine-control functions and the one place
 * a status becomes a Python exception. */
#ifndef TPU_PYTHON_MODULE_H_
#define TPU_PYTHON_MODULE_H_

#include <Python.h>

#include "base/status.h"

/* A new module torch_tpu._C holding the engine-control functions and the
 * exception classes Unsupported and NotTpuError. */
PyObject *tpu_py_engine_module(void);
/* Sets the Python exception for st (freed) and returns NULL. */
PyObject *tpu_py_raise_status(tpu_status_t st);
/* The class raised for TPU_RESOURCE_EXHAUSTED (torch.OutOfMemoryError). */
void tpu_py_set_oom_error(PyObject *cls);
/* Adds the user-kernel functions (custom.c) to the module; -1 on error. */
int tpu_py_custom_add(PyObject *m);
/* Out of memory: a callback that writes a note for the message (where the
 * live allocations it names were made, from torch.tpu.memory's record) into
 * out (n bytes, "" for none); set by the C++ layer (memory_history.cpp). */
typedef void (*tpu_py_oom_note_fn)(const char *message, char *out, size_t n);
void tpu_py_set_oom_note(tpu_py_oom_note_fn fn);
/* Adds the engine timeline's functions (trace_py.c); -1 on error. */
int tpu_py_trace_add(PyObject *m);

#endif /* TPU_PYTHON_MODULE_H_ */
