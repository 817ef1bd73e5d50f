#include "rpc/server_loop.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "common/log.h"

namespace ferry::rpc {
namespace {

// How long accepting pauses after the process ran out of file descriptors, so a listener that
// stays readable cannot spin the loop.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
// Connections accepted per loop iteration, so a connect storm cannot starve served ones.
constexpr int kAcceptBatch = 64;
// The loop wakes at least this often even with nothing to do.
constexpr std::chrono::seconds kMaxPollWait{1};

}  // namespace

ServerLoop::ServerLoop(UniqueFd listener, const Options& options, DispatchFn dispatch)
    : options_(options), dispatch_(std::move(dispatch)), listener_(std::move(listener)) {}

Status ServerLoop::Start() {
  MutexLock lifecycle(lifecycle_mu_);
  if (stopped_) return BusyError("rpc server loop was stopped and cannot restart");
  if (started_) return Status::Ok();
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return InternalError("rpc server wake pipe: " + ErrnoText(errno));
  }
  wake_read_.Reset(fds[0]);
  wake_write_.Reset(fds[1]);
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return InternalError(std::string("cannot start rpc server thread: ") + e.what());
  }
  started_ = true;
  return Status::Ok();
}

void ServerLoop::Stop() {
  MutexLock lifecycle(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  {
    MutexLock lock(mu_);  // a loop backing off after a poll failure sees it before waiting
    stop_.store(true, std::memory_order_release);
  }
  stop_cv_.NotifyAll();
  if (started_) {
    Wake();
    thread_.join();
  }
  listener_.Reset();  // the loop thread is gone (or never ran): nobody else touches these
  connections_.clear();
  open_.store(0, std::memory_order_relaxed);
  MutexLock lock(mu_);
  responses_.clear();
}

void ServerLoop::PostResponse(uint64_t connection_id, std::string frame) {
  {
    MutexLock lock(mu_);
    if (stop_.load(std::memory_order_acquire)) return;
    responses_.emplace_back(connection_id, std::move(frame));
  }
  Wake();
}

void ServerLoop::Wake() {
  const char byte = 1;
  // A full pipe already holds a wake-up; nothing else can fail here that matters.
  (void)!write(wake_write_.get(), &byte, 1);
}

void ServerLoop::DrainWakePipe() {
  char buf[256];
  while (read(wake_read_.get(), buf, sizeof(buf)) > 0) {
  }
}

void ServerLoop::Run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop_.load(std::memory_order_acquire)) {
    Deadline now = std::chrono::steady_clock::now();
    Deadline wake_at = now + kMaxPollWait;
    fds.clear();
    ids.clear();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listener_.get() : -1, POLLIN, 0});
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until_);
    for (const auto& [id, conn] : connections_) {
      fds.push_back({conn->fd(), conn->PollEvents(), 0});
      ids.push_back(id);
      wake_at = std::min(wake_at, conn->deadline());
    }
    const int rc = poll(fds.data(), fds.size(), PollTimeoutMs(wake_at));
    if (rc < 0 && errno != EINTR) {
      FERRY_LOG(kError) << "rpc server poll failed: " << ErrnoText(errno);
      // Back off without poll (which just failed); Stop() ends the wait at once.
      MutexLock lock(mu_);
      const Deadline until = std::chrono::steady_clock::now() + kAcceptBackoff;
      while (!stop_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
        stop_cv_.WaitUntil(mu_, until);
      }
      continue;
    }
    now = std::chrono::steady_clock::now();
    if (rc > 0) {
      if (fds[0].revents != 0) {
        DrainWakePipe();
        TakeResponses(now);
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        if (fds[i + 2].revents != 0) ServeReady(ids[i], fds[i + 2].revents, now);
      }
      if (fds[1].revents != 0) AcceptReady(now);
    }
    CloseExpired(now);
  }
}

void ServerLoop::TakeResponses(Deadline now) {
  std::vector<std::pair<uint64_t, std::string>> ready;
  {
    MutexLock lock(mu_);
    ready.swap(responses_);
  }
  for (auto& [id, frame] : ready) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;  // closed while its handler ran
    it->second->StartResponse(std::move(frame), now);
    std::string error;
    Handle(id, it->second->OnWritable(now, &error), nullptr, error);
  }
}

void ServerLoop::AcceptReady(Deadline now) {
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    UniqueFd fd(accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len,  // NOLINT
                        SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      FERRY_LOG(kWarn) << "rpc server accept failed: " << ErrnoText(err);
      accept_paused_until_ = now + kAcceptBackoff;  // EMFILE and the like: back off
      return;
    }
    const HostPort address = NumericAddress(addr, len);
    if (connections_.size() >= options_.max_connections) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      FERRY_LOG(kWarn) << "rpc server refused a connection from " << address.ToString() << ": "
                       << options_.max_connections << " connections are open";
      continue;  // `fd` closes here
    }
    Result<auth::Handshake> handshake =
        auth::Handshake::Server(auth::Channel::kRpc, options_.auth_secret, address.ToString());
    if (!handshake.ok()) {
      FERRY_LOG(kError) << "rpc server refused a connection from " << address.ToString() << ": "
                        << handshake.status();
      continue;  // `fd` closes here
    }
    const uint64_t id = next_connection_id_++;
    accepted_.fetch_add(1, std::memory_order_relaxed);
    connections_.emplace(id, std::make_unique<ServerConnection>(
                                 std::move(fd), PeerInfo{address, id}, options_.limits,
                                 std::move(handshake).value(), now));
    open_.store(connections_.size(), std::memory_order_relaxed);
  }
}

void ServerLoop::ServeReady(uint64_t id, short revents, Deadline now) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  ServerConnection& conn = *it->second;
  const short events = conn.PollEvents();
  std::string error;
  if (events == POLLIN) {
    InboundRequest request;
    Handle(id, conn.OnReadable(now, &request, &error), &request, error);
  } else if (events == POLLOUT) {
    Handle(id, conn.OnWritable(now, &error), nullptr, error);
  } else if ((revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    Close(id);  // the peer vanished while its handler runs; the response has nowhere to go
  }
}

void ServerLoop::Handle(uint64_t id, Outcome outcome, InboundRequest* request,
                        const std::string& error) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  const PeerInfo& peer = it->second->peer();
  switch (outcome) {
    case Outcome::kPending:
      return;
    case Outcome::kRequest:
      if (!dispatch_(peer, std::move(*request))) Close(id);
      return;
    case Outcome::kPeerClosed:
      FERRY_LOG(kTrace) << "rpc connection from " << peer.address.ToString() << " closed";
      break;
    case Outcome::kBadFrame:
      bad_frames_.fetch_add(1, std::memory_order_relaxed);
      FERRY_LOG(kWarn) << "rpc server closing connection from " << peer.address.ToString() << ": "
                       << error;
      return;  // it writes its closing notice, then drains until the peer closes (or expires)
    case Outcome::kIoError:
      FERRY_LOG(kDebug) << "rpc connection from " << peer.address.ToString() << ": " << error;
      break;
    case Outcome::kDenied:
      refusals_.Refused("rpc server", peer.address.ToString(), PermissionDeniedError(error));
      break;
  }
  Close(id);
}

void ServerLoop::CloseExpired(Deadline now) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->second->deadline() <= now) {
      FERRY_LOG(kDebug) << "rpc server closing connection from "
                        << it->second->peer().address.ToString()
                        << ": idle or no progress within its timeout";
      it = connections_.erase(it);
      open_.store(connections_.size(), std::memory_order_relaxed);
    } else {
      ++it;
    }
  }
}

void ServerLoop::Close(uint64_t id) {
  connections_.erase(id);
  open_.store(connections_.size(), std::memory_order_relaxed);
}

}  // namespace ferry::rpc
