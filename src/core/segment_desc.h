// SegmentDesc: everything one engine makes reachable (DESIGN.md, Contracts).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/buffer_desc.h"
#include "ferry/types.h"

namespace ferry {

// Where a peer reaches an engine's RPC service.
struct RpcEndpoint {
  std::string host;  // hostname or IP literal, no brackets
  uint16_t port = 0;
  friend bool operator==(const RpcEndpoint&, const RpcEndpoint&) = default;
};

// Identifies the running kernel and process view, for locality decisions. Two engines share
// a host when boot_id matches and each can see the other's processes (same pid namespace).
struct HostIdentity {
  std::string hostname;
  std::string boot_id;         // /proc/sys/kernel/random/boot_id
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid; 0 = unknown
  friend bool operator==(const HostIdentity&, const HostIdentity&) = default;
};

// One device in the engine's topology (a NIC, GPU, CXL window...).
struct DeviceDesc {
  std::string name;       // e.g. "mlx5_0", "cuda:0"
  std::string transport;  // the transport that drives it, e.g. "rdma"
  Location location;      // memory it is closest to (cpu:<numa> for a NIC)
  friend bool operator==(const DeviceDesc&, const DeviceDesc&) = default;
};

// Thread contract: value type. Shared read-only between threads as shared_ptr<const SegmentDesc>.
struct SegmentDesc {
  // 2: buffers may carry a file window (BufferDesc::file). A descriptor is published in the
  // oldest version that can say it (v1 while it has no file buffer), so engines of the release
  // before still read it during a rolling upgrade; a decoder reads kOldestSchemaVersion up to
  // kSchemaVersion (a v1 document with a file window is refused) and holds the result as
  // kSchemaVersion. A newer document is refused as an unsupported version, never half read.
  static constexpr uint32_t kSchemaVersion = 2;
  static constexpr uint32_t kOldestSchemaVersion = 1;

  uint32_t schema_version = kSchemaVersion;
  std::string name;          // segment name, 1..255 printable bytes
  uint64_t incarnation = 0;  // random, new at every engine start; > 0
  RpcEndpoint rpc;
  HostIdentity host;
  std::vector<DeviceDesc> devices;
  // Transport-level opaque extras (an endpoint address, a window name), keyed by transport name.
  std::map<std::string, std::string> transports;
  // Sorted by addr, pairwise disjoint.
  std::vector<BufferDesc> buffers;

  // The buffer that covers [addr, addr + length) entirely, or nullptr. O(log n).
  const BufferDesc* FindCovering(uint64_t addr, uint64_t length) const;

  friend bool operator==(const SegmentDesc&, const SegmentDesc&) = default;
};

}  // namespace ferry
