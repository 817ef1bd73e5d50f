// Metadata plane benchmarks:
//  - BM_OpenSegmentCacheHit: SegmentDirectory::Open of a cached segment (aim: <= 1 us median);
//  - BM_FetchDecode/<store>: Sync (Get + strict decode + install) of a 1,000-buffer segment
//    from each store, each served by a real server started on 127.0.0.1 for the run, next to
//    BM_DecodeOnly, the decode alone, as the in-run baseline.
#include <benchmark/benchmark.h>

#include <memory>

#include "core/segment_desc_codec.h"
#include "metadata/segment_directory.h"
#include "metadata/store_factory.h"
#include "test_servers.h"

namespace ferry {
namespace {

SegmentDesc MakeDesc(const std::string& name, int buffers) {
  SegmentDesc desc;
  desc.name = name;
  desc.incarnation = 77;
  desc.rpc = {"127.0.0.1", 4000};
  for (int i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 0x100000 + static_cast<uint64_t>(i) * 0x10000;
    b.length = 0x8000;
    b.location = Location::CpuNuma(0);
    b.generation = static_cast<uint64_t>(i) + 1;
    b.keys["tcp"] = "0123456789abcdef";
    b.keys["rdma"] = "0123456789abcdef01234567";
    desc.buffers.push_back(b);
  }
  return desc;
}

void BM_OpenSegmentCacheHit(benchmark::State& state) {
  auto store = CreateMetadataStore("memory://bench-hit", {});
  SegmentPublisher publisher(store->get(), "ferry");
  if (!publisher.Publish(MakeDesc("hot", 1000)).ok()) std::abort();
  auto dir = SegmentDirectory::Create(store->get(), {});
  if (!dir.ok() || !(*dir)->Open("hot").ok()) std::abort();
  for (auto _ : state) {
    Result<SegmentHandle> h = (*dir)->Open("hot");
    benchmark::DoNotOptimize(h.ok());
  }
}
BENCHMARK(BM_OpenSegmentCacheHit)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_DecodeOnly(benchmark::State& state) {
  const std::string json = EncodeSegmentDesc(MakeDesc("seg", 1000));
  for (auto _ : state) {
    Result<SegmentDesc> d = DecodeSegmentDesc(json);
    benchmark::DoNotOptimize(d.ok());
  }
}
BENCHMARK(BM_DecodeOnly)->Unit(benchmark::kMicrosecond);

void FetchDecode(benchmark::State& state, const std::string& connection) {
  auto store = CreateMetadataStore(connection, {});
  if (!store.ok()) {
    state.SkipWithError(store.status().ToString().c_str());
    return;
  }
  SegmentPublisher publisher(store->get(), "ferry");
  if (!publisher.Publish(MakeDesc("cold", 1000)).ok()) std::abort();
  auto dir = SegmentDirectory::Create(store->get(), {});
  for (auto _ : state) {
    Status s = (*dir)->Sync("cold");
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
}

template <typename Server>
void FetchDecodeFrom(benchmark::State& state, const std::string& scheme,
                     const std::string& suffix) {
  static auto server = Server::Start();  // one server per store kind for the whole run
  if (!server.ok()) {
    state.SkipWithError(server.status().ToString().c_str());
    return;
  }
  FetchDecode(state, scheme + (*server)->endpoint() + suffix);
}

void BM_FetchDecodeMemory(benchmark::State& state) { FetchDecode(state, "memory://bench-fetch"); }
void BM_FetchDecodeEtcd(benchmark::State& state) {
  FetchDecodeFrom<testing::EtcdServer>(state, "etcd://", "");
}
void BM_FetchDecodeRedis(benchmark::State& state) {
  FetchDecodeFrom<testing::RedisServer>(state, "redis://", "");
}
void BM_FetchDecodeHttp(benchmark::State& state) {
  FetchDecodeFrom<testing::MetadataServer>(state, "http://", "/metadata");
}
BENCHMARK(BM_FetchDecodeMemory)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FetchDecodeEtcd)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FetchDecodeRedis)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FetchDecodeHttp)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
