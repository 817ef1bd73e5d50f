#include "transport/tcp/tcp_test_context.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

namespace ferry::tcp::testing {

using namespace std::chrono_literals;

Result<AccessPin> GatedContext::PinRemoteAccess(uint64_t addr, uint64_t length,
                                                uint64_t incarnation, uint64_t generation,
                                                std::string_view transport) {
  if (addr == reinterpret_cast<uint64_t>(gate_)) {  // NOLINT
    MutexLock lock(mu_);
    frozen_ = true;
    cv_.NotifyAll();
    while (!open_) (void)cv_.WaitUntil(mu_, std::chrono::steady_clock::now() + 1s);
  }
  return inner_->PinRemoteAccess(addr, length, incarnation, generation, transport);
}

bool GatedContext::WaitFrozen(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (!frozen_ && std::chrono::steady_clock::now() < until) (void)cv_.WaitUntil(mu_, until);
  return frozen_;
}

void GatedContext::Open() {
  MutexLock lock(mu_);
  open_ = true;
  cv_.NotifyAll();
}

size_t OpenFdCount() {
  size_t n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

RawSocket::~RawSocket() { Close(); }

void RawSocket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

RawSocket RawSocket::ListenLoopback(uint16_t* port) {
  RawSocket s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);  // NOLINT
  if (bind(s.fd(), sa, sizeof(addr)) != 0 || listen(s.fd(), 64) != 0) return RawSocket();
  socklen_t len = sizeof(addr);
  (void)getsockname(s.fd(), sa, &len);
  *port = ntohs(addr.sin_port);
  return s;
}

RawSocket RawSocket::ConnectLoopback(uint16_t port) {
  RawSocket s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {  // NOLINT
    return RawSocket();
  }
  return s;
}

RawSocket RawSocket::Accept(std::chrono::milliseconds timeout) const {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return RawSocket();
  return RawSocket(accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
}

bool RawSocket::SendAll(const void* data, size_t size) const {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = send(fd_, p, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

long RawSocket::RecvSome(void* data, size_t size, std::chrono::milliseconds timeout) const {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return -1;
  return static_cast<long>(recv(fd_, data, size, 0));
}

}  // namespace ferry::tcp::testing
