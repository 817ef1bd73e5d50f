#include "transport/tcp/initiator_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "common/log.h"
#include "transport/tcp/tcp_runtime.h"

namespace ferry::tcp {
namespace {

constexpr size_t kInitiatorMaxIov = 256;
// Responses are read through a buffer of this size; a READ payload with at least
// kInitiatorDirectReadBytes still to come is received straight into local memory instead.
constexpr size_t kInitiatorReadAheadBytes = 32 * 1024;
constexpr uint64_t kInitiatorDirectReadBytes = 8 * 1024;
// One sendmsg is built from sealed requests plus at most this many bytes of requests sealed
// for it, so a WRITE payload is checksummed shortly before the kernel copies it.
constexpr uint64_t kSealAheadBytes = 512 * 1024;

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
    for (const Slice* slice : slices) {
      earliest_pending_deadline_ = std::min(earliest_pending_deadline_, slice->deadline);
    }
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

Status InitiatorConnection::close_reason() const {
  MutexLock lock(mu_);
  return close_why_;
}

void InitiatorConnection::Release(const Status& why) {
  // A refused post means the loop is stopping; its shutdown fails what is held here.
  (void)loop_->Post([self = shared_from_this(), why] { self->OnReleased(why); });
}

void InitiatorConnection::OnReleased(const Status& why) {
  if (state_ == State::kClosed || draining_) return;
  std::deque<Slice*> pending;
  std::vector<Slice*> unsent;
  {
    MutexLock lock(mu_);
    closed_ = true;
    closed_flag_.store(true, std::memory_order_release);
    pending.swap(pending_);
    unsent = TakeUnsentLocked();
  }
  draining_ = true;
  release_why_ = why;
  for (Slice* slice : unsent) Complete(slice, why);
  for (Slice* slice : pending) Complete(slice, why);
  if (window_.empty()) {
    Fail(why);
  } else {
    UpdateInterest();
  }
}

std::vector<Slice*> InitiatorConnection::TakeUnsentLocked() {
  std::vector<Slice*> unsent;
  // Only the request at send_index_ can be partly sent; the ones after it have no byte out.
  size_t keep = send_index_;
  if (keep < window_.size() && window_[keep].sent > 0) ++keep;
  while (window_.size() > keep) {
    unsent.push_back(window_.back().slice);
    window_.pop_back();
  }
  std::reverse(unsent.begin(), unsent.end());
  return unsent;
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
  const TimePoint now = std::chrono::steady_clock::now();
  last_progress_ = now;
  last_active_ = now;
  if (!runtime_->auth_secret.empty()) {
    Result<auth::Handshake> handshake =
        auth::Handshake::Client(auth::Channel::kTcp, runtime_->auth_secret, peer_name_);
    if (!handshake.ok()) {
      Fail(handshake.status());
      return;
    }
    auth_.emplace(std::move(handshake).value());
    Authenticate();
    return;
  }
  StartProbe(now);
  SendReady();
  if (state_ == State::kOpen) UpdateInterest();
}

void InitiatorConnection::Authenticate() {
  while (state_ == State::kOpen && auth_.has_value()) {
    if (auth_->denied()) {
      auth::FlushRefusal(*auth_, fd_.get());  // best-effort: the target learns why
      const Status why = auth_->error();
      auth_.reset();
      Fail(why);
      return;
    }
    if (auth_->done()) {
      auth_.reset();
      StartProbe(std::chrono::steady_clock::now());
      SendReady();  // the hello; requests follow its reply
      return;
    }
    const auth::SendStep sent = auth::SendPending(*auth_, fd_.get());
    if (sent == auth::SendStep::kBlocked) break;
    if (sent == auth::SendStep::kFailed) {
      Fail(Broken("send: " + ErrnoText(errno)));
      return;
    }
    if (sent == auth::SendStep::kSent) {
      last_progress_ = std::chrono::steady_clock::now();
      continue;
    }
    uint8_t in[auth::kMessageSize];
    size_t got = 0;
    if (ReadSome(in, std::min(sizeof(in), auth_->want()), &got) != Io::kProgress) break;
    auth_->Received(std::span<const uint8_t>(in, got));
  }
  UpdateInterest();
}

void InitiatorConnection::StartProbe(TimePoint now) {
  probing_ = true;
  hello_sent_ = 0;
  phase_ = RecvPhase::kHello;  // the window is empty: the reply is the next frame
  response_got_ = 0;
  last_progress_ = now;
}

void InitiatorConnection::Refill() {
  if (state_ == State::kClosed) return;
  const TimePoint now = std::chrono::steady_clock::now();
  const bool was_idle = window_.empty();
  bool probe = false;
  std::vector<Slice*> expired;
  {
    MutexLock lock(mu_);
    kick_posted_ = false;
    if (state_ != State::kOpen || auth_.has_value() || probing_ || draining_) return;
    if (!clock_valid_ || now - clock_.measured_at >= kClockRefresh) {
      // Requests wait for a fresh estimate; the hello goes once the window drained.
      probe = window_.empty() && !pending_.empty();
    } else {
      FillWindowLocked(now, &expired);
    }
  }
  if (probe) StartProbe(now);
  if (was_idle && !window_.empty()) last_progress_ = now;
  if (!window_.empty()) last_active_ = now;
  for (Slice* slice : expired) Complete(slice, ExpiredStatus(false));
}

void InitiatorConnection::FillWindowLocked(TimePoint now, std::vector<Slice*>* expired) {
  while (window_.size() < runtime_->options.window && !pending_.empty()) {
    Slice* slice = pending_.front();
    pending_.pop_front();
    if (slice->deadline <= now) {
      expired->push_back(slice);
      continue;
    }
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
    header.deadline = clock_.TargetDeadline(slice->deadline);
    header.payload_checksum = runtime_->options.payload_checksum;
    request.wire = header;  // sealed (encoded, checksummed) by SendReady
  }
}

void InitiatorConnection::Seal(Request& r) {
  if (r.wire.op == WireOp::kWrite && r.wire.payload_checksum) {
    r.wire.payload_crc = Crc32c(LocalPtr(*r.slice, 0), r.slice->length);
  }
  EncodeRequestHeader(r.wire, r.header);
  r.sealed = true;
}

Status InitiatorConnection::ExpiredStatus(bool on_wire) const {
  return TimeoutError(on_wire ? "tcp: deadline passed with the request to " + peer_name_ +
                                    " unanswered; connection reset"
                              : "tcp: deadline passed before the request to " + peer_name_ +
                                    " was sent");
}

bool InitiatorConnection::SendHello() {
  while (hello_sent_ < kHelloSize) {
    if (hello_sent_ == 0) {
      hello_sent_at_ = std::chrono::steady_clock::now();
      EncodeHello(kHelloMagic, SteadyNanos(hello_sent_at_), hello_);
    }
    const ssize_t sent = send(fd_.get(), hello_.data() + hello_sent_, kHelloSize - hello_sent_,
                              MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      Fail(Broken("send: " + ErrnoText(errno)));
      return false;
    }
    last_progress_ = std::chrono::steady_clock::now();
    hello_sent_ += static_cast<size_t>(sent);
  }
  return true;
}

void InitiatorConnection::SendReady() {
  if (state_ != State::kOpen) return;
  if (auth_.has_value()) {
    Authenticate();
    return;
  }
  if (probing_) {
    // Nothing follows a hello until its reply came.
    (void)SendHello();
    UpdateInterest();
    return;
  }
  uint64_t moved = 0;
  while (send_index_ < window_.size() && moved < runtime_->options.bytes_per_turn) {
    std::array<iovec, kInitiatorMaxIov> iov;  // uninitialised: only the first n entries are passed
    size_t n = 0;
    uint64_t sealed_now = 0;
    for (size_t i = send_index_; i < window_.size() && n + 2 <= kInitiatorMaxIov; ++i) {
      Request& r = window_[i];
      if (!r.sealed) {
        if (sealed_now >= kSealAheadBytes) break;
        Seal(r);
        sealed_now += r.total;
      }
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
  if (auth_.has_value()) {
    Authenticate();
    return;
  }
  uint64_t moved = 0;
  while (state_ == State::kOpen && moved < runtime_->options.bytes_per_turn) {
    // The read-ahead buffer is always empty here: what is read into it is parsed at once, so
    // nothing waits in it for a readiness event that may never come.
    in_begin_ = in_end_ = 0;
    if (phase_ == RecvPhase::kPayload && PayloadExpired()) return;
    // A long payload goes straight into local memory; everything else through the read-ahead
    // buffer, so one recv takes many small responses.
    const bool direct = phase_ == RecvPhase::kPayload &&
                        window_.front().slice->length - payload_got_ >= kInitiatorDirectReadBytes;
    size_t got = 0;
    if (direct) {
      const Slice& slice = *window_.front().slice;
      uint8_t* const into = LocalPtr(slice, payload_got_);
      if (ReadSome(into, slice.length - payload_got_, &got) != Io::kProgress) break;
      if (payload_checked_) body_crc_ = Crc32cExtend(body_crc_, into, got);
      payload_got_ += got;
      if (payload_got_ == slice.length) FinishResponse();
    } else {
      if (!read_ahead_) read_ahead_ = std::make_unique<uint8_t[]>(kInitiatorReadAheadBytes);
      if (ReadSome(read_ahead_.get(), kInitiatorReadAheadBytes, &got) != Io::kProgress) break;
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
    if (phase_ == RecvPhase::kHello) {
      take = std::min(available, kHelloSize - response_got_);
      std::memcpy(response_bytes_.data() + response_got_, from, take);
      response_got_ += take;
      in_begin_ += take;
      if (StartsWithMagic(std::span<const uint8_t>(response_bytes_.data(), response_got_),
                          kResponseMagic)) {
        phase_ = RecvPhase::kHeader;  // a closing notice instead of the reply (tcp_protocol.h)
        continue;
      }
      if (response_got_ == kHelloSize && !AcceptHelloReply()) return false;
    } else if (phase_ == RecvPhase::kHeader) {
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
        body_crc_ = Crc32c(message_);
        if (response_.is_notice()) {
          OnNotice();
        } else if (response_.payload_length > 0) {
          phase_ = RecvPhase::kPayload;
        } else {
          FinishResponse();
        }
      }
    } else {
      if (PayloadExpired()) return false;
      const Slice& slice = *window_.front().slice;
      take = std::min<uint64_t>(available, slice.length - payload_got_);
      std::memcpy(LocalPtr(slice, payload_got_), from, take);
      if (payload_checked_) body_crc_ = Crc32cExtend(body_crc_, from, take);
      payload_got_ += take;
      in_begin_ += take;
      if (payload_got_ == slice.length) FinishResponse();
    }
  }
  return state_ == State::kOpen;
}

bool InitiatorConnection::AcceptHelloReply() {
  // A target that requires authentication (this runtime has no secret) refuses here.
  if (Status refused =
          auth::RefusalIn(std::span<const uint8_t>(response_bytes_.data(), kHelloSize), peer_name_);
      !refused.ok()) {
    Fail(refused);
    return false;
  }
  uint64_t target_ns = 0;
  Status decoded =
      DecodeHello(std::span<const uint8_t, kHelloSize>(response_bytes_.data(), kHelloSize),
                  kHelloReplyMagic, &target_ns);
  if (!decoded.ok()) {
    BadFrame(decoded.message());
    return false;
  }
  if (hello_sent_ < kHelloSize) {
    BadFrame("hello reply before the hello was sent");
    return false;
  }
  clock_ = ClockMapping::FromRoundTrip(hello_sent_at_, target_ns, std::chrono::steady_clock::now());
  clock_valid_ = true;
  probing_ = false;
  response_got_ = 0;
  phase_ = RecvPhase::kHeader;
  return true;
}

bool InitiatorConnection::PayloadExpired() {
  const TimePoint now = std::chrono::steady_clock::now();
  if (now < window_.front().slice->deadline) return false;
  // Not one more byte of this READ goes into local memory.
  ExpireInFlight();
  return true;
}

void InitiatorConnection::ExpireInFlight() {
  runtime_->counters.deadline_resets.fetch_add(1, std::memory_order_relaxed);
  Fail(Broken("reset: a request on it passed its deadline"));
}

bool InitiatorConnection::AcceptResponseHeader() {
  Status decoded = DecodeResponseHeader(response_bytes_, &response_);
  if (!decoded.ok()) {
    BadFrame(decoded.message());
    return false;
  }
  response_got_ = 0;
  message_.assign(response_.message_length, '\0');
  message_got_ = 0;
  payload_got_ = 0;
  payload_checked_ = false;
  body_crc_ = 0;
  if (response_.is_notice()) {
    // The target found a bad frame and closes; its reason follows as the message.
    if (response_.message_length > 0) {
      phase_ = RecvPhase::kMessage;
    } else {
      OnNotice();
    }
    return state_ == State::kOpen;
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
  payload_checked_ = response_.payload_length > 0 && window_.front().wire.payload_checksum;
  if (response_.message_length > 0) {
    phase_ = RecvPhase::kMessage;
  } else if (response_.payload_length > 0) {
    phase_ = RecvPhase::kPayload;
  } else {
    FinishResponse();
  }
  return true;
}

bool InitiatorConnection::BodyIntact() {
  if (body_crc_ == response_.body_crc) return true;
  const std::string id = std::to_string(response_.request_id);
  const std::string what = response_.payload_length > 0
                               ? "payload of READ request " + id + " (" +
                                     std::to_string(response_.payload_length) + " bytes)"
                               : "response message of request " + id;
  BadFrame(ChecksumMismatch(what, response_.body_crc, body_crc_));
  return false;
}

void InitiatorConnection::OnNotice() {
  if (!BodyIntact()) return;
  Fail(Broken(message_));
}

void InitiatorConnection::FinishResponse() {
  // Corrupted bytes never complete a slice (a READ's are in local memory already: it fails).
  if (!BodyIntact()) return;
  phase_ = RecvPhase::kHeader;
  Slice* slice = window_.front().slice;
  window_.pop_front();
  --send_index_;
  Status status;
  if (response_.code != StatusCode::kOk) {
    status = Status(response_.code, "tcp target " + peer_name_ + ": " + message_);
    slice->answered = true;  // the target's verdict on this request; the connection goes on
  }
  last_active_ = std::chrono::steady_clock::now();
  Complete(slice, status);
  if (draining_ && window_.empty()) Fail(release_why_);
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
  if (state_ == State::kClosed) return;
  ExpireUnsent(now);
  if (state_ == State::kOpen && InFlightExpired(now)) {
    ExpireInFlight();
    return;
  }
  if (draining_ && window_.empty()) {
    Fail(release_why_);
    return;
  }
  const bool waiting =
      state_ == State::kConnecting ||
      (state_ == State::kOpen && (!window_.empty() || probing_ || auth_.has_value()));
  if (waiting && now - last_progress_ >= runtime_->options.io_timeout) {
    runtime_->counters.timeouts.fetch_add(1, std::memory_order_relaxed);
    const auto ms = runtime_->options.io_timeout.count();
    Fail(Broken(state_ == State::kConnecting
                    ? "connect timed out after " + std::to_string(ms) + " ms"
                    : "no progress for " + std::to_string(ms) + " ms (peer dead or stuck)"));
    return;
  }
  CloseIfIdle(now);
}

void InitiatorConnection::ExpireUnsent(TimePoint now) {
  std::vector<Slice*> expired;
  {
    MutexLock lock(mu_);
    if (now >= earliest_pending_deadline_) {
      TimePoint earliest = TimePoint::max();
      std::deque<Slice*> keep;
      for (Slice* slice : pending_) {
        if (slice->deadline <= now) {
          expired.push_back(slice);
        } else {
          keep.push_back(slice);
          earliest = std::min(earliest, slice->deadline);
        }
      }
      pending_.swap(keep);
      earliest_pending_deadline_ = earliest;
    }
  }
  // Requests in the window that have not begun on the wire can still be dropped unsent.
  size_t first_unsent = send_index_;
  if (first_unsent < window_.size() && window_[first_unsent].sent > 0) ++first_unsent;
  for (size_t i = first_unsent; i < window_.size();) {
    if (window_[i].slice->deadline <= now) {
      expired.push_back(window_[i].slice);
      window_.erase(window_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  for (Slice* slice : expired) Complete(slice, ExpiredStatus(false));
  if (!expired.empty() && state_ == State::kOpen) UpdateInterest();
}

bool InitiatorConnection::InFlightExpired(TimePoint now) const {
  size_t on_wire = send_index_;
  if (on_wire < window_.size() && window_[on_wire].sent > 0) ++on_wire;
  for (size_t i = 0; i < on_wire; ++i) {
    if (window_[i].slice->deadline <= now) return true;
  }
  return false;
}

void InitiatorConnection::CloseIfIdle(TimePoint now) {
  const auto idle = runtime_->options.idle_timeout;
  if (idle.count() == 0 || state_ != State::kOpen || auth_.has_value() || probing_ || draining_ ||
      !window_.empty() || now - last_active_ < idle) {
    return;
  }
  {
    MutexLock lock(mu_);
    if (!pending_.empty()) return;
    // Closed under the lock: an Enqueue racing this is refused, and the link opens another.
    closed_ = true;
    closed_flag_.store(true, std::memory_order_release);
  }
  runtime_->counters.idle_closes.fetch_add(1, std::memory_order_relaxed);
  Fail(CanceledError("tcp connection to " + peer_name_ + " idle"));
}

void InitiatorConnection::UpdateInterest() {
  if (state_ != State::kOpen) return;
  const bool to_send = auth_.has_value() ? !auth_->output().empty()
                       : probing_         ? hello_sent_ < kHelloSize
                                          : send_index_ < window_.size();
  const uint32_t want = EPOLLIN | (to_send ? EPOLLOUT : 0u);
  if (want == interest_) return;
  interest_ = want;
  loop_->Modify(this, fd_.get(), interest_);
}

void InitiatorConnection::Fail(const Status& why) {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  if (fd_.valid()) {
    loop_->Unwatch(this, fd_.get());
    // Requests on the wire are given up: reset, so nothing queued behind a FIN still reaches
    // the target and the target sees the hang-up at once.
    if (!window_.empty()) ResetOnClose(fd_.get());
    fd_.Reset();
  }
  std::deque<Slice*> pending;
  {
    MutexLock lock(mu_);
    closed_ = true;
    closed_flag_.store(true, std::memory_order_release);  // seen by anyone Enqueue refused
    close_why_ = why;
    pending.swap(pending_);
  }
  std::deque<Request> window;
  window.swap(window_);
  send_index_ = 0;
  if (why.code() != StatusCode::kCanceled) {
    runtime_->counters.connections_failed.fetch_add(1, std::memory_order_relaxed);
  }
  if (why.code() == StatusCode::kUnavailable && (!window.empty() || !pending.empty())) {
    // Debug only: the slices carry the reason to the engine, which logs a failing peer a
    // bounded number of times (engine/peer_health.h).
    FERRY_LOG(kDebug) << why.message();
  }
  // Past its deadline, a slice ends with Timeout whatever closed the connection (but Stop's
  // Canceled stays Canceled).
  const TimePoint now = std::chrono::steady_clock::now();
  const bool canceled = why.code() == StatusCode::kCanceled;
  for (Request& r : window) {
    Complete(r.slice, !canceled && r.slice->deadline <= now ? ExpiredStatus(r.sent > 0) : why);
  }
  for (Slice* slice : pending) {
    Complete(slice, !canceled && slice->deadline <= now ? ExpiredStatus(false) : why);
  }
}

void InitiatorConnection::Complete(Slice* slice, const Status& status) {
  load_.fetch_sub(1, std::memory_order_relaxed);
  budget_->Release(1);
  if (status.code() == StatusCode::kTimeout) {
    runtime_->counters.expired_slices.fetch_add(1, std::memory_order_relaxed);
  }
  runtime_->ctx->CompleteSlice(slice, status);
}

}  // namespace ferry::tcp
