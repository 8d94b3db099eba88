// memory_history.cpp - the record behind torch.tpu.memory._record_memory_history
// and _snapshot() (torch_tpu/memory.py turns it into the dict
// torch.cuda._memory_viz reads).
//
// While on, every DataPtr storage.cpp makes over an engine storage is an
// allocation (its fake device address, bytes, device, time and the Python
// stack of the thread that made it, when that thread holds the GIL) and its
// deleter the free.  Entries are kept in order, at most max_entries (the
// oldest go first); the live allocations keep their stacks so a snapshot's
// blocks name where each was made.  A resize makes a new DataPtr over the
// same engine storage before the old one's deleter runs: the old address is
// freed then, and that deleter's call is not counted again.
#define PY_SSIZE_T_CLEAN
#include "torch/memory_history.h"

#include <frameobject.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "python/module.h"
#include "runtime/storage_list.h"
}

namespace torch_tpu {

std::atomic<bool> g_memory_history_on{false};

namespace {

struct Frame {
  std::string filename, name;
  int line;
};

struct Entry {
  int action;  // 0 alloc, 1 free, 2 out of memory (nbytes: the request)
  uint64_t address;
  size_t nbytes;
  int device;
  int64_t time_us;
  std::shared_ptr<const std::vector<Frame>> frames;
};

struct Live {
  uint64_t address;
  size_t nbytes;
  int device;
  int skip_frees;  // deleters of replaced DataPtrs still to come (resize)
  std::shared_ptr<const std::vector<Frame>> frames;
};

std::mutex g_lock;
std::deque<Entry> g_entries;
std::unordered_map<const void*, Live> g_live;
size_t g_max_entries = SIZE_MAX;
bool g_stacks = true;
constexpr int kMaxFrames = 64;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string utf8(PyObject* s) {
  Py_ssize_t n = 0;
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &n) : nullptr;
  if (!c) {
    PyErr_Clear();
    return "??";
  }
  return std::string(c, static_cast<size_t>(n));
}

// The calling thread's Python stack, innermost first: PyTorch's bindings
// release the GIL around an op, so it is taken for the walk; a thread with
// no Python state (the autograd engine's device threads) has no stack.
std::shared_ptr<const std::vector<Frame>> capture() {
  if (!g_stacks || !Py_IsInitialized() || _Py_IsFinalizing() || !PyGILState_GetThisThreadState()) return nullptr;
  PyGILState_STATE gil = PyGILState_Ensure();
  auto out = std::make_shared<std::vector<Frame>>();
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  while (f && static_cast<int>(out->size()) < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(f);  // new reference
    out->push_back(Frame{utf8(code->co_filename), utf8(code->co_name), PyFrame_GetLineNumber(f)});
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);  // new reference
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  PyGILState_Release(gil);
  return out;
}

void push(Entry e) {
  g_entries.push_back(std::move(e));
  while (g_entries.size() > g_max_entries) g_entries.pop_front();
}

PyObject* frames_list(const std::shared_ptr<const std::vector<Frame>>& frames) {
  PyObject* l = PyList_New(0);
  if (!l || !frames) return l;
  for (const Frame& fr : *frames) {
    PyObject* d = Py_BuildValue("{s:s#,s:i,s:s#}", "filename", fr.filename.data(),
                                static_cast<Py_ssize_t>(fr.filename.size()), "line", fr.line, "name", fr.name.data(),
                                static_cast<Py_ssize_t>(fr.name.size()));
    if (!d || PyList_Append(l, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(l);
      return nullptr;
    }
    Py_DECREF(d);
  }
  return l;
}

// _memory_history_record(enabled, max_entries, stacks): on clears what an
// earlier recording kept; off stops recording (what was kept stays for
// _snapshot, as CUDA's).
PyObject* py_record(PyObject*, PyObject* args) {
  int enabled = 0, stacks = 1;
  long long max_entries = -1;
  if (!PyArg_ParseTuple(args, "p|Lp", &enabled, &max_entries, &stacks)) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  if (enabled) {
    g_entries.clear();
    g_live.clear();
    g_max_entries = max_entries > 0 ? static_cast<size_t>(max_entries) : SIZE_MAX;
    g_stacks = stacks != 0;
  }
  g_memory_history_on.store(enabled != 0, std::memory_order_relaxed);
  Py_RETURN_NONE;
}

// -> (entries [(action, address, nbytes, device, time_us, frames)],
//     live {address: frames} of the allocations recorded and not freed)
PyObject* py_history(PyObject*, PyObject*) {
  // a copy taken under the lock, the Python objects built after it: building
  // them can run the garbage collector, whose frees of tpu storages record
  // (memory_history_free) and would wait for this lock forever
  decltype(g_entries) entries_copy;
  decltype(g_live) live_copy;
  {
    std::lock_guard<std::mutex> g(g_lock);
    entries_copy = g_entries;
    live_copy = g_live;
  }
  PyObject* entries = PyList_New(0);
  PyObject* live = PyDict_New();
  if (!entries || !live) {
    Py_XDECREF(entries);
    Py_XDECREF(live);
    return nullptr;
  }
  for (const Entry& e : entries_copy) {
    PyObject* fr = frames_list(e.frames);
    PyObject* t = fr ? Py_BuildValue("(sKniLN)", e.action == 2 ? "oom" : e.action ? "free" : "alloc", static_cast<unsigned long long>(e.address),
                                     static_cast<Py_ssize_t>(e.nbytes), e.device, static_cast<long long>(e.time_us), fr)
                     : nullptr;
    if (!t || PyList_Append(entries, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(entries);
      Py_DECREF(live);
      return nullptr;
    }
    Py_DECREF(t);
  }
  for (const auto& kv : live_copy) {
    PyObject* k = PyLong_FromUnsignedLongLong(kv.second.address);
    PyObject* fr = frames_list(kv.second.frames);
    if (!k || !fr || PyDict_SetItem(live, k, fr) < 0) {
      Py_XDECREF(k);
      Py_XDECREF(fr);
      Py_DECREF(entries);
      Py_DECREF(live);
      return nullptr;
    }
    Py_DECREF(k);
    Py_DECREF(fr);
  }
  return Py_BuildValue("(NN)", entries, live);
}

PyObject* py_recording(PyObject*, PyObject*) { return PyBool_FromLong(g_memory_history_on.load()); }

// -> [(address, nbytes, device, has_value)] of every live tpu storage PyTorch holds
PyObject* py_live_storages(PyObject*, PyObject*) {
  std::vector<tpu_rt_storage_info_t> buf(256);
  int n;
  while ((n = tpu_rt_storages_live(buf.data(), static_cast<int>(buf.size()))) > static_cast<int>(buf.size()))
    buf.resize(static_cast<size_t>(n) + 256);
  PyObject* l = PyList_New(0);
  for (int i = 0; l && i < n; i++) {
    PyObject* t = Py_BuildValue("(Knii)", static_cast<unsigned long long>(buf[i].address),
                                static_cast<Py_ssize_t>(buf[i].nbytes), buf[i].device, buf[i].has_value);
    if (!t || PyList_Append(l, t) < 0) {
      Py_XDECREF(t);
      Py_CLEAR(l);
    } else {
      Py_DECREF(t);
    }
  }
  return l;
}

}  // namespace

void memory_history_alloc(const void* ctx, uint64_t address, size_t nbytes, int device) {
  auto frames = capture();
  int64_t t = now_us();
  std::lock_guard<std::mutex> g(g_lock);
  if (!g_memory_history_on.load(std::memory_order_relaxed)) return;
  auto it = g_live.find(ctx);
  int skip = 0;
  if (it != g_live.end()) {  // a resize: the old address goes now, its deleter comes later
    push(Entry{1, it->second.address, it->second.nbytes, it->second.device, t, frames});
    skip = it->second.skip_frees + 1;
  }
  push(Entry{0, address, nbytes, device, t, frames});
  g_live[ctx] = Live{address, nbytes, device, skip, frames};
}

void memory_history_free(const void* ctx) {
  int64_t t = now_us();
  std::shared_ptr<const std::vector<Frame>> frames;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_live.find(ctx);
    if (it == g_live.end()) return;  // made before recording began
    if (it->second.skip_frees > 0) {
      it->second.skip_frees--;
      return;
    }
  }
  frames = capture();  // outside the lock: capture may run Python's allocator
  std::lock_guard<std::mutex> g(g_lock);
  auto it = g_live.find(ctx);
  if (it == g_live.end()) return;
  if (g_memory_history_on.load(std::memory_order_relaxed))
    push(Entry{1, it->second.address, it->second.nbytes, it->second.device, t, frames});
  g_live.erase(it);
}

namespace {

// "4.00 MiB" -> bytes (the engine's out-of-memory message), 0 if unreadable
size_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (!end || end == s) return 0;
  while (*end == ' ') end++;
  double unit = 1;
  if (!strncmp(end, "KiB", 3)) unit = 1024.0;
  else if (!strncmp(end, "MiB", 3)) unit = 1024.0 * 1024;
  else if (!strncmp(end, "GiB", 3)) unit = 1024.0 * 1024 * 1024;
  else if (!strncmp(end, "TiB", 3)) unit = 1024.0 * 1024 * 1024 * 1024;
  return static_cast<size_t>(v * unit);
}

bool ours(const std::string& file) {
  return file.find("/torch_tpu/") != std::string::npos || file.find("/torch/") != std::string::npos;
}

// module.c's out-of-memory hook: while recording, the failure is an "oom"
// entry of the trace, and the note says where each live allocation the
// message names was made (its stack's first frame outside torch).
void oom_note(const char* message, char* out, size_t n) {
  out[0] = 0;
  if (!g_memory_history_on.load(std::memory_order_relaxed)) return;
  const char* req = strstr(message, "Tried to allocate ");
  size_t request = req ? parse_bytes(req + strlen("Tried to allocate ")) : 0;
  int device = 0;
  if (const char* d = strstr(message, "tpu:")) device = atoi(d + 4);
  auto frames = capture();
  std::string note;
  std::lock_guard<std::mutex> g(g_lock);
  push(Entry{2, 0, request, device, now_us(), frames});
  for (const char* p = strstr(message, " at 0x"); p; p = strstr(p + 1, " at 0x")) {
    uint64_t address = strtoull(p + 4, nullptr, 16);
    for (const auto& kv : g_live) {
      if (kv.second.address != address || !kv.second.frames) continue;
      for (const Frame& f : *kv.second.frames) {
        if (ours(f.filename)) continue;
        char b[600];
        snprintf(b, sizeof(b), "%s0x%llx made at %s:%d in %s", note.empty() ? " Where they were made: " : "; ",
                 static_cast<unsigned long long>(address), f.filename.c_str(), f.line, f.name.c_str());
        note += b;
        break;
      }
      break;
    }
  }
  if (!note.empty()) note += ".";
  snprintf(out, n, "%s", note.c_str());
}

}  // namespace

std::string memory_history_oom_note(const char* message) {
  char note[1024];
  oom_note(message, note, sizeof(note));
  return note;
}

namespace {

struct RegisterOomNote {
  RegisterOomNote() { tpu_py_set_oom_note(&oom_note); }
} g_register_oom_note;

}  // namespace

PyMethodDef memory_history_methods[] = {
    {"_memory_history_record", py_record, METH_VARARGS,
     "_memory_history_record(enabled, max_entries=-1, stacks=True): record tpu storage allocations and frees"},
    {"_memory_history", py_history, METH_NOARGS, "(entries, live stacks) recorded so far"},
    {"_memory_history_recording", py_recording, METH_NOARGS, ""},
    {"_live_storages", py_live_storages, METH_NOARGS, "[(address, nbytes, device, has_value)] of the live tpu storages"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace torch_tpu
