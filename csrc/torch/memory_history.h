// memory_history.h - torch.tpu.memory._record_memory_history: every tpu
// storage PyTorch allocates and frees, with the Python stack that did it,
// while recording is on (memory_history.cpp).  Off, the hooks in
// storage.cpp are one relaxed atomic load.
#pragma once

#include <Python.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace torch_tpu {

extern std::atomic<bool> g_memory_history_on;

// storage.cpp: a DataPtr over engine storage ctx was made at address / freed.
void memory_history_alloc(const void* ctx, uint64_t address, size_t nbytes, int device);
void memory_history_free(const void* ctx);
// Out of memory (core.cpp's and module.c's raise): while recording, an
// "oom" trace entry, and a note naming where the live allocations the
// message names were made ("" otherwise).
std::string memory_history_oom_note(const char* message);

// The Python face (added to torch_tpu._C by python.cpp).
extern PyMethodDef memory_history_methods[];

}  // namespace torch_tpu
