// PyEngine: what the Python module needs on top of ferry::TransferEngine, in plain C++ (no
// Python types), so that module.cc only converts arguments, releases the GIL and raises.
//
// It adds:
//  - a table of the memory this engine registered or allocated, so that the raw-address helpers
//    (CopyIn / CopyOut, behind Mooncake's write_bytes_to_buffer / read_bytes_from_buffer) touch
//    only memory the caller handed to the engine, and refuse anything else with a clear error
//    instead of faulting;
//  - managed buffers for every protocol: the engine's shareable ones when a transport that
//    shares memory (shm, cxl) is installed, plain registered anonymous memory otherwise (as
//    Mooncake's allocate_managed_buffer works whatever the protocol);
//  - one-call transfers: allocate a batch, submit (with an optional notification), wait for it
//    within its deadline, free it.
//
// Thread contract: thread-safe after Init() (the engine is; the region table has its own
// mutex). Init() once, before anything else.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/options.h"
#include "ferry/status.h"
#include "ferry/transfer_engine.h"

namespace ferry::python {

// The pointer a Python integer address stands for.
inline void* Ptr(uint64_t addr) { return reinterpret_cast<void*>(static_cast<uintptr_t>(addr)); }

class PyEngine {
 public:
  PyEngine() = default;
  ~PyEngine();
  PyEngine(const PyEngine&) = delete;
  PyEngine& operator=(const PyEngine&) = delete;

  Status Init(const EngineOptions& options);
  bool initialized() const { return initialized_; }
  // The engine; valid for this object's life. Calls before Init() fail as the engine defines.
  TransferEngine& engine() { return engine_; }
  const EngineOptions& options() const { return options_; }

  // As TransferEngine's, recording the regions for the helpers below.
  Status Register(uint64_t addr, uint64_t length, const std::string& location,
                  bool remote_accessible);
  Status Unregister(uint64_t addr);
  // All or nothing (the engine's batch calls). `addrs` and `lengths` have equal sizes.
  Status RegisterBatch(const std::vector<uint64_t>& addrs, const std::vector<uint64_t>& lengths,
                       const std::string& location);
  Status UnregisterBatch(const std::vector<uint64_t>& addrs);

  // `length` registered bytes: the engine's managed buffer when shm or cxl is installed (or
  // "auto"), else anonymous memory registered as by Register.
  Result<uint64_t> AllocateManaged(uint64_t length, const std::string& location);
  // Unregisters and frees a buffer from AllocateManaged. `length` 0: any; otherwise it must be
  // the allocated length (InvalidArgument, nothing freed).
  Status FreeManaged(uint64_t addr, uint64_t length);

  // memcpy into / out of [addr, addr + length), which must lie inside one region registered or
  // allocated through this object (InvalidArgument naming the range otherwise). The caller
  // keeps the region registered for the duration of the call.
  Status CopyIn(uint64_t addr, const void* src, uint64_t length);
  Status CopyOut(uint64_t addr, void* dst, uint64_t length);

  // Allocates a batch sized for `requests`, submits them (with `notify` delivered to their
  // single target once all completed, when given) and returns the batch. Nothing stays
  // allocated when the submission fails.
  Result<BatchId> Submit(const std::vector<TransferRequest>& requests,
                         const std::optional<std::string>& notify);
  // Submit, then wait until every task ended (bounded by the task deadline plus one request
  // timeout), free the batch and return its summary. A batch that did not complete returns
  // its first task error (the batch's state is in the message).
  Result<BatchStatus> TransferSync(const std::vector<TransferRequest>& requests,
                                   const std::optional<std::string>& notify);
  // How long a wait for a whole batch may last at most: task deadline + one request timeout.
  std::chrono::milliseconds BatchBound() const;

 private:
  struct Region {
    uint64_t length = 0;
    enum class Kind { kRegistered, kEngineManaged, kAnonymous } kind = Kind::kRegistered;
  };
  Status CheckInside(uint64_t addr, uint64_t length, std::string_view what) const;
  bool SharesMemory() const;

  TransferEngine engine_;
  EngineOptions options_;
  bool initialized_ = false;
  mutable std::mutex mu_;
  std::map<uint64_t, Region> regions_;  // guarded by mu_; start address -> region
};

}  // namespace ferry::python
