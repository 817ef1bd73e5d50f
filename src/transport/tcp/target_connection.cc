#include "transport/tcp/target_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "common/crc32c.h"
#include "common/dma_scope.h"
#include "common/log.h"
#include "transport/tcp/tcp_runtime.h"

namespace ferry::tcp {
namespace {

constexpr size_t kTargetMaxIov = 256;  // answers per sendmsg: up to a third of this
// Requests are read through a buffer of this size (headers, short payloads, discarded
// payloads); a WRITE payload with at least kTargetDirectReadBytes still to come, met with the
// buffer empty, is received straight into the pinned memory instead.
constexpr size_t kTargetReadAheadBytes = 64 * 1024;
constexpr uint64_t kTargetDirectReadBytes = 8 * 1024;

uint8_t* TargetPtr(uint64_t addr, uint64_t offset) {
  return reinterpret_cast<uint8_t*>(addr) + offset;  // NOLINT
}

// Staging for `length` bytes of a file buffer, page-aligned so that the owner's file I/O can go
// O_DIRECT when the file offset and length allow; null when the allocation failed.
std::shared_ptr<uint8_t[]> MakeStaging(uint64_t length) {
  constexpr uint64_t kPage = 4096;
  void* bytes =
      std::aligned_alloc(kPage, std::max<uint64_t>(1, (length + kPage - 1) / kPage) * kPage);
  if (bytes == nullptr) return nullptr;
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(bytes), [](uint8_t* p) { std::free(p); });
}

Status NoStaging(uint64_t length) {
  return AgainError("tcp target: cannot allocate " + std::to_string(length) +
                    " bytes of staging for a file buffer or device memory access");
}

}  // namespace

TargetConnection::TargetConnection(std::shared_ptr<TcpRuntime> runtime, IoLoop* loop, UniqueFd fd,
                                   std::string peer)
    : runtime_(std::move(runtime)),
      loop_(loop),
      fd_(std::move(fd)),
      peer_(std::move(peer)),
      last_progress_(std::chrono::steady_clock::now()),
      accepted_at_(last_progress_) {
  runtime_->open_target_connections.fetch_add(1, std::memory_order_relaxed);
}

TargetConnection::~TargetConnection() {
  runtime_->open_target_connections.fetch_sub(1, std::memory_order_relaxed);
}

void TargetConnection::Start() {
  Result<auth::Handshake> handshake =
      auth::Handshake::Server(auth::Channel::kTcp, runtime_->auth_secret, peer_);
  if (!handshake.ok()) {
    FERRY_LOG(kError) << "tcp: cannot serve " << peer_ << ": " << handshake.status();
    Close(handshake.status().message());
    return;
  }
  auth_.emplace(std::move(handshake).value());
  ConfigureDataSocket(fd_.get());
  interest_ = EPOLLIN | EPOLLRDHUP;
  Status watched = loop_->Watch(shared_from_this(), fd_.get(), interest_);
  if (!watched.ok()) {
    FERRY_LOG(kWarn) << "tcp: cannot serve " << peer_ << ": " << watched.message();
    Close(watched.message());
    return;
  }
  watched_ = true;
  runtime_->counters.connections_accepted.fetch_add(1, std::memory_order_relaxed);
}

TargetConnection::Io TargetConnection::ReadSome(void* buf, size_t len, size_t* got) {
  switch (RecvSome(fd_.get(), buf, len, got)) {
    case RecvOutcome::kProgress:
      last_progress_ = std::chrono::steady_clock::now();
      return Io::kProgress;
    case RecvOutcome::kWouldBlock:
      return Io::kWouldBlock;
    case RecvOutcome::kPeerClosed:
      Close("closed by initiator");
      return Io::kClosed;
    case RecvOutcome::kError:
      break;
  }
  Close("recv: " + ErrnoText(errno));
  return Io::kClosed;
}

void TargetConnection::Authenticate() {
  while (!closed_ && auth_.has_value()) {
    if (auth_->denied()) {
      auth::FlushRefusal(*auth_, fd_.get());  // best-effort: the initiator learns why
      runtime_->refusals.Refused("tcp target", peer_, auth_->error());
      Close(auth_->error().message());
      return;
    }
    if (auth_->done()) {
      const std::span<const uint8_t> first = auth_->passthrough();  // <= 4 bytes of a frame
      std::copy(first.begin(), first.end(), header_bytes_.begin());
      header_got_ = first.size();
      auth_.reset();
      last_progress_ = std::chrono::steady_clock::now();
      break;
    }
    const auth::SendStep sent = auth::SendPending(*auth_, fd_.get());
    if (sent == auth::SendStep::kBlocked) break;
    if (sent == auth::SendStep::kFailed) {
      Close("send: " + ErrnoText(errno));
      return;
    }
    if (sent == auth::SendStep::kSent) {
      last_progress_ = std::chrono::steady_clock::now();
      continue;
    }
    uint8_t in[auth::kMessageSize];
    size_t got = 0;
    if (ReadSome(in, std::min(sizeof(in), auth_->want()), &got) != Io::kProgress) break;
    auth_began_ = true;
    auth_->Received(std::span<const uint8_t>(in, got));
  }
  UpdateInterest();
}

void TargetConnection::ReceiveReady() {
  if (auth_.has_value()) {
    Authenticate();
    if (closed_ || auth_.has_value()) return;
  }
  uint64_t moved = 0;
  while (!closed_ && !closing_ && moved < runtime_->options.bytes_per_turn) {
    if (in_begin_ < in_end_) {
      // Throttled with requests read ahead: answer what waits, then go on once room was made.
      SendReady();
      if (closed_ || Throttled()) return;
      if (!ConsumeBuffered()) return;
      continue;
    }
    if (Throttled()) break;
    in_begin_ = in_end_ = 0;
    size_t got = 0;
    if (phase_ == Phase::kPayload && request_.length - payload_got_ >= kTargetDirectReadBytes) {
      // A long payload lands straight in the pinned memory.
      if (RequestExpired()) {
        ExpireWrite();
        continue;
      }
      uint8_t* const into = PayloadPtr(payload_got_);
      {
        const DmaScope dma;
        if (ReadSome(into, request_.length - payload_got_, &got) != Io::kProgress) break;
        // Checked as it lands, while the bytes are still in cache.
        if (request_.payload_checksum) payload_crc_ = Crc32cExtend(payload_crc_, into, got);
      }
      payload_got_ += got;
      if (payload_got_ == request_.length && !FinishWrite()) return;
    } else {
      // Headers, short payloads and discarded bytes come through the read-ahead buffer, so one
      // recv takes many small requests.
      if (!read_ahead_) read_ahead_ = std::make_unique<uint8_t[]>(kTargetReadAheadBytes);
      if (ReadSome(read_ahead_.get(), kTargetReadAheadBytes, &got) != Io::kProgress) break;
      in_end_ = got;
      if (!ConsumeBuffered()) return;
    }
    moved += got;
  }
  if (closed_) return;
  SendReady();
  if (!closed_ && !closing_ && in_begin_ < in_end_ && !Throttled()) {
    // Requests read ahead never wait for a readiness event that may not come: they go on in
    // a later turn of the loop (the turn's byte budget ran out, or answers made room).
    (void)loop_->Post([self = shared_from_this()] {
      if (!self->closed_) self->ReceiveReady();
    });
  }
}

bool TargetConnection::ConsumeBuffered() {
  while (in_begin_ < in_end_ && !closed_ && !closing_) {
    const uint8_t* const from = read_ahead_.get() + in_begin_;
    const size_t available = in_end_ - in_begin_;
    if (phase_ == Phase::kHeader) {
      if (Throttled()) return true;  // the rest stays buffered until answers drain
      const size_t take = std::min(available, kRequestHeaderSize - header_got_);
      std::copy(from, from + take,
                header_bytes_.begin() + static_cast<std::ptrdiff_t>(header_got_));
      header_got_ += take;
      in_begin_ += take;
      const std::span<const uint8_t> frame(header_bytes_.data(), header_got_);
      // A peer of another version may send shorter frames: judge its first bytes at once.
      if (Status prefix = FramePrefixError(frame, kRequestMagic, kHelloMagic); !prefix.ok()) {
        BadFrame(prefix.message());
        return false;
      }
      if (StartsWithMagic(frame, kHelloMagic)) {
        // A conforming initiator sends nothing after a hello until the reply.
        if (header_got_ > kHelloSize) {
          BadFrame("tcp bad frame: bytes after a hello");
          return false;
        }
        if (header_got_ == kHelloSize && !OnHello()) return false;
      } else if (header_got_ == kRequestHeaderSize && !OnRequestHeader()) {
        return false;
      }
    } else if (phase_ == Phase::kPayload) {
      if (RequestExpired()) {
        ExpireWrite();
        continue;
      }
      const uint64_t take = std::min<uint64_t>(available, request_.length - payload_got_);
      uint8_t* const into = PayloadPtr(payload_got_);
      {
        const DmaScope dma;
        std::memcpy(into, from, take);
        if (request_.payload_checksum) payload_crc_ = Crc32cExtend(payload_crc_, into, take);
      }
      payload_got_ += take;
      in_begin_ += take;
      if (payload_got_ == request_.length && !FinishWrite()) return false;
    } else {
      const uint64_t take = std::min<uint64_t>(available, request_.length - payload_got_);
      payload_got_ += take;
      in_begin_ += take;
      if (payload_got_ == request_.length) {
        phase_ = Phase::kHeader;
        QueueResponse(rejection_, nullptr, 0, AccessPin());
      }
    }
  }
  return !closed_;
}

void TargetConnection::ExpireWrite() {
  // The deadline passed mid-payload: not one more byte lands; the rest is discarded.
  runtime_->counters.expired_accesses.fetch_add(1, std::memory_order_relaxed);
  pin_.Release();
  if (write_staging_ != nullptr) {  // nothing of it reaches the file
    write_staging_.reset();
    staged_ -= request_.length;
  }
  rejection_ = TimeoutError(
      "tcp target: the write's deadline passed while its payload "
      "streamed in; it is incomplete");
  phase_ = Phase::kDiscard;
}

bool TargetConnection::FinishWrite() {
  // Every byte is in memory: the access is over, then the WRITE is answered. A file buffer's
  // bytes are in the staging: checked, they go on to the file, and the answer waits for that.
  phase_ = Phase::kHeader;
  const bool checksum_ok = !request_.payload_checksum || payload_crc_ == request_.payload_crc;
  if (write_staging_ != nullptr && checksum_ok) {
    StartStagedWrite();
    return true;
  }
  pin_.Release();
  if (write_staging_ != nullptr) {  // a bad checksum: nothing reaches the file
    write_staging_.reset();
    staged_ -= request_.length;
  }
  if (!checksum_ok) {
    // The corrupted bytes are in the region already: the WRITE must fail, not succeed.
    BadFrame(ChecksumMismatch("payload of WRITE request " + std::to_string(request_.request_id) +
                                  " (" + std::to_string(request_.length) + " bytes)",
                              request_.payload_crc, payload_crc_) +
             "; its target range may hold corrupted bytes");
    return false;
  }
  QueueResponse(Status::Ok(), nullptr, 0, AccessPin());
  return true;
}

bool TargetConnection::Throttled() const {
  return phase_ == Phase::kHeader && header_got_ == 0 &&
         (responses_.size() >= kMaxQueuedResponses || parked_);
}

void TargetConnection::BadFrame(const std::string& what) {
  runtime_->counters.bad_frames.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kWarn) << "tcp: " << what << " from " << peer_ << "; closing";
  // The initiator learns why before the connection goes (tcp_protocol.h, closing notice).
  QueueNotice(UnavailableError("tcp target closed the connection: " + what));
  closing_ = true;
  SendReady();
}

bool TargetConnection::OnHello() {
  header_got_ = 0;
  uint64_t initiator_ns = 0;
  Status decoded =
      DecodeHello(std::span<const uint8_t, kHelloSize>(header_bytes_.data(), kHelloSize),
                  kHelloMagic, &initiator_ns);
  if (!decoded.ok()) {
    BadFrame(decoded.message());
    return false;
  }
  hello_seen_ = true;
  Response& r = responses_.emplace_back();
  r.header_size = kHelloSize;
  EncodeHello(kHelloReplyMagic, SteadyNowNanos(),
              std::span<uint8_t, kHelloSize>(r.header.data(), kHelloSize));
  r.total = kHelloSize;
  if (responses_.size() == 1) last_progress_ = std::chrono::steady_clock::now();
  return true;
}

bool TargetConnection::RequestExpired() const {
  return request_.deadline != kNoDeadline && SteadyNowNanos() >= request_.deadline;
}

bool TargetConnection::OnRequestHeader() {
  header_got_ = 0;
  RequestHeader request;
  Status decoded = DecodeRequestHeader(header_bytes_, &request);
  if (decoded.ok() && request.request_id <= last_request_id_) {
    decoded = InvalidArgumentError("tcp bad frame: request id " +
                                   std::to_string(request.request_id) + " not increasing");
  }
  if (decoded.ok() && !hello_seen_) {
    decoded = InvalidArgumentError("tcp bad frame: a request before the clock hello");
  }
  if (!decoded.ok()) {
    BadFrame(decoded.message());
    return false;
  }
  request_ = request;
  last_request_id_ = request.request_id;
  payload_got_ = 0;
  payload_crc_ = 0;
  StartRequest();
  return true;
}

void TargetConnection::StartRequest() {
  const RequestHeader& request = request_;
  if (RequestExpired()) {
    // Checked before anything is pinned or moved: an expired request never starts.
    runtime_->counters.expired_accesses.fetch_add(1, std::memory_order_relaxed);
    const Status expired =
        TimeoutError("tcp target: the request's deadline passed before its access began");
    if (request.op == WireOp::kWrite) {
      rejection_ = expired;
      phase_ = Phase::kDiscard;
    } else {
      QueueResponse(expired, nullptr, 0, AccessPin());
    }
    return;
  }
  Result<AccessPin> pin = runtime_->ctx->PinRemoteAccess(
      request.remote_addr, request.length, request.incarnation, request.generation, "tcp");
  if (!pin.ok()) runtime_->counters.rejected_accesses.fetch_add(1, std::memory_order_relaxed);
  // Asked once pinned, so the answer holds while the pin does: a file buffer or device memory,
  // whose bytes go through this connection's staging, never at the address.
  const bool staged = pin.ok() && runtime_->ctx->IsStagedAddress(request.remote_addr);
  if (staged) {
    const uint64_t budget = runtime_->options.staging_bytes;
    if (request.length > budget) {
      pin->Release();
      runtime_->counters.rejected_accesses.fetch_add(1, std::memory_order_relaxed);
      pin = InvalidArgumentError(
          "tcp target: an access to a file buffer or device memory through staging moves at "
          "most " +
          std::to_string(budget) + " bytes per request, not " + std::to_string(request.length) +
          " (TcpTransportOptions::staging_bytes)");
    } else if (staged_ + request.length > budget) {
      pin->Release();
      parked_ = true;  // nothing pinned; served once answers free the staging (MaybeUnpark)
      runtime_->counters.staging_waits.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (request.op == WireOp::kWrite) {
    if (pin.ok()) {
      pin_ = std::move(pin).value();
      phase_ = Phase::kPayload;
      if (staged) {
        // Its payload lands in the staging, never at the staged address.
        write_staging_ = MakeStaging(request.length);
        if (write_staging_ == nullptr) {
          pin_.Release();
          rejection_ = NoStaging(request.length);
          phase_ = Phase::kDiscard;
        } else {
          staged_ += request.length;
        }
      }
    } else {
      rejection_ = pin.status();
      phase_ = Phase::kDiscard;
    }
    return;
  }
  if (!pin.ok()) {
    QueueResponse(pin.status(), nullptr, 0, AccessPin());
  } else if (staged) {
    StartStagedRead(std::move(pin).value());
  } else {
    QueueResponse(Status::Ok(), TargetPtr(request.remote_addr, 0), request.length,
                  std::move(pin).value());
  }
}

uint8_t* TargetConnection::PayloadPtr(uint64_t offset) const {
  return write_staging_ != nullptr ? write_staging_.get() + offset
                                   : TargetPtr(request_.remote_addr, offset);
}

void TargetConnection::StartStagedRead(AccessPin pin) {
  std::shared_ptr<uint8_t[]> staging = MakeStaging(request_.length);
  if (staging == nullptr) {
    QueueResponse(NoStaging(request_.length), nullptr, 0, AccessPin());
    return;
  }
  Response& r = responses_.emplace_back();
  r.staging = std::move(staging);
  r.staged = request_.length;
  staged_ += r.staged;
  r.staged_read = true;
  if (responses_.size() == 1) last_progress_ = std::chrono::steady_clock::now();
  StartStagedIo(r, OpCode::kRead, std::move(pin));
}

void TargetConnection::StartStagedWrite() {
  Response& r = responses_.emplace_back();
  r.staging = std::move(write_staging_);  // staged_ already counts it
  r.staged = request_.length;
  if (responses_.size() == 1) last_progress_ = std::chrono::steady_clock::now();
  StartStagedIo(r, OpCode::kWrite, std::move(pin_));
}

void TargetConnection::StartStagedIo(Response& r, OpCode op, AccessPin pin) {
  r.pending = true;
  r.request_id = request_.request_id;
  r.checksum = request_.payload_checksum;
  r.staged_io = ++next_staged_io_;
  TransportContext::StagedIo io;
  io.op = op;
  io.addr = request_.remote_addr;
  io.length = request_.length;
  io.incarnation = request_.incarnation;
  io.generation = request_.generation;
  io.staging = r.staging.get();
  if (request_.deadline != kNoDeadline) {
    io.deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(
        static_cast<int64_t>(std::min<uint64_t>(request_.deadline, INT64_MAX))));
  }
  // The staging lives until the I/O ended, whatever becomes of this connection; the answer goes
  // back to the loop thread (dropped when the loop is stopping).
  io.done = [self = shared_from_this(), id = r.staged_io, staging = r.staging](const Status& s) {
    self->loop_->Post([self, id, s] { self->OnStagedIoDone(id, s); });
  };
  Status started = runtime_->ctx->StartStagedIo(std::move(io), std::move(pin));
  if (started.ok()) runtime_->counters.staged_accesses.fetch_add(1, std::memory_order_relaxed);
  if (!started.ok()) {
    runtime_->counters.rejected_accesses.fetch_add(1, std::memory_order_relaxed);
    r.pending = false;
    staged_ -= r.staged;
    r.staged = 0;
    r.staging.reset();
    FillResponse(r, r.request_id, r.checksum, started, nullptr, 0);
  }
}

void TargetConnection::OnStagedIoDone(uint64_t id, const Status& status) {
  if (closed_) return;
  for (Response& r : responses_) {
    if (!r.pending || r.staged_io != id) continue;
    r.pending = false;
    if (status.ok() && r.staged_read) {
      FillResponse(r, r.request_id, r.checksum, status, r.staging.get(), r.staged);
    } else {
      staged_ -= r.staged;  // a WRITE's staging, or a failed READ's: no longer needed
      r.staged = 0;
      r.staging.reset();
      FillResponse(r, r.request_id, r.checksum, status, nullptr, 0);
    }
    last_progress_ = std::chrono::steady_clock::now();
    SendReady();  // also serves a request parked for staging (MaybeUnpark)
    return;
  }
}

void TargetConnection::MaybeUnpark() {
  if (!parked_ || closed_ || closing_) return;
  if (staged_ + request_.length > runtime_->options.staging_bytes) return;
  parked_ = false;
  StartRequest();
  // Requests read ahead (or the parked WRITE's payload) go on in a later turn of the loop.
  (void)loop_->Post([self = shared_from_this()] {
    if (!self->closed_) self->ReceiveReady();
  });
}

void TargetConnection::QueueResponse(const Status& status, const uint8_t* payload, uint64_t length,
                                     AccessPin pin) {
  Response& r = responses_.emplace_back();
  r.pin = std::move(pin);
  FillResponse(r, request_.request_id, request_.payload_checksum, status, payload, length);
  if (responses_.size() == 1) last_progress_ = std::chrono::steady_clock::now();
}

void TargetConnection::FillResponse(Response& r, uint64_t request_id, bool checksum,
                                    const Status& status, const uint8_t* payload, uint64_t length) {
  r.message = std::string(ClampMessage(status.message()));
  r.payload = payload;
  r.payload_length = length;
  ResponseHeader header;
  header.request_id = request_id;
  header.code = status.code();
  header.message_length = static_cast<uint16_t>(r.message.size());
  header.payload_length = length;
  header.body_crc = Crc32c(r.message);
  if (length > 0 && checksum) {
    const DmaScope dma;
    header.body_crc = Crc32cExtend(header.body_crc, payload, length);
  }
  EncodeResponseHeader(header, r.header);
  r.total = kResponseHeaderSize + r.message.size() + length;
}

void TargetConnection::QueueNotice(const Status& why) {
  Response& r = responses_.emplace_back();
  r.message = std::string(ClampMessage(why.message()));
  ResponseHeader header;
  header.request_id = kNoticeRequestId;
  header.code = why.ok() ? StatusCode::kInternal : why.code();
  header.message_length = static_cast<uint16_t>(r.message.size());
  header.body_crc = Crc32c(r.message);
  EncodeResponseHeader(header, r.header);
  r.total = kResponseHeaderSize + r.message.size();
  if (responses_.size() == 1) last_progress_ = std::chrono::steady_clock::now();
}

void TargetConnection::SendReady() {
  if (auth_.has_value()) {
    Authenticate();
    return;
  }
  uint64_t moved = 0;
  while (!closed_ && !responses_.empty() && moved < runtime_->options.bytes_per_turn) {
    std::array<iovec, kTargetMaxIov> iov;  // uninitialised: only the first n entries are passed
    size_t n = 0;
    for (size_t i = 0; i < responses_.size() && n + 3 <= kTargetMaxIov; ++i) {
      Response& r = responses_[i];
      if (r.pending) break;  // answers go in order: this one waits for its file I/O
      uint64_t at = r.sent;  // offset in header + message + payload
      if (at < r.header_size) {
        iov[n++] = {r.header.data() + at, r.header_size - at};
        at = r.header_size;
      }
      const uint64_t message_end = r.header_size + r.message.size();
      if (at < message_end) {
        iov[n++] = {r.message.data() + (at - r.header_size), message_end - at};
        at = message_end;
      }
      if (at < r.total) {
        iov[n++] = {const_cast<uint8_t*>(r.payload) + (at - message_end), r.total - at};
      }
    }
    if (n == 0) break;  // the first answer waits for its file I/O
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n;
    ssize_t sent = 0;
    {
      const DmaScope dma;  // READ payloads leave straight from pinned memory
      sent = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Close("send: " + ErrnoText(errno));
      return;
    }
    last_progress_ = std::chrono::steady_clock::now();
    moved += static_cast<uint64_t>(sent);
    auto left = static_cast<uint64_t>(sent);
    while (left > 0) {
      Response& r = responses_.front();
      const uint64_t take = std::min(left, r.total - r.sent);
      r.sent += take;
      left -= take;
      if (r.sent == r.total) {
        staged_ -= r.staged;
        responses_.pop_front();  // releases a READ's pin (or staging)
      }
    }
  }
  MaybeUnpark();
  if (!closed_ && closing_ && responses_.empty() && !shut_down_) {
    // The closing notice is out: end our side. The connection closes when the initiator hangs
    // up (it reads the notice, then EOF) or after io_timeout.
    (void)shutdown(fd_.get(), SHUT_WR);
    shut_down_ = true;
  }
  UpdateInterest();
}

void TargetConnection::UpdateInterest() {
  if (closed_ || !watched_) return;
  const bool throttled = Throttled();
  // An answer waiting for its file I/O sends nothing yet (nor do those behind it): watching for
  // EPOLLOUT then would wake this level-triggered loop at once, again and again, until the I/O
  // ended; its completion (OnStagedIoDone) sends instead.
  const bool to_send = auth_.has_value() ? !auth_->output().empty()
                                         : !responses_.empty() && !responses_.front().pending;
  const uint32_t want =
      (throttled || closing_ ? 0u : EPOLLIN) | EPOLLRDHUP | (to_send ? EPOLLOUT : 0u);
  if (want == interest_) return;
  interest_ = want;
  loop_->Modify(this, fd_.get(), interest_);
}

bool TargetConnection::Busy() const {
  return (auth_.has_value() && auth_began_) || phase_ != Phase::kHeader || header_got_ > 0 ||
         in_begin_ < in_end_ || !responses_.empty() || closing_;
}

void TargetConnection::OnEvents(uint32_t events) {
  if (auth_.has_value() && (events & (EPOLLIN | EPOLLRDHUP)) != 0) {
    Authenticate();  // first: a peer's refusal may come just before its hang-up
    if (closed_) return;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    // The initiator closed, half-closed or reset: it gave up on every request it sent (it never
    // half-closes while it waits for answers), so what is not started yet must not be.
    Close("initiator hung up");
    return;
  }
  if ((events & EPOLLIN) != 0) ReceiveReady();
  if (!closed_ && (events & EPOLLOUT) != 0) {
    SendReady();
    // Requests read ahead while throttled go on once answers made room.
    if (!closed_ && in_begin_ < in_end_ && !Throttled()) ReceiveReady();
  }
}

void TargetConnection::OnTick(TimePoint now) {
  if (!closed_ && auth_.has_value() && auth_->has_secret() &&
      now - accepted_at_ >= runtime_->options.io_timeout) {
    // The whole handshake is bounded from the accept, progress or not.
    runtime_->refusals.Refused("tcp target", peer_,
                               PermissionDeniedError("peer " + peer_ +
                                                     " did not authenticate within the io "
                                                     "timeout"));
    Close("authentication timed out");
    return;
  }
  if (closed_ || !Busy() || now - last_progress_ < runtime_->options.io_timeout) return;
  runtime_->counters.timeouts.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kWarn) << "tcp: " << peer_ << " made no progress for "
                   << runtime_->options.io_timeout.count() << " ms; closing";
  Close("timed out");
}

void TargetConnection::Close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  FERRY_LOG(kTrace) << "tcp: closing data connection from " << peer_ << ": " << why;
  if (watched_) loop_->Unwatch(this, fd_.get());
  fd_.Reset();
  pin_.Release();
  write_staging_.reset();
  parked_ = false;
  responses_.clear();  // releases READ pins (file I/O in flight keeps its staging until it ends)
}

}  // namespace ferry::tcp
