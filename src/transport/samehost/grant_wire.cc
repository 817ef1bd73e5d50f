#include "transport/samehost/grant_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "common/log.h"
#include "common/wire_codec.h"
#include "common/wire_status.h"

namespace ferry::samehost {

namespace wire {
namespace {

// Bytes of a frame read by the first recvmsg: a typical Acquire reply fits.
constexpr size_t kFirstRead = 16 * 1024;

int RemainingMs(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 60 * 60 * 1000));
}

// Takes the fds of a received control message: keeps the first in `out` (when non-null and
// empty), closes the rest.
void TakeFds(msghdr* msg, UniqueFd* out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (out != nullptr && !out->valid()) {
        out->Reset(fd);
      } else {
        ::close(fd);
      }
    }
  }
}

// One recvmsg of up to `length` bytes into `buf`; 0 bytes read means EAGAIN. Unavailable on
// EOF or error.
Result<size_t> RecvSome(int fd, char* buf, size_t length, UniqueFd* received_fd) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, length};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
    return UnavailableError("grant channel recv: " + ErrnoText(errno));
  }
  if (msg.msg_controllen > 0) TakeFds(&msg, received_fd);
  if (n == 0) return UnavailableError("grant channel closed by the peer");
  return static_cast<size_t>(n);
}

}  // namespace

uint64_t EncodeDeadline(Deadline deadline) {
  if (deadline == Deadline::max()) return kNoDeadline;
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
  if (ns <= 0) return 0;
  return std::min(static_cast<uint64_t>(ns), kNoDeadline - 1);
}

Deadline DecodeDeadline(uint64_t nanoseconds) {
  using Ns = std::chrono::nanoseconds;
  if (nanoseconds >= static_cast<uint64_t>(std::numeric_limits<Ns::rep>::max())) {
    return Deadline::max();
  }
  return Deadline(
      std::chrono::duration_cast<Deadline::duration>(Ns(static_cast<Ns::rep>(nanoseconds))));
}

void PutU16(std::string* out, uint16_t v) { WireWriter(out).PutU16(v); }
void PutU32(std::string* out, uint32_t v) { WireWriter(out).PutU32(v); }
void PutU64(std::string* out, uint64_t v) { WireWriter(out).PutU64(v); }

void PutStatus(std::string* out, const Status& status) {
  WireWriter w(out);
  w.PutU8(StatusCodeToWire(status.code()));
  const std::string_view text = std::string_view(status.message()).substr(0, kMaxStatusText);
  w.PutU16(static_cast<uint16_t>(text.size()));
  w.PutBytes(text);
}

void PutHeader(std::string* out, FrameType type, uint32_t payload_length) {
  WireWriter w(out);
  w.PutU32(payload_length);
  w.PutU8(static_cast<uint8_t>(type));
  w.PutU8(kVersion);
  w.PutU16(0);
}

Result<FrameHeader> ParseHeader(const uint8_t* b) {
  FrameHeader h;
  h.payload_length = LoadLe32(b);
  if (h.payload_length > kMaxFramePayload) {
    return InvalidArgumentError("grant frame of " + std::to_string(h.payload_length) +
                                " bytes exceeds the limit");
  }
  if (b[4] < static_cast<uint8_t>(FrameType::kAcquire) ||
      b[4] > static_cast<uint8_t>(FrameType::kMapSlotReply)) {
    return InvalidArgumentError("unknown grant frame type " + std::to_string(b[4]));
  }
  if (b[5] != kVersion) {
    return InvalidArgumentError("grant frame version " + std::to_string(b[5]) + " (expected " +
                                std::to_string(kVersion) + ")");
  }
  if (b[6] != 0 || b[7] != 0) return InvalidArgumentError("grant frame reserved bytes not zero");
  h.type = static_cast<FrameType>(b[4]);
  return h;
}

bool Reader::GetU32(uint32_t* v) { return in_.GetU32("u32", v).ok(); }

bool Reader::GetU64(uint64_t* v) { return in_.GetU64("u64", v).ok(); }

bool Reader::GetStatus(Status* status) {
  // Reads a copy, so that a malformed status leaves the reader where it was.
  WireReader r = in_;
  uint8_t wire = 0;
  uint16_t n = 0;
  std::string_view text;
  if (!r.GetU8("status code", &wire).ok() || !r.GetU16("status text length", &n).ok()) {
    return false;
  }
  const std::optional<StatusCode> code = StatusCodeFromWire(wire);
  if (!code.has_value() || n > kMaxStatusText || !r.GetBytes("status text", n, &text).ok()) {
    return false;
  }
  if (*code == StatusCode::kOk) {
    if (n != 0) return false;
    *status = Status::Ok();
  } else {
    *status = Status(*code, std::string(text));
  }
  in_ = r;
  return true;
}

Status WaitReady(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ms = RemainingMs(deadline);
    const int n = ::poll(&p, 1, ms);
    if (n > 0) {
      if ((p.revents & events) != 0) return Status::Ok();
      return UnavailableError("grant channel closed or failed");
    }
    if (n < 0 && errno != EINTR) return UnavailableError("grant channel poll: " + ErrnoText(errno));
    if (n == 0 && ms == 0) return TimeoutError("grant channel: no answer in time");
    if (n == 0 && std::chrono::steady_clock::now() >= deadline) {
      return TimeoutError("grant channel: no answer in time");
    }
  }
}

Status SendAll(int fd, std::string_view bytes, Deadline deadline, int pass_fd) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    iovec iov{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (pass_fd >= 0) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      pass_fd = -1;  // it went with the first bytes
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      RETURN_IF_ERROR(WaitReady(fd, POLLOUT, deadline));
      continue;
    }
    return UnavailableError("grant channel send: " + ErrnoText(n < 0 ? errno : EPIPE));
  }
  return Status::Ok();
}

Status RecvFrame(int fd, Deadline deadline, FrameHeader* header, std::string* payload,
                 UniqueFd* received_fd) {
  char first[kFirstRead];
  size_t have = 0;
  while (have < kHeaderSize) {
    ASSIGN_OR_RETURN(size_t n, RecvSome(fd, first + have, sizeof(first) - have, received_fd));
    if (n == 0) RETURN_IF_ERROR(WaitReady(fd, POLLIN, deadline));
    have += n;
  }
  ASSIGN_OR_RETURN(*header, ParseHeader(reinterpret_cast<const uint8_t*>(first)));
  const size_t total = kHeaderSize + header->payload_length;
  if (have > total) return InvalidArgumentError("grant channel: bytes beyond the frame");
  payload->assign(first + kHeaderSize, have - kHeaderSize);
  size_t got = payload->size();
  payload->resize(header->payload_length);
  while (got < header->payload_length) {
    ASSIGN_OR_RETURN(
        size_t n, RecvSome(fd, payload->data() + got, header->payload_length - got, received_fd));
    if (n == 0) RETURN_IF_ERROR(WaitReady(fd, POLLIN, deadline));
    got += n;
  }
  return Status::Ok();
}

}  // namespace wire
}  // namespace ferry::samehost
