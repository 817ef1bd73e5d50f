// LocalRegistry: the memory regions this process has registered, their overlap rules,
// generations, and the pins that keep a region alive while the data path touches it.
//
// Rules (MISSION.md 2, DESIGN.md "Unregister order"):
//  - A region is [addr, addr + length) with addr != 0, length > 0, no wrap-around.
//  - Partial overlap with a registered region is kOverlap, naming both ranges.
//  - The exact same range registered for another transport joins the existing region: one
//    region, one generation, one binding (opaque key + unregister callback) per transport.
//  - The exact same range for a transport it already has is kAlreadyExists.
//  - Every new region gets a generation from a registry-wide counter that only grows, so a range
//    unregistered and registered again never reuses a generation.
//  - Pin(addr, len) succeeds only when the whole range lies inside one open region; the data
//    path holds the PinGuard for the duration of every local or remote access.
//  - Unregister: (1) mark the region closing, so new pins are refused with kStale, and tell the
//    holders of revocable pins on it (PinRevocable) to let go; (2) wait for the pins held
//    (revocable ones too) to drain, up to RegistryOptions::drain_timeout; (3) run each transport's
//    unregister callback, without registry locks held; (4) erase the entry. The caller then
//    publishes the new descriptor (the registry knows nothing of metadata).
//
//    At the drain timeout, Unregister returns kTimeout and changes nothing more: the region
//    stays registered and closing (new pins still refused), no callback has run, and the memory
//    must NOT be freed. The owner fails or cancels the in-flight work holding the pins and calls
//    Unregister again, which resumes the wait. This never frees memory under an access.
//
// Thread contract: every method is thread-safe. Pin/Lookup take a shared lock and scale with
// readers; Register/Unregister take the exclusive lock only briefly (never while draining or
// running callbacks). Callbacks must not call Unregister on the same region. A PinGuard may
// be released on any thread but must not outlive the registry.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "core/buffer_desc.h"
#include "ferry/status.h"
#include "ferry/types.h"
#include "registry/region_index.h"

namespace ferry {

struct RegistryOptions {
  std::chrono::milliseconds drain_timeout{5000};
  // The most regions registered at once. A registration that would go past it is refused
  // whole (InvalidArgument, checked under the registry's lock, so concurrent registrations
  // cannot pass it together); registering another transport for a registered range adds no
  // region.
  size_t max_regions = std::numeric_limits<size_t>::max();
  // Where max_regions comes from, named in its error when set. Must outlive the registry (a
  // literal).
  std::string_view max_regions_setting;
};

// What a pin additionally requires of the region.
struct PinCheck {
  uint64_t generation = 0;     // 0: any; otherwise must match (else kStale)
  std::string_view transport;  // empty: any; otherwise the region must have this binding
  bool require_remote_accessible = false;
};

class LocalRegistry;

// Keeps one region from being unregistered while held. Move-only; releasing is idempotent.
// Thread contract: one owner at a time; may be moved to and released on another thread.
class PinGuard {
 public:
  PinGuard() = default;
  PinGuard(PinGuard&& other) noexcept;
  PinGuard& operator=(PinGuard&& other) noexcept;
  PinGuard(const PinGuard&) = delete;
  PinGuard& operator=(const PinGuard&) = delete;
  ~PinGuard() { Release(); }

  void Release();
  bool held() const { return region_ != nullptr; }
  // Gives up the guard without releasing the pin, for handing it across a type-erased boundary
  // (a transport's AccessPin): LocalRegistry::ReleaseDetachedPin(registry, token) releases it.
  void* Detach() {
    registry_ = nullptr;
    return std::exchange(region_, nullptr);
  }

  // The pinned region (valid while held).
  uint64_t region_addr() const;
  uint64_t region_length() const;
  uint64_t generation() const;
  Location location() const;
  // The pinned region is a file window (RegionSpec::file), not memory.
  bool is_file() const;
  // Removes from `transports` every name the pinned region is not registered with (its memory
  // is not reachable by it); keeps the order. Empties it when nothing is pinned.
  void RetainBound(std::vector<std::string>* transports) const;

 private:
  friend class LocalRegistry;
  PinGuard(LocalRegistry* registry, registry_internal::Region* region)
      : registry_(registry), region_(region) {}

  LocalRegistry* registry_ = nullptr;            // borrowed; outlives the guard
  registry_internal::Region* region_ = nullptr;  // stays alive while pinned
};

class LocalRegistry {
 public:
  explicit LocalRegistry(RegistryOptions options = {});
  // Precondition: no PinGuard is held (checked; a violation is logged as a bug).
  ~LocalRegistry();
  LocalRegistry(const LocalRegistry&) = delete;
  LocalRegistry& operator=(const LocalRegistry&) = delete;

  // Registers one region for one transport; returns the region's generation.
  Result<uint64_t> Register(const RegionSpec& spec);
  // All or nothing: on any error no spec is applied. Returns generations in spec order.
  Result<std::vector<uint64_t>> RegisterBatch(const std::vector<RegionSpec>& specs);

  // Removes the region that starts at `addr`, with every transport binding, in the safe order.
  Status Unregister(uint64_t addr);
  // Removes one transport's binding. The whole region is drained first (brief refusal of new
  // pins); the region goes when its last binding goes, and otherwise reopens unchanged.
  Status Unregister(uint64_t addr, std::string_view transport);
  // Drains all of them against one deadline. Regions that drained are removed even if others
  // time out; the error names the ones left closing.
  Status UnregisterBatch(const std::vector<uint64_t>& addrs);

  // Pins [addr, addr + length) (length may be 0: a point inside a region).
  //   kNotFound: no region contains addr;  kInvalidArgument: the range leaves its region;
  //   kStale: region closing, or generation mismatch;  kPermissionDenied: not remote
  //   accessible, or no binding for the requested transport.
  Result<PinGuard> Pin(uint64_t addr, uint64_t length, const PinCheck& check = {});

  // Releases a pin given up by PinGuard::Detach(). `registry` is the LocalRegistry.
  static void ReleaseDetachedPin(void* registry, void* token);

  // A pin its holder keeps across many accesses (a transport's lease on a whole region): Pin's
  // checks and errors, then `on_revoke` is registered and runs once when Unregister marks the
  // region closing (before it waits for the pins to drain), so the holder stops starting
  // accesses, lets its in-flight ones end and releases the pin. on_revoke runs on the
  // unregistering thread (or inside this call, when the region started closing meanwhile) with
  // an internal lock held: it must be quick and must not call the registry (nor release a pin);
  // it never runs once the pin was released. Release it with
  // ReleaseRevocablePin(registry, token) exactly once.
  struct RevocablePin {
    void* token = nullptr;
    uint64_t region_addr = 0;
    uint64_t region_length = 0;
  };
  Result<RevocablePin> PinRevocable(uint64_t addr, uint64_t length, const PinCheck& check,
                                    std::function<void()> on_revoke);
  static void ReleaseRevocablePin(void* registry, void* token);

  // Ok when [addr, addr + length) overlaps no registered region; Overlap naming it otherwise.
  Status CheckOverlap(uint64_t addr, uint64_t length) const;

  // The open region containing addr, as it should be published (keys: see Snapshot).
  Result<BufferDesc> Lookup(uint64_t addr) const;
  // Whether `addr` lies in a registered region (open or closing) whose location is a device's.
  // A shared lock and an index lookup; no allocation.
  bool IsDeviceMemory(uint64_t addr) const;
  // Every open region, sorted by address, as it should be published: a remote-accessible
  // region with one key per transport binding, a local-only one with no keys at all.
  std::vector<BufferDesc> Snapshot() const;
  size_t size() const;

 private:
  friend class PinGuard;
  Status ValidateSpec(const RegionSpec& spec) const;
  // Registers specs (all or nothing); `batch` only shapes error messages.
  Result<std::vector<uint64_t>> RegisterAll(const std::vector<RegionSpec>& specs, bool batch)
      EXCLUDES(mu_);
  // Where `spec` goes among the registered regions: Ok with *join = the region of the exact
  // same range (a new transport for it), Ok with *join = nullptr for a new region, or the error.
  Status PlaceLocked(const RegionSpec& spec, registry_internal::Region** join) const
      REQUIRES_SHARED(mu_);
  // Starts unregistering: marks closing and unregistering. nullptr with `*error` set otherwise.
  registry_internal::Region* BeginUnregisterLocked(uint64_t addr, Status* error) REQUIRES(mu_);
  // Waits until the region's pin count reaches zero or the deadline passes.
  bool WaitDrained(registry_internal::Region* region,
                   std::chrono::steady_clock::time_point deadline) EXCLUDES(drain_mu_);
  Status AbandonUnregister(registry_internal::Region* region) EXCLUDES(mu_);
  // Runs the callbacks of `transport` (all when empty) on a drained region. No lock is held.
  Status RunUnregisterCallbacks(registry_internal::Region* region, std::string_view transport)
      EXCLUDES(mu_);
  // Removes `transport`'s binding, or the whole region when it is the last or `transport` is
  // empty; a region that keeps bindings reopens. Returns whether the region was erased.
  bool RemoveBindingLocked(registry_internal::Region* region, std::string_view transport)
      REQUIRES(mu_);
  void ReleasePin(registry_internal::Region* region) EXCLUDES(drain_mu_);
  // Runs the on_revoke of every revocable pin on `region` not told yet (it is closing).
  void Revoke(registry_internal::Region* region) EXCLUDES(revoke_mu_);
  static BufferDesc Describe(const registry_internal::Region& region);

  const RegistryOptions options_;
  mutable SharedMutex mu_;
  registry_internal::RegionIndex index_ GUARDED_BY(mu_);
  uint64_t next_generation_ GUARDED_BY(mu_) = 1;

  Mutex drain_mu_;
  CondVar drain_cv_;  // signalled when a closing region's last pin is released
  // Guards every Region::revokers list and Revoker::revoked; taken after mu_, never before.
  Mutex revoke_mu_;
};

}  // namespace ferry
