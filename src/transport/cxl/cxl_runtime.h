// The state a started CxlTransport shares with its workers and links, and the data path the
// workers run (cxl_data_path.cc). Internal to transport/cxl.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "transport/cxl/cxl_allocator.h"
#include "transport/cxl/cxl_transport.h"
#include "transport/cxl/cxl_window.h"
#include "transport/samehost/grant_channel.h"
#include "transport/transport.h"

namespace ferry::cxl {

class CxlPeerLink;

// A window mapping and its allocator, shared by the transport and by whoever must keep
// allocations valid past it. Thread contract: thread-safe (both members are).
struct WindowState {
  std::unique_ptr<CxlWindow> window;  // declared first: unmapped after the allocator is gone
  std::unique_ptr<CxlAllocator> allocator;
};

// One Submit's slices, for one link; they share one Acquire (per kMaxRangesPerAcquire).
struct Batch {
  std::shared_ptr<CxlPeerLink> link;
  std::vector<Slice*> slices;
};

// Thread contract: the plain fields are written by Start before the workers exist and are
// read-only afterwards; the queue is guarded by `mu`.
struct CxlRuntime {
  uint64_t id = 0;  // tells this runtime's links from another transport's
  CxlTransportOptions options;
  TransportContext* ctx = nullptr;  // borrowed until Stop
  std::shared_ptr<WindowState> window;
  std::unique_ptr<samehost::GrantServer> grant_server;  // reset by Stop
  std::vector<std::thread> workers;

  Mutex mu;
  CondVar work_cv;
  std::deque<Batch> queue GUARDED_BY(mu);
  size_t queued_slices GUARDED_BY(mu) = 0;
  bool stopping GUARDED_BY(mu) = false;
  // Set with `stopping`; read by workers between chunks of a batch without the lock.
  std::atomic<bool> stop_requested{false};
};

// Ranges one Acquire carries (the grant server's default limit).
inline constexpr size_t kMaxRangesPerAcquire = 4096;

// Queues `batch`: Canceled once stopping, Again when the queue cannot take all its slices.
Status Enqueue(CxlRuntime& rt, Batch batch);
// A worker's loop: takes batches and moves them until the runtime stops.
void RunWorker(CxlRuntime* rt);
// Moves one batch and completes each of its slices exactly once (see CxlTransport::Submit).
void MoveBatch(CxlRuntime& rt, Batch& batch);

}  // namespace ferry::cxl
