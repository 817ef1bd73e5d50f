// The state a started CxlTransport shares with its links. Internal to transport/cxl.
#pragma once

#include <memory>

#include "transport/cxl/cxl_allocator.h"
#include "transport/cxl/cxl_window.h"
#include "transport/samehost/copy_engine.h"
#include "transport/samehost/grant_channel.h"

namespace ferry::cxl {

// A window mapping and its allocator, shared by the transport, its links' copiers and whoever
// must keep allocations valid past it. Thread contract: thread-safe (both members are).
struct WindowState {
  std::unique_ptr<CxlWindow> window;  // declared first: unmapped after the allocator is gone
  std::unique_ptr<CxlAllocator> allocator;
};

// Ranges one Acquire carries (the grant server's limit).
inline constexpr size_t kMaxRangesPerAcquire = 4096;

// Thread contract: written by Start before it is shared, read-only afterwards; the members are
// thread-safe.
struct CxlRuntime {
  std::shared_ptr<WindowState> window;
  std::unique_ptr<samehost::GrantServer> grant_server;  // reset by Stop
  std::unique_ptr<samehost::CopyEngine> engine;         // stopped by Stop
};

}  // namespace ferry::cxl
