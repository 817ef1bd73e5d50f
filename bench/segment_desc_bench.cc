// SegmentDesc JSON codec cost:
//  - BM_EncodeSegmentDesc / BM_DecodeSegmentDesc: a descriptor of 10,000 buffers, each
//    registered for tcp (16-byte key) and rdma (24-byte key), the size a large KV-cache pool
//    publishes (issue 13 aims at <= 10 ms for the decode);
//  - BM_DecodeLargestSegmentDesc (only with --largest: it takes seconds): the largest
//    descriptor the default DecodeLimits accept, as many such buffers as fit in
//    max_input_bytes (64 MiB of JSON);
//  - BM_DecodeKeysHeavySegmentDesc (also only with --largest): what one buffer can cost at
//    most, the worst case EngineOptions::max_segment_buffers bounds: 65,536 buffers (its
//    default) each with DecodeLimits::max_transports keys of 16 bytes (the size that costs
//    the most heap per byte of JSON: one map node and one heap string per key).
// Every decode reports peak_heap_MiB: the most heap it held at once (operator new is counted
// below; the input text is not included), so the memory a peer's descriptor costs is one
// number next to its time.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "bench_main.h"
#include "core/segment_desc_codec.h"

// ----- heap accounting: every operator new/delete of the program goes through these ----------

namespace {
// Counting is on only around the one decode that measures (it costs a malloc_usable_size and
// two atomics per call): a block freed in that window was allocated in it.
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};

void* CountedAlloc(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  if (!g_counting.load(std::memory_order_relaxed)) return p;
  const int64_t live = g_live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)),
                                              std::memory_order_relaxed) +
                       static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak &&
         !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return p;
}

void CountedFree(void* p) {
  if (p == nullptr) return;
  if (g_counting.load(std::memory_order_relaxed))
    g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
}  // namespace

void* operator new(size_t n) { return CountedAlloc(n); }
void* operator new[](size_t n) { return CountedAlloc(n); }
void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { CountedFree(p); }

namespace ferry {
namespace {

constexpr size_t kBuffers = 10000;

SegmentDesc MakeDesc(size_t buffers) {
  SegmentDesc d;
  d.name = "decode-node-7";
  d.incarnation = 0x5eed'1234'abcd'0001;
  d.rpc = {"10.0.0.7", 12345};
  d.host = {"n7", "6f1c1b6e-0d6a-4c1e-9b8e-3f2a1d0c9b8a", 4026531836};
  d.devices = {{"mlx5_0", "rdma", Location::CpuNuma(0)}, {"mlx5_1", "rdma", Location::CpuNuma(1)}};
  d.transports = {{"rdma", std::string(32, 'g')}};
  d.buffers.reserve(buffers);
  for (size_t i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 0x7f00'0000'0000 + i * (2u << 20);
    b.length = 2u << 20;
    b.location = Location::CpuNuma(static_cast<int32_t>(i % 2));
    b.generation = i + 1;
    b.keys["tcp"] = std::string(16, static_cast<char>(i));
    b.keys["rdma"] = std::string(24, static_cast<char>(i * 7));
    d.buffers.push_back(std::move(b));
  }
  return d;
}

// The JSON of MakeDesc(n) for the largest n whose JSON fits DecodeLimits::max_input_bytes.
std::string LargestJson(size_t* buffers) {
  const size_t limit = DecodeLimits{}.max_input_bytes;
  const size_t small = EncodeSegmentDesc(MakeDesc(1000)).size();
  const size_t header = EncodeSegmentDesc(MakeDesc(0)).size();
  size_t n = (limit - header) * 1000 / (small - header);
  std::string json = EncodeSegmentDesc(MakeDesc(n));
  while (json.size() > limit) {
    n -= (json.size() - limit) / ((small - header) / 1000) + 1;
    json = EncodeSegmentDesc(MakeDesc(n));
  }
  *buffers = n;
  return json;
}

void BM_EncodeSegmentDesc(benchmark::State& state) {
  const SegmentDesc desc = MakeDesc(kBuffers);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string json = EncodeSegmentDesc(desc);
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBuffers));
  state.counters["json_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_EncodeSegmentDesc)->Unit(benchmark::kMillisecond);

// Decodes `json` (of `buffers` buffers) in the timed loop; the first decode, untimed, checks
// the result and measures the peak heap.
void DecodeLoop(benchmark::State& state, const std::string& json, size_t buffers) {
  g_live_bytes.store(0);
  g_peak_bytes.store(0);
  g_counting.store(true);
  {
    Result<SegmentDesc> check = DecodeSegmentDesc(json);
    if (!check.ok() || check->buffers.size() != buffers) {
      g_counting.store(false);
      state.SkipWithError(("decode failed: " + check.status().ToString()).c_str());
      return;
    }
  }
  g_counting.store(false);
  const double peak_mib = static_cast<double>(g_peak_bytes.load()) / (1 << 20);
  for (auto _ : state) {
    Result<SegmentDesc> decoded = DecodeSegmentDesc(json);
    benchmark::DoNotOptimize(decoded);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * buffers));
  state.counters["json_bytes"] = static_cast<double>(json.size());
  state.counters["buffers"] = static_cast<double>(buffers);
  state.counters["peak_heap_MiB"] = peak_mib;
}

void BM_DecodeSegmentDesc(benchmark::State& state) {
  const SegmentDesc desc = MakeDesc(kBuffers);
  const std::string json = EncodeSegmentDesc(desc);
  Result<SegmentDesc> check = DecodeSegmentDesc(json);
  if (!check.ok() || *check != desc) {
    state.SkipWithError(("decode failed: " + check.status().ToString()).c_str());
    return;
  }
  DecodeLoop(state, json, kBuffers);
}
BENCHMARK(BM_DecodeSegmentDesc)->Unit(benchmark::kMillisecond);

void BM_DecodeKeysHeavySegmentDesc(benchmark::State& state) {
  constexpr size_t kHeavyBuffers = 65536;  // EngineOptions::max_segment_buffers' default
  SegmentDesc desc = MakeDesc(kHeavyBuffers);
  for (BufferDesc& b : desc.buffers) {
    b.keys.clear();
    for (size_t k = 0; k < DecodeLimits{}.max_transports; ++k) {
      b.keys["t" + std::to_string(k)] = std::string(16, static_cast<char>(k));
    }
  }
  DecodeLoop(state, EncodeSegmentDesc(desc), kHeavyBuffers);
}

void BM_DecodeLargestSegmentDesc(benchmark::State& state) {
  size_t buffers = 0;
  const std::string json = LargestJson(&buffers);
  DecodeLoop(state, json, buffers);
}

}  // namespace
}  // namespace ferry

// --largest adds BM_DecodeLargestSegmentDesc and BM_DecodeKeysHeavySegmentDesc (kept out of
// the default run, which the ctest smoke run makes: each takes seconds, more under sanitizers).
int main(int argc, char** argv) {
  return ferry::bench::RunBenchmarks(argc, argv, "--largest", [] {
    benchmark::RegisterBenchmark("BM_DecodeLargestSegmentDesc", ferry::BM_DecodeLargestSegmentDesc)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
    benchmark::RegisterBenchmark("BM_DecodeKeysHeavySegmentDesc",
                                 ferry::BM_DecodeKeysHeavySegmentDesc)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
  });
}
