// ferry-bench --mode=initiator: the measured loop, the --check verification and the report.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/bench_modes.h"
#include "bench/bench_report.h"
#include "bench/pattern.h"
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

// What the worker threads share. Thread contract: every member is safe from any thread.
class RunState {
 public:
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  void AddOps(uint64_t n) { ops_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }

  // Counts `count` errors, keeps the first reason, and stops the run.
  void Fail(uint64_t count, const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      errors_ += count;
      if (first_error_.empty()) first_error_ = reason;
    }
    Stop();
  }
  uint64_t errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  std::string first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ops_{0};
  std::mutex mu_;
  uint64_t errors_ = 0;      // guarded by mu_
  std::string first_error_;  // guarded by mu_
};

struct WorkerResult {
  uint64_t ops = 0;
  std::vector<double> latencies_us;
  std::vector<std::string> transports;  // distinct TransferStatus::transport values seen
  Clock::time_point finished;
};

struct BatchOutcome {
  BatchStatus status;
  double latency_us = 0;  // submit until every task was done
  std::string transport;  // what carried the sampled task; empty unless the batch completed
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

// Submits `requests` as one batch, spins until every task is done and frees the batch. When the
// batch completed, the transport of task `sample_task` (modulo the batch size) is sampled
// with one getTransferStatus: one call per batch, outside the wait.
// Errors: a failed allocate/submit/status/free call, or Timeout after kBatchTimeout (the batch
// is then left allocated: the engine still owns its tasks).
Result<BatchOutcome> RunBatch(TransferEngine& engine, const std::vector<TransferRequest>& requests,
                              uint64_t sample_task = 0) {
  Result<BatchId> batch = engine.allocateBatchID(requests.size());
  if (!batch.ok()) return batch.status().WithContext("allocateBatchID");
  const auto start = Clock::now();
  if (Status s = engine.submitTransfer(*batch, requests); !s.ok()) {
    engine.freeBatchID(*batch).IgnoreError();  // nothing of it was queued
    return s.WithContext("submitTransfer");
  }
  while (true) {
    Result<BatchStatus> status = engine.getBatchTransferStatus(*batch);
    if (!status.ok()) return status.status().WithContext("getBatchTransferStatus");
    if (status->state != TransferState::kPending && status->state != TransferState::kWaiting) {
      const auto done = Clock::now();
      BatchOutcome outcome{*status, std::chrono::duration<double, std::micro>(done - start).count(),
                           ""};
      if (status->state == TransferState::kCompleted && !requests.empty()) {
        Result<TransferStatus> task =
            engine.getTransferStatus(*batch, sample_task % requests.size());
        if (!task.ok()) return task.status().WithContext("getTransferStatus");
        outcome.transport = std::move(task->transport);
      }
      RETURN_IF_ERROR(FreeBatch(engine, *batch, start));
      return outcome;
    }
    const auto waited = Clock::now() - start;
    if (waited > kBatchTimeout) {
      return TimeoutError("batch not done " + std::to_string(kBatchTimeout.count()) +
                          " ms after submit");
    }
    // Spin briefly for short batches, then sleep: on a small machine a spinning poller takes
    // the core the transport's threads need.
    if (waited < 50us) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(20us);
    }
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

// One thread's measured loop over its slice `t` of the local and the remote buffer.
WorkerResult Worker(TransferEngine& engine, const BenchOptions& o, SegmentId target,
                    uint8_t* local_base, uint64_t t, RunState& state) {
  WorkerResult result;
  const uint64_t slice_offset = t * o.SliceBytes();
  uint8_t* local = local_base + slice_offset;
  const bool read = o.operation == BenchOperation::kRead;
  const auto requests = BuildRequests(o, read ? OpCode::kRead : OpCode::kWrite, local, target,
                                      o.target_addr + slice_offset);
  uint64_t batches = 0;
  while (!state.stopped()) {
    if (o.check && read) std::memset(local, kPoison, o.SliceBytes());
    Result<BatchOutcome> outcome = RunBatch(engine, requests, batches++);
    if (!outcome.ok()) {
      state.Fail(1, outcome.status().ToString());
      break;
    }
    const BatchStatus& status = outcome->status;
    result.ops += status.completed;
    state.AddOps(status.completed);
    result.latencies_us.push_back(outcome->latency_us);
    if (!outcome->transport.empty() && std::find(result.transports.begin(), result.transports.end(),
                                                 outcome->transport) == result.transports.end()) {
      result.transports.push_back(std::move(outcome->transport));
    }
    if (status.failed > 0 || status.state != TransferState::kCompleted) {
      state.Fail(std::max<uint64_t>(status.failed, 1), status.first_error.ToString());
      break;
    }
    if (o.check && read) {
      if (std::string bad = CheckReadBlocks(o, local, slice_offset); !bad.empty()) {
        state.Fail(1, bad);
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
  for (uint64_t t = 0; t < o.threads && status.ok(); ++t) {
    const uint64_t offset = t * o.SliceBytes();
    Result<BatchOutcome> outcome = RunBatch(
        engine,
        BuildRequests(o, OpCode::kRead, back->data() + offset, target, o.target_addr + offset));
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

// Waits until the duration ran out, a stop signal came or the workers stopped; prints a live
// progress line once a second when stdout is a terminal.
void WaitForEnd(const BenchOptions& o, StopSignals& signals, RunState& state,
                Clock::time_point start) {
  const bool tty = isatty(STDOUT_FILENO) == 1;
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
    if (tty && after - last_print >= 1s) {
      const double dt = std::chrono::duration<double>(after - last_print).count();
      const uint64_t ops = state.ops();
      const double rate = static_cast<double>(ops - last_ops) / dt;
      std::printf("\r  %.0f s: %.3f GB/s, %.0f ops/s   ",
                  std::chrono::duration<double>(after - start).count(),
                  rate * static_cast<double>(o.block_size) / 1e9, rate);
      std::fflush(stdout);
      last_print = after;
      last_ops = ops;
    }
  }
  state.Stop();
  if (tty && last_print != start) std::printf("\n");
}

uint64_t FreshSeed() {
  std::random_device device;
  const uint64_t seed = (uint64_t{device()} << 32) ^ device();
  return seed == kTargetPatternSeed ? seed + 1 : seed;
}

int Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "ferry-bench initiator: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// Runs the threads and collects their counts and latencies into a BenchResult.
BenchResult Measure(TransferEngine& engine, const BenchOptions& o, SegmentId target, uint8_t* local,
                    StopSignals& signals) {
  RunState state;
  std::vector<WorkerResult> results(o.threads);
  std::vector<std::thread> threads;
  {
    // One untimed batch first, so that connection set-up (and first-touch faults) stay out of
    // the numbers. The same operation as the run: a write writes the run's own pattern.
    const bool read = o.operation == BenchOperation::kRead;
    Result<BatchOutcome> warm = RunBatch(
        engine,
        BuildRequests(o, read ? OpCode::kRead : OpCode::kWrite, local, target, o.target_addr));
    if (!warm.ok()) {
      state.Fail(1, warm.status().ToString());
    } else if (warm->status.state != TransferState::kCompleted) {
      state.Fail(1, warm->status.first_error.ToString());
    }
  }
  const auto start = Clock::now();
  for (uint64_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] { results[t] = Worker(engine, o, target, local, t, state); });
  }
  WaitForEnd(o, signals, state, start);
  for (auto& thread : threads) thread.join();

  BenchResult r;
  std::vector<double> latencies;
  std::vector<std::string> transports;
  auto finished = start;
  for (auto& w : results) {
    r.ops += w.ops;
    latencies.insert(latencies.end(), w.latencies_us.begin(), w.latencies_us.end());
    transports.insert(transports.end(), w.transports.begin(), w.transports.end());
    finished = std::max(finished, w.finished);
  }
  r.transport = JoinTransports(std::move(transports));
  r.bytes = r.ops * o.block_size;
  r.seconds = std::chrono::duration<double>(finished - start).count();
  r.p50_us = Percentile(latencies, 50);
  r.p99_us = Percentile(latencies, 99);
  r.errors = state.errors();
  r.first_error = state.first_error();
  return r;
}

// `o` with target_addr set: the override when given, else the first buffer the segment
// publishes (as Mooncake's bench takes it). InvalidArgument when that buffer cannot hold the
// working set.
Result<BenchOptions> WithTargetAddr(TransferEngine& engine, const BenchOptions& o,
                                    SegmentId target) {
  if (o.target_addr != 0) return o;
  ASSIGN_OR_RETURN(std::vector<SegmentBuffer> buffers, engine.getSegmentBuffers(target));
  if (buffers.empty()) {
    return InvalidArgumentError("publishes no remote-accessible buffer (pass --target_addr)");
  }
  if (buffers.front().length < o.WorkingSetBytes()) {
    return InvalidArgumentError("its first buffer holds " + std::to_string(buffers.front().length) +
                                " bytes, less than threads * batch_size * block_size = " +
                                std::to_string(o.WorkingSetBytes()) +
                                " (pass --target_addr, or use smaller blocks)");
  }
  BenchOptions out = o;
  out.target_addr = buffers.front().addr;
  return out;
}

}  // namespace

int RunInitiator(const BenchOptions& o, StopSignals& signals) {
  TransferEngine engine;  // declared first: it outlives the buffer registered with it
  if (Status s = engine.init(MakeEngineOptions(o)); !s.ok()) return Fail("init", s);
  Result<std::unique_ptr<BenchBuffer>> buffer =
      BenchBuffer::Create(engine, o.EffectiveBufferSize(), o.managed, o.ManagedLocation());
  if (!buffer.ok()) return Fail("allocating the buffer", buffer.status());
  BenchBuffer& memory = **buffer;
  const uint64_t seed = FreshSeed();
  if (o.check && o.operation == BenchOperation::kWrite) {
    FillPattern(seed, 0, memory.data(), o.WorkingSetBytes());
  }
  Result<SegmentId> target = engine.openSegment(o.segment_id);
  if (!target.ok()) return Fail("openSegment " + o.segment_id, target.status());
  Result<BenchOptions> resolved = WithTargetAddr(engine, o, *target);
  if (!resolved.ok()) return Fail("segment " + o.segment_id, resolved.status());
  const BenchOptions& run = *resolved;

  BenchResult result = Measure(engine, run, *target, memory.data(), signals);
  if (run.check && run.operation == BenchOperation::kWrite && result.errors == 0) {
    if (Status s = VerifyWrites(engine, run, *target, seed); !s.ok()) {
      result.errors += 1;
      result.first_error = s.ToString();
    }
  }
  memory.Release().IgnoreError();  // the process ends anyway

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

}  // namespace ferry::bench
