#include "common/connect_error.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "common/log.h"
#include "common/net_address.h"
#include "common/unique_fd.h"

namespace ferry {
namespace {

using SteadyClock = std::chrono::steady_clock;

// One non-blocking connect to `ai` until `deadline`: 0 when it connected, else the errno
// (ETIMEDOUT when the deadline passed).
int ConnectOnce(const addrinfo& ai, SteadyClock::time_point deadline) {
  UniqueFd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                       ai.ai_protocol));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return ETIMEDOUT;
    pollfd p{fd.get(), POLLOUT, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 3'600'000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return errno;
    if (rc == 0) continue;  // the loop head decides whether time is up
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
  }
}

}  // namespace

std::string ConnectErrnoText(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "connection refused";
    case EHOSTUNREACH:
      return "no route to host";
    case ENETUNREACH:
      return "network unreachable";
    case ETIMEDOUT:
      return "timed out";
    case ECONNRESET:
      return "connection reset";
    default:
      return ErrnoText(err);
  }
}

std::string MillisText(SteadyClock::duration d) {
  return std::to_string(std::chrono::round<std::chrono::milliseconds>(d).count()) + " ms";
}

std::string DiagnoseConnect(const HostPort& server, std::chrono::milliseconds timeout) {
  const auto start = SteadyClock::now();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(server.port);
  const int rc = ::getaddrinfo(server.host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return "cannot resolve '" + server.host +
           "': " + (rc == EAI_SYSTEM ? ErrnoText(errno) : std::string(gai_strerror(rc)));
  }
  AddrInfoPtr addrs(found);
  const auto deadline = start + timeout;
  int err = ETIMEDOUT;
  for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    err = ConnectOnce(*ai, deadline);
    if (err == 0) return "connects now (the failure was transient)";
    if (SteadyClock::now() >= deadline) break;
  }
  if (err == ETIMEDOUT) return "timed out after " + MillisText(SteadyClock::now() - start);
  return ConnectErrnoText(err);
}

std::string DescribeConnectFailure(const HostPort& server, SteadyClock::duration elapsed,
                                   std::chrono::milliseconds timeout) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout - elapsed);
  // Out of time, or so nearly that another attempt could not tell more.
  if (left < std::chrono::milliseconds(10)) return "timed out after " + MillisText(elapsed);
  const auto start = SteadyClock::now();
  std::string why = DiagnoseConnect(server, left);
  if (why.rfind("timed out", 0) == 0) {
    return "failed after " + MillisText(elapsed) + ", and a second attempt timed out after " +
           MillisText(SteadyClock::now() - start);
  }
  return why + " (after " + MillisText(elapsed) + ")";
}

}  // namespace ferry
