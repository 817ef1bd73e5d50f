// CopyEngine: the initiator side that shm and cxl (and cuda_ipc to come) share. Per Submit it
// queues the slices (bounded: Again when full); worker threads take them in batches of at most
// `max_batch` slices for one peer and run
//   1. checks: a zero-length slice completes Ok, a slice whose deadline passed completes
//      Timeout without asking, and PeerCopier::Check may refuse a slice locally;
//   2. pins: on one grant connection (an idle one of the peer's pool, else a new one), each
//      range inside a region the connection holds a lease of is pinned through the target's
//      shared lease table (GrantConnection::TryPin: no message); one Acquire round trip pins
//      the others, waiting at most min(io_timeout, the earliest deadline of those slices).
//      When the deadline is what ran out, the slices past it complete Timeout and the
//      connection is closed (the target drops whatever it pins for it, also later); the others
//      are asked again on a new connection;
//   3. PeerCopier::PrepareCopies (e.g. fetching a buffer's fd over the same connection);
//   4. a fence, PeerCopier::Copy of the granted slices whose deadline has not passed (the
//      others complete Timeout, uncopied), a fence (and sfence on x86, for non-temporal
//      stores), then Release (a message only when Acquire pinned something);
//   5. every slice completes exactly once through the context.
// A timer thread completes queued slices whose deadline passes before a worker takes them
// (Timeout, at most a few milliseconds late), and closes grant connections idle for longer
// than `idle_timeout`.
//
// Per-peer state (the grant connections and the transport's PeerCopier, e.g. shm's mappings
// of the peer's buffers) lives in the link MakeLink returns; queued batches share it. When the
// last link is dropped and no batch uses it any more, every connection closes and the copier
// is destroyed, releasing what it holds.
//
// Thread contract: thread-safe; Submit and MakeLink may be called from many threads at once.
// Stop must not run concurrently with Submit (a racing Submit is answered Canceled).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ferry/status.h"
#include "transport/samehost/grant_channel.h"
#include "transport/transport.h"

namespace ferry::samehost {

// How one transport moves the bytes of a granted slice, for one peer. Made per link by the
// transport; owned by the link's state and destroyed with it. Thread contract: the engine calls
// it from worker threads, several at once (each with its own slices); implementations guard
// their shared state (caches) themselves.
class PeerCopier {
 public:
  virtual ~PeerCopier() = default;

  // Initiator-side checks before the target is asked (the key decodes, the local range is
  // reachable...). A non-Ok status fails the slice without a grant.
  virtual Status Check(const Slice& slice) = 0;
  // Called on every grant connection the engine opens to the peer, before its first Acquire:
  // refuses a connection answered by another process than the one the copier moves bytes into
  // (shm: the pid it process_vm_writev's into). A non-Ok status (PermissionDenied) closes the
  // connection and fails the slices of that round trip; nothing is asked, nothing copied.
  virtual Status CheckPeer(const GrantConnection& /*connection*/) { return Status::Ok(); }
  // Called with the pins of `granted` held, before their copies: fetches what the copies need
  // over `connection` (e.g. buffer fds), each wait bounded by `deadline`. The engine fails the
  // slices without copying when the connection broke meanwhile.
  virtual void PrepareCopies(std::span<Slice* const> /*granted*/, GrantConnection& /*connection*/,
                             Deadline /*deadline*/) {}
  // Moves the bytes of every slice in `granted` (pins held, Check passed) and writes each
  // result to results[i]. Runs between the engine's fences.
  virtual void Copy(std::span<Slice* const> granted, std::span<Status> results) = 0;
  // The target refused `slice` with `answer` (e.g. drop a cached mapping on Stale).
  virtual void Refused(const Slice& /*slice*/, const Status& /*answer*/) {}
};

struct CopyEngineOptions {
  std::string transport;  // names the transport in messages ("shm")
  // Bounds every wait on a peer: connecting to its grant socket, a grant round trip, a fetch.
  std::chrono::milliseconds io_timeout{5000};
  size_t workers = 2;                // 1..64
  size_t max_queued_slices = 65536;  // Submit beyond it: Again; one call with more: InvalidArgument
  size_t max_batch = 1024;           // slices per grant round trip, 1..wire::kMaxRanges
  // Grant connections unused for this long are closed. 0: kept until the link goes.
  std::chrono::milliseconds idle_timeout{0};
  // The cluster secret each grant connection authenticates with (GrantAuth); empty: none.
  std::string auth_secret;
};

// Counters since Start (tests, diagnostics).
struct CopyEngineStats {
  uint64_t grant_round_trips = 0;  // Acquire calls made
  uint64_t table_pinned_slices = 0;  // slices pinned through a lease table (no round trip)
  uint64_t failed_slices = 0;      // completed with an error, Canceled excluded
  uint64_t timed_out_slices = 0;   // completed with Timeout (their deadline passed)
  uint64_t connections_opened = 0;
  uint64_t idle_connections_closed = 0;
};

class CopyEngine {
 public:
  // Starts the workers and the timer thread. `ctx` is borrowed until Stop. InvalidArgument for
  // bad options; Internal when a thread cannot be started.
  static Result<std::unique_ptr<CopyEngine>> Start(TransportContext* ctx,
                                                   CopyEngineOptions options);
  virtual ~CopyEngine() = default;  // Stop()

  // Completes every queued slice with Canceled, lets the workers finish the batch in hand
  // (bounded by io_timeout and the slices' deadlines) and joins every thread. Idempotent.
  virtual void Stop() = 0;

  // The link to a peer whose grant server listens at `grant_path`; `peer_name` names it in
  // messages ("segment 'b'"). Connects nothing: connections open on first use. Canceled after
  // Stop.
  virtual Result<std::shared_ptr<PeerLink>> MakeLink(std::string grant_path, std::string peer_name,
                                                     std::unique_ptr<PeerCopier> copier) = 0;
  // Queues `slices` for `link`'s peer. InvalidArgument (nothing queued) for a link this engine
  // did not make, a null slice, a bad op, or more slices than max_queued_slices; Again when the
  // queue cannot take them all; Canceled after Stop.
  virtual Status Submit(PeerLink& link, std::span<Slice* const> slices) = 0;

  virtual CopyEngineStats stats() const = 0;
};

}  // namespace ferry::samehost
