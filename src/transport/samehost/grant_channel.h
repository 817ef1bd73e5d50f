// Same-host access grants: the target-side access check (DESIGN.md, Contracts) for transports
// whose initiator moves the bytes itself: shm (process_vm_writev/readv, or memcpy into a mapped
// shared buffer) and cxl (memcpy inside a shared window).
//
// The target serves a Unix stream socket at a filesystem path (not the abstract namespace,
// which is per network namespace: two network namespaces of one machine are one host).
//
// Pins through shared memory (no message per batch). The target keeps a lease table: a sealed
// memfd of atomic words, one per entry, that initiators map read-only (pin_table.h), and per
// connection a pin slot: a memfd of one counter per entry that only that connection's initiator
// writes. Both are handed over once per connection (kMapTable, kMapSlot, SCM_RIGHTS) after the
// authentication. Per batch of slices the initiator
//   1. TryPin: for a range inside a region it holds a lease of (below), with the planned
//      incarnation and generation, it increments its slot's counter of the lease's entry and
//      re-reads the entry's table word (both seq_cst); the word still being the one of that
//      lease (kLive, same sequence) pins it, otherwise it takes the increment back, forgets the
//      lease and asks over the socket. An entry is counted once per batch: a later range of the
//      lease already pinned through it is pinned by that count, and a range of another lease
//      cached for that entry (stale: the entry was freed and leased anew since) is not (that
//      lease is forgotten). Every other range also goes to
//   2. Acquire: the target pins each range (TransportContext::PinRemoteAccess, with the
//      transport's name); each range gets its own Status, so refusals (Stale, out of range,
//      not remote-accessible...) always come from the target's registry, with its messages.
//      Each range carries its slice's deadline: the target refuses (Timeout) a range whose
//      deadline passed before it read the request. For a range it grants to a connection that
//      mapped its slot, the target also leases the whole region (TransportContext::
//      LeaseRemoteRegion) into a table entry, or reuses the entry already leasing it, and
//      answers the entry, its word and the region's bounds: the initiator's next batches pin
//      that region with TryPin. A full table answers no lease (the region stays on the socket
//      path; GrantServer::Options::lease_table_entries sizes it);
//   3. moves the bytes of the pinned ranges (the engine checks each slice's deadline first);
//   4. Release: decrements its counters, and sends a Release frame (one-way) only when Acquire
//      pinned something.
// Unregister (the registry's order, DESIGN.md): when the region starts closing, the registry
// revokes its leases; the target stores kClosing in the entry's word (seq_cst), and its drainer
// thread then waits until every live slot's counter of that entry is zero (polling, 50 us
// doubling to 2 ms), frees the entry (the next lease of it has a new sequence, so no cached
// word matches again) and releases the lease, which the registry's drain waits for like any pin
// and bounds with the same timeout: an initiator that holds a pin and never lets go (frozen,
// or writing garbage into its own slot) makes the unregister time out, as a held socket pin
// did, and nothing else. A connection that closes releases every pin it held, socket and slot
// alike: a dead initiator never blocks an unregister beyond the moment the kernel closes its
// socket. The initiator checks its socket is not hung up before the first TryPin of a batch, so
// it never copies on the table of a target that died.
//
// Trust: the target reads slot counters and nothing else an initiator writes; the slot memfd is
// sealed against shrinking (an initiator cannot make the target's mapping fault), the table
// against any writable mapping but the target's. A frozen target still honours the pins taken
// through its table: slices on a leased region move while it is stopped (its memory is as live
// as ever); slices that need an Acquire wait for it, up to their deadline.
//
// The channel also hands out file descriptors of shareable buffers (SCM_RIGHTS), so that a peer
// maps each one once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/peer_auth.h"
#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry::samehost {

using Deadline = std::chrono::steady_clock::time_point;

// The channel's authentication (common/peer_auth.h): with a cluster secret, every connection
// starts with the mutual HMAC handshake before its first frame; a peer that fails it (or has no
// secret) is refused with PermissionDenied before anything is pinned or sent. Empty secret: no
// handshake, but a peer that asks for one is refused too. `transport` ("shm", "cxl") picks the
// channel kind the MACs are bound to.
struct GrantAuth {
  std::string secret;
  std::string transport;
};

// The auth channel kind of `transport`'s grant channel.
inline auth::Channel GrantAuthChannel(std::string_view transport) {
  return transport == "cxl" ? auth::Channel::kCxlGrant : auth::Channel::kShmGrant;
}

// One range to pin on the target, in the target's address space.
struct RangeRequest {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t incarnation = 0;  // the target's, as planned
  uint64_t generation = 0;   // of the covering buffer, as planned
  // The slice's deadline (same host: steady_clock values are comparable across processes);
  // the target answers Timeout for the range once it has passed. max(): none.
  Deadline deadline = Deadline::max();
};

// Target side. Thread contract: thread-safe; serves each connection on its own thread.
class GrantServer {
 public:
  // Looks up the fd of shareable buffer `id` for FetchFd; the fd stays owned by the caller.
  // NotFound when there is no such buffer (any more).
  using FdLookup = std::function<Result<int>(uint64_t id)>;

  struct Options {
    std::string transport;         // the name pins are checked against (e.g. "shm")
    std::string dir = "/dev/shm";  // where the socket file is made (removed by the destructor)
    FdLookup fds;                  // unset: FetchFd answers NotFound
    // True: `fds` returns a fresh fd (e.g. a dup taken under the owner's lock) that the server
    // closes once sent, so a buffer freed meanwhile can never hand out a reused fd number.
    bool close_fetched_fds = false;
    size_t max_ranges_per_acquire = 4096;  // 1..4096; more in one Acquire: InvalidArgument
    // Bounds sending one reply; a connection whose reader does not drain it in time is closed.
    std::chrono::milliseconds reply_timeout{5000};
    // How long destruction waits for initiators to Release the pins they hold (they may be
    // copying) before it closes their connections anyway.
    std::chrono::milliseconds drain_timeout{5000};
    // Entries of the lease table (regions whose pins go through shared memory, pin_table.h),
    // 0..pins::kMaxEntries; 0: none, every batch asks over the socket. Each connection that
    // pins through it maps a slot of 8 bytes per entry.
    size_t lease_table_entries = 4096;
    // The cluster secret (see GrantAuth; empty or >= 16 bytes). With one, a connection must
    // finish the handshake within reply_timeout of its accept. Refusals are logged once per
    // peer process and counted in auth_refusals().
    std::string auth_secret;
  };

  // Removes socket files in `dir` that servers of the same transport left behind when their
  // process died (named like ours, owned by this user, over a minute old, and refusing
  // connections), then binds a fresh socket path (unique per process and start) and serves. `ctx`
  // is borrowed until destruction. The socket file is mode 0600: only this user (or root) may
  // connect. InvalidArgument for bad options or a path too long for a Unix socket;
  // PermissionDenied / Unavailable when the socket cannot be made.
  static Result<std::unique_ptr<GrantServer>> Start(TransportContext* ctx, Options options);
  // Stops serving: refuses new Acquires (Unavailable), waits up to drain_timeout for the pins
  // held to be released (an initiator holding one may be copying), then closes every
  // connection (releasing what is left), joins the threads and removes the socket file.
  virtual ~GrantServer() = default;

  virtual const std::string& path() const = 0;
  // Pins currently held by all connections through Acquire (tests); it drops just after the
  // pins are released. Pins taken through the lease table are not counted.
  virtual int held_pins() const = 0;
  // Regions leased into the table now (tests); an entry counts until its lease is released.
  virtual int leased_regions() const = 0;
  // Frames that broke the protocol (each closed its connection) since Start.
  virtual uint64_t bad_frames() const = 0;
  // Connections refused by the authentication (each closed before its first frame).
  virtual uint64_t auth_refusals() const = 0;
};

// Initiator side: one connection to one peer's GrantServer. Thread contract: one caller at a
// time; keep a pool per peer for parallelism. Every call is bounded by its deadline; after a
// timeout or I/O error the connection is broken (broken() is true) and its socket closed, so
// the target drops whatever it pinned for it (also pins it grants after the timeout).
class GrantConnection {
 public:
  // Connects, waiting for room in a full backlog until `deadline`: Timeout then; Unavailable
  // when nothing listens; PermissionDenied when the socket refuses this user. With a secret in
  // `auth` it then runs the handshake, within `deadline`: PermissionDenied when the server fails
  // it, holds another secret or has none. Without one, a server that requires authentication
  // answers the first request with a refusal, which that request returns as PermissionDenied.
  static Result<std::unique_ptr<GrantConnection>> Connect(const std::string& path,
                                                          Deadline deadline,
                                                          const GrantAuth& auth = {});
  static Result<std::unique_ptr<GrantConnection>> Connect(const std::string& path,
                                                          std::chrono::milliseconds timeout,
                                                          const GrantAuth& auth = {}) {
    return Connect(path, std::chrono::steady_clock::now() + timeout, auth);
  }
  virtual ~GrantConnection() = default;

  // Pins `range` through the target's lease table, without a message, when this connection
  // holds a lease covering it with its incarnation and generation that the target has not
  // revoked (see above). True: pinned until Release. False: nothing pinned; ask with Acquire
  // (also when the connection is broken or its target hung up). Does not look at the deadline.
  virtual bool TryPin(const RangeRequest& range) = 0;
  // Pins every range over the socket; results[i] is the target's answer for ranges[i] (Ok:
  // pinned until Release), and the leases it grants are kept for TryPin. On first use it maps
  // the target's lease table and this connection's slot (a target without a table is used
  // without one). Returns a non-Ok status (and fills nothing) when the round trip failed:
  // Unavailable (peer gone), Timeout (no answer by `deadline`), InvalidArgument (too many
  // ranges).
  virtual Status Acquire(std::span<const RangeRequest> ranges, std::vector<Status>* results,
                         Deadline deadline) = 0;
  Status Acquire(std::span<const RangeRequest> ranges, std::vector<Status>* results,
                 std::chrono::milliseconds timeout) {
    return Acquire(ranges, results, std::chrono::steady_clock::now() + timeout);
  }
  // Releases every pin this connection holds: TryPin's (no message) and Acquire's (a Release
  // frame, sent only when Acquire granted any since the last Release). Non-Ok only when the
  // connection broke (the target releases the pins itself then).
  virtual Status Release() = 0;
  // Receives a dup of shareable buffer `id`'s fd, owned by the caller.
  virtual Result<int> FetchFd(uint64_t id, Deadline deadline) = 0;
  Result<int> FetchFd(uint64_t id, std::chrono::milliseconds timeout) {
    return FetchFd(id, std::chrono::steady_clock::now() + timeout);
  }
  virtual bool broken() const = 0;
  // The pid of the process that answers this connection (that made the listening socket), as
  // the kernel saw it at connect (SO_PEERCRED), in this process's pid namespace; 0 when the
  // kernel could not name it (another pid namespace). Lets a transport that copies into a
  // published pid check that the pid is the one granting (see PeerCopier::CheckPeer).
  virtual pid_t peer_pid() const = 0;
};

}  // namespace ferry::samehost
