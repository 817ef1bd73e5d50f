// GrantConnection: the initiator side of the grant channel (grant_channel.h, grant_wire.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/samehost/grant_channel.h"
#include "transport/samehost/grant_wire.h"

namespace ferry::samehost {
namespace {

using wire::FrameType;

// Thread contract: one caller at a time (see GrantConnection).
class UnixGrantConnection final : public GrantConnection {
 public:
  UnixGrantConnection(UniqueFd fd, std::string path, pid_t peer_pid)
      : fd_(std::move(fd)), path_(std::move(path)), peer_pid_(peer_pid) {
    request_.reserve(wire::kHeaderSize + 4 + 64 * wire::kRangeSize);
  }

  Status Acquire(std::span<const RangeRequest> ranges, std::vector<Status>* results,
                 Deadline deadline) override {
    if (broken_) return UnavailableError("grant connection to " + path_ + " is broken");
    if (ranges.empty() || ranges.size() > wire::kMaxRanges) {
      return InvalidArgumentError("grant Acquire takes 1.." + std::to_string(wire::kMaxRanges) +
                                  " ranges, not " + std::to_string(ranges.size()));
    }
    request_.clear();
    const auto payload = static_cast<uint32_t>(4 + ranges.size() * wire::kRangeSize);
    wire::PutHeader(&request_, FrameType::kAcquire, payload);
    wire::PutU32(&request_, static_cast<uint32_t>(ranges.size()));
    for (const RangeRequest& r : ranges) {
      wire::PutU64(&request_, r.addr);
      wire::PutU64(&request_, r.length);
      wire::PutU64(&request_, r.incarnation);
      wire::PutU64(&request_, r.generation);
      wire::PutU64(&request_, wire::EncodeDeadline(r.deadline));
    }
    RETURN_IF_ERROR(Check(wire::SendAll(fd_.get(), request_, deadline)));
    RETURN_IF_ERROR(CheckNotRefused(deadline));
    wire::FrameHeader header;
    RETURN_IF_ERROR(Check(wire::RecvFrame(fd_.get(), deadline, &header, &reply_, nullptr)));
    return ParseAcquireReply(header, ranges.size(), results);
  }

  Status Release() override {
    if (broken_) return UnavailableError("grant connection to " + path_ + " is broken");
    std::string frame;
    wire::PutHeader(&frame, FrameType::kRelease, 0);
    // A release never waits on the target for long: the frame is 8 bytes.
    return Check(wire::SendAll(fd_.get(), frame,
                               std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  }

  Result<int> FetchFd(uint64_t id, Deadline deadline) override {
    if (broken_) return UnavailableError("grant connection to " + path_ + " is broken");
    std::string frame;
    wire::PutHeader(&frame, FrameType::kFetchFd, 8);
    wire::PutU64(&frame, id);
    RETURN_IF_ERROR(Check(wire::SendAll(fd_.get(), frame, deadline)));
    RETURN_IF_ERROR(CheckNotRefused(deadline));
    wire::FrameHeader header;
    UniqueFd received;
    RETURN_IF_ERROR(Check(wire::RecvFrame(fd_.get(), deadline, &header, &reply_, &received)));
    wire::Reader reader(reply_);
    Status answer;
    if (header.type != FrameType::kFetchFdReply || !reader.GetStatus(&answer) ||
        reader.remaining() != 0 || answer.ok() != received.valid()) {
      return BadFrame("malformed FetchFd reply");
    }
    if (!answer.ok()) return answer;
    return received.Release();
  }

  bool broken() const override { return broken_; }
  pid_t peer_pid() const override { return peer_pid_; }

 private:
  // Before the first reply is read as a frame: a server that requires authentication (or
  // found ours wrong) answers with a refusal (common/peer_auth.h) instead, which is returned as
  // PermissionDenied; the connection is then broken.
  Status CheckNotRefused(Deadline deadline) {
    if (!first_reply_) return Status::Ok();
    first_reply_ = false;
    RETURN_IF_ERROR(Check(wire::WaitReady(fd_.get(), POLLIN, deadline)));
    uint8_t head[8];
    const ssize_t n = ::recv(fd_.get(), head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
    if (n < 4) return Status::Ok();  // RecvFrame reads (or fails on) whatever it is
    Status refused =
        auth::RefusalIn(std::span<const uint8_t>(head, static_cast<size_t>(n)), path_);
    if (refused.ok()) return refused;
    broken_ = true;
    fd_.Reset();
    return refused;
  }

  // Marks the connection broken when `s` failed; returns `s`, a bad frame as Unavailable.
  Status Check(Status s) {
    if (s.ok()) return s;
    broken_ = true;
    fd_.Reset();
    if (s.code() == StatusCode::kInvalidArgument) {
      return UnavailableError("grant channel " + path_ + ": " + s.message());
    }
    return s.WithContext("grant channel " + path_);
  }

  Status BadFrame(const std::string& what) { return Check(InvalidArgumentError(what)); }

  Status ParseAcquireReply(const wire::FrameHeader& header, size_t count,
                           std::vector<Status>* results) {
    wire::Reader reader(reply_);
    Status overall;
    uint32_t n = 0;
    if (header.type != FrameType::kAcquireReply || !reader.GetStatus(&overall) ||
        !reader.GetU32(&n)) {
      return BadFrame("malformed Acquire reply");
    }
    if (!overall.ok()) {
      if (n != 0 || reader.remaining() != 0) return BadFrame("malformed Acquire reply");
      return overall;
    }
    if (n != count) return BadFrame("Acquire reply answers the wrong number of ranges");
    std::vector<Status> out(count);
    for (Status& s : out) {
      if (!reader.GetStatus(&s)) return BadFrame("malformed Acquire reply");
    }
    if (reader.remaining() != 0) return BadFrame("malformed Acquire reply");
    *results = std::move(out);
    return Status::Ok();
  }

  UniqueFd fd_;
  const std::string path_;
  const pid_t peer_pid_;
  bool broken_ = false;
  bool first_reply_ = true;  // no reply read yet (CheckNotRefused)
  std::string request_;
  std::string reply_;
};

}  // namespace

Result<std::unique_ptr<GrantConnection>> GrantConnection::Connect(const std::string& path,
                                                                  Deadline deadline,
                                                                  const GrantAuth& auth) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("grant socket path '" + path + "' is empty or too long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A blocking connect on a Unix socket waits (up to SO_SNDTIMEO) for room in a full backlog;
  // the socket turns non-blocking once connected.
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return UnavailableError("grant socket: " + ErrnoText(errno));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return TimeoutError("connect to grant socket " + path + ": backlog full until timeout");
    }
    const int64_t us = std::min<int64_t>(left.count(), int64_t{3600} * 1000 * 1000);
    timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
      return UnavailableError("grant socket SO_SNDTIMEO: " + ErrnoText(errno));
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    const int err = errno;
    if (err == EINTR || err == EAGAIN || err == EINPROGRESS) continue;  // re-checks the deadline
    if (err == EACCES || err == EPERM) {
      return PermissionDeniedError("connect to grant socket " + path + ": " + ErrnoText(err));
    }
    return UnavailableError("connect to grant socket " + path + ": " + ErrnoText(err));
  }
  const timeval none{0, 0};
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) != 0 || flags < 0 ||
      ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return UnavailableError("grant socket set-up: " + ErrnoText(errno));
  }
  // Who answers: the kernel's record of the listener, which no peer can forge.
  ucred peer{};
  socklen_t peer_size = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0) {
    return UnavailableError("grant socket " + path + " SO_PEERCRED: " + ErrnoText(errno));
  }
  if (!auth.secret.empty()) {
    ASSIGN_OR_RETURN(auth::Handshake handshake,
                     auth::Handshake::Client(GrantAuthChannel(auth.transport), auth.secret,
                                             "grant socket " + path));
    RETURN_IF_ERROR(auth::RunHandshake(handshake, fd.get(), deadline));
  }
  return std::unique_ptr<GrantConnection>(
      std::make_unique<UnixGrantConnection>(std::move(fd), path, peer.pid));
}

}  // namespace ferry::samehost
