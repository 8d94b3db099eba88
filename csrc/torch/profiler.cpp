// profiler.cpp - the tpu device in torch.profiler: a libkineto activity
// profiler registered through PyTorch's PrivateUse1 profiler extension
// point (torch/csrc/profiler/standalone/privateuse1_profiler.h,
// REGISTER_PRIVATEUSE1_PROFILER), which torch 2.13 forwards to Kineto.
//
// torch.profiler.profile(activities=[CPU, PrivateUse1]) runs in state
// KINETO_PRIVATEUSE1; Kineto configures this profiler's session with it.
// The session starts the engine's timeline (runtime/trace.h) and keeps, per
// thread, the correlation id of the op being run (Kineto pushes one per op)
// as the engine's thread tag, so a flush records the op that cut it.  At
// stop it waits for the device, takes the events and hands them to Kineto:
//
//   CONCURRENT_KERNEL   each program execution, "tpu program: <name>", its
//                       span from the completion callbacks (metrics.h's
//                       device time; on the CPU plugin executions do not
//                       overlap, so it is the run time), linked to the op
//                       that flushed it: key_averages' device time is there
//   GPU_MEMCPY          host<->device and device copies, with bytes (instants:
//                       the engine sees when a copy is issued or read)
//   PRIVATEUSE1_RUNTIME compiles (cache miss), disk-tier loads, memory-tier
//                       hits, flushes (cut, ops, recording window), host
//                       waits and CPU fallbacks
//
// All on the device's own track in the trace ("tpu:<n>"), one row each for
// programs, compiles, transfers and host work.  Times are the engine's
// CLOCK_MONOTONIC moved to the Unix-epoch nanoseconds Kineto uses.
// libkineto formats metadata with fmt, which torch links internally only
#ifndef FMT_HEADER_ONLY
#define FMT_HEADER_ONLY 1
#endif
#ifndef USE_KINETO
#define USE_KINETO 1
#endif

#include <time.h>

#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

extern "C" {
#include "runtime/event.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"
}

namespace torch_tpu {
namespace {

using libkineto::ActivityType;

enum Row { kPrograms = 0, kCompiles = 1, kTransfers = 2, kHost = 3 };

thread_local std::vector<uint64_t> t_correlation;

// What a session hands Kineto: its loggers keep pointers to the activities
// (and they to the span) past the session's end, until the trace result is
// gone, so the last few sessions' activities are kept here.
struct Activities {
  std::unique_ptr<libkineto::TraceSpan> span;
  std::deque<libkineto::GenericTraceActivity> list;
};
std::mutex g_kept_lock;
std::deque<std::shared_ptr<Activities>> g_kept;
constexpr size_t kKeptSessions = 8;

std::shared_ptr<Activities> new_activities() {
  auto a = std::make_shared<Activities>();
  a->span = std::make_unique<libkineto::TraceSpan>(0, 0, "tpu");
  std::lock_guard<std::mutex> g(g_kept_lock);
  g_kept.push_back(a);
  while (g_kept.size() > kKeptSessions) g_kept.pop_front();
  return a;
}

int64_t epoch_offset_ns() {
  struct timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (static_cast<int64_t>(rt.tv_sec) - static_cast<int64_t>(mono.tv_sec)) * 1000000000LL +
         (static_cast<int64_t>(rt.tv_nsec) - static_cast<int64_t>(mono.tv_nsec));
}

std::string hex_key(uint64_t key) {
  char b[32];
  snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(key));
  return b;
}

// Runs what is pending and waits for the device; a failure it reports
// (asynchronous, or a device-side check) is kept for the user's next
// synchronize, where it would have been reported without the profiler.
void wait_for_device() {
  if (!tpu_rt_initialized()) return;
  tpu_status_t st = tpu_rt_synchronize();
  if (st) tpu_work_fail(st);
}

class TpuSession final : public libkineto::IActivityProfilerSession {
 public:
  ~TpuSession() override = default;

  void start() override {
    // work recorded before the profile runs first and is not part of it
    wait_for_device();
    tpu_rt_trace_start();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // every execution issued inside completes (and is recorded) first
    wait_for_device();
    tpu_rt_trace_stop();
    std::vector<tpu_rt_trace_event_t> buf(4096);
    int n;
    while ((n = tpu_rt_trace_take(buf.data(), static_cast<int>(buf.size()))) > 0) {
      events_.insert(events_.end(), buf.begin(), buf.begin() + n);
      if (n < static_cast<int>(buf.size())) break;
    }
    dropped_ = tpu_rt_trace_dropped();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    if (!dropped_) return {};
    return {"tpu: " + std::to_string(dropped_) + " engine trace events dropped (buffer full)"};
  }

  void processTrace(libkineto::ActivityLogger& logger) override { process(logger, nullptr); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    process(logger, &linked);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{device_pid(0), device_pid(0), "tpu:0", "tpu"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {libkineto::ResourceInfo{kPrograms, kPrograms, device_pid(0), "programs (device)"},
            libkineto::ResourceInfo{kCompiles, kCompiles, device_pid(0), "compiles and program cache"},
            libkineto::ResourceInfo{kTransfers, kTransfers, device_pid(0), "transfers"},
            libkineto::ResourceInfo{kHost, kHost, device_pid(0), "flushes, host waits, CPU fallbacks"}};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override {
    t_correlation.push_back(id);
    tpu_rt_trace_set_tag(id);
  }

  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
    tpu_rt_trace_set_tag(t_correlation.empty() ? 0 : t_correlation.back());
  }

  std::string getDeviceProperties() override { return ""; }

 private:
  // The device's process id in the trace: apart from the host's pid and
  // from CUDA-style small device numbers other tools may emit.
  static int64_t device_pid(int device) { return 1000 + device; }

  void process(libkineto::ActivityLogger& logger, const libkineto::getLinkedActivityCallback* linked) {
    int64_t off = epoch_offset_ns();
    std::shared_ptr<Activities> out = new_activities();
    for (const tpu_rt_trace_event_t& e : events_) {
      ActivityType type = ActivityType::PRIVATEUSE1_RUNTIME;
      Row row = kHost;
      std::string name;
      switch (e.kind) {
        case TPU_TRACE_EXECUTE:
          type = ActivityType::CONCURRENT_KERNEL;
          row = kPrograms;
          name = std::string("tpu program: ") + e.name;
          break;
        case TPU_TRACE_COMPILE: row = kCompiles; name = std::string("tpu compile (cache miss): ") + e.name; break;
        case TPU_TRACE_DISK_LOAD: row = kCompiles; name = std::string("tpu load (disk tier hit): ") + e.name; break;
        case TPU_TRACE_CACHE_HIT: row = kCompiles; name = std::string("tpu memory tier hit: ") + e.name; break;
        case TPU_TRACE_FLUSH:
          name = std::string("tpu flush (") + (e.cut >= 0 ? tpu_rt_cut_name(static_cast<tpu_rt_cut_t>(e.cut)) : "?") +
                 "): " + e.name;
          break;
        case TPU_TRACE_TO_DEVICE: type = ActivityType::GPU_MEMCPY; row = kTransfers; name = "tpu copy host to device"; break;
        case TPU_TRACE_TO_HOST: type = ActivityType::GPU_MEMCPY; row = kTransfers; name = "tpu copy device to host"; break;
        case TPU_TRACE_DEVICE_COPY: type = ActivityType::GPU_MEMCPY; row = kTransfers; name = "tpu copy device to device"; break;
        case TPU_TRACE_HOST_WAIT: name = "tpu host wait"; break;
        case TPU_TRACE_FALLBACK: name = std::string("tpu CPU fallback: ") + e.name; break;
        default: continue;
      }
      out->list.emplace_back(*out->span, type, name);
      libkineto::GenericTraceActivity& a = out->list.back();
      a.startTime = static_cast<int64_t>(e.start * 1e9) + off;
      a.endTime = static_cast<int64_t>(e.end * 1e9) + off;
      if (a.endTime < a.startTime) a.endTime = a.startTime;
      // a flush is a point on the host (its recording window, which spans the
      // ops recorded into it, is in its args: as a span it would overlap them)
      if (e.kind == TPU_TRACE_FLUSH) a.endTime = a.startTime;
      a.device = static_cast<int32_t>(device_pid(e.device < 0 ? 0 : e.device));
      a.resource = row;
      a.id = static_cast<int32_t>(++next_id_);
      if (e.key) a.addMetadataQuoted("program", hex_key(e.key));
      if (e.ops) a.addMetadata("ops", e.ops);
      if (e.cut >= 0) a.addMetadataQuoted("cut", tpu_rt_cut_name(static_cast<tpu_rt_cut_t>(e.cut)));
      if (e.bytes) a.addMetadata("bytes", e.bytes);
      if (e.kind == TPU_TRACE_EXECUTE) {
        a.addMetadataQuoted("span", "issue (or the previous completion) to completion callback");
        if (e.rec_end > 0) {
          a.addMetadata("recorded_from_us", static_cast<int64_t>((e.rec_start * 1e9 + off) / 1000));
          a.addMetadata("recorded_to_us", static_cast<int64_t>((e.rec_end * 1e9 + off) / 1000));
        }
      }
      // the ops recorded into a program are those with correlation ids from
      // first_correlation (its first op's) to correlation (the op that ran it)
      if (e.first_tag && (e.kind == TPU_TRACE_EXECUTE || e.kind == TPU_TRACE_FLUSH))
        a.addMetadata("first_correlation", e.first_tag);
      if (e.tag) {
        a.addMetadata("correlation", e.tag);
        if (linked && *linked) a.linked = (*linked)(static_cast<int32_t>(e.tag));
      }
      logger.handleActivity(a);
    }
  }

  std::vector<tpu_rt_trace_event_t> events_;
  int64_t dropped_ = 0;
  uint64_t next_id_ = 0;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    // a session when the device's activity is asked for (ProfilerActivity.PrivateUse1
    // asks for kernels and copies; CPU alone asks for host types only)
    if (types.count(ActivityType::CONCURRENT_KERNEL) || types.count(ActivityType::GPU_MEMCPY))
      return std::make_unique<TpuSession>();
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"torch_tpu"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::PRIVATEUSE1_RUNTIME, ActivityType::PRIVATEUSE1_DRIVER};
};

}  // namespace
}  // namespace torch_tpu

using TpuActivityProfiler = torch_tpu::TpuActivityProfiler;
REGISTER_PRIVATEUSE1_PROFILER(TpuActivityProfiler);
