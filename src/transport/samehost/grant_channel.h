// Same-host access grants: the target-side access check (DESIGN.md, Contracts) for transports
// whose initiator moves the bytes itself: shm (process_vm_writev/readv, or memcpy into a mapped
// shared buffer) and cxl (memcpy inside a shared window).
//
// The target serves a Unix stream socket at a filesystem path (not the abstract namespace,
// which is per network namespace: two network namespaces of one machine are one host). Per
// batch of slices the initiator
//   1. Acquire: asks the target to pin each range (TransportContext::PinRemoteAccess, with the
//      transport's name); each range gets its own Status. Each range carries its slice's
//      deadline: the target refuses (Timeout) a range whose deadline passed before it read the
//      request, so a target that was frozen never grants an access that is already too late;
//   2. moves the bytes of the granted ranges while the pins are held;
//   3. Release: lets the pins go (one-way; the target handles a connection's messages in order).
// A connection that closes releases every pin it held, so a dead initiator never blocks an
// unregister beyond the moment the kernel closes its socket.
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
  // Pins currently held by all connections (tests); it drops just after the pins are released.
  virtual int held_pins() const = 0;
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

  // Pins every range; results[i] is the target's answer for ranges[i] (Ok: pinned until
  // Release). Returns a non-Ok status (and fills nothing) when the round trip failed:
  // Unavailable (peer gone), Timeout (no answer by `deadline`), InvalidArgument (too many
  // ranges).
  virtual Status Acquire(std::span<const RangeRequest> ranges, std::vector<Status>* results,
                         Deadline deadline) = 0;
  Status Acquire(std::span<const RangeRequest> ranges, std::vector<Status>* results,
                 std::chrono::milliseconds timeout) {
    return Acquire(ranges, results, std::chrono::steady_clock::now() + timeout);
  }
  // Releases every pin this connection holds. Non-Ok only when the connection broke (the
  // target releases the pins itself then).
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
