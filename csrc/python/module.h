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
/* Adds the engine timeline's functions (trace_py.c); -1 on error. */
int tpu_py_trace_add(PyObject *m);

#endif /* TPU_PYTHON_MODULE_H_ */
