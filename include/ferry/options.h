// EngineOptions: typed configuration, parsed once at the edge (CLI, environment, Python).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

struct EngineOptions {
  // Where descriptors are published (see README: etcd://, redis://, http://, P2PHANDSHAKE,
  // memory://).
  std::string metadata_conn = "P2PHANDSHAKE";
  // This engine's segment name. Empty: "<host>:<rpc_port>" (the only form P2PHANDSHAKE accepts).
  std::string local_server_name;
  // Address peers use to reach this engine; its RPC service and transports listen on it.
  std::string host = "127.0.0.1";
  // RPC port; 0 picks a free one. With rpc_port_range_end, the first free port of the range.
  uint16_t rpc_port = 0;
  uint16_t rpc_port_range_end = 0;
  // Transports to install: names ("tcp", ...) or {"auto"} for every one this build has.
  std::vector<std::string> transports = {"auto"};
  // Every task ends by this deadline: COMPLETED, FAILED or TIMEOUT.
  std::chrono::milliseconds task_timeout{30000};
  // Requests are cut into slices of at most this many bytes, spread over connections.
  uint64_t slice_size = 256 << 10;
  // Metadata key prefix ("<prefix>/ram/<segment>").
  std::string metadata_prefix = "ferry";
  // Published entries vanish this long after the engine dies.
  std::chrono::milliseconds lease_ttl{10000};
  // Remote descriptor cache lifetime when the store cannot watch.
  std::chrono::milliseconds segment_cache_ttl{5000};
  // Bound on waiting for in-flight accesses when unregistering memory.
  std::chrono::milliseconds unregister_drain_timeout{5000};
  // Bound on each metadata / RPC round trip.
  std::chrono::milliseconds request_timeout{5000};
};

}  // namespace ferry
