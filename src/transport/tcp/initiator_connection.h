// InitiatorConnection: one persistent data connection from this engine to a peer's tcp
// listener. Once connected it authenticates when the runtime has a secret (common/peer_auth.h;
// a denial fails every slice it holds with PermissionDenied, as does a target's refusal read
// where the clock hello's reply should be), then it measures the target's clock (a hello round
// trip, repeated when the estimate is older than kClockRefresh). Slices are queued from any thread;
// the loop thread writes their requests (WRITE payloads straight from local memory, the deadline
// mapped to the target's clock; the frames of many requests coalesced into one sendmsg), keeps up
// to `window` of them in flight, reads the responses in order (READ payloads straight into local
// memory) and completes each slice through the context (small responses are read through a
// read-ahead buffer, so one recv takes many of them).
//
// Checksums (tcp_protocol.h): each request header is sealed with its checksum (and a WRITE's
// payload checksum) just before it goes out; a response is believed only when its header
// checksum matches, and a READ's payload is checked as it lands. A mismatch is a bad frame: the
// slice is never completed OK, and the connection fails (below) with a reason naming the
// checksum. A target's closing notice fails every slice held here with the target's reason.
//
// Deadlines (see tcp_transport.h): a queued slice whose deadline passed completes with Timeout
// unsent; a request on the wire whose deadline passed resets the connection. A broken,
// timed-out, expired or out-of-step connection fails every slice it holds (Timeout for those
// past their deadline, otherwise Unavailable), resetting the socket when requests were on the
// wire, and stays closed; the link replaces it on next use. With idle_timeout set, a connection
// that held nothing for that long closes; the link opens a new one on next use.
//
// Thread contract: Start, Enqueue, Release, load and closed are thread-safe; the IoHandler
// methods run on the connection's loop thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/peer_auth.h"
#include "transport/tcp/io_loop.h"
#include "transport/tcp/tcp_protocol.h"
#include "transport/tcp/tcp_socket.h"
#include "transport/transport.h"

namespace ferry::tcp {

struct TcpRuntime;

// How many slices one link holds (queued or in flight), shared by the link and its
// connections. Thread-safe.
class LinkBudget {
 public:
  explicit LinkBudget(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  // Takes `n` places, or none (false) when fewer are free.
  bool TryReserve(size_t n);
  void Release(size_t n) { used_.fetch_sub(n, std::memory_order_acq_rel); }

 private:
  const size_t capacity_;
  std::atomic<size_t> used_{0};
};

class InitiatorConnection final : public IoHandler,
                                  public std::enable_shared_from_this<InitiatorConnection> {
 public:
  // `peer_name` names the peer in failure messages. The runtime must be started.
  InitiatorConnection(std::shared_ptr<TcpRuntime> runtime, IoLoop* loop, SocketAddress address,
                      std::string peer_name, std::shared_ptr<LinkBudget> budget);
  ~InitiatorConnection() override = default;

  // Posts the connect to the loop. False when the loop is stopping (the connection is unusable).
  bool Start();
  // Queues `slices`, whose places in the budget are already taken; they become this
  // connection's to complete. False, queuing nothing, once the connection is closed.
  bool Enqueue(std::span<Slice* const> slices);
  // The link let go of this connection: it takes no more slices, those not yet on the wire fail
  // with `why`, requests on the wire finish (answer, deadline or io_timeout), then it closes.
  // Asynchronous; idempotent.
  void Release(const Status& why);
  // Slices queued or in flight here.
  size_t load() const { return load_.load(std::memory_order_relaxed); }
  bool closed() const { return closed_flag_.load(std::memory_order_acquire); }
  // Why it closed (OK while open, or when the link released it without a failure).
  Status close_reason() const;

  void OnEvents(uint32_t events) override;
  void OnTick(TimePoint now) override;
  void Shutdown(const Status& why) override { Fail(why); }

  // How old the clock estimate may grow before the next request waits for a new hello.
  static constexpr std::chrono::seconds kClockRefresh{60};

 private:
  enum class State { kNew, kConnecting, kOpen, kClosed };
  enum class RecvPhase { kHello, kHeader, kMessage, kPayload };
  enum class Io { kProgress, kWouldBlock, kFailed };

  struct Request {
    Slice* slice = nullptr;
    uint64_t id = 0;
    uint64_t total = 0;  // header + WRITE payload bytes
    uint64_t sent = 0;
    RequestHeader wire;   // what `header` encodes once sealed
    bool sealed = false;  // `header` holds the encoded, checksummed header
    std::array<uint8_t, kRequestHeaderSize> header{};
  };

  void Connect();
  void OnConnected();
  // Drives the handshake as far as the socket allows; once it is done, starts the clock hello.
  void Authenticate();
  // Sends a hello next; no request goes out until its reply arrived.
  void StartProbe(TimePoint now);
  // Moves queued slices into the window while it has room (slices past their deadline complete
  // with Timeout instead); starts a hello first when the clock estimate is missing or old.
  void Refill();
  void SendReady();
  // Moves queued slices into the window (Refill, with the lock held).
  void FillWindowLocked(TimePoint now, std::vector<Slice*>* expired) REQUIRES(mu_);
  // The Timeout a slice past its deadline completes with.
  Status ExpiredStatus(bool on_wire) const;
  // Sends what is left of the hello; false when it cannot go on (would block, or failed).
  bool SendHello();
  // The hello reply arrived whole in response_bytes_; false: failed (bad frame).
  bool AcceptHelloReply();
  void ReceiveReady();
  // Feeds the read-ahead buffer to the response parser; false when the connection failed.
  bool ConsumeBuffered();
  // Reads into [buf, buf + len): kFailed means the connection was failed.
  Io ReadSome(void* buf, size_t len, size_t* got);
  // Validates a decoded response header against the oldest request; false: failed (bad frame).
  bool AcceptResponseHeader();
  // Encodes `r`'s header with its checksums (a WRITE's payload checksum is computed here, just
  // before its bytes are sent, so they are still in cache when the kernel copies them).
  void Seal(Request& r);
  // A response's body is complete: false (the connection failed as a bad frame) when its
  // checksum differs from the header's.
  bool BodyIntact();
  // The closing notice's message arrived: fails the connection with the target's reason.
  void OnNotice();
  void FinishResponse();
  void BadFrame(const std::string& what);
  // Completes with Timeout every queued slice, and every request not yet begun on the wire,
  // whose deadline is at or before `now`.
  void ExpireUnsent(TimePoint now);
  // Whether a request on the wire (begun or sent, unanswered) is past its deadline.
  bool InFlightExpired(TimePoint now) const;
  // Resets the connection because a request on the wire passed its deadline.
  void ExpireInFlight();
  // Whether the READ whose payload is arriving passed its deadline; if so the connection was
  // reset (ExpireInFlight) and nothing more may be read.
  bool PayloadExpired();
  // Drops the window's requests not yet begun on the wire; returns their slices.
  std::vector<Slice*> TakeUnsentLocked() REQUIRES(mu_);
  void OnReleased(const Status& why);
  void CloseIfIdle(TimePoint now);
  // Closes for good: each slice held completes with `why`, or Timeout when its deadline passed
  // (not for Canceled). Resets the socket when requests were on the wire.
  void Fail(const Status& why);
  void Complete(Slice* slice, const Status& status);
  void UpdateInterest();
  Status Broken(const std::string& why) const;

  const std::shared_ptr<TcpRuntime> runtime_;
  IoLoop* const loop_;
  const SocketAddress address_;
  const std::string peer_name_;
  const std::shared_ptr<LinkBudget> budget_;
  std::atomic<size_t> load_{0};
  std::atomic<bool> closed_flag_{false};

  mutable Mutex mu_;
  std::deque<Slice*> pending_ GUARDED_BY(mu_);
  // No queued slice has an earlier deadline (it may be later: a bound to skip scans).
  TimePoint earliest_pending_deadline_ GUARDED_BY(mu_) = TimePoint::max();
  bool closed_ GUARDED_BY(mu_) = false;
  Status close_why_ GUARDED_BY(mu_);  // set when it fails
  bool kick_posted_ GUARDED_BY(mu_) = false;

  // Loop thread only.
  State state_ = State::kNew;
  std::optional<auth::Handshake> auth_;  // while authenticating (kOpen, before the hello)
  UniqueFd fd_;
  uint32_t interest_ = 0;
  TimePoint last_progress_{};
  TimePoint last_active_{};  // when it last held or finished a slice (idle_timeout)
  bool draining_ = false;    // released by the link: closes once the window is empty
  Status release_why_;
  // The clock hello: `probing_` from StartProbe until the reply arrived.
  bool clock_valid_ = false;
  ClockMapping clock_;
  bool probing_ = false;
  std::array<uint8_t, kHelloSize> hello_{};
  size_t hello_sent_ = 0;
  TimePoint hello_sent_at_{};
  uint64_t next_request_id_ = 1;
  std::deque<Request> window_;  // [0, send_index_) fully sent; front is answered next
  size_t send_index_ = 0;
  std::unique_ptr<uint8_t[]> read_ahead_;  // made on first use
  size_t in_begin_ = 0;                    // unparsed bytes: [in_begin_, in_end_)
  size_t in_end_ = 0;
  RecvPhase phase_ = RecvPhase::kHeader;
  std::array<uint8_t, kResponseHeaderSize> response_bytes_{};
  size_t response_got_ = 0;
  ResponseHeader response_;
  std::string message_;
  size_t message_got_ = 0;
  uint64_t payload_got_ = 0;
  bool payload_checked_ = false;  // the response's payload counts in its body checksum
  uint32_t body_crc_ = 0;         // of the response body received so far
};

}  // namespace ferry::tcp
