// What counting costs the data path (engine/engine_metrics.h): recording a completed slice into
// its series (two relaxed atomic adds, no lock, no allocation) against a bare relaxed atomic
// increment, on one thread and on two threads sharing the series (the worst case: every
// completion thread counting into one peer's series). Also the plan-time series lookup (a lock
// and a map search, once per task and transport) and a task's end (with its latency).
//
//   build/bin/metrics_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <string>

#include "engine/engine_metrics.h"

namespace ferry {
namespace {

using engine::EngineCounters;
using engine::SeriesCounters;

void BM_BareAtomicIncrement(benchmark::State& state) {
  static std::atomic<uint64_t> counter{0};
  for (auto _ : state) counter.fetch_add(1, std::memory_order_relaxed);
  benchmark::DoNotOptimize(counter.load());
}
BENCHMARK(BM_BareAtomicIncrement)->Threads(1)->Threads(2);

void BM_RecordSlice(benchmark::State& state) {
  static SeriesCounters series("tcp", "peer");
  for (auto _ : state) series.RecordSlice(OpCode::kWrite, 65536, true);
  benchmark::DoNotOptimize(series.slices_ok.load());
}
BENCHMARK(BM_RecordSlice)->Threads(1)->Threads(2);

void BM_RecordTaskEnd(benchmark::State& state) {
  static SeriesCounters series("tcp", "peer");
  for (auto _ : state) series.RecordTaskEnd(StatusCode::kOk, std::chrono::microseconds(300));
  benchmark::DoNotOptimize(series.completed.load());
}
BENCHMARK(BM_RecordTaskEnd)->Threads(1)->Threads(2);

// Plan time: the series of one of 64 known peers.
void BM_SeriesLookup(benchmark::State& state) {
  static EngineCounters counters(64);
  static const std::string peers[4] = {"10.0.0.1:15000", "10.0.0.2:15000", "10.0.0.3:15000",
                                       "10.0.0.4:15000"};
  if (state.thread_index() == 0) {
    for (int i = 0; i < 64; ++i) counters.Series("tcp", "10.0.0." + std::to_string(i) + ":15000");
  }
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(counters.Series("tcp", peers[i++ & 3]));
}
BENCHMARK(BM_SeriesLookup)->Threads(1)->Threads(2);

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
