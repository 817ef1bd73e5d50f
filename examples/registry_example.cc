// A tour of what ferry's foundation does today, run by scripts/demo.sh: register regions, see the
// overlap rules, publish the segment descriptor as JSON, read it back strictly, pin a range and
// copy through it, and unregister in the safe order.
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/location.h"
#include "core/segment_desc.h"
#include "core/segment_desc_codec.h"
#include "registry/local_registry.h"

using namespace ferry;

namespace {

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

void Show(const char* what, const Status& s) {
  std::printf("  %-44s -> %s\n", what, s.ToString().c_str());
}

}  // namespace

int main() {
  std::vector<char> pool_a(1 << 20, 'a');
  std::vector<char> pool_b(1 << 20, 'b');
  Result<Location> where = DetectHostLocation(pool_a.data());
  if (!where.ok()) {
    std::fprintf(stderr, "detect: %s\n", where.status().ToString().c_str());
    return 1;
  }
  std::printf("pool A is in %s\n", where->ToString().c_str());

  LocalRegistry registry;
  auto spec = [&](const std::vector<char>& pool, uint64_t offset, uint64_t length,
                  const char* transport) {
    RegionSpec s;
    s.addr = Addr(pool.data()) + offset;
    s.length = length;
    s.location = *where;
    s.binding.transport = transport;
    s.binding.key = std::string("key:") + transport;
    return s;
  };
  std::printf("registering:\n");
  Show("A [0, 512K) for tcp", registry.Register(spec(pool_a, 0, 512 << 10, "tcp")).status());
  Show("B [0, 1M) for tcp", registry.Register(spec(pool_b, 0, 1 << 20, "tcp")).status());
  Show("A [0, 512K) again for rdma (joins)",
       registry.Register(spec(pool_a, 0, 512 << 10, "rdma")).status());
  Show("A [0, 512K) again for tcp", registry.Register(spec(pool_a, 0, 512 << 10, "tcp")).status());
  Show("A [256K, 768K) (partial overlap)",
       registry.Register(spec(pool_a, 256 << 10, 512 << 10, "tcp")).status());

  SegmentDesc desc;
  desc.name = "demo-segment";
  desc.incarnation = 0x5eed;
  desc.rpc = {"127.0.0.1", 12345};
  desc.buffers = registry.Snapshot();
  const std::string json = EncodeSegmentDesc(desc);
  std::printf("published descriptor (%zu bytes):\n  %s\n", json.size(), json.c_str());
  Result<SegmentDesc> decoded = DecodeSegmentDesc(json);
  std::printf("decoded back: %s, equal: %s\n", decoded.status().ToString().c_str(),
              decoded.ok() && *decoded == desc ? "yes" : "no");
  std::string broken = json;
  broken.replace(broken.find("\"length\":"), 9, "\"length\":-");
  std::printf("a corrupted copy: %s\n", DecodeSegmentDesc(broken).status().ToString().c_str());

  {  // the pins are released at the end of this block, before unregistering
    Result<PinGuard> src = registry.Pin(Addr(pool_b.data()), 4096, {.transport = "tcp"});
    Result<PinGuard> dst = registry.Pin(Addr(pool_a.data()) + 4096, 4096, {.transport = "rdma"});
    if (src.ok() && dst.ok()) std::memcpy(pool_a.data() + 4096, pool_b.data(), 4096);
    std::printf("pinned copy of 4 KiB B -> A: %s, A[4096] = '%c'\n",
                src.ok() && dst.ok() ? "ok" : "refused", pool_a[4096]);
    Show("pin crossing the end of A",
         registry.Pin(Addr(pool_a.data()) + (512 << 10) - 8, 16).status());
  }
  Show("unregister A", registry.Unregister(Addr(pool_a.data())));
  Show("unregister B", registry.Unregister(Addr(pool_b.data())));
  std::printf("regions left: %zu\n", registry.size());
  return 0;
}
