// The shm initiator's data path for one batch of slices to one peer:
//   1. one grant round trip pins every remote range on the target (Acquire);
//   2. granted "mapped" slices are copied with memcpy through the peer's cached mapping,
//      granted "cma" slices (and mapped ones whose buffer cannot be mapped) with
//      process_vm_writev / process_vm_readv; then a full memory fence;
//   3. the pins are released (Release, one-way), and every slice completes through the context.
// No byte moves unless its range is pinned: when the grant connection breaks before the
// copies, the granted slices fail instead (the target dropped their pins with the connection).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/shm/shm_peer.h"
#include "transport/transport.h"

namespace ferry::shm {

// Counters shared by the workers of one transport (see ShmTransportStats).
struct ShmCounters {
  std::atomic<uint64_t> cma_slices{0};
  std::atomic<uint64_t> mapped_slices{0};
  std::atomic<uint64_t> failed_slices{0};
  std::atomic<uint64_t> grant_round_trips{0};
  std::atomic<uint64_t> fd_fetches{0};
  std::atomic<uint64_t> mappings_dropped{0};
};

// The most slices MoveBatch takes at once (one Acquire).
constexpr size_t kMaxBatch = 1024;

struct MoveEnv {
  TransportContext* ctx = nullptr;  // completions go here
  ShmCounters* counters = nullptr;
  std::chrono::milliseconds timeout{5000};  // bounds each grant call
};

// Moves `slices` (1..kMaxBatch, validated by Submit) to or from `peer`, as worker `worker`, and
// completes each exactly once. Runs on the worker's thread.
void MoveBatch(const MoveEnv& env, ShmPeer& peer, size_t worker, std::span<Slice* const> slices);

}  // namespace ferry::shm
