#include "transport/tcp/initiator_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/log.h"
#include "transport/tcp/tcp_runtime.h"

namespace ferry::tcp {
namespace {

constexpr size_t kMaxIov = 64;
// Responses are read through a buffer of this size; a READ payload with at least
// kDirectReadBytes still to come is received straight into local memory instead.
constexpr size_t kReadAheadBytes = 32 * 1024;
constexpr uint64_t kDirectReadBytes = 8 * 1024;

uint8_t* LocalPtr(const Slice& slice, uint64_t offset) {
  return reinterpret_cast<uint8_t*>(slice.local_addr) + offset;  // NOLINT
}

}  // namespace

bool LinkBudget::TryReserve(size_t n) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (n > capacity_ || used > capacity_ - n) return false;
  } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_acq_rel));
  return true;
}

InitiatorConnection::InitiatorConnection(std::shared_ptr<TcpRuntime> runtime, IoLoop* loop,
                                         SocketAddress address, std::string peer_name,
                                         std::shared_ptr<LinkBudget> budget)
    : runtime_(std::move(runtime)),
      loop_(loop),
      address_(address),
      peer_name_(std::move(peer_name)),
      budget_(std::move(budget)) {}

bool InitiatorConnection::Start() {
  return loop_->Post([self = shared_from_this()] { self->Connect(); });
}

bool InitiatorConnection::Enqueue(std::span<Slice* const> slices) {
  bool post = false;
  {
    MutexLock lock(mu_);
    if (closed_) return false;
    pending_.insert(pending_.end(), slices.begin(), slices.end());
    load_.fetch_add(slices.size(), std::memory_order_relaxed);
    post = !kick_posted_;
    kick_posted_ = true;
  }
  if (post) {
    // A refused post means the loop is stopping; its shutdown fails what is pending here.
    (void)loop_->Post([self = shared_from_this()] {
      self->Refill();
      self->SendReady();
    });
  }
  return true;
}

void InitiatorConnection::Close(const Status& why) {
  (void)loop_->Post([self = shared_from_this(), why] { self->Fail(why); });
}

Status InitiatorConnection::Broken(const std::string& why) const {
  return UnavailableError("tcp connection to " + peer_name_ + ": " + why);
}

void InitiatorConnection::Connect() {
  if (state_ != State::kNew) return;
  state_ = State::kConnecting;
  last_progress_ = std::chrono::steady_clock::now();
  bool connected = false;
  Result<UniqueFd> fd = BeginConnect(address_, &connected);
  if (!fd.ok()) {
    Fail(Broken(fd.status().message()));
    return;
  }
  fd_ = std::move(fd).value();
  interest_ = EPOLLOUT;
  Status watched = loop_->Watch(shared_from_this(), fd_.get(), interest_);
  if (!watched.ok()) {
    Fail(Broken(watched.message()));
    return;
  }
  if (connected) OnConnected();
}

void InitiatorConnection::OnConnected() {
  state_ = State::kOpen;
  ConfigureDataSocket(fd_.get());
  runtime_->counters.connections_opened.fetch_add(1, std::memory_order_relaxed);
  last_progress_ = std::chrono::steady_clock::now();
  Refill();
  SendReady();
  if (state_ == State::kOpen) UpdateInterest();
}

void InitiatorConnection::Refill() {
  if (state_ == State::kClosed) return;
  const bool was_idle = window_.empty();
  MutexLock lock(mu_);
  kick_posted_ = false;
  while (window_.size() < runtime_->options.window && !pending_.empty()) {
    Slice* slice = pending_.front();
    pending_.pop_front();
    Request& request = window_.emplace_back();
    request.slice = slice;
    request.id = next_request_id_++;
    const bool write = slice->op == OpCode::kWrite;
    request.total = kRequestHeaderSize + (write ? slice->length : 0);
    RequestHeader header;
    header.op = write ? WireOp::kWrite : WireOp::kRead;
    header.request_id = request.id;
    header.remote_addr = slice->remote_addr;
    header.length = slice->length;
    header.incarnation = slice->peer_incarnation;
    header.generation = slice->remote_generation;
    EncodeRequestHeader(header, request.header);
  }
  if (was_idle && !window_.empty()) last_progress_ = std::chrono::steady_clock::now();
}

void InitiatorConnection::SendReady() {
  if (state_ != State::kOpen) return;
  uint64_t moved = 0;
  while (send_index_ < window_.size() && moved < runtime_->options.bytes_per_turn) {
    std::array<iovec, kMaxIov> iov{};
    size_t n = 0;
    for (size_t i = send_index_; i < window_.size() && n + 2 <= kMaxIov; ++i) {
      Request& r = window_[i];
      if (r.sent < kRequestHeaderSize) {
        iov[n++] = {r.header.data() + r.sent, kRequestHeaderSize - r.sent};
      }
      if (r.slice->op == OpCode::kWrite) {
        const uint64_t offset = r.sent > kRequestHeaderSize ? r.sent - kRequestHeaderSize : 0;
        iov[n++] = {LocalPtr(*r.slice, offset), r.slice->length - offset};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n;
    const ssize_t sent = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Fail(Broken("send: " + ErrnoText(errno)));
      return;
    }
    last_progress_ = std::chrono::steady_clock::now();
    moved += static_cast<uint64_t>(sent);
    auto left = static_cast<uint64_t>(sent);
    while (left > 0) {
      Request& r = window_[send_index_];
      const uint64_t take = std::min(left, r.total - r.sent);
      r.sent += take;
      left -= take;
      if (r.sent == r.total) ++send_index_;
    }
  }
  UpdateInterest();
}

InitiatorConnection::Io InitiatorConnection::ReadSome(void* buf, size_t len, size_t* got) {
  switch (RecvSome(fd_.get(), buf, len, got)) {
    case RecvOutcome::kProgress:
      last_progress_ = std::chrono::steady_clock::now();
      return Io::kProgress;
    case RecvOutcome::kWouldBlock:
      return Io::kWouldBlock;
    case RecvOutcome::kPeerClosed:
      Fail(Broken("closed by peer"));
      return Io::kFailed;
    case RecvOutcome::kError:
      break;
  }
  Fail(Broken("recv: " + ErrnoText(errno)));
  return Io::kFailed;
}

void InitiatorConnection::ReceiveReady() {
  uint64_t moved = 0;
  while (state_ == State::kOpen && moved < runtime_->options.bytes_per_turn) {
    // The read-ahead buffer is always empty here: what is read into it is parsed at once, so
    // nothing waits in it for a readiness event that may never come.
    in_begin_ = in_end_ = 0;
    // A long payload goes straight into local memory; everything else through the read-ahead
    // buffer, so one recv takes many small responses.
    const bool direct = phase_ == RecvPhase::kPayload &&
                        window_.front().slice->length - payload_got_ >= kDirectReadBytes;
    size_t got = 0;
    if (direct) {
      const Slice& slice = *window_.front().slice;
      if (ReadSome(LocalPtr(slice, payload_got_), slice.length - payload_got_, &got) !=
          Io::kProgress) {
        break;
      }
      payload_got_ += got;
      if (payload_got_ == slice.length) FinishResponse();
    } else {
      if (!read_ahead_) read_ahead_ = std::make_unique<uint8_t[]>(kReadAheadBytes);
      if (ReadSome(read_ahead_.get(), kReadAheadBytes, &got) != Io::kProgress) break;
      in_end_ = got;
      if (!ConsumeBuffered()) return;
    }
    moved += got;
  }
  if (state_ != State::kOpen) return;
  // Answers made room in the window.
  Refill();
  SendReady();
}

bool InitiatorConnection::ConsumeBuffered() {
  while (in_begin_ < in_end_ && state_ == State::kOpen) {
    const uint8_t* from = read_ahead_.get() + in_begin_;
    const size_t available = in_end_ - in_begin_;
    size_t take = 0;
    if (phase_ == RecvPhase::kHeader) {
      take = std::min(available, kResponseHeaderSize - response_got_);
      std::memcpy(response_bytes_.data() + response_got_, from, take);
      response_got_ += take;
      in_begin_ += take;
      if (response_got_ == kResponseHeaderSize && !AcceptResponseHeader()) return false;
    } else if (phase_ == RecvPhase::kMessage) {
      take = std::min(available, message_.size() - message_got_);
      std::memcpy(message_.data() + message_got_, from, take);
      message_got_ += take;
      in_begin_ += take;
      if (message_got_ == message_.size()) {
        if (response_.payload_length > 0) {
          phase_ = RecvPhase::kPayload;
        } else {
          FinishResponse();
        }
      }
    } else {
      const Slice& slice = *window_.front().slice;
      take = std::min<uint64_t>(available, slice.length - payload_got_);
      std::memcpy(LocalPtr(slice, payload_got_), from, take);
      payload_got_ += take;
      in_begin_ += take;
      if (payload_got_ == slice.length) FinishResponse();
    }
  }
  return state_ == State::kOpen;
}

bool InitiatorConnection::AcceptResponseHeader() {
  Status decoded = DecodeResponseHeader(response_bytes_, &response_);
  if (!decoded.ok()) {
    BadFrame(decoded.message());
    return false;
  }
  if (send_index_ == 0 || response_.request_id != window_.front().id) {
    BadFrame("response " + std::to_string(response_.request_id) + " answers no sent request");
    return false;
  }
  const Slice& slice = *window_.front().slice;
  const uint64_t expected =
      response_.code == StatusCode::kOk && slice.op == OpCode::kRead ? slice.length : 0;
  if (response_.payload_length != expected) {
    BadFrame("payload length " + std::to_string(response_.payload_length) + ", expected " +
             std::to_string(expected));
    return false;
  }
  response_got_ = 0;
  message_.assign(response_.message_length, '\0');
  message_got_ = 0;
  payload_got_ = 0;
  if (response_.message_length > 0) {
    phase_ = RecvPhase::kMessage;
  } else if (response_.payload_length > 0) {
    phase_ = RecvPhase::kPayload;
  } else {
    FinishResponse();
  }
  return true;
}

void InitiatorConnection::FinishResponse() {
  phase_ = RecvPhase::kHeader;
  Slice* slice = window_.front().slice;
  window_.pop_front();
  --send_index_;
  Status status;
  if (response_.code != StatusCode::kOk) {
    status = Status(response_.code, "tcp target " + peer_name_ + ": " + message_);
  }
  Complete(slice, status);
}

void InitiatorConnection::BadFrame(const std::string& what) {
  runtime_->counters.bad_frames.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kWarn) << "tcp: bad frame from " << peer_name_ << ": " << what;
  Fail(Broken("bad frame: " + what));
}

void InitiatorConnection::OnEvents(uint32_t events) {
  if (state_ == State::kConnecting) {
    Status connected = FinishConnect(fd_.get());
    if (!connected.ok()) {
      Fail(Broken("connect: " + connected.message()));
      return;
    }
    OnConnected();
    return;
  }
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) ReceiveReady();
  if (state_ == State::kOpen && (events & EPOLLERR) != 0) {
    // Nothing left to read, yet the socket is in error: take the error and close.
    Status error = FinishConnect(fd_.get());
    Fail(Broken(error.ok() ? "socket error" : error.message()));
    return;
  }
  if (state_ == State::kOpen && (events & EPOLLOUT) != 0) SendReady();
}

void InitiatorConnection::OnTick(TimePoint now) {
  if (state_ != State::kConnecting && (state_ != State::kOpen || window_.empty())) return;
  if (now - last_progress_ < runtime_->options.io_timeout) return;
  runtime_->counters.timeouts.fetch_add(1, std::memory_order_relaxed);
  const auto ms = runtime_->options.io_timeout.count();
  Fail(Broken(state_ == State::kConnecting
                  ? "connect timed out after " + std::to_string(ms) + " ms"
                  : "no progress for " + std::to_string(ms) + " ms (peer dead or stuck)"));
}

void InitiatorConnection::UpdateInterest() {
  if (state_ != State::kOpen) return;
  const uint32_t want = EPOLLIN | (send_index_ < window_.size() ? EPOLLOUT : 0u);
  if (want == interest_) return;
  interest_ = want;
  loop_->Modify(this, fd_.get(), interest_);
}

void InitiatorConnection::Fail(const Status& why) {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  if (fd_.valid()) {
    loop_->Unwatch(this, fd_.get());
    fd_.Reset();
  }
  std::deque<Slice*> pending;
  {
    MutexLock lock(mu_);
    closed_ = true;
    closed_flag_.store(true, std::memory_order_release);  // seen by anyone Enqueue refused
    pending.swap(pending_);
  }
  std::deque<Request> window;
  window.swap(window_);
  send_index_ = 0;
  if (why.code() != StatusCode::kCanceled) {
    runtime_->counters.connections_failed.fetch_add(1, std::memory_order_relaxed);
  }
  if (why.code() == StatusCode::kUnavailable && (!window.empty() || !pending.empty())) {
    FERRY_LOG(kWarn) << why.message();
  }
  for (Request& r : window) Complete(r.slice, why);
  for (Slice* slice : pending) Complete(slice, why);
}

void InitiatorConnection::Complete(Slice* slice, const Status& status) {
  load_.fetch_sub(1, std::memory_order_relaxed);
  budget_->Release(1);
  runtime_->ctx->CompleteSlice(slice, status);
}

}  // namespace ferry::tcp
