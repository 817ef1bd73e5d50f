// What one initiator run measured, and its two printed forms: the human summary and the --json
// line (keys: operation, protocol, transport, target, file_io, block_size, batch_size, threads,
// inflight, working_set, bytes, seconds, gbps, ops_per_s, p50_us, p99_us, mean_us, errors, retries,
// fallbacks, stale_refreshes, task_failures), and the CSV rows of a sweep.
//
// Thread contract: value types and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_options.h"

namespace ferry::bench {

struct BenchResult {
  uint64_t bytes = 0;  // bytes of completed tasks
  uint64_t ops = 0;    // completed tasks (blocks)
  double seconds = 0;  // wall time of the measured loop
  double p50_us = 0;   // batch latency percentiles, submit to all-done
  double p99_us = 0;
  double mean_us = 0;        // the mean of the same
  uint64_t working_set = 0;  // bytes the batches cycled through (BenchOptions::WorkingSetBytes)
  uint64_t errors = 0;       // failed tasks, plus one per failed submit/poll/check
  std::string first_error;   // empty when errors == 0
  // The transports that carried completed tasks (TransferStatus::transport, one task sampled per
  // batch), sorted and joined by '+' ("shm", "shm+tcp"); empty when none was seen.
  std::string transport;
  // The target buffer was a file buffer (BenchOptions::target_is_file): "target":"file" in
  // --json, else "memory".
  bool target_is_file = false;
  // How the file transport moved the sampled tasks' bytes (TransferStatus::file_io): "direct",
  // "buffered" or both as "buffered+direct"; empty for a memory target.
  std::string file_io;
  // What the engine itself counted during the measured loop (TransferEngine::getMetrics, the
  // difference of two snapshots, all transports and peers): attempts after a task's first,
  // those that could take another transport, STALE answers, and tasks that ended failed.
  uint64_t retries = 0;
  uint64_t fallbacks = 0;
  uint64_t stale_refreshes = 0;
  uint64_t task_failures = 0;

  double Gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
  double OpsPerSecond() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

// The raw baseline measured next to one sweep point (raw_baseline_runner.h).
struct RawPoint {
  std::string baseline;      // "tcp-stream", "shm-cma", "shm-memcpy"; empty: none measured
  double gbps = 0;           // 10^9 bytes/s
  double p99_us = 0;         // per batch; 0 where the baseline measures no latency
  uint64_t working_set = 0;  // bytes it cycled through; 0 where it does not say
};

// `names` sorted, without repeats or empty names, joined by '+'.
std::string JoinTransports(std::vector<std::string> names);

// The nearest-rank percentile (0 < p <= 100) of `samples`, which it sorts; 0 when empty.
double Percentile(std::vector<double>& samples, double p);

std::string FormatJson(const BenchOptions& options, const BenchResult& result);
std::string FormatSummary(const BenchOptions& options, const BenchResult& result);

// The CSV header of a sweep: protocol,operation,block_size,threads,batch_size,inflight,gbps,
// ops_per_s,p50_us,p99_us,raw_baseline,raw_gbps,raw_p99_us,ratio,transport,errors (no field
// ever holds a comma or a quote, so nothing is quoted).
std::string CsvHeader();
// One point's row (no newline): `point` is the point's options (ForPoint), `result` its run,
// `raw` its baseline (raw_baseline, raw_gbps, raw_p99_us and ratio = gbps / raw_gbps stay empty
// when raw.baseline is; raw_p99_us also when raw.p99_us is 0).
std::string FormatCsvRow(const BenchOptions& point, const BenchResult& result, const RawPoint& raw);

}  // namespace ferry::bench
