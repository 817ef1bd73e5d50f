// InitiatorConnection: one persistent data connection from this engine to a peer's tcp
// listener. Slices are queued from any thread; the loop thread writes their requests (WRITE
// payloads straight from local memory), keeps up to `window` of them in flight, reads the
// responses in order (READ payloads straight into local memory) and completes each slice
// through the context (small responses are read through a read-ahead buffer, so one recv takes
// many of them). A broken, timed-out or out-of-step connection fails every slice it holds
// with Unavailable and stays closed; the link replaces it on next use.
//
// Thread contract: Start, Enqueue, Close, load and closed are thread-safe; the IoHandler methods
// run on the connection's loop thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>

#include "common/mutex.h"
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
  // Closes the connection; what it holds fails with `why`. Asynchronous; idempotent.
  void Close(const Status& why);
  // Slices queued or in flight here.
  size_t load() const { return load_.load(std::memory_order_relaxed); }
  bool closed() const { return closed_flag_.load(std::memory_order_acquire); }

  void OnEvents(uint32_t events) override;
  void OnTick(TimePoint now) override;
  void Shutdown(const Status& why) override { Fail(why); }

 private:
  enum class State { kNew, kConnecting, kOpen, kClosed };
  enum class RecvPhase { kHeader, kMessage, kPayload };
  enum class Io { kProgress, kWouldBlock, kFailed };

  struct Request {
    Slice* slice = nullptr;
    uint64_t id = 0;
    uint64_t total = 0;  // header + WRITE payload bytes
    uint64_t sent = 0;
    std::array<uint8_t, kRequestHeaderSize> header{};
  };

  void Connect();
  void OnConnected();
  // Moves queued slices into the window while it has room.
  void Refill();
  void SendReady();
  void ReceiveReady();
  // Feeds the read-ahead buffer to the response parser; false when the connection failed.
  bool ConsumeBuffered();
  // Reads into [buf, buf + len): kFailed means the connection was failed.
  Io ReadSome(void* buf, size_t len, size_t* got);
  // Validates a decoded response header against the oldest request; false: failed (bad frame).
  bool AcceptResponseHeader();
  void FinishResponse();
  void BadFrame(const std::string& what);
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

  Mutex mu_;
  std::deque<Slice*> pending_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  bool kick_posted_ GUARDED_BY(mu_) = false;

  // Loop thread only.
  State state_ = State::kNew;
  UniqueFd fd_;
  uint32_t interest_ = 0;
  TimePoint last_progress_{};
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
};

}  // namespace ferry::tcp
