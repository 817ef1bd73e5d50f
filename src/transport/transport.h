// The Transport seam (DESIGN.md, Seams): how the engine drives one way of moving bytes, and the
// narrow TransportContext a transport gets back from the engine.
//
// A transport may include this header, core/ and common/ and its vendor SDK, never another
// transport, the registry, metadata, rpc or the engine (scripts/check-layering.sh).
//
// Life of a transfer, as the engine drives it:
//   1. Start(ctx, info) once; the returned bytes are published as SegmentDesc::transports[name].
//   2. RegisterMemory for every region registered for this transport, with the region's
//      MemoryAccess. A remote-accessible region's key is published as BufferDesc::keys[name];
//      a local-only region's key is never published, and the transport grants no remote access
//      to it (no remote rights at the provider). UnregisterMemory after the region's pins
//      drained.
//   3. Connect(peer descriptor) makes per-peer state lazily; a new incarnation of the peer gets
//      a new link.
//   4. Submit(link, slices): each slice ends in exactly one ctx->CompleteSlice(slice, status),
//      on any thread, after its bytes are in place (a WRITE only once the target applied it).
//      Every slice carries its task's deadline. A transport completes each slice no later than
//      shortly after that deadline (its tick, at most ~50 ms late) with Timeout when it did not
//      finish, and from the moment it reports Timeout (or any failure) nothing more of that
//      slice lands on either side: it closes what carries the slice, and a target never starts
//      an access whose deadline has passed. What a transport cannot promise (a one-sided RMA
//      already on the wire) its header says.
//   5. On the target, every remote access is checked with ctx->PinRemoteAccess before a byte
//      moves, and the pin is held while bytes move (or the access is made under a RegionLease
//      from ctx->LeaseRemoteRegion, which the transport gives up when it is revoked).
//   6. File buffers (TransportCapabilities::file_buffers; registerLocalFile) have addresses that
//      name file bytes and are never dereferenced (ctx->IsStagedAddress). A peer that can open the
//      file itself (Transport::Reaches) is carried by the file transport; one that cannot reaches
//      it through its owner: the owner registers it with tcp too, and the tcp target, on an access
//      to a file address, pins it as any access, then moves the bytes between the file and a
//      bounded staging buffer of its own with ctx->StartStagedIo (the owner's file transport, on
//      io_uring), never at the address.
//   7. Device memory (a location such as cuda:<n>) is reached by a transport with
//      reaches_device_memory directly (cuda-ipc; rdma with FI_HMEM, for the memory its provider
//      registered). One with stages_device_memory (tcp) registers
//      it too, and never touches it: its target stages each access to it exactly as a file
//      buffer's (ctx->IsStagedAddress, ctx->StartStagedIo: the engine copies between the staging
//      and the device), and the engine hands it no slice whose local side is device memory: such
//      a slice is carried from a pinned host chunk the engine copies to or from the device
//      (engine/staging_copier.h). Every other transport's RegisterMemory refuses device memory
//      it cannot reach (NotFound), so the engine never plans it there.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/net_address.h"
#include "core/segment_desc.h"
#include "ferry/status.h"
#include "ferry/types.h"

namespace ferry {

// Who may reach a registered region. kLocal: only this process's own transfers (as their local
// side); a peer's access is refused, whatever key or address it crafts. kRemote: peers too,
// through the published key, each access checked by the target (PinRemoteAccess).
enum class MemoryAccess : uint8_t { kLocal, kRemote };

struct TransportCapabilities {
  bool reaches_other_hosts = true;  // false: same-host only (shm, cxl, cuda-ipc)
  // Device memory the transport registered is its to move (item 7 above); fixed once Start
  // returned (rdma decides it at Start, by what its provider offers).
  bool reaches_device_memory = false;
  // Device memory through staging (item 7 above): RegisterMemory accepts it, the target stages
  // every access to it with ctx->StartStagedIo, and the engine bounces the local side (tcp).
  bool stages_device_memory = false;
  bool allocates_shared_memory = false;  // AllocateShared/FreeShared work (shm)
  // Slice sizes (Slice::length). The engine cuts requests into slices of preferred_slice_size
  // when EngineOptions::slice_size is 0, and never hands over a slice longer than
  // max_slice_size (an explicit slice_size is clamped to it). Both are > 0, preferred <= max,
  // and fixed once Start returned (a transport may decide them at Start, e.g. by provider).
  uint64_t preferred_slice_size = uint64_t{256} << 10;
  uint64_t max_slice_size = UINT64_MAX;
  // RegisterFile/UnregisterFile work, and the transport carries slices whose remote side is a
  // file buffer (BufferDesc::file) and only those (file).
  bool file_buffers = false;
};

// A target-side access, pinned until released: the region cannot be unregistered meanwhile.
// Move-only; releasing is idempotent. Made only by TransportContext::PinRemoteAccess.
class AccessPin {
 public:
  using ReleaseFn = void (*)(void* owner, void* token);
  AccessPin() = default;
  AccessPin(ReleaseFn release, void* owner, void* token)
      : release_(release), owner_(owner), token_(token) {}
  AccessPin(AccessPin&& o) noexcept
      : release_(std::exchange(o.release_, nullptr)), owner_(o.owner_), token_(o.token_) {}
  AccessPin& operator=(AccessPin&& o) noexcept {
    if (this != &o) {
      Release();
      release_ = std::exchange(o.release_, nullptr);
      owner_ = o.owner_;
      token_ = o.token_;
    }
    return *this;
  }
  AccessPin(const AccessPin&) = delete;
  AccessPin& operator=(const AccessPin&) = delete;
  ~AccessPin() { Release(); }
  void Release() {
    if (release_ != nullptr) std::exchange(release_, nullptr)(owner_, token_);
  }
  bool held() const { return release_ != nullptr; }

 private:
  ReleaseFn release_ = nullptr;
  void* owner_ = nullptr;
  void* token_ = nullptr;
};

// A target-side lease on a whole registered region (TransportContext::LeaseRemoteRegion): held,
// it keeps the region from being unregistered, like an AccessPin, until its holder releases it
// after being told (on_revoke) that the region is closing.
struct RegionLease {
  AccessPin pin;
  uint64_t region_addr = 0;  // the leased region: [region_addr, region_addr + region_length)
  uint64_t region_length = 0;
};

// One contiguous piece of a task, planned against a descriptor snapshot that outlives it.
struct Slice {
  OpCode op = OpCode::kWrite;
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  uint64_t remote_generation = 0;  // generation of the covering BufferDesc in the plan
  uint64_t peer_incarnation = 0;   // incarnation of the SegmentDesc the plan used
  std::string_view remote_key;     // the covering buffer's key for this transport
  // The task's deadline: the transport completes the slice by then (Timeout when unfinished)
  // and never lets it land afterwards. time_point::max(): none.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  void* task = nullptr;  // the engine's; opaque to the transport
  // File buffers only. A WRITE with `sync` completes only after an fdatasync of its file that
  // followed it (the syncing slices of one Submit call share one per file).
  bool sync = false;
  // Set by a file transport before it completes the slice: how its bytes moved
  // (kSliceIoDirect: O_DIRECT, kSliceIoBuffered: through the page cache; both when a part of
  // it went each way). 0 for every other transport.
  uint8_t io_path = 0;
  // Set by a transport before it completes the slice with an error that the target answered
  // on a connection that stays healthy (an error answer to this request: refused, Stale, the
  // owner's file I/O failed), as opposed to a link that broke, timed out or could not be made.
  // Such an error is the target's verdict about this request, not about the link: the engine
  // fails the task without a retry, a transport cool-down or dropping the link. False (the
  // default) for every error a transport does not know to be such an answer. The engine sets it
  // too for a failure of its own side that says nothing about the link (its staging copier's
  // device copy, pinned memory it cannot have).
  bool answered = false;
};
inline constexpr uint8_t kSliceIoDirect = 1;
inline constexpr uint8_t kSliceIoBuffered = 2;

struct TransportStartInfo {
  std::string local_segment;  // this engine's segment name
  std::string bind_host;      // where this engine listens (its RPC host; may be a wildcard)
  // What peers are told: the host a transport publishes in its endpoint bytes. Never a
  // wildcard; equal to bind_host unless EngineOptions::advertise_host (or the route to the
  // metadata store, for a wildcard bind) says otherwise.
  std::string advertise_host = {};
  // Every port a transport listens on (TCP listeners, socket-addressed fabric endpoints) lies in
  // this range; unbounded: the kernel picks. Exhausted: Unavailable naming the range.
  PortRange ports = {};
  // The cluster secret (EngineOptions::auth_secret; empty: none, or >= 16 bytes, validated by
  // the engine). A transport that opens its own connections runs common/peer_auth.h's
  // handshake on each before its first frame, and refuses peers that fail it; a transport
  // whose set-up runs over the engine's RPC (Exchange) is covered by the RPC's handshake.
  std::string auth_secret = {};
};


// What a transport may ask of the engine. Thread contract: thread-safe; borrowed by the
// transport between Start and Stop.
class TransportContext {
 public:
  virtual ~TransportContext() = default;

  // Target side. The whole [addr, addr + length) must lie in one registered, remote-accessible
  // region of `generation` that is registered for `transport`, and `incarnation` must be this
  // engine's. Stale: another incarnation or generation, or the region is closing;
  // NotFound / InvalidArgument: no region there / the range leaves it; PermissionDenied: not
  // remote-accessible, or not registered for `transport`.
  virtual Result<AccessPin> PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                            uint64_t generation, std::string_view transport) = 0;

  // Target side, optional: for a transport that checks accesses without a call per access
  // (samehost's shared pin table). Checks [addr, addr + length) exactly as PinRemoteAccess
  // does (same errors) and then leases the whole region that contains it. The registry's
  // unregister calls `on_revoke` once, as soon as it marks the region closing (step 1), before
  // it waits for pins to drain (step 2): the holder then starts no new access through the lease,
  // lets the ones in flight end, and releases the lease, which the drain waits for like any pin
  // (bounded by the same drain timeout). `on_revoke` runs on the unregistering thread (or
  // inside this call, when the region started closing meanwhile) with a registry lock held: it
  // must be quick and must not call this context or release a pin; it
  // never runs after the lease was released. Unavailable when the context does not lease (the
  // transport pins each access with PinRemoteAccess then).
  virtual Result<RegionLease> LeaseRemoteRegion(uint64_t /*addr*/, uint64_t /*length*/,
                                                uint64_t /*incarnation*/, uint64_t /*generation*/,
                                                std::string_view /*transport*/,
                                                std::function<void()> /*on_revoke*/) {
    return UnavailableError("this engine does not lease regions");
  }

  // Initiator side: reports the end of a slice submitted to this transport. Exactly once per
  // slice; `status` carries the reason of a failure (the target's rejection, a dead peer...).
  virtual void CompleteSlice(Slice* slice, const Status& status) = 0;

  // A round trip with the same transport on `peer` over the engine's RPC service, for
  // connection set-up (e.g. endpoint addresses). The peer's transport answers in OnExchange.
  virtual Result<std::string> Exchange(const SegmentDesc& peer, std::string_view transport,
                                       std::string_view payload,
                                       std::chrono::milliseconds timeout) = 0;

  virtual uint64_t incarnation() const = 0;

  // Target side, for memory this engine serves through staging: file buffers (item 6 above) and
  // device memory (item 7). Whether `addr` lies in such memory: its bytes are in a file or on a
  // device, and the address must never be dereferenced by the CPU. Cheap (a range test; a
  // registry lookup only once device memory was registered); asked after the access was pinned,
  // so the answer holds while the pin does.
  virtual bool IsStagedAddress(uint64_t /*addr*/) const { return false; }
  // Starts moving `io.length` bytes between the staged memory at [io.addr, io.addr + io.length)
  // and the memory at io.staging (a host buffer of the caller's, not registered): kRead fills
  // staging from the file or device, kWrite writes staging to it. `pin` is the caller's
  // PinRemoteAccess of exactly that range; for a file it is checked again for the file transport
  // (generation, window, closing; Stale / InvalidArgument / NotFound as PinRemoteAccess). It is
  // held until the I/O ended, so that an unregister waits for it. On Ok, `io.done` runs exactly
  // once, on any thread (the file transport's or the engine's staging copier's, or inside this
  // call when the file transport refused the access at once), after the I/O ended: with Ok once
  // every byte moved, or the reason (Stale, truncated / vanished file, ENOSPC, EIO, a CUDA
  // error, Timeout at io.deadline, Canceled at Stop); staging must stay valid until then, and
  // `done` must not call back into the caller's locks. On an error return (a bad request, no
  // file transport or device copier, a full queue: Again), `io.done` never runs. Never blocks on
  // disk I/O or a device copy.
  struct StagedIo {
    OpCode op = OpCode::kRead;
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t incarnation = 0;
    uint64_t generation = 0;
    uint8_t* staging = nullptr;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    std::function<void(const Status&)> done;
  };
  virtual Status StartStagedIo(StagedIo /*io*/, AccessPin /*pin*/) {
    return UnavailableError("this engine serves no file buffers or device memory");
  }
};

// Per-peer state (connections, addresses). Made by Transport::Connect; the engine drops it
// when the peer's incarnation changes.
class PeerLink {
 public:
  virtual ~PeerLink() = default;
};

// Thread contract: thread-safe after Start; Submit may be called from many threads at once.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;
  virtual TransportCapabilities capabilities() const = 0;

  // Starts the transport's own threads and listeners. Returns the bytes peers need to reach it
  // (published as SegmentDesc::transports[name()]). `ctx` is borrowed until Stop().
  virtual Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& info) = 0;
  // Fails whatever is queued (each slice completes with Canceled), joins threads. Idempotent.
  virtual void Stop() = 0;

  // Returns the opaque key for BufferDesc::keys[name()]. NotFound means "this transport cannot
  // reach this memory" (e.g. outside a cxl window): the engine registers the region without
  // this transport. Any other error fails the registration.
  // `access` kLocal: the region is only ever the local side of this process's slices. The
  // transport registers it for local use only (e.g. an RDMA MR without FI_REMOTE_READ/WRITE), so
  // that an access a peer crafts with the key this call returns (the engine does not publish it)
  // fails at the provider or at the target's check and moves no byte.
  virtual Result<std::string> RegisterMemory(uint64_t addr, uint64_t length,
                                             const Location& location, MemoryAccess access) = 0;
  virtual Status UnregisterMemory(uint64_t addr, uint64_t length) = 0;

  // Optional (capabilities().allocates_shared_memory): `length` bytes that peers on this host
  // can map and copy with memcpy. The engine registers them like any memory afterwards, and
  // frees them with FreeShared after unregistering them.
  virtual Result<void*> AllocateShared(size_t /*length*/, const Location& /*location*/) {
    return InvalidArgumentError("transport '" + std::string(name()) +
                                "' cannot allocate shared memory");
  }
  virtual Status FreeShared(void* /*addr*/) {
    return InvalidArgumentError("transport '" + std::string(name()) +
                                "' allocated no shared memory");
  }

  // Optional (capabilities().file_buffers): opens `path` and makes its bytes [offset, offset +
  // length) the local buffer named [addr, addr + length) (addresses the engine chose, never
  // dereferenced). Returns the file's identity (device, inode, size; offset echoed; no paths).
  // InvalidArgument when the window leaves the file, NotFound / PermissionDenied when it cannot
  // be opened (the path and errno named).
  virtual Result<FileWindow> RegisterFile(uint64_t /*addr*/, uint64_t /*length*/,
                                          const std::string& /*path*/, uint64_t /*offset*/) {
    return InvalidArgumentError("transport '" + std::string(name()) + "' has no file buffers");
  }
  // Closes what RegisterFile opened; called after the region's pins drained.
  virtual Status UnregisterFile(uint64_t /*addr*/) {
    return InvalidArgumentError("transport '" + std::string(name()) + "' has no file buffers");
  }
  // Optional (capabilities().file_buffers): whether this transport can reach `buffer`, a file
  // buffer of `peer`, from here (the peer's file is visible on this host: its path map names a
  // path here and the file there is the published one). false sends the request through the
  // owner (over a transport the owner registered the buffer with, e.g. tcp). Cheap after the
  // first call per buffer (remembered per incarnation, buffer and generation); thread-safe.
  virtual bool Reaches(const SegmentDesc& /*peer*/, const BufferDesc& /*buffer*/) { return true; }

  // Per-peer state from the peer's descriptor. Unavailable when the peer cannot be reached.
  virtual Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) = 0;
  // Queues slices for `link`'s peer; each completes through the context. Again when the queues
  // are full (nothing was queued then).
  virtual Status Submit(PeerLink& link, std::span<Slice* const> slices) = 0;

  // Answers a peer's Exchange (see TransportContext::Exchange).
  virtual Result<std::string> OnExchange(std::string_view payload) = 0;

  // Optional: the transport's own counters since Start (connections opened, bad frames, ...),
  // name -> value, each only growing; the engine reports them in its metrics
  // (TransportMetrics::counters). Names are lower_snake_case. Thread-safe, cheap, never blocks.
  virtual std::vector<std::pair<std::string, uint64_t>> Counters() const { return {}; }
};

}  // namespace ferry
