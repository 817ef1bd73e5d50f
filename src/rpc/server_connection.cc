#include "rpc/server_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"

namespace ferry::rpc {

ServerConnection::ServerConnection(UniqueFd fd, PeerInfo peer, const ConnectionLimits& limits,
                                   Deadline now)
    : fd_(std::move(fd)), peer_(std::move(peer)), limits_(limits), last_progress_(now) {}

short ServerConnection::PollEvents() const {
  switch (phase_) {
    case Phase::kReading:
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
    case Phase::kReading:
      return last_progress_ + (header_have_ == 0 ? limits_.idle_timeout : limits_.io_timeout);
    case Phase::kWriting:
      return last_progress_ + limits_.io_timeout;
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

ServerConnection::Outcome ServerConnection::OnReadable(Deadline now, InboundRequest* request,
                                                       std::string* error) {
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
      if (in_header && header_have_ == kFrameHeaderSize) {
        if (Outcome o = OnHeader(error); o != Outcome::kPending) return o;
      }
    }
    if (header_have_ == kFrameHeaderSize && payload_have_ == header_.payload_len) {
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
  while (phase_ == Phase::kWriting) {
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
