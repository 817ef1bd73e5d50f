// LocalRegistry::Pin + release of a random address among N registered regions. The aim
// is <= 200 ns median for N = 100,000; the median is taken over repetitions of the mean, and
// google-benchmark's per-thread numbers show how the shared lock scales.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "registry/local_registry.h"

namespace ferry {
namespace {

constexpr uint64_t kRegionSize = 64 << 10;
constexpr uint64_t kStride = 128 << 10;  // gaps between regions, so misses are possible too
constexpr uint64_t kBase = 1ULL << 32;

struct Fixture {
  explicit Fixture(size_t regions) {
    std::vector<RegionSpec> specs(regions);
    for (size_t i = 0; i < regions; ++i) {
      specs[i].addr = kBase + i * kStride;
      specs[i].length = kRegionSize;
      specs[i].location = Location::CpuNuma(0);
      specs[i].binding.transport = "tcp";
    }
    if (!registry.RegisterBatch(specs).ok()) std::abort();
    std::mt19937_64 rng(42);
    addrs.resize(1 << 16);
    for (uint64_t& a : addrs)
      a = kBase + (rng() % regions) * kStride + rng() % (kRegionSize - 4096);
  }
  LocalRegistry registry;
  std::vector<uint64_t> addrs;
};

void BM_PinRandom(benchmark::State& state) {
  static std::unique_ptr<Fixture> fixture;
  if (state.thread_index() == 0)
    fixture = std::make_unique<Fixture>(static_cast<size_t>(state.range(0)));
  // google-benchmark synchronises threads between setup and the timed loop.
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    Result<PinGuard> pin = fixture->registry.Pin(fixture->addrs[i++ & 0xffff], 4096);
    benchmark::DoNotOptimize(pin.ok());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PinRandom)->Arg(1000)->Arg(100000)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_PinRandom)->Arg(100000)->Threads(2)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_RegisterUnregister(benchmark::State& state) {
  LocalRegistry registry;
  RegionSpec spec;
  spec.addr = kBase;
  spec.length = kRegionSize;
  spec.location = Location::CpuNuma(0);
  spec.binding.transport = "tcp";
  for (auto _ : state) {
    if (!registry.Register(spec).ok() || !registry.Unregister(spec.addr).ok()) std::abort();
  }
}
BENCHMARK(BM_RegisterUnregister);

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
