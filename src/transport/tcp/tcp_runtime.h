// TcpRuntime: the state a TcpTransport shares with its links and connections (options, the
// engine's context, the I/O loops, counters). Links and connections hold it by shared_ptr, so a
// link that outlives its transport stays safe: it finds the runtime stopped.
//
// Thread contract: immutable after Start except the atomics and `refusals` (thread-safe); `ctx`
// may be used until `stopped` is set and the loops are joined.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/peer_auth.h"
#include "transport/tcp/io_loop.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace ferry::tcp {

struct TcpCounters {
  std::atomic<uint64_t> bad_frames{0};
  std::atomic<uint64_t> connections_opened{0};
  std::atomic<uint64_t> connections_failed{0};
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> rejected_accesses{0};
  std::atomic<uint64_t> expired_slices{0};
  std::atomic<uint64_t> deadline_resets{0};
  std::atomic<uint64_t> idle_closes{0};
  std::atomic<uint64_t> expired_accesses{0};
  std::atomic<uint64_t> staged_accesses{0};
  std::atomic<uint64_t> staging_waits{0};
};

struct TcpRuntime {
  TcpTransportOptions options;                 // validated, defaults applied
  TransportContext* ctx = nullptr;             // borrowed from Start until Stop
  std::string auth_secret;                     // TransportStartInfo::auth_secret (validated)
  auth::RefusalLog refusals;                   // target connections that failed authentication
  std::vector<std::unique_ptr<IoLoop>> loops;  // fixed once Start returns
  std::atomic<size_t> next_loop{0};
  std::atomic<bool> stopped{false};
  std::atomic<size_t> open_target_connections{0};
  TcpCounters counters;

  // The loop for a new connection (round-robin).
  IoLoop* PickLoop() {
    return loops[next_loop.fetch_add(1, std::memory_order_relaxed) % loops.size()].get();
  }
};

}  // namespace ferry::tcp
