#include "transport/tcp/tcp_test_context.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

namespace ferry::tcp::testing {

void TestContext::AddRegion(const void* addr, uint64_t length, uint64_t generation,
                            bool remote_accessible, std::string transport) {
  MutexLock lock(mu_);
  regions_.push_back(Region{reinterpret_cast<uint64_t>(addr), length, generation,  // NOLINT
                            remote_accessible, std::move(transport)});
}

Result<AccessPin> TestContext::PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                               uint64_t generation, std::string_view transport) {
  MutexLock lock(mu_);
  ++pin_calls_;
  if (incarnation != incarnation_) return StaleError("incarnation mismatch");
  const Region* region = nullptr;
  for (const Region& r : regions_) {
    if (addr >= r.addr && addr < r.addr + r.length) region = &r;
  }
  if (region == nullptr) return NotFoundError("no region at address");
  if (length > region->addr + region->length - addr) {
    return InvalidArgumentError("range leaves the region");
  }
  if (generation != region->generation) return StaleError("generation mismatch");
  if (!region->remote_accessible) return PermissionDeniedError("not remote-accessible");
  if (transport != region->transport) return PermissionDeniedError("not registered for tcp");
  ++active_pins_;
  return AccessPin(&TestContext::ReleasePin, this, nullptr);
}

void TestContext::ReleasePin(void* owner, void* /*token*/) {
  auto* self = static_cast<TestContext*>(owner);
  MutexLock lock(self->mu_);
  --self->active_pins_;
  self->cv_.NotifyAll();
}

void TestContext::CompleteSlice(Slice* slice, const Status& status) {
  MutexLock lock(mu_);
  ++completions_;
  if (!done_.emplace(slice, status).second) ++duplicates_;
  if (slice == waiting_for_) cv_.NotifyAll();  // one wake-up per awaited slice, not per slice
}

Result<std::string> TestContext::Exchange(const SegmentDesc& /*peer*/,
                                          std::string_view /*transport*/,
                                          std::string_view /*payload*/,
                                          std::chrono::milliseconds /*timeout*/) {
  return InvalidArgumentError("no exchange in tcp tests");
}

bool TestContext::WaitAll(const std::vector<Slice*>& slices, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  for (Slice* slice : slices) {
    waiting_for_ = slice;
    while (done_.count(slice) == 0) {
      if (!cv_.WaitUntil(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) {
        break;
      }
    }
    waiting_for_ = nullptr;
    if (done_.count(slice) == 0) return false;
  }
  return true;
}

Status TestContext::StatusOf(Slice* slice) {
  MutexLock lock(mu_);
  auto it = done_.find(slice);
  return it == done_.end() ? InternalError("not completed") : it->second;
}

void TestContext::Forget(const std::vector<Slice*>& slices) {
  MutexLock lock(mu_);
  for (Slice* slice : slices) done_.erase(slice);
}

bool TestContext::WaitNoPins(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (active_pins_ != 0) {
    if (!cv_.WaitUntil(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) break;
  }
  return active_pins_ == 0;
}

int TestContext::active_pins() {
  MutexLock lock(mu_);
  return active_pins_;
}
uint64_t TestContext::pin_calls() {
  MutexLock lock(mu_);
  return pin_calls_;
}
uint64_t TestContext::completions() {
  MutexLock lock(mu_);
  return completions_;
}
uint64_t TestContext::duplicate_completions() {
  MutexLock lock(mu_);
  return duplicates_;
}

Slice* SliceBatch::Add(const Slice& slice) {
  owned.push_back(std::make_unique<Slice>(slice));
  ptrs.push_back(owned.back().get());
  return owned.back().get();
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
