// FaultProxy: a TCP proxy that tests put between an initiator and a target to break what flows
// between them: it delays, cuts a connection in the middle of a frame, or flips bits.
//
//   auto proxy = FaultProxy::Start("0.0.0.0");      // forwards to each connection's original
//                                                    // destination (iptables REDIRECT / DNAT)
//   (*proxy)->CorruptEvery(FaultProxy::kToServer, 3 << 20);
//   ... traffic ...
//   (*proxy)->stats().corrupted[FaultProxy::kToServer]
//
// Real sockets and real threads: one accepting thread, and per connection one thread for each
// direction (read a chunk, apply the faults, write it on when it is due). Bounded: at most
// `max_connections` open at once (more are closed at accept), at most kMaxHeldChunks chunks of
// kChunkBytes held per direction, every wait on a socket bounded and checked against Stop(). A
// side that does not take bytes for kStallLimit loses the connection. When one side closes or
// resets, the bytes already read are still delivered to the other (they were on the wire), and
// then the close or reset is passed on.
// Faults apply to bytes read after the call that sets them. Thread contract: thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ferry/status.h"

namespace ferry::testing {

class FaultProxy {
 public:
  enum Direction { kToServer = 0, kToClient = 1 };
  static constexpr size_t kChunkBytes = 64 << 10;
  static constexpr size_t kMaxHeldChunks = 64;
  static constexpr std::chrono::milliseconds kStallLimit{30000};

  struct Stats {
    uint64_t accepted = 0;                   // connections forwarded
    uint64_t refused = 0;                    // connections closed at accept (limit, no upstream)
    uint64_t open = 0;                       // connections with a direction still running
    uint64_t closed = 0;                     // connections whose both directions ended
    uint64_t held = 0;                       // chunks read and not yet written or dropped
    uint64_t forwarded[2] = {0, 0};          // bytes written on, per direction
    uint64_t corrupted[2] = {0, 0};          // bytes flipped, per direction
    uint64_t cuts = 0;                       // connections cut by CutAfter
  };

  // Listens on `bind_host`, port 0 (the kernel picks). Each connection goes on to `upstream`
  // ("a.b.c.d:port"), or, when empty, to its destination before an iptables REDIRECT or DNAT
  // took it here (SO_ORIGINAL_DST). The sockets belong to the network namespace of the calling
  // thread. InvalidArgument for a malformed address; Internal naming the failed call otherwise.
  static Result<std::unique_ptr<FaultProxy>> Start(const std::string& bind_host,
                                                   const std::string& upstream = "",
                                                   size_t max_connections = 64);
  ~FaultProxy();  // Stop()
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // Closes the listener and every connection, and joins every thread. Idempotent.
  void Stop();
  uint16_t port() const { return port_; }

  // Each chunk is written on `delay` after it was read (0: at once), both directions: latency,
  // not a lower rate (chunks read meanwhile follow each at its own time).
  void SetDelay(std::chrono::milliseconds delay) { delay_ms_.store(delay.count()); }
  // Once `bytes` more bytes went in `direction` (over all connections), the connection carrying
  // the next byte writes up to that byte and is then reset on both sides: a cut in the middle of
  // whatever frame was passing. One cut per call.
  void CutAfter(Direction direction, uint64_t bytes);
  // Flips the low bit of one byte in every `every` bytes going in `direction`; 0 stops it.
  void CorruptEvery(Direction direction, uint64_t every);
  Stats stats() const;

 private:
  struct Connection;
  FaultProxy(int listen_fd, uint16_t port, size_t max_connections);
  void AcceptLoop();
  void Pump(const std::shared_ptr<Connection>& conn, Direction direction);
  // Applies corruption and the pending cut to `n` bytes about to go in `direction`; returns how
  // many of them to write before cutting (n when no cut falls inside).
  size_t ApplyFaults(Direction direction, unsigned char* data, size_t n, bool* cut);

  struct State;
  std::unique_ptr<State> state_;
  const int listen_fd_;
  const uint16_t port_;
  const size_t max_connections_;
  std::atomic<int64_t> delay_ms_{0};
};

}  // namespace ferry::testing
