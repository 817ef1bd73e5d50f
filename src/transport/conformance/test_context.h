// Test support for transport tests: a TransportContext over a table of "registered" ranges,
// standing in for the engine, plus a batch of slices. Not part of the library.
//
// Thread contract: TestContext is thread-safe (transports call it from their own threads).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "transport/transport.h"

namespace ferry::transport_testing {

// What the engine's registry would answer, kept in a table; counts pins and completions.
class TestContext final : public TransportContext {
 public:
  explicit TestContext(uint64_t incarnation) : incarnation_(incarnation) {}

  // A registered range. `transport` is the transport it is registered for.
  void AddRegion(const void* addr, uint64_t length, uint64_t generation,
                 bool remote_accessible = true, std::string transport = "tcp");
  // Marks the region at `addr` closing (new pins get Stale) and revokes the leases on it, as
  // the registry's unregister step 1 does; false when there is none. Of several regions added
  // at `addr`, the last one (the one pins find).
  bool CloseRegion(const void* addr);
  // Exchange() to a SegmentDesc named `segment` is answered by `peer`'s OnExchange.
  void AddPeer(const std::string& segment, Transport* peer);

  // The contract of TransportContext::PinRemoteAccess, checked in its order.
  Result<AccessPin> PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                    uint64_t generation, std::string_view transport) override;
  // PinRemoteAccess's checks, then a lease on the region (see TransportContext).
  Result<RegionLease> LeaseRemoteRegion(uint64_t addr, uint64_t length, uint64_t incarnation,
                                        uint64_t generation, std::string_view transport,
                                        std::function<void()> on_revoke) override;
  void CompleteSlice(Slice* slice, const Status& status) override;
  Result<std::string> Exchange(const SegmentDesc& peer, std::string_view transport,
                               std::string_view payload,
                               std::chrono::milliseconds timeout) override;
  uint64_t incarnation() const override { return incarnation_; }

  // Waits until every slice in `slices` completed; false on timeout. Any number of waiters.
  bool WaitAll(const std::vector<Slice*>& slices, std::chrono::milliseconds timeout);
  // The completion status of `slice` (InternalError "not completed" when none yet).
  Status StatusOf(Slice* slice);
  // Drops the record of `slices` (their memory is about to be reused).
  void Forget(const std::vector<Slice*>& slices);
  // Waits until no pin is held and every revoked lease was released (what the registry's
  // unregister drain waits for); false on timeout.
  bool WaitNoPins(std::chrono::milliseconds timeout);

  int active_pins();    // pins from PinRemoteAccess held now (leases not counted)
  int active_leases();  // leases held now, revoked or not
  uint64_t pin_calls();
  uint64_t completions();
  uint64_t duplicate_completions();

 private:
  struct Region {
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t generation = 0;
    bool remote_accessible = true;
    std::string transport;
    bool closing = false;
  };
  struct Lease {
    uint64_t region_addr = 0;
    std::function<void()> on_revoke;
    bool revoked = false;
  };
  static void ReleasePin(void* owner, void* token);
  static void ReleaseLease(void* owner, void* token);
  int RevokedLeasesLocked() REQUIRES(mu_);

  const uint64_t incarnation_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Region> regions_ GUARDED_BY(mu_);
  std::map<std::string, Transport*> peers_ GUARDED_BY(mu_);
  std::map<Slice*, Status> done_ GUARDED_BY(mu_);
  int waiters_ GUARDED_BY(mu_) = 0;  // threads in WaitAll
  int active_pins_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Lease> leases_ GUARDED_BY(mu_);  // by id (the AccessPin's token)
  uint64_t next_lease_ GUARDED_BY(mu_) = 1;
  uint64_t pin_calls_ GUARDED_BY(mu_) = 0;
  uint64_t completions_ GUARDED_BY(mu_) = 0;
  uint64_t duplicates_ GUARDED_BY(mu_) = 0;
};

// The bytes behind a buffer, for tests to set and check, guard bytes included: memory (memcpy,
// or a copy function for memory the CPU must not touch, such as a device's) or a file
// (pread/pwrite; for transports whose target buffers are file windows,
// TransportCapabilities::file_buffers). Positions count from the start of the backing, which may
// be larger than the registered window. A range outside the backing is InvalidArgument; a
// pread/pwrite that fails or comes short is Internal naming the file and errno; a copy that
// fails is the copy function's status, naming the range.
//
// Thread contract: Read, Write and Set may be called from several threads on disjoint ranges (or
// ranges only read), when the copy function (if any) may be; the object itself does not change
// after it was made.
class TargetBytes {
 public:
  // Copies n bytes from src to dst, where either may be the backing's memory; Ok once they are
  // in place.
  using CopyFunction = std::function<Status(void* dst, const void* src, size_t n)>;

  // `length` bytes at `memory` (kept alive by the shared pointer), reached through `copy`, or
  // with memcpy when it is unset.
  static std::unique_ptr<TargetBytes> Memory(std::shared_ptr<uint8_t> memory, size_t length,
                                             CopyFunction copy = {});
  // A new file of `length` bytes (zeros) in `directory`, removed when this is destroyed.
  static Result<std::unique_ptr<TargetBytes>> File(const std::string& directory, size_t length);
  ~TargetBytes();
  TargetBytes(const TargetBytes&) = delete;
  TargetBytes& operator=(const TargetBytes&) = delete;

  size_t length() const { return length_; }
  // The memory, or nullptr for a file; with a copy function, memory the CPU must not touch.
  uint8_t* memory() const { return memory_.get(); }
  // The file's path, or empty for memory.
  const std::string& path() const { return path_; }

  // [pos, pos + n) of the backing.
  Result<std::vector<uint8_t>> Read(size_t pos, size_t n) const;
  // Sets [pos, pos + n) of the backing to `in`, or to `n` times `value`.
  Status Write(size_t pos, const uint8_t* in, size_t n);
  Status Set(size_t pos, uint8_t value, size_t n);

 private:
  TargetBytes() = default;

  std::shared_ptr<uint8_t> memory_;
  CopyFunction copy_;  // unset: memcpy
  std::string path_;
  int fd_ = -1;
  size_t length_ = 0;
};

// Owns a batch of slices and their pointers; forgets them in `ctx` when destroyed, so a later
// batch that reuses the memory is not taken as already complete.
struct SliceBatch {
  explicit SliceBatch(TestContext* context) : ctx(context) {}
  ~SliceBatch() { ctx->Forget(ptrs); }
  SliceBatch(SliceBatch&&) = default;
  SliceBatch(const SliceBatch&) = delete;
  SliceBatch& operator=(const SliceBatch&) = delete;
  Slice* Add(const Slice& slice);

  TestContext* ctx;
  std::vector<std::unique_ptr<Slice>> owned;
  std::vector<Slice*> ptrs;
};

}  // namespace ferry::transport_testing
