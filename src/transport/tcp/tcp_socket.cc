#include "transport/tcp/tcp_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "common/net_address.h"

namespace ferry::tcp {
namespace {

// getaddrinfo for a stream socket; numeric hosts are tried first so literals never reach DNS.
Result<AddrInfoPtr> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  addrinfo* out = nullptr;
  int rc = getaddrinfo(node, service.c_str(), &hints, &out);
  if (rc == EAI_NONAME && node != nullptr) {
    hints.ai_flags &= ~AI_NUMERICHOST;
    rc = getaddrinfo(node, service.c_str(), &hints, &out);
  }
  if (rc != 0) {
    const std::string why = rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc);
    return UnavailableError("cannot resolve '" + host + "': " + why);
  }
  return AddrInfoPtr(out);
}

SocketAddress FromAddrInfo(const addrinfo& ai) {
  SocketAddress addr;
  std::memcpy(&addr.storage, ai.ai_addr, ai.ai_addrlen);
  addr.length = ai.ai_addrlen;
  return addr;
}

}  // namespace

std::string SocketAddress::ToString() const {
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "0";
  (void)getnameinfo(reinterpret_cast<const sockaddr*>(&storage), length,  // NOLINT
                    host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
  if (storage.ss_family == AF_INET6) return "[" + std::string(host) + "]:" + serv;
  return std::string(host) + ":" + serv;
}

Result<SocketAddress> ResolveAddress(const std::string& host, uint16_t port) {
  ASSIGN_OR_RETURN(AddrInfoPtr list, Resolve(host, port, false));
  return FromAddrInfo(*list);
}

Result<UniqueFd> BeginConnect(const SocketAddress& addr, bool* connected) {
  UniqueFd fd(socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return UnavailableError("socket: " + ErrnoText(errno));
  const auto* sa = reinterpret_cast<const sockaddr*>(&addr.storage);  // NOLINT
  int rc;
  do {
    rc = connect(fd.get(), sa, addr.length);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    *connected = true;
  } else if (errno == EINPROGRESS) {
    *connected = false;
  } else {
    return UnavailableError("connect to " + addr.ToString() + ": " + ErrnoText(errno));
  }
  return fd;
}

Status FinishConnect(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return UnavailableError(ErrnoText(err));
  return Status::Ok();
}

void ConfigureDataSocket(int fd) {
  const int one = 1;
  const int idle_s = 60;
  const int interval_s = 10;
  const int probes = 3;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

void ResetOnClose(int fd) {
  const linger hard{1, 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
}

RecvOutcome RecvSome(int fd, void* buf, size_t len, size_t* got) {
  for (;;) {
    const ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return RecvOutcome::kProgress;
    }
    if (n == 0) return RecvOutcome::kPeerClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return RecvOutcome::kWouldBlock;
    return RecvOutcome::kError;
  }
}

}  // namespace ferry::tcp
