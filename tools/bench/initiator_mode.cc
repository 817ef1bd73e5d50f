// ferry-bench --mode=initiator: the measured loop, the --check verification, the live progress
// line, the report, and --sweep.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/bench_modes.h"
#include "bench/bench_report.h"
#include "bench/pattern.h"
#include "bench/raw_baseline_runner.h"
#include "ferry/metrics.h"
#include "ferry/options.h"
#include "ferry/transfer_engine.h"

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Every task ends by EngineOptions::task_timeout; a batch still pending this long after it is a
// broken engine contract, reported as an error instead of hanging the benchmark.
const std::chrono::milliseconds kBatchTimeout = EngineOptions{}.task_timeout + 10s;
constexpr uint8_t kPoison = 0xa5;  // what a read block holds before the read lands (--check)

// What the worker threads share. The counters are relaxed atomics the workers add to once per
// ended batch (no lock on the measured path); the progress line reads them.
// Thread contract: every member is safe from any thread.
class RunState {
 public:
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  void AddOps(uint64_t n) { ops_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }

  // Counts `count` errors, keeps the first reason, and stops the run.
  void Fail(uint64_t count, const std::string& reason) {
    errors_.fetch_add(count, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (first_error_.empty()) first_error_ = reason;
    }
    Stop();
  }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  std::string first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> errors_{0};
  std::mutex mu_;
  std::string first_error_;  // guarded by mu_
};

struct WorkerResult {
  uint64_t ops = 0;
  std::vector<double> latencies_us;
  std::vector<std::string> transports;  // distinct TransferStatus::transport values seen
  std::vector<std::string> file_ios;    // distinct TransferStatus::file_io values seen
  Clock::time_point finished;
};

struct BatchOutcome {
  BatchStatus status;
  double latency_us = 0;  // submit until every task was done
  std::string transport;  // what carried the sampled task; empty unless the batch completed
  std::string file_io;    // how its file I/O went (TransferStatus::file_io); empty: no file
};

// batch_size requests of block_size bytes: block i moves local + i * block to/from remote_addr +
// i * block of segment `target`, each with --protocol's transport hint.
std::vector<TransferRequest> BuildRequests(const BenchOptions& o, OpCode op, uint8_t* local,
                                           SegmentId target, uint64_t remote_addr) {
  const std::string hint = o.TransportHint();
  std::vector<TransferRequest> requests(o.batch_size);
  for (uint64_t i = 0; i < o.batch_size; ++i) {
    requests[i] = {
        op, local + i * o.block_size, target, remote_addr + i * o.block_size, o.block_size, hint};
  }
  return requests;
}

// Frees a batch whose tasks all ended. freeBatchID may still answer Busy for a moment after the
// batch reported done (its last slices being retired); that is retried until kBatchTimeout after
// `start`. Errors: any other freeBatchID error, or Timeout.
Status FreeBatch(TransferEngine& engine, BatchId batch, Clock::time_point start) {
  while (true) {
    Status s = engine.freeBatchID(batch);
    if (s.code() != StatusCode::kBusy) return s.WithContext("freeBatchID");
    if (Clock::now() - start > kBatchTimeout) return s.WithContext("freeBatchID (timed out)");
    std::this_thread::yield();
  }
}

// One submitted batch, until it ended and was freed.
struct OpenBatch {
  BatchId id{};
  Clock::time_point start;
};

// Allocates a batch and submits `requests` to it. Errors: a failed allocate/submit call (the
// batch is freed again: nothing of it was queued).
Result<OpenBatch> SubmitBatch(TransferEngine& engine,
                              const std::vector<TransferRequest>& requests) {
  Result<BatchId> batch = engine.allocateBatchID(requests.size());
  if (!batch.ok()) return batch.status().WithContext("allocateBatchID");
  const auto start = Clock::now();
  if (Status s = engine.submitTransfer(*batch, requests); !s.ok()) {
    engine.freeBatchID(*batch).IgnoreError();  // nothing of it was queued
    return s.WithContext("submitTransfer");
  }
  return OpenBatch{*batch, start};
}

// Polls `batch` once. nullopt while a task is open; once every task ended, the outcome (latency
// from submit until this poll saw it done; when it completed, the transport of task
// `sample_task` modulo the batch size, one getTransferStatus per batch) and the batch freed.
// Errors: a failed status/free call, or Timeout kBatchTimeout after submit (the batch is then
// left allocated: the engine still owns its tasks).
Result<std::optional<BatchOutcome>> PollBatch(TransferEngine& engine, const OpenBatch& batch,
                                              size_t tasks, uint64_t sample_task) {
  Result<BatchStatus> status = engine.getBatchTransferStatus(batch.id);
  if (!status.ok()) return status.status().WithContext("getBatchTransferStatus");
  const auto now = Clock::now();
  if (status->state == TransferState::kPending || status->state == TransferState::kWaiting) {
    if (now - batch.start > kBatchTimeout) {
      return TimeoutError("batch not done " + std::to_string(kBatchTimeout.count()) +
                          " ms after submit");
    }
    return std::optional<BatchOutcome>();
  }
  BatchOutcome outcome{
      *status, std::chrono::duration<double, std::micro>(now - batch.start).count(), "", ""};
  if (status->state == TransferState::kCompleted && tasks > 0) {
    Result<TransferStatus> task = engine.getTransferStatus(batch.id, sample_task % tasks);
    if (!task.ok()) return task.status().WithContext("getTransferStatus");
    outcome.transport = std::move(task->transport);
    outcome.file_io = std::move(task->file_io);
  }
  RETURN_IF_ERROR(FreeBatch(engine, batch.id, batch.start));
  return std::optional<BatchOutcome>(std::move(outcome));
}

// How a poller waits between polls that found nothing new, `waited` after the oldest open
// batch's submit: spin briefly for short batches, then sleep; on a small machine a spinning
// poller takes the core the transport's threads need.
void PauseBetweenPolls(Clock::duration waited) {
  if (waited < 50us) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(20us);
  }
}

// Submits `requests` as one batch, polls until every task is done and frees the batch (see
// PollBatch). Errors: those of SubmitBatch and PollBatch.
Result<BatchOutcome> RunBatch(TransferEngine& engine, const std::vector<TransferRequest>& requests,
                              uint64_t sample_task = 0) {
  ASSIGN_OR_RETURN(OpenBatch batch, SubmitBatch(engine, requests));
  while (true) {
    ASSIGN_OR_RETURN(std::optional<BatchOutcome> outcome,
                     PollBatch(engine, batch, requests.size(), sample_task));
    if (outcome) return std::move(*outcome);
    PauseBetweenPolls(Clock::now() - batch.start);
  }
}

// Points `requests` (BuildRequests' batch) at the slice at `offset` of both buffers.
void AimAt(std::vector<TransferRequest>& requests, const BenchOptions& o, uint8_t* local_base,
           uint64_t offset) {
  for (uint64_t i = 0; i < requests.size(); ++i) {
    requests[i].source = local_base + offset + i * o.block_size;
    requests[i].target_offset = o.target_addr + offset + i * o.block_size;
  }
}

// The first block of `local` (read from target offset `remote_offset`) that differs from the
// target pattern, as an error text; empty when all match.
std::string CheckReadBlocks(const BenchOptions& o, const uint8_t* local, uint64_t remote_offset) {
  for (uint64_t i = 0; i < o.batch_size; ++i) {
    const uint64_t offset = remote_offset + i * o.block_size;
    if (auto bad = FindPatternMismatch(kTargetPatternSeed, offset, local + i * o.block_size,
                                       o.block_size)) {
      return "read check: byte at target offset " + std::to_string(*bad) +
             " differs from the target's pattern (was the target started with --check, and "
             "did a write run against it before?)";
    }
  }
  return "";
}

// One in-flight batch position of a worker: its requests (re-aimed at each use), how often it
// was used (which slice of its ring comes next), and the batch it has open, if any.
struct Position {
  uint64_t index = 0;  // BenchOptions position: t * inflight + k
  uint64_t uses = 0;
  uint64_t offset = 0;  // the slice the open batch moves
  std::vector<TransferRequest> requests;
  std::optional<OpenBatch> open;
};

// Thread t's measured loop: keeps its o.inflight positions busy, each moving batches through its
// own ring of slices (BenchOptions::SliceOffset), resubmitting a position as soon as its batch
// ended, until the run stops; then waits for what is still open. A failed batch, call or check
// stops the run (RunState::Fail); the open batches are still waited for.
WorkerResult Worker(TransferEngine& engine, const BenchOptions& o, SegmentId target,
                    uint8_t* local_base, uint64_t t, RunState& state) {
  WorkerResult result;
  const bool read = o.operation == BenchOperation::kRead;
  std::vector<Position> positions(o.inflight);
  for (uint64_t k = 0; k < o.inflight; ++k) {
    positions[k].index = t * o.inflight + k;
    positions[k].requests =
        BuildRequests(o, read ? OpCode::kRead : OpCode::kWrite, local_base, target, o.target_addr);
  }
  auto submit = [&](Position& p) {
    p.offset = o.SliceOffset(p.index, p.uses++);
    AimAt(p.requests, o, local_base, p.offset);
    if (o.check && read) std::memset(local_base + p.offset, kPoison, o.SliceBytes());
    Result<OpenBatch> batch = SubmitBatch(engine, p.requests);
    if (!batch.ok()) {
      state.Fail(1, batch.status().ToString());
      return;
    }
    p.open = *batch;
  };
  for (Position& p : positions) {
    if (!state.stopped()) submit(p);
  }
  uint64_t batches = 0;
  size_t open = static_cast<size_t>(
      std::count_if(positions.begin(), positions.end(), [](const Position& p) { return p.open; }));
  while (open > 0) {
    bool ended = false;
    Clock::time_point oldest = Clock::now();
    for (Position& p : positions) {
      if (!p.open) continue;
      Result<std::optional<BatchOutcome>> outcome =
          PollBatch(engine, *p.open, p.requests.size(), batches);
      if (!outcome.ok()) {
        state.Fail(1, outcome.status().ToString());
        p.open.reset();  // a timed-out batch stays allocated: the engine still owns its tasks
        --open;
        continue;
      }
      if (!*outcome) {
        oldest = std::min(oldest, p.open->start);
        continue;
      }
      ended = true;
      ++batches;
      p.open.reset();
      --open;
      const BatchStatus& status = (*outcome)->status;
      result.ops += status.completed;
      state.AddOps(status.completed);
      result.latencies_us.push_back((*outcome)->latency_us);
      std::string& transport = (*outcome)->transport;
      if (!transport.empty() && std::find(result.transports.begin(), result.transports.end(),
                                          transport) == result.transports.end()) {
        result.transports.push_back(std::move(transport));
      }
      std::string& file_io = (*outcome)->file_io;
      if (!file_io.empty() && std::find(result.file_ios.begin(), result.file_ios.end(), file_io) ==
                                  result.file_ios.end()) {
        result.file_ios.push_back(std::move(file_io));
      }
      if (status.failed > 0 || status.state != TransferState::kCompleted) {
        state.Fail(std::max<uint64_t>(status.failed, 1), status.first_error.ToString());
        continue;
      }
      if (o.check && read) {
        if (std::string bad = CheckReadBlocks(o, local_base + p.offset, p.offset); !bad.empty()) {
          state.Fail(1, bad);
          continue;
        }
      }
      if (!state.stopped()) {
        submit(p);
        if (p.open) ++open;
      }
    }
    if (ended || open == 0) continue;
    if (!o.wait_block) {
      PauseBetweenPolls(Clock::now() - oldest);
      continue;
    }
    // Block on the oldest open batch; its result is read by the next poll (which also reports
    // a batch past kBatchTimeout), so an error or Timeout here needs nothing more.
    for (Position& p : positions) {
      if (p.open && p.open->start == oldest) {
        const auto left = kBatchTimeout - (Clock::now() - oldest);
        engine
            .waitBatch(p.open->id,
                       std::max(1ms, std::chrono::ceil<std::chrono::milliseconds>(left)))
            .status()
            .IgnoreError();
        break;
      }
    }
  }
  result.finished = Clock::now();
  return result;
}

// Reads the working set back from the target into a second registered buffer and compares it
// with the pattern of `seed` the run wrote. Errors: a failed transfer, or a mismatch.
Status VerifyWrites(TransferEngine& engine, const BenchOptions& o, SegmentId target,
                    uint64_t seed) {
  Result<PageBuffer> back = PageBuffer::Allocate(o.WorkingSetBytes());
  if (!back.ok()) return back.status();
  RETURN_IF_ERROR(engine.registerLocalMemory(back->data(), back->size()));
  Status status;
  std::vector<TransferRequest> requests =
      BuildRequests(o, OpCode::kRead, back->data(), target, o.target_addr);
  for (uint64_t offset = 0; offset < o.WorkingSetBytes() && status.ok(); offset += o.SliceBytes()) {
    AimAt(requests, o, back->data(), offset);
    Result<BatchOutcome> outcome = RunBatch(engine, requests);
    if (!outcome.ok()) {
      status = outcome.status();
    } else if (outcome->status.state != TransferState::kCompleted) {
      status = outcome->status.first_error;
      if (status.ok()) status = InternalError("read-back batch ended without completing");
    }
  }
  Status unregistered = engine.unregisterLocalMemory(back->data());
  RETURN_IF_ERROR(status.WithContext("write check: reading back"));
  RETURN_IF_ERROR(unregistered);
  if (auto bad = FindPatternMismatch(seed, 0, back->data(), back->size())) {
    return InternalError("write check: byte at target offset " + std::to_string(*bad) +
                         " differs from what was written");
  }
  return Status::Ok();
}

// Whether the run shows the live progress line: only on a terminal (stderr), and never with
// --json (whose reader wants one quiet line).
bool ShowsProgress(const BenchOptions& o) { return !o.json && isatty(STDERR_FILENO) == 1; }

// Waits until the duration ran out, a stop signal came or the workers stopped. With `progress`,
// prints on stderr, once a second, "<label><t> s: <GB/s>, <ops/s>, <n> error(s)" (rates over
// the last second, errors so far), overwriting the line in place (\r, erase to the end of the
// line), and erases it at the end so that the summary starts on a clean line. It reads only
// RunState's relaxed counters: the workers take no lock for it.
void WaitForEnd(const BenchOptions& o, StopSignals& signals, RunState& state,
                Clock::time_point start, bool progress, const std::string& label) {
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(o.duration_s));
  auto last_print = start;
  uint64_t last_ops = 0;
  while (!state.stopped()) {
    const auto now = Clock::now();
    if (now >= end) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now);
    if (signals.WaitFor(std::min<std::chrono::milliseconds>(100ms, left + 1ms))) break;
    const auto after = Clock::now();
    if (progress && after - last_print >= 1s) {
      const double dt = std::chrono::duration<double>(after - last_print).count();
      const uint64_t ops = state.ops();
      const double rate = static_cast<double>(ops - last_ops) / dt;
      std::fprintf(stderr, "\r\033[K%s%.0f s: %.3f GB/s, %.0f ops/s, %llu error(s)", label.c_str(),
                   std::chrono::duration<double>(after - start).count(),
                   rate * static_cast<double>(o.block_size) / 1e9, rate,
                   static_cast<unsigned long long>(state.errors()));
      std::fflush(stderr);
      last_print = after;
      last_ops = ops;
    }
  }
  state.Stop();
  if (progress && last_print != start) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

uint64_t FreshSeed() {
  std::random_device device;
  const uint64_t seed = (uint64_t{device()} << 32) ^ device();
  return seed == kTargetPatternSeed ? seed + 1 : seed;
}

int InitiatorFailed(const std::string& what, const Status& status) {
  std::fprintf(stderr, "ferry-bench initiator: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// Runs the threads and collects their counts and latencies into a BenchResult. `label` starts
// the progress line (ShowsProgress).
BenchResult Measure(TransferEngine& engine, const BenchOptions& o, SegmentId target, uint8_t* local,
                    StopSignals& signals, const std::string& label = "  ") {
  RunState state;
  std::vector<WorkerResult> results(o.threads);
  std::vector<std::thread> threads;
  {
    // Untimed batches first, one on the first slice of every position, so that connection
    // set-up (and first-touch faults) stay out of the numbers; under --check a write covers
    // the whole working set, so that the read-back finds every slice written. The same
    // operation as the run: a write writes the run's own pattern.
    const bool read = o.operation == BenchOperation::kRead;
    std::vector<TransferRequest> requests =
        BuildRequests(o, read ? OpCode::kRead : OpCode::kWrite, local, target, o.target_addr);
    const uint64_t warm_bytes =
        o.check && !read ? o.WorkingSetBytes() : o.Positions() * o.SliceBytes();
    for (uint64_t offset = 0; offset < warm_bytes && !state.stopped(); offset += o.SliceBytes()) {
      AimAt(requests, o, local, offset);
      Result<BatchOutcome> warm = RunBatch(engine, requests);
      if (!warm.ok()) {
        state.Fail(1, warm.status().ToString());
      } else if (warm->status.state != TransferState::kCompleted) {
        state.Fail(1, warm->status.first_error.ToString());
      }
    }
  }
  const TransferSeries engine_before = engine.getMetrics().Total();
  const auto start = Clock::now();
  for (uint64_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] { results[t] = Worker(engine, o, target, local, t, state); });
  }
  WaitForEnd(o, signals, state, start, ShowsProgress(o), label);
  for (auto& thread : threads) thread.join();
  const TransferSeries engine_after = engine.getMetrics().Total();

  BenchResult r;
  std::vector<double> latencies;
  std::vector<std::string> transports;
  std::vector<std::string> file_ios;  // "direct", "buffered", "direct+buffered": split at '+'
  auto finished = start;
  for (auto& w : results) {
    r.ops += w.ops;
    latencies.insert(latencies.end(), w.latencies_us.begin(), w.latencies_us.end());
    transports.insert(transports.end(), w.transports.begin(), w.transports.end());
    for (const std::string& io : w.file_ios) {
      for (size_t at = 0; at <= io.size();) {
        const size_t plus = std::min(io.find('+', at), io.size());
        file_ios.push_back(io.substr(at, plus - at));
        at = plus + 1;
      }
    }
    finished = std::max(finished, w.finished);
  }
  r.transport = JoinTransports(std::move(transports));
  r.file_io = JoinTransports(std::move(file_ios));
  r.target_is_file = o.target_is_file;
  r.bytes = r.ops * o.block_size;
  r.seconds = std::chrono::duration<double>(finished - start).count();
  r.p50_us = Percentile(latencies, 50);
  r.p99_us = Percentile(latencies, 99);
  double sum_us = 0;
  for (const double us : latencies) sum_us += us;
  r.mean_us = latencies.empty() ? 0 : sum_us / static_cast<double>(latencies.size());
  r.working_set = o.WorkingSetBytes();
  r.errors = state.errors();
  r.first_error = state.first_error();
  r.retries = engine_after.retries - engine_before.retries;
  r.fallbacks = engine_after.fallbacks - engine_before.fallbacks;
  r.stale_refreshes = engine_after.stale_refreshes - engine_before.stale_refreshes;
  r.task_failures = engine_after.failures() - engine_before.failures();
  return r;
}

// Whether `buffer` is a file buffer: the file transport carries file buffers and only those
// (registerLocalFile), so a buffer it is published for is one.
bool IsFileBuffer(const SegmentBuffer& buffer) {
  return std::find(buffer.transports.begin(), buffer.transports.end(), "file") !=
         buffer.transports.end();
}

// `o` with target_addr set: the override when given, else the first buffer the segment
// publishes (as Mooncake's bench takes it); and target_is_file for the buffer there.
// InvalidArgument when that buffer cannot hold the working set.
Result<BenchOptions> WithTargetAddr(TransferEngine& engine, const BenchOptions& o,
                                    SegmentId target) {
  Result<std::vector<SegmentBuffer>> listed = engine.getSegmentBuffers(target);
  if (o.target_addr != 0) {
    BenchOptions out = o;
    if (listed.ok()) {  // only for the report: the override needs no listing
      for (const SegmentBuffer& b : *listed) {
        if (o.target_addr >= b.addr && o.target_addr - b.addr < b.length) {
          out.target_is_file = IsFileBuffer(b);
        }
      }
    }
    return out;
  }
  if (!listed.ok()) return listed.status();
  const std::vector<SegmentBuffer>& buffers = *listed;
  if (buffers.empty()) {
    return InvalidArgumentError("publishes no remote-accessible buffer (pass --target_addr)");
  }
  if (buffers.front().length < o.WorkingSetBytes()) {
    return InvalidArgumentError(
        "its first buffer holds " + std::to_string(buffers.front().length) +
        " bytes, less than the working set (threads * inflight * batch_size * "
        "block_size, or --working_set) = " +
        std::to_string(o.WorkingSetBytes()) + " (pass --target_addr, or use smaller blocks)");
  }
  BenchOptions out = o;
  out.target_addr = buffers.front().addr;
  out.target_is_file = IsFileBuffer(buffers.front());
  return out;
}

// The initiator's side of a run or of a sweep's series: an engine (declared first: it outlives
// the buffer registered with it), its local buffer, the target segment opened, and the options
// with target_addr resolved (WithTargetAddr).
// Thread contract: owned by the thread that opened it; the engine is shared by the workers.
struct InitiatorSide {
  TransferEngine engine;
  std::unique_ptr<BenchBuffer> buffer;
  SegmentId target = 0;
  BenchOptions run;
};

// Starts `side`'s engine for `o`, allocates o.EffectiveBufferSize() bytes (filled with the
// `seed` pattern over the working set for a --check write) and opens the target. Errors: the
// failed step's, with the step named.
Status OpenInitiator(const BenchOptions& o, uint64_t seed, InitiatorSide& side) {
  RETURN_IF_ERROR(side.engine.init(MakeEngineOptions(o)).WithContext("init"));
  Result<std::unique_ptr<BenchBuffer>> buffer = BenchBuffer::Create(
      side.engine, o.EffectiveBufferSize(), o.BufferFromEngine(), o.BufferLocation());
  if (!buffer.ok()) return buffer.status().WithContext("allocating the buffer");
  side.buffer = std::move(*buffer);
  if (o.check && o.operation == BenchOperation::kWrite) {
    FillPattern(seed, 0, side.buffer->data(), o.WorkingSetBytes());
  }
  Result<SegmentId> target = side.engine.openSegment(o.segment_id);
  if (!target.ok()) return target.status().WithContext("openSegment " + o.segment_id);
  side.target = *target;
  Result<BenchOptions> resolved = WithTargetAddr(side.engine, o, side.target);
  if (!resolved.ok()) return resolved.status().WithContext("segment " + o.segment_id);
  side.run = *resolved;
  return Status::Ok();
}

// "4096" -> "4K", "1048576" -> "1M": a block size as the flags spell it.
std::string SizeText(uint64_t bytes) {
  if (bytes % (uint64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes % (uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes % (uint64_t{1} << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// The raw baselines of a sweep: runs each point's (RawBaselineFor) from one folder, reusing the
// last result when the next point runs the very same command (the tcp stream ignores the
// operation, so a write and a read point share one), and saying once per program when it is
// missing. Thread contract: one thread.
class RawBaselines {
 public:
  explicit RawBaselines(const BenchOptions& o)
      : enabled_(o.raw_baselines != "none"),
        folder_(o.raw_baselines.empty() ? ExecutableFolder() : o.raw_baselines) {}

  // `point`'s baseline; an empty RawPoint (no baseline) when it has none or it failed (said on
  // stderr).
  RawPoint For(const BenchOptions& point) {
    if (!enabled_) return {};
    std::optional<RawBaselineCommand> command = RawBaselineFor(point);
    if (!command) return {};
    std::string key = command->program;
    for (const std::string& arg : command->args) key += " " + arg;
    if (key == last_key_) return last_;
    if (std::find(missing_.begin(), missing_.end(), command->program) != missing_.end()) return {};
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(point.duration_s) + 60s);
    Result<RawPoint> raw = RunRawBaseline(folder_, *command, timeout);
    if (!raw.ok()) {
      if (raw.status().code() == StatusCode::kNotFound) missing_.push_back(command->program);
      std::fprintf(stderr, "ferry-bench sweep: %s (its columns stay empty)\n",
                   raw.status().ToString().c_str());
      return {};
    }
    last_key_ = std::move(key);
    last_ = *raw;
    return last_;
  }

 private:
  const bool enabled_;
  const std::string folder_;
  std::vector<std::string> missing_;  // programs found missing
  std::string last_key_;              // the command of last_
  RawPoint last_;
};

}  // namespace

int RunInitiator(const BenchOptions& o, StopSignals& signals) {
  const uint64_t seed = FreshSeed();
  InitiatorSide side;
  if (Status s = OpenInitiator(o, seed, side); !s.ok()) return InitiatorFailed("setting up", s);
  const BenchOptions& run = side.run;

  BenchResult result = Measure(side.engine, run, side.target, side.buffer->data(), signals);
  if (run.check && run.operation == BenchOperation::kWrite && result.errors == 0) {
    if (Status s = VerifyWrites(side.engine, run, side.target, seed); !s.ok()) {
      result.errors += 1;
      result.first_error = s.ToString();
    }
  }
  side.buffer->Release().IgnoreError();  // the process ends anyway

  if (o.json) {
    std::printf("%s\n", FormatJson(o, result).c_str());
    if (!result.first_error.empty()) {
      std::fprintf(stderr, "ferry-bench initiator: first error: %s\n", result.first_error.c_str());
    }
  } else {
    std::printf("%s\n", FormatSummary(o, result).c_str());
    if (o.check && result.errors == 0) std::printf("  check: every byte matched\n");
  }
  std::fflush(stdout);
  return result.errors == 0 ? 0 : 1;
}

int RunSweep(const BenchOptions& o, StopSignals& signals) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(nullptr, &std::fclose);
  FILE* csv = stdout;
  if (!o.csv.empty()) {
    file.reset(std::fopen(o.csv.c_str(), "w"));
    if (!file) {
      std::fprintf(stderr, "ferry-bench sweep: cannot write --csv=%s: %s\n", o.csv.c_str(),
                   std::strerror(errno));
      return 1;
    }
    csv = file.get();
  }
  std::fprintf(csv, "%s\n", CsvHeader().c_str());
  std::fflush(csv);
  RawBaselines baselines(o);
  int status = 0;
  bool stopped = false;
  for (const std::string& protocol : o.sweep_protocols) {
    if (stopped) break;
    BenchOptions series = o.LargestPoint();  // the buffers hold every point of the series
    series.protocol = protocol;
    InitiatorSide side;
    if (Status s = OpenInitiator(series, /*seed=*/0, side); !s.ok()) {
      status = InitiatorFailed("--sweep_protocols " + protocol, s);
      continue;
    }
    for (const uint64_t threads : o.sweep_threads) {
      for (const uint64_t block : o.sweep_block_sizes) {
        for (const BenchOperation op : o.sweep_operations) {
          if (stopped) break;
          BenchOptions point = o.ForPoint(protocol, op, threads, block);
          point.target_addr = side.run.target_addr;
          const RawPoint raw = baselines.For(point);
          const std::string name = protocol + " " + std::string(OperationName(op)) + " " +
                                   SizeText(block) + " x" + std::to_string(threads);
          const BenchResult r =
              Measure(side.engine, point, side.target, side.buffer->data(), signals, name + ": ");
          std::fprintf(csv, "%s\n", FormatCsvRow(point, r, raw).c_str());
          std::fflush(csv);
          std::fprintf(stderr, "sweep: %s: %.3f GB/s, %.0f ops/s, p99 %.1f us", name.c_str(),
                       r.Gbps(), r.OpsPerSecond(), r.p99_us);
          if (!raw.baseline.empty() && raw.gbps > 0) {
            std::fprintf(stderr, "; raw %s %.3f GB/s, ratio %.2f", raw.baseline.c_str(), raw.gbps,
                         r.Gbps() / raw.gbps);
          }
          std::fprintf(stderr, "\n");
          if (r.errors != 0) {
            status = 1;
            std::fprintf(stderr, "  %llu error(s); first: %s\n",
                         static_cast<unsigned long long>(r.errors), r.first_error.c_str());
          }
          stopped = signals.WaitFor(0ms);  // a stop signal ends the sweep after this point
        }
      }
    }
    side.buffer->Release().IgnoreError();
  }
  if (file && std::fclose(file.release()) != 0) {
    std::fprintf(stderr, "ferry-bench sweep: writing --csv=%s: %s\n", o.csv.c_str(),
                 std::strerror(errno));
    return 1;
  }
  return status;
}

}  // namespace ferry::bench
