#include "transport/tcp/target_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <utility>

#include "common/log.h"
#include "transport/tcp/target_connection.h"
#include "transport/tcp/tcp_runtime.h"

namespace ferry::tcp {

TargetServer::TargetServer(std::shared_ptr<TcpRuntime> runtime, IoLoop* loop, UniqueFd listener)
    : runtime_(std::move(runtime)), loop_(loop), listener_(std::move(listener)) {}

bool TargetServer::Start() {
  return loop_->Post([self = shared_from_this()] { self->Register(); });
}

void TargetServer::Register() {
  Status watched = loop_->Watch(shared_from_this(), listener_.get(), EPOLLIN);
  if (!watched.ok()) {
    FERRY_LOG(kError) << "tcp: cannot watch the data listener: " << watched.message();
    listener_.Reset();
  }
}

void TargetServer::OnEvents(uint32_t /*events*/) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr),  // NOLINT
                           &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      FERRY_LOG(kWarn) << "tcp: accept: " << ErrnoText(errno) << "; pausing accepts";
      paused_ = true;  // EMFILE and friends: retry on the next tick instead of spinning
      loop_->Modify(this, listener_.get(), 0);
      return;
    }
    SocketAddress peer;
    peer.storage = addr;
    peer.length = len;
    Serve(UniqueFd(fd), peer.ToString());
  }
}

void TargetServer::Serve(UniqueFd fd, const std::string& peer) {
  if (runtime_->open_target_connections.load(std::memory_order_relaxed) >=
      runtime_->options.max_target_connections) {
    FERRY_LOG(kWarn) << "tcp: refusing " << peer << ": " << runtime_->options.max_target_connections
                     << " connections open";
    return;  // closes fd
  }
  IoLoop* loop = runtime_->PickLoop();
  auto connection = std::make_shared<TargetConnection>(runtime_, loop, std::move(fd), peer);
  // A refused post means the loop is stopping; dropping the connection closes it.
  (void)loop->Post([connection] { connection->Start(); });
}

void TargetServer::OnTick(TimePoint /*now*/) {
  if (!paused_ || !listener_.valid()) return;
  paused_ = false;
  loop_->Modify(this, listener_.get(), EPOLLIN);
}

void TargetServer::Shutdown(const Status& /*why*/) {
  if (!listener_.valid()) return;
  loop_->Unwatch(this, listener_.get());
  listener_.Reset();
}

}  // namespace ferry::tcp
