#include "rpc/server_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace ferry::rpc {

ServerConnection::ServerConnection(UniqueFd fd, PeerInfo peer, const ConnectionLimits& limits,
                                   auth::Handshake handshake, Deadline now)
    : fd_(std::move(fd)),
      peer_(std::move(peer)),
      limits_(limits),
      auth_(std::move(handshake)),
      accepted_at_(now),
      last_progress_(now) {}

short ServerConnection::PollEvents() const {
  switch (phase_) {
    case Phase::kAuth:
      return auth_.output().empty() ? POLLIN : POLLOUT;
    case Phase::kReading:
    case Phase::kDraining:
      return POLLIN;
    case Phase::kWriting:
      return POLLOUT;
    case Phase::kHandling:
      break;
  }
  return 0;
}

Deadline ServerConnection::deadline() const {
  switch (phase_) {
    case Phase::kAuth:
      // With a secret the whole handshake is bounded from the accept; without one this only
      // waits for the first frame's first bytes, as an idle connection would.
      if (auth_.has_secret()) return accepted_at_ + limits_.io_timeout;
      return last_progress_ + (auth_began_ ? limits_.io_timeout : limits_.idle_timeout);
    case Phase::kReading:
      return last_progress_ + (header_have_ == 0 ? limits_.idle_timeout : limits_.io_timeout);
    case Phase::kWriting:
      return last_progress_ + limits_.io_timeout;
    case Phase::kDraining:
      return drain_until_;
    case Phase::kHandling:
      break;
  }
  return Deadline::max();
}

ServerConnection::Outcome ServerConnection::OnHeader(std::string* error) {
  std::string_view bytes(header_bytes_, kFrameHeaderSize);
  Result<FrameHeader> header = DecodeFrameHeader(bytes, limits_.max_frame_bytes);
  if (!header.ok()) {
    *error = header.status().message();
    return Outcome::kBadFrame;
  }
  if (header->is_response()) {
    *error = "rpc frame: a response where a request was expected";
    return Outcome::kBadFrame;
  }
  header_ = *header;
  payload_.clear();
  payload_have_ = 0;
  GrowPayloadBuffer();
  return Outcome::kPending;
}

void ServerConnection::GrowPayloadBuffer() {
  // Memory follows the bytes that actually arrived (doubling, from 64 KiB), not the length the
  // peer claims: a peer that announces a large frame and stalls holds little.
  constexpr size_t kFirstChunk = 64 * 1024;
  const size_t want = std::max(kFirstChunk, payload_.size() * 2);
  payload_.resize(std::min<size_t>(header_.payload_len, want));
}

ServerConnection::Outcome ServerConnection::BadFrame(std::string why, Deadline now,
                                                     std::string* error) {
  // The peer learns why before the close (rpc/frame.h: the closing notice); the notice is
  // written from the loop's next turn on, like any response.
  out_ = EncodeClosingNotice(
      InvalidArgumentError("rpc server closed the connection after a bad frame: " + why));
  out_sent_ = 0;
  closing_ = true;
  phase_ = Phase::kWriting;
  last_progress_ = now;
  drain_until_ = now + limits_.io_timeout;
  *error = std::move(why);
  return Outcome::kBadFrame;
}

ServerConnection::Outcome ServerConnection::Drain(Deadline now, std::string* error) {
  // A bounded number of reads per turn: a peer that floods cannot hold the loop.
  char scratch[4096];
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = recv(fd_.get(), scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n == 0) return Outcome::kPeerClosed;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Outcome::kPending;
      *error = "recv while closing: " + ErrnoText(errno);
      return Outcome::kIoError;
    }
    last_progress_ = now;
  }
  return Outcome::kPending;
}

ServerConnection::Outcome ServerConnection::Authenticate(Deadline now, std::string* error) {
  while (phase_ == Phase::kAuth) {
    if (auth_.denied()) {
      auth::FlushRefusal(auth_, fd_.get());  // best-effort: the peer learns why
      *error = auth_.error().message();
      return Outcome::kDenied;
    }
    if (auth_.done()) {
      const std::span<const uint8_t> first = auth_.passthrough();  // <= 4 bytes of a frame
      if (!first.empty()) std::memcpy(header_bytes_, first.data(), first.size());
      header_have_ = first.size();
      last_progress_ = now;
      phase_ = Phase::kReading;
      break;
    }
    const auth::SendStep sent = auth::SendPending(auth_, fd_.get());
    if (sent == auth::SendStep::kBlocked) return Outcome::kPending;
    if (sent == auth::SendStep::kFailed) {
      *error = "send during authentication: " + ErrnoText(errno);
      return Outcome::kIoError;
    }
    if (sent == auth::SendStep::kSent) {
      last_progress_ = now;
      continue;
    }
    uint8_t in[auth::kMessageSize];
    const ssize_t n = recv(fd_.get(), in, std::min(sizeof(in), auth_.want()), MSG_DONTWAIT);
    if (n == 0) return Outcome::kPeerClosed;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Outcome::kPending;
      *error = "recv during authentication: " + ErrnoText(errno);
      return Outcome::kIoError;
    }
    auth_.Received(std::span<const uint8_t>(in, static_cast<size_t>(n)));
    auth_began_ = true;
    last_progress_ = now;
  }
  return Outcome::kPending;
}

ServerConnection::Outcome ServerConnection::OnReadable(Deadline now, InboundRequest* request,
                                                       std::string* error) {
  if (phase_ == Phase::kDraining) return Drain(now, error);
  if (phase_ == Phase::kAuth) {
    if (Outcome o = Authenticate(now, error); o != Outcome::kPending || phase_ == Phase::kAuth) {
      return o;
    }
  }
  while (phase_ == Phase::kReading) {
    const bool in_header = header_have_ < kFrameHeaderSize;
    if (!in_header && payload_have_ == payload_.size() && payload_.size() < header_.payload_len) {
      GrowPayloadBuffer();
    }
    char* dst = in_header ? header_bytes_ + header_have_ : payload_.data() + payload_have_;
    const size_t want =
        in_header ? kFrameHeaderSize - header_have_ : payload_.size() - payload_have_;
    if (want > 0) {
      const ssize_t n = recv(fd_.get(), dst, want, 0);
      if (n == 0) return Outcome::kPeerClosed;
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Outcome::kPending;
        *error = "recv: " + ErrnoText(errno);
        return Outcome::kIoError;
      }
      last_progress_ = now;
      (in_header ? header_have_ : payload_have_) += static_cast<size_t>(n);
      if (in_header && header_have_ < kFrameHeaderSize) {
        // A peer of another version may send a shorter header: refuse it on its first bytes.
        Status prefix = FramePrefixError(std::string_view(header_bytes_, header_have_));
        if (!prefix.ok()) return BadFrame(prefix.message(), now, error);
      }
      if (in_header && header_have_ == kFrameHeaderSize) {
        if (OnHeader(error) != Outcome::kPending) return BadFrame(*error, now, error);
      }
    }
    if (header_have_ == kFrameHeaderSize && payload_have_ == header_.payload_len) {
      // Corrupted bytes are never handled.
      if (Status intact = VerifyFramePayload(header_, payload_); !intact.ok()) {
        return BadFrame(intact.message(), now, error);
      }
      request->header = header_;
      request->payload = std::move(payload_);
      payload_.clear();
      header_have_ = 0;
      payload_have_ = 0;
      phase_ = Phase::kHandling;
      return Outcome::kRequest;
    }
  }
  return Outcome::kPending;
}

void ServerConnection::StartResponse(std::string frame, Deadline now) {
  out_ = std::move(frame);
  out_sent_ = 0;
  last_progress_ = now;
  phase_ = Phase::kWriting;
}

ServerConnection::Outcome ServerConnection::OnWritable(Deadline now, std::string* error) {
  if (phase_ == Phase::kAuth) return Authenticate(now, error);
  while (phase_ == Phase::kWriting) {
    if (out_sent_ == out_.size() && closing_) {
      // The notice is out: end our side (the peer reads it, then EOF) and drain until it closes.
      (void)shutdown(fd_.get(), SHUT_WR);
      out_.clear();
      phase_ = Phase::kDraining;
      break;
    }
    if (out_sent_ == out_.size()) {
      out_.clear();
      out_.shrink_to_fit();
      last_progress_ = now;  // the idle clock starts when the response is out
      phase_ = Phase::kReading;
      break;
    }
    const ssize_t n =
        send(fd_.get(), out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Outcome::kPending;
      *error = "send: " + ErrnoText(errno);
      return Outcome::kIoError;
    }
    out_sent_ += static_cast<size_t>(n);
    last_progress_ = now;
  }
  return Outcome::kPending;
}

}  // namespace ferry::rpc
