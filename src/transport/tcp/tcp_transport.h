// TcpTransport: moves slices between engines over plain TCP (DESIGN.md, transport/tcp/).
//
// It reaches other hosts and host memory, and through staging file buffers (through their
// owner) and device memory (stages_device_memory): a target never touches such an address
// (TransportContext::IsStagedAddress) but stages the bytes with TransportContext::StartStagedIo
// (target_connection.h), and the engine hands it no slice whose local side is device memory.
// Start() listens for data connections and returns "host:port", published as
// SegmentDesc::transports["tcp"]. Connect() gives a PeerLink with a pool of persistent connections
// to the peer's listener, opened lazily and re-opened after a break. Submit() spreads slices over
// the pool (consecutive ones together up to stripe_size bytes, so small ones share system calls and
// a large request spreads); each connection pipelines up to `window` requests, coalescing the
// frames of many into one sendmsg, and the target answers likewise. Slices complete on the I/O
// thread that read their answer. The wire format is in tcp_protocol.h. All socket I/O runs on
// `io_threads` IoLoops shared by the initiator and target sides; no call blocks on a peer.
//
// Deadlines (Slice::deadline; the Transport contract in transport.h). What tcp promises:
//   - Initiator: a slice whose deadline passes while it waits to be sent completes with Timeout
//     and is never sent. When the deadline of a request already on the wire (sent in part or
//     whole, unanswered) passes, the connection carrying it is reset (SO_LINGER 0): that slice
//     completes with Timeout, the connection's other unfinished slices with Timeout when their
//     deadline passed too and Unavailable otherwise (another connection may carry a retry).
//     Each completes within one loop tick (kDeadlineTick) after its deadline. No READ payload
//     byte is written into local memory once the slice's deadline has passed.
//   - Target: every connection starts with a clock hello, so each request carries its deadline
//     in the target's steady clock, mapped early by the estimate's error bound and a drift
//     allowance (ClockMapping, tcp_protocol.h): hosts' clocks may differ freely. A request whose
//     deadline has passed when its header is read is refused with Timeout before anything is
//     pinned or moved. A WRITE whose header was accepted before its deadline may still land
//     while its payload streams in, but the target checks the deadline before every read into
//     memory and stops landing once it passed: the bytes of one read already under way (at most
//     one slice per connection) are the only ones that can land after the deadline. A target
//     that sees the initiator close or reset the connection abandons everything on it it has not
//     started, so a slice failed by a reset connection does not land later either (what the
//     target read in the same turn as the reset arrived excepted).
//   - The clock estimate is refreshed (a new hello, once the connection's window drained) when
//     it is older than a minute (InitiatorConnection::kClockRefresh), so the drift allowance
//     stays small. A hello costs one round trip before a new connection's first request.
//   - Dropping a link refuses new slices on its connections and fails the ones not yet on the
//     wire with Canceled; requests on the wire finish (answer, deadline or io_timeout), then the
//     connection closes and its descriptor is freed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "transport/transport.h"

namespace ferry {

namespace tcp {
struct TcpRuntime;
}

struct TcpTransportOptions {
  // Data port to listen on; 0 lets the kernel pick.
  uint16_t port = 0;
  // Persistent connections per peer link, 1..64.
  size_t connections_per_peer = 4;
  // Requests in flight per connection (sent, not yet answered), 1..4096.
  size_t window = 32;
  // Slices a link holds at once (queued or in flight); a Submit beyond it gets Again, and one
  // call with more slices than this is InvalidArgument (it could never fit). A queued slice
  // costs a pointer, so the default bounds memory, not throughput.
  size_t max_queued_per_peer = 65536;
  // Accepted data connections served at once; more are closed at once.
  size_t max_target_connections = 1024;
  // Bytes one connection moves per readiness event before the loop serves its other
  // connections (fairness); >= 1.
  uint64_t bytes_per_turn = uint64_t{4} << 20;
  // I/O threads; 0: std::thread::hardware_concurrency(), at most 8.
  size_t io_threads = 0;
  // Bounds every wait on a peer: a connect, or a connection with work that makes no progress
  // for this long, fails (Unavailable). The engine sets it from EngineOptions::request_timeout.
  std::chrono::milliseconds io_timeout{10000};
  // An initiator connection with nothing queued or in flight for this long is closed, and
  // re-opened on next use. 0: never. The engine sets it from EngineOptions::idle_link_timeout.
  std::chrono::milliseconds idle_timeout{0};
  // Whether the payloads of the slices this engine starts carry a checksum (tcp_protocol.h,
  // kFlagPayloadChecksum); headers always do. The engine sets it from
  // EngineOptions::tcp_payload_checksum.
  bool payload_checksum = true;
  // How a link spreads work over its connections, in bytes (a multiple of 4096). Consecutive
  // slices of one Submit share a connection until they hold this many bytes, so a batch of small
  // slices leaves in few sendmsg calls and is answered in few recvs instead of paying a wake-up
  // and a system call per connection, while a large request (the engine's slices of it) spreads
  // over up to connections_per_peer connections. A slice itself is never cut: each goes whole
  // to one connection.
  uint64_t stripe_size = uint64_t{1} << 20;
  // Target side, staged accesses (file buffers served through this engine to a peer that cannot
  // open the file, and device memory; TransportContext::StartStagedIo): the bytes of staging one
  // data connection holds at once, its READs' payloads read from the file or device and its
  // WRITEs' payloads on their way to it. A request
  // that would take more than what is left waits, and the connection reads nothing more
  // meanwhile (as when answers wait at the cap); one longer than this is refused
  // (InvalidArgument). Also the transport's max_slice_size, so that the engine never plans a
  // slice a target cannot stage. >= 4096.
  uint64_t staging_bytes = uint64_t{16} << 20;
};

// How often each I/O loop checks timeouts and deadlines: a slice completes at most this long
// after its deadline (plus the loop's current turn).
inline constexpr std::chrono::milliseconds kDeadlineTick{20};

// Counters since Start, for tests and diagnostics.
struct TcpTransportStats {
  uint64_t bad_frames = 0;            // frames that broke the protocol (connection closed)
  uint64_t connections_opened = 0;    // initiator connections established
  uint64_t connections_failed = 0;    // initiator connections that broke or never opened
  uint64_t connections_accepted = 0;  // target connections accepted and served
  uint64_t timeouts = 0;              // connections closed for no progress within io_timeout
  uint64_t rejected_accesses = 0;     // target accesses refused by PinRemoteAccess
  uint64_t expired_slices = 0;        // initiator slices completed Timeout (deadline passed)
  uint64_t deadline_resets = 0;       // initiator connections reset for an expired request
  uint64_t idle_closes = 0;           // initiator connections closed after idle_timeout
  uint64_t expired_accesses = 0;      // target requests refused or cut short by their deadline
  uint64_t auth_refusals = 0;         // target connections that failed authentication
  uint64_t staged_accesses = 0;       // target file/device accesses started through StartStagedIo
  uint64_t staging_waits = 0;         // target staged requests parked for want of staging
};

// Thread contract: thread-safe after Start (see Transport). Submit never blocks on a peer. Stop
// must not run concurrently with Submit on the same transport (a Submit racing Stop may
// complete its slices with Canceled on the calling thread).
class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TcpTransportOptions& options);
  ~TcpTransport() override;  // Stop()
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  std::string_view name() const override { return "tcp"; }
  TransportCapabilities capabilities() const override;

  // Listens on info.bind_host (wildcard: every interface) at options.port, or when that is 0 at
  // the first free port of info.ports (unbounded: the kernel picks), and publishes
  // "<info.advertise_host>:<port>" (without one: the bind host; for a wildcard, this machine's
  // hostname). InvalidArgument for bad options, host or auth secret; Unavailable (naming the
  // range when it is exhausted) / PermissionDenied when no port can be bound; Busy when started
  // or stopped before. With info.auth_secret every data connection starts with
  // common/peer_auth.h's handshake (before the clock hello), bounded by io_timeout: an initiator
  // whose peer fails it completes its slices with PermissionDenied; a target refuses such a peer
  // before reading a request (logged once per peer address, counted in stats().auth_refusals).
  Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& info) override;
  // Fails every queued and in-flight slice with Canceled, closes every socket and joins every
  // thread. Never waits on a peer: it returns once each loop ran its queued tasks and the
  // completions. Idempotent; a stopped transport does not restart.
  void Stop() override;

  // Host memory only (NotFound for device memory). Returns an empty key: the target
  // checks accesses against the engine's registry through PinRemoteAccess, which refuses
  // (PermissionDenied) any access to a kLocal region, so `access` needs no state here.
  Result<std::string> RegisterMemory(uint64_t addr, uint64_t length, const Location& location,
                                     MemoryAccess access) override;
  Status UnregisterMemory(uint64_t addr, uint64_t length) override;

  // A link to the "host:port" in peer.transports["tcp"]. InvalidArgument (naming the peer) when
  // it is missing or malformed; Unavailable when the host does not resolve; Busy before Start;
  // Canceled after Stop. Resolves the host once here (a host name may wait on DNS; an IP
  // literal never does) and opens no connection: they open on first use.
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override;
  // Queues slices on `link` (made by this transport's Connect). InvalidArgument (nothing queued)
  // for a foreign link, a null slice, a bad op, a length over 1 GiB, or more slices than
  // max_queued_per_peer; Again when the link's queue cannot take them all; Canceled after Stop.
  // Otherwise OK, and each slice completes exactly once through the context (one of length 0
  // at once, OK, without a round trip).
  Status Submit(PeerLink& link, std::span<Slice* const> slices) override;

  // tcp needs no exchange: InvalidArgument.
  Result<std::string> OnExchange(std::string_view payload) override;

  TcpTransportStats stats() const;
  // stats(), by name.
  std::vector<std::pair<std::string, uint64_t>> Counters() const override;

 private:
  const TcpTransportOptions options_;
  Mutex lifecycle_mu_;
  bool stopped_ GUARDED_BY(lifecycle_mu_) = false;
  // Written once under lifecycle_mu_ before started_ turns true; read after started_ is seen.
  std::shared_ptr<tcp::TcpRuntime> runtime_;
  std::atomic<bool> started_{false};
};

// The factory the transport list uses.
std::unique_ptr<Transport> CreateTcpTransport(const TcpTransportOptions& options);

}  // namespace ferry
