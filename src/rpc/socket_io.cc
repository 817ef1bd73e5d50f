#include "rpc/socket_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "common/net_address.h"

namespace ferry::rpc {
namespace {

// getaddrinfo for a stream socket; numeric hosts are tried first so literals never reach DNS.
Result<AddrInfoPtr> Resolve(const std::string& host, const std::string& service, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* out = nullptr;
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out);
  if (rc == EAI_NONAME) {
    hints.ai_flags &= ~AI_NUMERICHOST;
    rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out);
  }
  if (rc != 0) {
    const std::string why = rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc);
    return UnavailableError("cannot resolve '" + host + "': " + why);
  }
  return AddrInfoPtr(out);
}

// Waits for `events` on `fd` until `deadline`. OK when ready; Timeout when the deadline passed;
// Unavailable when poll itself fails.
Status WaitFor(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, PollTimeoutMs(deadline));
    if (rc > 0) return Status::Ok();
    if (rc == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return TimeoutError("rpc i/o timed out");
      continue;  // poll rounds down in rare cases; wait out the rest
    }
    if (errno != EINTR) return UnavailableError("poll: " + ErrnoText(errno));
  }
}

// One non-blocking connect to `ai`, bounded by `deadline`.
Result<UniqueFd> ConnectOne(const addrinfo& ai, Deadline deadline) {
  UniqueFd fd(socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd.valid()) return UnavailableError("socket: " + ErrnoText(errno));
  if (connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return UnavailableError(ErrnoText(errno));
    Status ready = WaitFor(fd.get(), POLLOUT, deadline);
    if (!ready.ok()) {
      return UnavailableError(ready.code() == StatusCode::kTimeout ? "connect timed out"
                                                                   : ready.message());
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return UnavailableError(ErrnoText(err));
  }
  const int one = 1;
  (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

int PollTimeoutMs(Deadline deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= Deadline::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 3'600'000));
}

Result<UniqueFd> ConnectTcp(const HostPort& peer, Deadline deadline) {
  Result<AddrInfoPtr> addrs = Resolve(peer.host, std::to_string(peer.port), false);
  if (!addrs.ok()) return addrs.status().WithContext("connect to " + peer.ToString());
  Status last = UnavailableError("no address");
  for (const addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
    Result<UniqueFd> fd = ConnectOne(*ai, deadline);
    if (fd.ok()) return fd;
    last = fd.status();
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  return last.WithContext("connect to " + peer.ToString());
}

Result<TcpListener> ListenTcp(std::string_view host, uint16_t port, uint16_t port_range_end,
                              PortRange fallback) {
  if (port_range_end != 0 && (port == 0 || port_range_end < port)) {
    return InvalidArgumentError("bad rpc port range " + std::to_string(port) + ".." +
                                std::to_string(port_range_end));
  }
  PortRange range = fallback;
  if (port != 0) range = {port, port_range_end == 0 ? port : port_range_end};
  ASSIGN_OR_RETURN(BoundListener bound, ListenTcpInRange(std::string(host), range, "rpc"));
  return TcpListener{std::move(bound.fd), bound.port};
}

Status SendAll(int fd, std::string_view bytes, Deadline deadline) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline));
      continue;
    }
    return UnavailableError("send: " + ErrnoText(errno));
  }
  return Status::Ok();
}

Status RecvExact(int fd, char* out, size_t size, Deadline deadline) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = recv(fd, out + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return UnavailableError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline));
      continue;
    }
    return UnavailableError("recv: " + ErrnoText(errno));
  }
  return Status::Ok();
}

bool HasPendingInputOrError(int fd) {
  pollfd p{fd, POLLIN, 0};
  int rc;
  do {
    rc = poll(&p, 1, 0);
  } while (rc < 0 && errno == EINTR);
  return rc != 0;  // readable, hung up, in error, or poll failed: do not trust it
}

HostPort NumericAddress(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "0";
  (void)getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host),
                    serv,  // NOLINT
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
  return HostPort{host, static_cast<uint16_t>(std::strtoul(serv, nullptr, 10))};
}

}  // namespace ferry::rpc
