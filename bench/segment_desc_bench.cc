// SegmentDesc JSON codec throughput: a descriptor of 10,000 buffers, each registered for tcp
// (16-byte key) and rdma (24-byte key), the size a large KV-cache pool publishes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "core/segment_desc_codec.h"

namespace ferry {
namespace {

constexpr size_t kBuffers = 10000;

SegmentDesc MakeLargeDesc() {
  SegmentDesc d;
  d.name = "decode-node-7";
  d.incarnation = 0x5eed'1234'abcd'0001;
  d.rpc = {"10.0.0.7", 12345};
  d.host = {"n7", "6f1c1b6e-0d6a-4c1e-9b8e-3f2a1d0c9b8a", 4026531836};
  d.devices = {{"mlx5_0", "rdma", Location::CpuNuma(0)}, {"mlx5_1", "rdma", Location::CpuNuma(1)}};
  d.transports = {{"rdma", std::string(32, 'g')}};
  d.buffers.reserve(kBuffers);
  for (size_t i = 0; i < kBuffers; ++i) {
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

void BM_EncodeSegmentDesc(benchmark::State& state) {
  const SegmentDesc desc = MakeLargeDesc();
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

void BM_DecodeSegmentDesc(benchmark::State& state) {
  const SegmentDesc desc = MakeLargeDesc();
  const std::string json = EncodeSegmentDesc(desc);
  Result<SegmentDesc> check = DecodeSegmentDesc(json);
  if (!check.ok() || *check != desc) {
    state.SkipWithError(("decode failed: " + check.status().ToString()).c_str());
    return;
  }
  for (auto _ : state) {
    Result<SegmentDesc> decoded = DecodeSegmentDesc(json);
    benchmark::DoNotOptimize(decoded);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBuffers));
  state.counters["json_bytes"] = static_cast<double>(json.size());
}
BENCHMARK(BM_DecodeSegmentDesc)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
