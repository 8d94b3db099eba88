// c10d_backend.cpp - the "tpu_dist" c10d backend: collectives on tpu tensors.
//
// A c10d::Backend registered by torch_tpu/_distributed.py for the tpu (and
// cpu) device of a ProcessGroup, so that PyTorch's own ProcessGroup routes
// tpu tensors here and, with init_process_group() and no backend named, cpu
// tensors to gloo ("tpu:tpu_dist,cpu:gloo").
//
// Transport: host memory.  The XLA CPU plugin has no cross-process
// collectives, so a collective stages its tpu inputs to host memory (one
// engine read per tensor, any view), runs the same collective on a wrapped
// host backend (gloo, on the group's store), and writes the results into
// the tpu tensors through the engine's write path (every alias sees them).
// The write-back runs when the host work completes (on gloo's thread; the
// engine takes its own lock), so async_op=True overlaps the transfer with
// whatever the caller does next, and Work.wait() / the Work's future (DDP)
// complete only after the tpu tensors hold the result.  The in-XLA
// transport (collectives recorded into the lazy graph) is a different
// Backend chosen by torch_tpu/_distributed.py; see docs/ARCHITECTURE.md.
//
// Wire formats: data-movement collectives (broadcast, all-gather, gather,
// scatter, all-to-all, send/recv) move bytes, so every dtype travels.
// Reductions run in a dtype gloo can reduce exactly: int16/uint16 in int32,
// uint32 in int64, uint64 in int64 (sign bit flipped for min/max), complex as
// real pairs (sum/avg), bool sum/product as max/min (NCCL's semantics).
//
// Agreement check (on by default, TORCH_TPU_DIST_CHECK=0 turns it off): before
// each collective the ranks exchange a small fingerprint (op, reduce op, root,
// dtype, shape) and raise one clear error naming every rank's tensor when
// they differ -- gloo itself would abort the process on a size mismatch and
// silently mix dtypes of equal size.
#include <Python.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>

#include <unistd.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#include <torch/csrc/utils/pybind.h>

#include "torch/tpu_torch.h"

namespace torch_tpu {
namespace {

using c10d::OpType;
using c10d::ReduceOp;
using FuturePtr = c10::intrusive_ptr<c10::ivalue::Future>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// ---- tensors <-> host memory -------------------------------------------------------------

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

// The engine storage and view of a tpu tensor (any strides, offset, dtype).
tpu_storage_t* view_of(const at::Tensor& t, tpu_view_t* v) {
  int64_t offset = 0;
  tpu_storage_t* s = tensor_storage(t.unsafeGetTensorImpl(), &offset);
  TORCH_CHECK_VALUE(s != nullptr, "tpu_dist: expected a tpu tensor backed by the tpu engine");
  TORCH_CHECK(t.dim() <= TPU_MAX_RANK, "tensors of rank ", t.dim(), " are not supported by tpu (max ",
              TPU_MAX_RANK, ")");
  memset(v, 0, sizeof(*v));
  v->dtype = dtype_code(t.scalar_type());
  TORCH_CHECK_TYPE(v->dtype != TPU_DTYPE_INVALID, "tpu does not support dtype ", dtype_name(t.scalar_type()));
  v->rank = static_cast<int>(t.dim());
  for (int d = 0; d < v->rank; d++) {
    v->sizes[d] = t.size(d);
    v->strides[d] = t.stride(d);
  }
  v->offset = offset;
  return s;
}

// Copies a tpu tensor's value into dense host memory at `dst` (nbytes).
void read_into(const at::Tensor& t, void* dst, size_t nbytes) {
  if (t.numel() == 0) return;
  tpu_view_t v;
  tpu_storage_t* s = view_of(t, &v);
  check(tpu_rt_flush(TPU_CUT_COLLECTIVE));  // what cut a fused graph here: the collective (metrics)
  check(tpu_rt_view_to_host(s, &v, dst, nbytes));
}

// A dense host copy of a tpu tensor (same shape and dtype).
at::Tensor to_host(const at::Tensor& t) {
  at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU));
  read_into(t, h.data_ptr(), h.nbytes());
  return h;
}

// A host tensor to receive a tpu tensor's result (not read from the device).
at::Tensor host_like(const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(at::kCPU)); }

// dst[...] = h (h dense on the host, dst's numel; converted to dst's dtype
// here when the wire dtype was wider).  Every alias of dst sees the write.
void write_from_host(const at::Tensor& dst, at::Tensor h) {
  if (dst.numel() == 0) return;
  if (h.scalar_type() != dst.scalar_type()) h = h.to(dst.scalar_type());
  h = h.contiguous();
  tpu_view_t dv;
  tpu_storage_t* ds = view_of(dst, &dv);
  int64_t dims[TPU_MAX_RANK];
  for (int d = 0; d < dv.rank; d++) dims[d] = dv.sizes[d];
  tpu_storage_t* s = nullptr;
  check(tpu_rt_storage_from_host(tpu_storage_device(ds), dv.dtype, dims, dv.rank, h.data_ptr(), &s));
  tpu_rt_input_t in;
  memset(&in, 0, sizeof(in));
  in.storage = s;
  in.view.dtype = dv.dtype;
  in.view.rank = dv.rank;
  int64_t stride = 1;
  for (int d = dv.rank - 1; d >= 0; d--) {
    in.view.sizes[d] = dims[d];
    in.view.strides[d] = stride;
    stride *= dims[d];
  }
  tpu_status_t st = tpu_rt_write(ds, &dv, &in);
  tpu_storage_release(s);
  check(st);
}

// A host tensor's bytes as a 1-D uint8 tensor (same memory).
at::Tensor bytes_of(const at::Tensor& h) {
  return h.reshape({-1}).view(at::kByte);
}

// ---- reductions: the dtype on the wire -----------------------------------------------------

struct Reduction {
  ReduceOp op;          // what the host backend runs
  double premul = 1.0;  // PREMUL_SUM's factor, applied on the host before a SUM
  bool premul_set = false;
};

// The host tensor a reduction runs on, made from the staged value `h`.
at::Tensor to_wire(const at::Tensor& h, const Reduction& r) {
  at::ScalarType t = h.scalar_type();
  at::Tensor w = h;
  if (t == at::kShort || t == at::kUInt16) w = h.to(at::kInt);
  else if (t == at::kUInt32) w = h.to(at::kLong);
  else if (t == at::kUInt64) {
    w = h.view(at::kLong);
    if (r.op == ReduceOp::MIN || r.op == ReduceOp::MAX) w = w.bitwise_xor(std::numeric_limits<int64_t>::min());
  } else if (at::isComplexType(t)) {
    w = at::view_as_real(h);
  }
  if (r.premul_set) w.mul_(r.premul);
  return w;
}

// The reduced wire tensor back in the tensor's dtype (dense host tensor).
at::Tensor from_wire(const at::Tensor& w, at::ScalarType t, const Reduction& r) {
  if (t == at::kUInt64) {
    at::Tensor x = w;
    if (r.op == ReduceOp::MIN || r.op == ReduceOp::MAX) x = x.bitwise_xor(std::numeric_limits<int64_t>::min());
    return x.contiguous().view(at::kUInt64);
  }
  if (at::isComplexType(t)) return at::view_as_complex(w);
  return w.scalar_type() == t ? w : w.to(t);
}

Reduction reduction_for(const ReduceOp& op, at::ScalarType t, const char* opname) {
  Reduction r;
  r.op = op;
  if (op == ReduceOp::PREMUL_SUM) {
    auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(sup != nullptr, "tpu_dist: ", opname, ": PREMUL_SUM without its factor");
    r.premul = sup->tensor_factor.defined() ? sup->tensor_factor.cpu().item<double>() : sup->double_factor;
    r.premul_set = true;
    r.op = ReduceOp::SUM;
  }
  if (at::isComplexType(t)) {
    TORCH_CHECK_VALUE(r.op == ReduceOp::SUM || r.op == ReduceOp::AVG, opname, " does not support ",
                      static_cast<int>(r.op.op_), " (only sum and avg) on complex tensors");
  }
  if (t == at::kBool) {
    TORCH_CHECK_VALUE(r.op != ReduceOp::AVG, "Cannot use ReduceOp.AVG with boolean inputs");
    if (r.op == ReduceOp::SUM) r.op = ReduceOp::MAX;
    else if (r.op == ReduceOp::PRODUCT) r.op = ReduceOp::MIN;
  }
  TORCH_CHECK_VALUE(!(r.op == ReduceOp::BAND || r.op == ReduceOp::BOR || r.op == ReduceOp::BXOR) || !at::isFloatingType(t),
                    "tpu_dist: ", opname, ": bitwise reductions need integer or bool tensors, got ", t);
  return r;
}

c10d::AllreduceOptions wire_allreduce(const c10d::AllreduceOptions& o, const Reduction& r) {
  c10d::AllreduceOptions w = o;
  w.reduceOp = ReduceOp(r.op.op_);
  return w;
}

// ---- a failed peer, named ---------------------------------------------------------------------------
// Gloo reports a dead peer as "Connection closed by peer [addr]:port" (or a
// timeout): true, but it names no rank.  Every rank publishes "<host> <pid>"
// on the group's store when the group is made (torch_tpu/_distributed.py);
// when a collective fails, the ranks on this host whose process is gone (or a
// zombie) are named in the error, which is raised as DistBackendError (the
// type NCCL's watchdog raises; a RuntimeError).  No store access at failure
// time: the store's host may be the rank that died.

struct Peers {
  int rank = 0;
  std::string group;
  std::vector<int64_t> global_ranks;  // group rank -> global rank (empty: the same)
  std::vector<std::string> hosts;
  std::vector<int64_t> pids;
};

bool process_gone(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string line;
  std::getline(f, line);
  size_t close = line.rfind(')');  // "pid (comm) S ..."
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

std::string peer_report(const Peers& p) {
  if (p.pids.empty()) return "";
  char me[256] = {0};
  gethostname(me, sizeof(me) - 1);
  std::ostringstream dead;
  int ndead = 0, other_hosts = 0;
  // a killed process closes its sockets before it is a zombie: the error can
  // come first, so look again for up to a second before saying none died
  for (int tries = 0; tries < 100; tries++) {
    bool any = false;
    for (size_t r = 0; r < p.pids.size() && !any; r++)
      any = static_cast<int>(r) != p.rank && p.hosts[r] == me && process_gone(p.pids[r]);
    if (any) break;
    usleep(10000);
  }
  for (size_t r = 0; r < p.pids.size(); r++) {
    if (static_cast<int>(r) == p.rank) continue;
    if (p.hosts[r] != me) {
      other_hosts++;
      continue;
    }
    if (!process_gone(p.pids[r])) continue;
    int64_t g = r < p.global_ranks.size() ? p.global_ranks[r] : static_cast<int64_t>(r);
    dead << (ndead++ ? ", " : "") << "rank " << g << " (pid " << p.pids[r] << ")";
  }
  std::ostringstream msg;
  if (ndead) msg << "peer " << dead.str() << (ndead > 1 ? " have" : " has") << " died";
  else msg << "no peer process on this host has died";
  if (other_hosts) msg << " (" << other_hosts << " peer(s) on other hosts not checked)";
  return msg.str();
}

// The error of a failed collective, with the dead peers named (once: an
// error already explained passes through).
std::exception_ptr explain(const std::shared_ptr<const Peers>& peers, const char* what, std::exception_ptr e) {
  if (!peers || !e) return e;
  std::string cause;
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& x) {
    cause = x.what_without_backtrace();
  } catch (const std::exception& x) {
    cause = x.what();
  } catch (...) {
    return e;
  }
  if (cause.rfind("tpu_dist: ", 0) == 0) return e;
  std::ostringstream msg;
  msg << "tpu_dist: " << what << " failed on rank ";
  int64_t g = static_cast<size_t>(peers->rank) < peers->global_ranks.size() ? peers->global_ranks[peers->rank]
                                                                             : peers->rank;
  msg << g << " of group " << (peers->group.empty() ? "?" : peers->group) << " (" << peers->pids.size()
      << " ranks): " << peer_report(*peers) << ". The group is broken; destroy it (or exit) and restart. Cause: "
      << cause;
  try {
    C10_THROW_ERROR(DistBackendError, msg.str());
  } catch (...) {
    return std::current_exception();
  }
  return e;
}

[[noreturn]] void rethrow_explained(const std::shared_ptr<const Peers>& peers, const char* what,
                                    std::exception_ptr e) {
  std::rethrow_exception(explain(peers, what, e));
}

// ---- the Work -----------------------------------------------------------------------------------
// Completes when every host work has completed and the results are written
// into the tpu tensors.  Host works with a future (gloo's collectives) chain
// the write-back onto it; the others (gloo's send/recv) write back in wait()
// or isCompleted() on the caller's thread.

// Completes a TpuWork's future when the last of its host futures has: the
// write-back runs then, on the thread that completed it.
struct Completion {
  Completion(FuturePtr fut, std::function<void()> writeback, std::vector<at::Tensor> results, size_t parts,
             std::shared_ptr<const Peers> peers, OpType type)
      : fut(std::move(fut)), writeback(std::move(writeback)), results(std::move(results)), left(parts),
        peers(std::move(peers)), type(type) {}

  void arrive(c10::ivalue::Future& part) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (part.hasError() && !err) err = part.exception_ptr();
      if (--left > 0) return;
    }
    if (!err) {
      try {
        if (writeback) writeback();
      } catch (...) {
        err = std::current_exception();
      }
    }
    writeback = nullptr;  // host tensors freed now
    if (err) fut->setError(explain(peers, c10d::opTypeToString(type).c_str(), err));
    else fut->markCompleted(c10::IValue(results));
  }

  FuturePtr fut;
  std::function<void()> writeback;
  std::vector<at::Tensor> results;
  size_t left;
  std::exception_ptr err;
  std::mutex mu;
  std::shared_ptr<const Peers> peers;
  OpType type;
};

class TpuWork final : public c10d::Work {
 public:
  TpuWork(int rank, OpType type, std::vector<WorkPtr> host, std::function<void()> writeback,
          std::vector<at::Tensor> results, std::shared_ptr<const Peers> peers = nullptr)
      : c10d::Work(rank, type),
        peers_(std::move(peers)),
        host_(std::move(host)),
        writeback_(std::move(writeback)),
        results_(std::move(results)),
        fut_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
    std::vector<FuturePtr> futs;
    for (auto& w : host_) {
      FuturePtr f;
      try {
        f = w->getFuture();
      } catch (const std::exception&) {
        f.reset();
      }
      if (!f) {
        futs.clear();
        break;
      }
      futs.push_back(f);
    }
    if (host_.empty()) {
      finish_now();
    } else if (!futs.empty()) {
      chained_ = true;
      // the callback holds what it needs, not the Work (the Work may be dropped)
      auto done = std::make_shared<Completion>(fut_, std::move(writeback_), results_, futs.size(), peers_, type);
      for (auto& f : futs) f->addCallback([done](c10::ivalue::Future& part) { done->arrive(part); });
    }
  }

  bool isCompleted() override {
    if (chained_) return fut_->completed();
    for (auto& w : host_)
      if (!w->isCompleted()) return false;
    try {
      finish_now();
    } catch (...) {
    }
    return true;
  }

  bool isSuccess() const override {
    if (chained_) return fut_->completed() && !fut_->hasError();
    for (auto& w : host_)
      if (!w->isSuccess()) return false;
    return !fut_->completed() || !fut_->hasError();
  }

  std::exception_ptr exception() const override {
    if (fut_->completed() && fut_->hasError()) return fut_->exception_ptr();
    for (auto& w : host_)
      if (auto e = w->exception()) return e;
    return nullptr;
  }

  int sourceRank() const override {
    TORCH_CHECK(!host_.empty(), "tpu_dist: sourceRank() of a work with no transfer");
    return host_[0]->sourceRank();
  }

  std::vector<at::Tensor> result() override { return results_; }

  bool wait(std::chrono::milliseconds timeout) override {
    try {
      for (auto& w : host_) w->wait(timeout);  // throws on error or timeout
    } catch (...) {
      rethrow_explained(peers_, c10d::opTypeToString(opType_).c_str(), std::current_exception());
    }
    if (!chained_) finish_now();
    fut_->wait();
    if (fut_->hasError()) std::rethrow_exception(fut_->exception_ptr());
    return true;
  }

  void synchronize() override {}

  FuturePtr getFuture() override { return fut_; }

 private:
  // Lazy write-back (no host future): once, on the caller's thread.
  void finish_now() {
    std::lock_guard<std::mutex> g(once_);
    if (fut_->completed()) return;
    try {
      if (writeback_) writeback_();
    } catch (...) {
      writeback_ = nullptr;
      fut_->setError(std::current_exception());
      throw;
    }
    writeback_ = nullptr;
    fut_->markCompleted(c10::IValue(results_));
  }

  std::shared_ptr<const Peers> peers_;
  std::vector<WorkPtr> host_;
  std::function<void()> writeback_;
  std::vector<at::Tensor> results_;
  FuturePtr fut_;
  bool chained_ = false;
  std::mutex once_;
};

// ---- the backend ----------------------------------------------------------------------------------

constexpr int kFp = 16;  // fingerprint: op, reduce op, root, dtype, ndim, numel, count, dims[8], spare

class TpuDistBackend final : public c10d::Backend {
 public:
  TpuDistBackend(c10::intrusive_ptr<c10d::Backend> host, int rank, int size, std::chrono::milliseconds timeout,
                 std::string group_name, bool check, std::shared_ptr<const Peers> peers)
      : c10d::Backend(rank, size), host_(std::move(host)), check_(check), peers_(std::move(peers)) {
    options_ = c10::make_intrusive<Options>("tpu_dist", timeout);
    options_->group_name = std::move(group_name);
  }

  const std::string getBackendName() const override { return "tpu_dist"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  bool supportsCoalescing() const override { return true; }

  void setTimeout(std::chrono::milliseconds timeout) override {
    options_->timeout = timeout;
    host_->setTimeout(timeout);
  }

  // Coalescing: ops in a coalescing block are issued at once (in order); the
  // block's Work completes when all of them have.
  void startCoalescing() override {
    TORCH_CHECK(!coalescing_, "tpu_dist: startCoalescing() inside a coalescing block");
    coalescing_ = true;
    coalesced_.clear();
  }

  WorkPtr endCoalescing() override {
    TORCH_CHECK(coalescing_, "tpu_dist: endCoalescing() without startCoalescing()");
    coalescing_ = false;
    std::vector<WorkPtr> works = std::move(coalesced_);
    coalesced_.clear();
    return c10::make_intrusive<TpuWork>(rank_, OpType::COALESCED, std::move(works), nullptr,
                                        std::vector<at::Tensor>{}, peers_);
  }

  // ---- reductions ----

  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    if (all_cpu(tensors)) return host_->allreduce(tensors, opts);
    require_tpu(tensors, "allreduce");
    agree(OpType::ALLREDUCE, "all_reduce", tensors, opts.reduceOp.op_, 0);
    std::vector<at::Tensor> staged, wire;
    std::vector<Reduction> reds;
    for (auto& t : tensors) {
      reds.push_back(reduction_for(opts.reduceOp, t.scalar_type(), "all_reduce"));
      staged.push_back(to_host(t));
      wire.push_back(to_wire(staged.back(), reds.back()));
    }
    auto hw = host_->allreduce(wire, wire_allreduce(opts, reds[0]));
    auto targets = tensors;
    return track(OpType::ALLREDUCE, {hw},
                 [targets, wire, reds]() {
                   for (size_t i = 0; i < targets.size(); i++)
                     write_from_host(targets[i], from_wire(wire[i], targets[i].scalar_type(), reds[i]));
                 },
                 tensors);
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    if (all_cpu(tensors)) return host_->allreduce_coalesced(tensors, opts);
    require_tpu(tensors, "allreduce_coalesced");
    agree(OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, opts.reduceOp.op_, 0);
    // one flat host buffer per dtype, one host all-reduce each
    std::vector<WorkPtr> works;
    std::vector<std::pair<std::vector<size_t>, std::pair<at::Tensor, Reduction>>> groups;
    std::vector<bool> done(tensors.size(), false);
    for (size_t i = 0; i < tensors.size(); i++) {
      if (done[i]) continue;
      std::vector<size_t> idx;
      int64_t total = 0;
      for (size_t j = i; j < tensors.size(); j++)
        if (!done[j] && tensors[j].scalar_type() == tensors[i].scalar_type()) {
          idx.push_back(j);
          done[j] = true;
          total += tensors[j].numel();
        }
      at::Tensor flat = at::empty({total}, tensors[i].options().device(at::kCPU));
      int64_t off = 0;
      for (size_t j : idx) {
        int64_t n = tensors[j].numel();
        at::Tensor part = flat.narrow(0, off, n);
        read_into(tensors[j], part.data_ptr(), part.nbytes());
        off += n;
      }
      Reduction r = reduction_for(opts.reduceOp, tensors[i].scalar_type(), "all_reduce_coalesced");
      at::Tensor w = to_wire(flat, r);
      std::vector<at::Tensor> ws{w};
      c10d::AllreduceOptions ao;
      ao.reduceOp = ReduceOp(r.op.op_);
      ao.timeout = opts.timeout;
      works.push_back(host_->allreduce(ws, ao));
      groups.push_back({idx, {w, r}});
    }
    auto targets = tensors;
    return track(OpType::ALLREDUCE_COALESCED, works,
                 [targets, groups]() {
                   for (auto& g : groups) {
                     at::Tensor flat = from_wire(g.second.first, targets[g.first[0]].scalar_type(), g.second.second);
                     int64_t off = 0;
                     for (size_t j : g.first) {
                       int64_t n = targets[j].numel();
                       write_from_host(targets[j], flat.narrow(0, off, n).view(targets[j].sizes()));
                       off += n;
                     }
                   }
                 },
                 tensors);
  }

  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    if (all_cpu(tensors)) return host_->reduce(tensors, opts);
    require_tpu(tensors, "reduce");
    agree(OpType::REDUCE, "reduce", tensors, opts.reduceOp.op_, opts.rootRank);
    std::vector<at::Tensor> wire;
    std::vector<Reduction> reds;
    for (auto& t : tensors) {
      reds.push_back(reduction_for(opts.reduceOp, t.scalar_type(), "reduce"));
      wire.push_back(to_wire(to_host(t), reds.back()));
    }
    c10d::ReduceOptions o = opts;
    o.reduceOp = ReduceOp(reds[0].op.op_);
    auto hw = host_->reduce(wire, o);
    auto targets = tensors;
    bool root = opts.rootRank == rank_;
    return track(OpType::REDUCE, {hw},
                 [targets, wire, reds, root]() {
                   if (!root) return;  // only the root receives the result
                   for (size_t i = 0; i < targets.size(); i++)
                     write_from_host(targets[i], from_wire(wire[i], targets[i].scalar_type(), reds[i]));
                 },
                 tensors);
  }

  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    if (all_cpu(outputs) && all_cpu_lists(inputs)) return host_->reduce_scatter(outputs, inputs, opts);
    require_tpu(outputs, "reduce_scatter");
    for (auto& l : inputs) require_tpu(l, "reduce_scatter");
    TORCH_CHECK_VALUE(outputs.size() == 1 && inputs.size() == 1, "tpu_dist: reduce_scatter takes one output tensor");
    TORCH_CHECK_VALUE(static_cast<int>(inputs[0].size()) == size_, "tpu_dist: reduce_scatter: the input list has ",
                      inputs[0].size(), " tensors; the group has ", size_, " ranks");
    agree(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, opts.reduceOp.op_, 0);
    at::ScalarType t = outputs[0].scalar_type();
    Reduction r = reduction_for(opts.reduceOp, t, "reduce_scatter");
    std::vector<std::vector<at::Tensor>> win(1);
    for (auto& x : inputs[0]) {
      TORCH_CHECK_TYPE(x.scalar_type() == t, "tpu_dist: reduce_scatter: input dtype ", x.scalar_type(),
                       " differs from the output's ", t);
      win[0].push_back(to_wire(to_host(x), r));
    }
    std::vector<at::Tensor> wout{to_wire(host_like(outputs[0]), Reduction{r.op})};
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = ReduceOp(r.op.op_);
    auto hw = host_->reduce_scatter(wout, win, o);
    auto target = outputs[0];
    return track(OpType::REDUCE_SCATTER, {hw},
                 [target, wout, win, r]() { write_from_host(target, from_wire(wout[0], target.scalar_type(), r)); },
                 outputs);
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    if (!is_tpu(output) && !is_tpu(input)) return host_->_reduce_scatter_base(output, input, opts);
    std::vector<at::Tensor> outs{output}, ins{input};
    require_tpu(outs, "reduce_scatter_tensor");
    require_tpu(ins, "reduce_scatter_tensor");
    TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), "tpu_dist: reduce_scatter_tensor: input dtype ",
                     input.scalar_type(), " differs from the output's ", output.scalar_type());
    TORCH_CHECK_VALUE(input.numel() == output.numel() * size_, "tpu_dist: reduce_scatter_tensor: input of ",
                      input.numel(), " elements must be world_size (", size_, ") times the output's ",
                      output.numel());
    agree(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", outs, opts.reduceOp.op_, 0);
    Reduction r = reduction_for(opts.reduceOp, output.scalar_type(), "reduce_scatter_tensor");
    at::Tensor win = to_wire(to_host(input), r).reshape({-1});
    at::Tensor wo = to_wire(host_like(output), Reduction{r.op});
    std::vector<int64_t> shape = wo.sizes().vec();
    at::Tensor wout = wo.reshape({-1});
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = ReduceOp(r.op.op_);
    auto hw = host_->_reduce_scatter_base(wout, win, o);
    auto target = output;
    return track(OpType::_REDUCE_SCATTER_BASE, {hw},
                 [target, wout, win, r, shape]() {
                   write_from_host(target, from_wire(wout.view(shape), target.scalar_type(), r));
                 },
                 {output});
  }

  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist: reduce_scatter_tensor_coalesced: ",
                      outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    for (size_t i = 0; i < outputs.size(); i++) works.push_back(_reduce_scatter_base(outputs[i], inputs[i], opts));
    return combine(OpType::REDUCE_SCATTER_TENSOR_COALESCED, std::move(works), outputs);
  }

  // ---- data movement (bytes on the wire) ----

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    if (all_cpu(tensors)) return host_->broadcast(tensors, opts);
    require_tpu(tensors, "broadcast");
    agree(OpType::BROADCAST, "broadcast", tensors, -1, opts.rootRank);
    bool root = opts.rootRank == rank_;
    std::vector<at::Tensor> staged, wire;
    for (auto& t : tensors) {
      staged.push_back(root ? to_host(t) : host_like(t));
      wire.push_back(bytes_of(staged.back()));
    }
    auto hw = host_->broadcast(wire, opts);
    auto targets = tensors;
    return track(OpType::BROADCAST, {hw},
                 [targets, staged, root]() {
                   if (root) return;  // the root's tensors are the source
                   for (size_t i = 0; i < targets.size(); i++) write_from_host(targets[i], staged[i]);
                 },
                 tensors);
  }

  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    if (all_cpu(inputs) && all_cpu_lists(outputs)) return host_->allgather(outputs, inputs, opts);
    require_tpu(inputs, "allgather");
    for (auto& l : outputs) require_tpu(l, "allgather");
    TORCH_CHECK_VALUE(inputs.size() == 1 && outputs.size() == 1, "tpu_dist: allgather takes one input tensor");
    TORCH_CHECK_VALUE(static_cast<int>(outputs[0].size()) == size_, "tpu_dist: allgather: the output list has ",
                      outputs[0].size(), " tensors; the group has ", size_, " ranks");
    for (auto& o : outputs[0]) {
      TORCH_CHECK_TYPE(o.scalar_type() == inputs[0].scalar_type(), "tpu_dist: allgather: output dtype ",
                       o.scalar_type(), " differs from the input's ", inputs[0].scalar_type());
      TORCH_CHECK_VALUE(o.numel() == inputs[0].numel(), "tpu_dist: allgather: output of shape ", o.sizes(),
                        " for an input of shape ", inputs[0].sizes());
    }
    agree(OpType::ALLGATHER, "all_gather", inputs, -1, 0);
    std::vector<at::Tensor> win{bytes_of(to_host(inputs[0]))};
    std::vector<at::Tensor> staged;
    std::vector<std::vector<at::Tensor>> wout(1);
    for (auto& o : outputs[0]) {
      staged.push_back(host_like(o));
      wout[0].push_back(bytes_of(staged.back()));
    }
    auto hw = host_->allgather(wout, win, opts);
    auto targets = outputs[0];
    return track(OpType::ALLGATHER, {hw},
                 [targets, staged, win, wout]() {
                   for (size_t i = 0; i < targets.size(); i++) write_from_host(targets[i], staged[i]);
                 },
                 targets);
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    if (!is_tpu(output) && !is_tpu(input)) return host_->_allgather_base(output, input, opts);
    std::vector<at::Tensor> outs{output}, ins{input};
    require_tpu(outs, "all_gather_into_tensor");
    require_tpu(ins, "all_gather_into_tensor");
    TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), "tpu_dist: all_gather_into_tensor: output dtype ",
                     output.scalar_type(), " differs from the input's ", input.scalar_type());
    TORCH_CHECK_VALUE(output.numel() == input.numel() * size_, "tpu_dist: all_gather_into_tensor: output of ",
                      output.numel(), " elements must be world_size (", size_, ") times the input's ", input.numel());
    agree(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", ins, -1, 0);
    at::Tensor win = bytes_of(to_host(input));
    at::Tensor hout = host_like(output);
    at::Tensor wout = bytes_of(hout);
    auto hw = host_->_allgather_base(wout, win, opts);
    auto target = output;
    return track(OpType::_ALLGATHER_BASE, {hw}, [target, hout, win]() { write_from_host(target, hout); }, {output});
  }

  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist: allgather_into_tensor_coalesced: ",
                      outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    for (size_t i = 0; i < outputs.size(); i++) works.push_back(_allgather_base(outputs[i], inputs[i], opts));
    return combine(OpType::ALLGATHER_COALESCED, std::move(works), outputs);
  }

  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist: allgather_coalesced: ", outputs.size(),
                      " output lists for ", inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    std::vector<at::Tensor> all;
    for (size_t i = 0; i < inputs.size(); i++) {
      std::vector<std::vector<at::Tensor>> o{outputs[i]};
      std::vector<at::Tensor> in{inputs[i]};
      works.push_back(allgather(o, in, opts));
      for (auto& t : outputs[i]) all.push_back(t);
    }
    return combine(OpType::ALLGATHER_COALESCED, std::move(works), all);
  }

  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    if (all_cpu(inputs) && all_cpu_lists(outputs)) return host_->gather(outputs, inputs, opts);
    require_tpu(inputs, "gather");
    for (auto& l : outputs) require_tpu(l, "gather");
    TORCH_CHECK_VALUE(inputs.size() == 1, "tpu_dist: gather takes one input tensor");
    bool root = opts.rootRank == rank_;
    agree(OpType::GATHER, "gather", inputs, -1, opts.rootRank);
    std::vector<at::Tensor> win{bytes_of(to_host(inputs[0]))};
    std::vector<std::vector<at::Tensor>> wout;
    std::vector<at::Tensor> staged, targets;
    if (root) {
      TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                        "tpu_dist: gather: the root needs a list of ", size_, " output tensors");
      wout.resize(1);
      for (auto& o : outputs[0]) {
        TORCH_CHECK_VALUE(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                          "tpu_dist: gather: output ", o.scalar_type(), o.sizes(), " for an input ",
                          inputs[0].scalar_type(), inputs[0].sizes());
        staged.push_back(host_like(o));
        wout[0].push_back(bytes_of(staged.back()));
        targets.push_back(o);
      }
    }
    auto hw = host_->gather(wout, win, opts);
    return track(OpType::GATHER, {hw},
                 [targets, staged, win, wout]() {
                   for (size_t i = 0; i < targets.size(); i++) write_from_host(targets[i], staged[i]);
                 },
                 targets);
  }

  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    if (all_cpu(outputs) && all_cpu_lists(inputs)) return host_->scatter(outputs, inputs, opts);
    require_tpu(outputs, "scatter");
    for (auto& l : inputs) require_tpu(l, "scatter");
    TORCH_CHECK_VALUE(outputs.size() == 1, "tpu_dist: scatter takes one output tensor");
    bool root = opts.rootRank == rank_;
    agree(OpType::SCATTER, "scatter", outputs, -1, opts.rootRank);
    std::vector<std::vector<at::Tensor>> win;
    if (root) {
      TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                        "tpu_dist: scatter: the root needs a list of ", size_, " input tensors");
      win.resize(1);
      for (auto& x : inputs[0]) {
        TORCH_CHECK_VALUE(x.numel() == outputs[0].numel() && x.scalar_type() == outputs[0].scalar_type(),
                          "tpu_dist: scatter: input ", x.scalar_type(), x.sizes(), " for an output ",
                          outputs[0].scalar_type(), outputs[0].sizes());
        win[0].push_back(bytes_of(to_host(x)));
      }
    }
    at::Tensor hout = host_like(outputs[0]);
    std::vector<at::Tensor> wout{bytes_of(hout)};
    auto hw = host_->scatter(wout, win, opts);
    auto target = outputs[0];
    return track(OpType::SCATTER, {hw}, [target, hout, win]() { write_from_host(target, hout); }, outputs);
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                        std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override {
    if (!is_tpu(output) && !is_tpu(input))
      return host_->alltoall_base(output, input, outputSplits, inputSplits, opts);
    std::vector<at::Tensor> outs{output}, ins{input};
    require_tpu(outs, "all_to_all_single");
    require_tpu(ins, "all_to_all_single");
    TORCH_CHECK_TYPE(input.scalar_type() == output.scalar_type(), "tpu_dist: all_to_all_single: output dtype ",
                     output.scalar_type(), " differs from the input's ", input.scalar_type());
    std::vector<int64_t> in_rows = rows_of(input, inputSplits, "input"), out_rows = rows_of(output, outputSplits, "output");
    agree(OpType::ALLTOALL_BASE, "all_to_all_single", {row_probe(input)}, -1, 0);
    agree_splits("all_to_all_single", in_rows, out_rows);
    int64_t in_row_bytes = row_bytes(input), out_row_bytes = row_bytes(output);
    std::vector<int64_t> in_b, out_b;
    for (auto r : in_rows) in_b.push_back(r * in_row_bytes);
    for (auto r : out_rows) out_b.push_back(r * out_row_bytes);
    at::Tensor win = bytes_of(to_host(input));
    at::Tensor hout = host_like(output);
    at::Tensor wout = bytes_of(hout);
    auto hw = host_->alltoall_base(wout, win, out_b, in_b, opts);
    auto target = output;
    return track(OpType::ALLTOALL_BASE, {hw}, [target, hout, win]() { write_from_host(target, hout); }, {output});
  }

  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    if (all_cpu(outputs) && all_cpu(inputs)) return host_->alltoall(outputs, inputs, opts);
    require_tpu(outputs, "all_to_all");
    require_tpu(inputs, "all_to_all");
    TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
                      "tpu_dist: all_to_all needs lists of ", size_, " tensors");
    for (size_t i = 0; i < inputs.size(); i++)
      TORCH_CHECK_TYPE(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                           outputs[i].scalar_type() == inputs[0].scalar_type(),
                       "tpu_dist: all_to_all: every tensor must have one dtype");
    agree(OpType::ALLTOALL, "all_to_all", {at::empty({0}, inputs[0].options().device(at::kCPU))}, -1, 0);
    std::vector<int64_t> in_n, out_n;
    for (auto& x : inputs) in_n.push_back(x.numel());
    for (auto& x : outputs) out_n.push_back(x.numel());
    agree_splits("all_to_all", in_n, out_n);
    // one uneven all_to_all_single over the bytes (gloo's list all_to_all
    // needs equal sizes; NCCL's does not)
    std::vector<int64_t> in_b, out_b;
    int64_t in_total = 0, out_total = 0;
    for (auto& x : inputs) in_total += (in_b.emplace_back(static_cast<int64_t>(x.nbytes())), in_b.back());
    for (auto& o : outputs) out_total += (out_b.emplace_back(static_cast<int64_t>(o.nbytes())), out_b.back());
    at::Tensor win = at::empty({in_total}, at::kByte), wout = at::empty({out_total}, at::kByte);
    int64_t off = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
      read_into(inputs[i], static_cast<uint8_t*>(win.data_ptr()) + off, static_cast<size_t>(in_b[i]));
      off += in_b[i];
    }
    std::vector<int64_t> out_arg = out_b, in_arg = in_b;  // the host backend may take them
    auto hw = host_->alltoall_base(wout, win, out_arg, in_arg, opts);
    auto targets = outputs;
    return track(OpType::ALLTOALL, {hw},
                 [targets, wout, win, out_b]() {
                   int64_t o = 0;
                   for (size_t i = 0; i < targets.size(); i++) {
                     at::Tensor part = wout.narrow(0, o, out_b[i]).view(targets[i].scalar_type());
                     write_from_host(targets[i], part.view(targets[i].sizes()));
                     o += out_b[i];
                   }
                 },
                 outputs);
  }

  // ---- point to point (no agreement check: the peers are two) ----

  WorkPtr send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    if (all_cpu(tensors)) return host_->send(tensors, dst, tag);
    require_tpu(tensors, "send");
    TORCH_CHECK_VALUE(tensors.size() == 1, "tpu_dist: send takes one tensor");
    std::vector<at::Tensor> wire{bytes_of(to_host(tensors[0]))};
    auto hw = host_->send(wire, dst, tag);
    return track(OpType::SEND, {hw}, [wire]() {}, {});
  }

  WorkPtr recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    if (all_cpu(tensors)) return host_->recv(tensors, src, tag);
    return recv_impl(tensors, [&](std::vector<at::Tensor>& w) { return host_->recv(w, src, tag); }, OpType::RECV);
  }

  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    if (all_cpu(tensors)) return host_->recvAnysource(tensors, tag);
    return recv_impl(tensors, [&](std::vector<at::Tensor>& w) { return host_->recvAnysource(w, tag); },
                     OpType::RECVANYSOURCE);
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    c10d::BarrierOptions o = opts;
    o.device = at::Device(at::kCPU);
    return host_->barrier(o);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    host_->monitoredBarrier(opts, waitAllRanks);
  }

  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }

  void abort() override { host_->abort(); }
  void shutdown() override { host_->shutdown(); }

 private:
  // ---- helpers ----

  static bool all_cpu(const std::vector<at::Tensor>& ts) {
    for (auto& t : ts)
      if (t.device().type() != at::kCPU) return false;
    return true;
  }
  static bool all_cpu_lists(const std::vector<std::vector<at::Tensor>>& ls) {
    for (auto& l : ls)
      if (!all_cpu(l)) return false;
    return true;
  }

  // As NCCL's check: every tensor of a tpu collective is a tpu tensor.
  static void require_tpu(const std::vector<at::Tensor>& ts, const char* op) {
    for (size_t i = 0; i < ts.size(); i++) {
      TORCH_CHECK_VALUE(is_tpu(ts[i]), "tpu_dist: ", op, ": tensors must be tpu tensors, got a ",
                        ts[i].device().str(), " tensor at position ", i,
                        " (a cpu tensor goes to the group's cpu backend when every tensor of the call is on cpu)");
      TORCH_CHECK_VALUE(ts[i].layout() == at::kStrided, "tpu_dist: ", op, ": tensors must be dense");
    }
  }

  static int64_t row_bytes(const at::Tensor& t) {
    int64_t n = t.element_size();
    for (int64_t d = 1; d < t.dim(); d++) n *= t.size(d);
    return n;
  }

  // A host tensor with t's dtype and row shape and no rows: what all ranks
  // of an all_to_all_single must agree on.
  static at::Tensor row_probe(const at::Tensor& t) {
    std::vector<int64_t> shape = t.sizes().vec();
    if (!shape.empty()) shape[0] = 0;
    return at::empty(shape, t.options().device(at::kCPU));
  }

  // Per-rank row counts of an all_to_all_single (equal splits when none given).
  std::vector<int64_t> rows_of(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    int64_t rows = t.dim() ? t.size(0) : 1;
    if (splits.empty()) {
      TORCH_CHECK_VALUE(rows % size_ == 0, "tpu_dist: all_to_all_single: the ", which, "'s first dimension (", rows,
                        ") is not divisible by the world size (", size_, ")");
      return std::vector<int64_t>(size_, rows / size_);
    }
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size_, "tpu_dist: all_to_all_single: ", splits.size(), " ",
                      which, " split sizes for ", size_, " ranks");
    int64_t sum = 0;
    for (auto s : splits) sum += s;
    TORCH_CHECK_VALUE(sum == rows, "tpu_dist: all_to_all_single: ", which, " split sizes sum to ", sum, ", but the ",
                      which, " has ", rows, " rows");
    return splits;
  }

  // Returns the tracked Work, or adds it to the open coalescing block.
  WorkPtr track(OpType type, std::vector<WorkPtr> host, std::function<void()> writeback,
                std::vector<at::Tensor> results) {
    WorkPtr w = c10::make_intrusive<TpuWork>(rank_, type, std::move(host), std::move(writeback), std::move(results),
                                             peers_);
    if (coalescing_) coalesced_.push_back(w);
    return w;
  }

  WorkPtr combine(OpType type, std::vector<WorkPtr> works, std::vector<at::Tensor> results) {
    if (coalescing_) {
      // the parts are already in the block
      return c10::make_intrusive<TpuWork>(rank_, type, std::vector<WorkPtr>{}, nullptr, std::move(results), peers_);
    }
    return c10::make_intrusive<TpuWork>(rank_, type, std::move(works), nullptr, std::move(results), peers_);
  }

  WorkPtr recv_impl(std::vector<at::Tensor>& tensors, const std::function<WorkPtr(std::vector<at::Tensor>&)>& post,
                    OpType type) {
    require_tpu(tensors, "recv");
    TORCH_CHECK_VALUE(tensors.size() == 1, "tpu_dist: recv takes one tensor");
    at::Tensor h = host_like(tensors[0]);
    std::vector<at::Tensor> wire{bytes_of(h)};
    auto hw = post(wire);
    auto target = tensors[0];
    return track(type, {hw}, [target, h]() { write_from_host(target, h); }, tensors);
  }

  // ---- agreement across ranks ----

  static void fingerprint(int64_t* fp, OpType op, int64_t redop, int64_t root, const std::vector<at::Tensor>& ts) {
    memset(fp, 0, sizeof(int64_t) * kFp);
    fp[0] = static_cast<int64_t>(op) + 1;
    fp[1] = redop;
    fp[2] = root;
    fp[6] = static_cast<int64_t>(ts.size());
    if (ts.empty()) return;
    const at::Tensor& t = ts[0];
    fp[3] = static_cast<int64_t>(t.scalar_type());
    fp[4] = t.dim();
    int64_t numel = 0;
    for (auto& x : ts) numel += x.numel();
    fp[5] = numel;
    for (int64_t d = 0; d < t.dim() && d < 8; d++) fp[7 + d] = t.size(d);
    uint64_t h = 1469598103934665603ull;
    for (int64_t d = 8; d < t.dim(); d++) h = (h ^ static_cast<uint64_t>(t.size(d))) * 1099511628211ull;
    fp[15] = static_cast<int64_t>(h);
  }

  static std::string describe(const int64_t* fp) {
    std::ostringstream s;
    s << c10d::opTypeToString(static_cast<OpType>(fp[0] - 1));
    if (fp[6] == 0) return s.str();
    s << "(" << c10::toString(static_cast<at::ScalarType>(fp[3])) << "[";
    for (int64_t d = 0; d < fp[4] && d < 8; d++) s << (d ? ", " : "") << fp[7 + d];
    if (fp[4] > 8) s << ", ...";
    s << "]";
    if (fp[6] > 1) s << " x" << fp[6] << " tensors, " << fp[5] << " elements";
    static const char* const kOps[] = {"sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum"};
    if (fp[1] >= 0) s << ", " << (fp[1] < 9 ? kOps[fp[1]] : "op?");
    if (fp[2]) s << ", root " << fp[2];
    s << ")";
    return s.str();
  }

  // Every rank must call the same collective on tensors of one dtype and
  // shape; a mismatch raises on every rank, naming each rank's call.
  void agree(OpType op, const char* name, const std::vector<at::Tensor>& ts, int64_t redop, int64_t root) {
    if (!check_ || size_ == 1) return;
    at::Tensor mine = at::empty({kFp}, at::kLong);
    fingerprint(mine.data_ptr<int64_t>(), op, redop, root, ts);
    gather_rows(name, mine, [&](const std::vector<at::Tensor>& all) {
      bool same = true;
      for (auto& r : all) same = same && at::equal(r, mine);
      if (same) return;
      std::ostringstream msg;
      msg << "Detected mismatch between collectives on ranks (tpu_dist " << name
          << "): every rank must call the same collective with tensors of the same shape and dtype.";
      for (int r = 0; r < size_; r++) msg << "\n  rank " << r << ": " << describe(all[r].data_ptr<int64_t>());
      TORCH_CHECK(false, msg.str());
    });
  }

  // all_to_all: what rank i sends to j is what j expects from i.
  void agree_splits(const char* name, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) {
    if (!check_ || size_ == 1) return;
    at::Tensor mine = at::empty({2 * size_}, at::kLong);
    int64_t* p = mine.data_ptr<int64_t>();
    for (int j = 0; j < size_; j++) {
      p[j] = send[j];
      p[size_ + j] = recv[j];
    }
    gather_rows(name, mine, [&](const std::vector<at::Tensor>& all) {
      for (int i = 0; i < size_; i++)
        for (int j = 0; j < size_; j++) {
          int64_t sent = all[i].data_ptr<int64_t>()[j], expected = all[j].data_ptr<int64_t>()[size_ + i];
          TORCH_CHECK(sent == expected, "Detected mismatch between collectives on ranks (tpu_dist ", name, "): rank ",
                      i, " sends ", sent, " rows to rank ", j, ", which expects ", expected, " from it");
        }
    });
  }

  void gather_rows(const char* name, const at::Tensor& mine,
                   const std::function<void(const std::vector<at::Tensor>&)>& judge) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size_; r++) outs[0].push_back(at::empty_like(mine));
    std::vector<at::Tensor> in{mine};
    c10d::AllgatherOptions o;
    try {
      host_->allgather(outs, in, o)->wait();
    } catch (...) {
      std::string what = std::string(name) + " (its agreement check)";
      rethrow_explained(peers_, what.c_str(), std::current_exception());
    }
    judge(outs[0]);
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  c10::intrusive_ptr<Options> options_;
  bool check_;
  std::shared_ptr<const Peers> peers_;
  bool coalescing_ = false;
  std::vector<WorkPtr> coalesced_;
};

// DDP's per-iteration timings (forward, backward compute, communication) for
// tpu modules: host timestamps, as CPU's (the transport waits for values).
class TpuTimer final : public c10d::Timer {
 public:
  explicit TpuTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    int64_t a = getTimeRef(start), b = getTimeRef(end);
    if (a == c10d::kUnsetTime || b == c10d::kUnsetTime || b < a) return std::nullopt;
    return b - a;
  }
};

}  // namespace
}  // namespace torch_tpu

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_tpu::TpuTimer)
}  // namespace c10d

namespace torch_tpu {

// Adds the backend's constructor to torch_tpu._C (called from its init; the
// c10d Python types are looked up when it is called, not here).
int c10d_register(PyObject* module) {
  try {
    auto m = pybind11::reinterpret_borrow<pybind11::module_>(module);
    m.def(
        "_tpu_dist_host_backend",
        [](c10::intrusive_ptr<c10d::Backend> host, int rank, int size, double timeout_s, std::string group_name,
           bool check, std::vector<std::string> peer_hosts, std::vector<int64_t> peer_pids,
           std::vector<int64_t> global_ranks) -> c10::intrusive_ptr<c10d::Backend> {
          TORCH_CHECK(host, "tpu_dist: no host backend");
          auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
          std::shared_ptr<const Peers> peers;
          if (peer_pids.size() == static_cast<size_t>(size) && peer_hosts.size() == peer_pids.size()) {
            auto p = std::make_shared<Peers>();
            p->rank = rank;
            p->group = group_name;
            p->hosts = std::move(peer_hosts);
            p->pids = std::move(peer_pids);
            if (global_ranks.size() == static_cast<size_t>(size)) p->global_ranks = std::move(global_ranks);
            peers = std::move(p);
          }
          return c10::make_intrusive<TpuDistBackend>(std::move(host), rank, size, timeout, std::move(group_name),
                                                     check, std::move(peers));
        },
        pybind11::arg("host"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout_s"),
        pybind11::arg("group_name"), pybind11::arg("check") = true,
        pybind11::arg("peer_hosts") = std::vector<std::string>{}, pybind11::arg("peer_pids") = std::vector<int64_t>{},
        pybind11::arg("global_ranks") = std::vector<int64_t>{},
        "The tpu_dist c10d backend over a host backend (gloo): tpu tensors staged through host memory.");
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
    return -1;
  }
  return 0;
}

}  // namespace torch_tpu
