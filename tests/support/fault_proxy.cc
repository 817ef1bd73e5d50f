#include "fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace ferry::testing {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPollSlice{20};  // how often a blocked thread checks Stop()
constexpr std::chrono::milliseconds kConnectLimit{3000};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Resets (RST, not FIN) when closed: what a broken middlebox or a dead peer looks like.
void SetAbortiveClose(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

// A blocking connect bounded by kConnectLimit; the socket or -1.
int ConnectTo(const sockaddr_in& to) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    if (errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(&p, 1, static_cast<int>(kConnectLimit.count())) != 1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      ::close(fd);
      return -1;
    }
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

// Both sockets of one proxied connection; closed when the last direction's thread lets go.
struct FaultProxy::Connection {
  Connection(int c, int s, std::atomic<uint64_t>* open_count, std::atomic<uint64_t>* closed_count)
      : fd{c, s}, open(open_count), closed(closed_count) {}
  ~Connection() {
    ::close(fd[0]);
    ::close(fd[1]);
    open->fetch_sub(1);
    closed->fetch_add(1);
  }
  // Both sides at once: the threads' next poll or read sees it.
  void Reset() {
    SetAbortiveClose(fd[0]);
    SetAbortiveClose(fd[1]);
    ::shutdown(fd[0], SHUT_RDWR);
    ::shutdown(fd[1], SHUT_RDWR);
  }
  const int fd[2];  // [0] the client's, [1] the server's
  std::atomic<uint64_t>* const open;
  std::atomic<uint64_t>* const closed;
};

struct FaultProxy::State {
  bool have_upstream = false;
  sockaddr_in upstream{};
  std::atomic<bool> stopping{false};
  // Stop() wakes the threads waiting for a held chunk's delivery time.
  Mutex stop_mu;
  CondVar stop_cv;
  // Waits until `due` (a held chunk's delivery time) or Stop(), whichever comes first.
  void WaitForDueOrStop(Clock::time_point due) {
    MutexLock lock(stop_mu);
    while (!stopping.load() && Clock::now() < due) stop_cv.WaitUntil(stop_mu, due);
  }
  std::atomic<uint64_t> accepted{0}, refused{0}, open{0}, closed{0}, held{0}, cuts{0};
  std::atomic<uint64_t> forwarded[2] = {0, 0};
  std::atomic<uint64_t> corrupted[2] = {0, 0};

  Mutex faults_mu;
  uint64_t corrupt_every[2] GUARDED_BY(faults_mu) = {0, 0};
  uint64_t until_corrupt[2] GUARDED_BY(faults_mu) = {0, 0};  // bytes before the next flip
  bool cut_armed[2] GUARDED_BY(faults_mu) = {false, false};
  uint64_t until_cut[2] GUARDED_BY(faults_mu) = {0, 0};

  struct Worker {
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  Mutex workers_mu;
  std::list<Worker> workers GUARDED_BY(workers_mu);
  std::thread acceptor;
  std::vector<std::weak_ptr<Connection>> connections GUARDED_BY(workers_mu);
};

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& bind_host,
                                                      const std::string& upstream,
                                                      size_t max_connections) {
  sockaddr_in bind_addr{};
  bind_addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, bind_host.c_str(), &bind_addr.sin_addr) != 1) {
    return InvalidArgumentError("fault proxy: bind address '" + bind_host + "' is not IPv4");
  }
  auto state = std::make_unique<State>();
  if (!upstream.empty()) {
    const size_t colon = upstream.rfind(':');
    state->upstream.sin_family = AF_INET;
    const int port = colon == std::string::npos ? 0 : std::atoi(upstream.c_str() + colon + 1);
    if (colon == std::string::npos || port <= 0 || port > 65535 ||
        ::inet_pton(AF_INET, upstream.substr(0, colon).c_str(), &state->upstream.sin_addr) != 1) {
      return InvalidArgumentError("fault proxy: upstream '" + upstream + "' is not a.b.c.d:port");
    }
    state->upstream.sin_port = htons(static_cast<uint16_t>(port));
    state->have_upstream = true;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError(Errno("fault proxy: socket"));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(bind_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&bind_addr), sizeof(bind_addr)) != 0 ||
      ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bind_addr), &len) != 0) {
    const std::string why = Errno("fault proxy: bind/listen on " + bind_host);
    ::close(fd);
    return InternalError(why);
  }
  std::unique_ptr<FaultProxy> proxy(
      new FaultProxy(fd, ntohs(bind_addr.sin_port), max_connections));
  proxy->state_ = std::move(state);
  FaultProxy* self = proxy.get();
  proxy->state_->acceptor = std::thread([self] { self->AcceptLoop(); });
  return proxy;
}

FaultProxy::FaultProxy(int listen_fd, uint16_t port, size_t max_connections)
    : listen_fd_(listen_fd), port_(port), max_connections_(max_connections) {}

FaultProxy::~FaultProxy() {
  Stop();
  ::close(listen_fd_);
}

void FaultProxy::Stop() {
  {
    MutexLock lock(state_->stop_mu);
    if (state_->stopping.exchange(true)) return;
  }
  state_->stop_cv.NotifyAll();
  if (state_->acceptor.joinable()) state_->acceptor.join();
  std::list<State::Worker> workers;
  {
    MutexLock lock(state_->workers_mu);
    for (const std::weak_ptr<Connection>& weak : state_->connections) {
      if (std::shared_ptr<Connection> conn = weak.lock()) conn->Reset();
    }
    state_->connections.clear();
    workers.splice(workers.end(), state_->workers);
  }
  for (State::Worker& w : workers) w.thread.join();
}

void FaultProxy::CutAfter(Direction direction, uint64_t bytes) {
  MutexLock lock(state_->faults_mu);
  state_->cut_armed[direction] = true;
  state_->until_cut[direction] = bytes;
}

void FaultProxy::CorruptEvery(Direction direction, uint64_t every) {
  MutexLock lock(state_->faults_mu);
  state_->corrupt_every[direction] = every;
  state_->until_corrupt[direction] = every;
}

FaultProxy::Stats FaultProxy::stats() const {
  Stats s;
  s.accepted = state_->accepted.load();
  s.refused = state_->refused.load();
  s.open = state_->open.load();
  s.closed = state_->closed.load();
  s.held = state_->held.load();
  s.cuts = state_->cuts.load();
  for (int d = 0; d < 2; ++d) {
    s.forwarded[d] = state_->forwarded[d].load();
    s.corrupted[d] = state_->corrupted[d].load();
  }
  return s;
}

void FaultProxy::AcceptLoop() {
  State& st = *state_;
  while (!st.stopping.load()) {
    {
      // Join the threads of connections that ended, so that threads stay bounded.
      MutexLock lock(st.workers_mu);
      for (auto it = st.workers.begin(); it != st.workers.end();) {
        if (it->finished.load()) {
          it->thread.join();
          it = st.workers.erase(it);
        } else {
          ++it;
        }
      }
      std::erase_if(st.connections, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
    }
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(kPollSlice.count())) != 1) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) continue;
    sockaddr_in to = st.upstream;
    socklen_t len = sizeof(to);
    const bool have_target =
        st.have_upstream ||
        ::getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &to, &len) == 0;
    // A connection straight to the proxy (no REDIRECT) has itself as original destination.
    const bool loops = !st.have_upstream && ntohs(to.sin_port) == port_;
    const int server = have_target && !loops && st.open.load() < max_connections_ ? ConnectTo(to) : -1;
    if (server < 0) {
      SetAbortiveClose(client);
      ::close(client);
      st.refused.fetch_add(1);
      continue;
    }
    const int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    st.accepted.fetch_add(1);
    st.open.fetch_add(1);
    auto conn = std::make_shared<Connection>(client, server, &st.open, &st.closed);
    MutexLock lock(st.workers_mu);
    st.connections.push_back(conn);
    for (Direction d : {kToServer, kToClient}) {
      State::Worker& w = st.workers.emplace_back();
      w.thread = std::thread([this, conn, d, &w]() mutable {
        Pump(conn, d);
        conn.reset();  // the last one out closes both sockets
        w.finished.store(true);
      });
    }
  }
}

size_t FaultProxy::ApplyFaults(Direction d, unsigned char* data, size_t n, bool* cut) {
  State& st = *state_;
  MutexLock lock(st.faults_mu);
  size_t write = n;
  *cut = false;
  if (st.cut_armed[d] && st.until_cut[d] < n) {
    write = static_cast<size_t>(st.until_cut[d]);
    st.cut_armed[d] = false;
    *cut = true;
  } else if (st.cut_armed[d]) {
    st.until_cut[d] -= n;
  }
  if (st.corrupt_every[d] != 0) {
    size_t at = 0;
    while (at < write) {
      const uint64_t left = write - at;
      if (st.until_corrupt[d] > left) {
        st.until_corrupt[d] -= left;
        break;
      }
      at += static_cast<size_t>(st.until_corrupt[d]);
      st.until_corrupt[d] = st.corrupt_every[d];
      if (at < write) {
        data[at] ^= 0x01;
        st.corrupted[d].fetch_add(1);
        ++at;
        --st.until_corrupt[d];
      }
    }
  }
  return write;
}

void FaultProxy::Pump(const std::shared_ptr<Connection>& conn, Direction d) {
  State& st = *state_;
  const int src = conn->fd[d == kToServer ? 0 : 1];
  const int dst = conn->fd[d == kToServer ? 1 : 0];
  // Chunks read and not yet due: the bytes "on the wire" of a link with latency.
  struct Chunk {
    std::vector<unsigned char> bytes;
    Clock::time_point due;
    bool cut_after = false;
  };
  std::deque<Chunk> queue;
  enum class After { kNothing, kHalfClose, kReset } after = After::kNothing;  // once drained
  auto drop_queue = [&] { st.held.fetch_sub(queue.size()); };
  // Writes `chunk` whole; false when the server side broke or stalled past kStallLimit.
  auto write_all = [&](const Chunk& chunk) {
    size_t sent = 0;
    auto stalled_at = Clock::now() + kStallLimit;
    while (sent < chunk.bytes.size() && !st.stopping.load() && Clock::now() < stalled_at) {
      const ssize_t w =
          ::send(dst, chunk.bytes.data() + sent, chunk.bytes.size() - sent, MSG_NOSIGNAL);
      if (w > 0) {
        sent += static_cast<size_t>(w);
        st.forwarded[d].fetch_add(static_cast<uint64_t>(w));
        stalled_at = Clock::now() + kStallLimit;
        continue;
      }
      if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
      pollfd out{dst, POLLOUT, 0};
      ::poll(&out, 1, static_cast<int>(kPollSlice.count()));
    }
    return sent == chunk.bytes.size();
  };
  while (!st.stopping.load()) {
    while (!queue.empty() && queue.front().due <= Clock::now()) {
      const bool ok = write_all(queue.front());
      const bool cut = queue.front().cut_after;
      queue.pop_front();
      st.held.fetch_sub(1);
      if (cut) st.cuts.fetch_add(1);
      if (!ok || cut) {
        drop_queue();
        conn->Reset();
        return;
      }
    }
    if (after != After::kNothing && queue.empty()) {
      if (after == After::kHalfClose) {
        ::shutdown(dst, SHUT_WR);  // pass the half-close on
      } else {
        conn->Reset();  // a reset on one side resets the other
      }
      return;
    }
    if (after != After::kNothing || queue.size() >= kMaxHeldChunks) {
      // Only delivering now: the front chunk's delivery time (the injected latency) or Stop().
      if (!queue.empty()) st.WaitForDueOrStop(queue.front().due);
      continue;
    }
    auto wait = kPollSlice;
    if (!queue.empty()) {
      wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(queue.front().due -
                                                                         Clock::now()));
    }
    pollfd p{src, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    if (ready <= 0) continue;
    Chunk chunk;
    chunk.bytes.resize(kChunkBytes);
    const ssize_t got = ::read(src, chunk.bytes.data(), chunk.bytes.size());
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) {
      // What was read before is still delivered, as a network delivers what is in flight.
      after = got == 0 ? After::kHalfClose : After::kReset;
      continue;
    }
    const size_t n = ApplyFaults(d, chunk.bytes.data(), static_cast<size_t>(got), &chunk.cut_after);
    chunk.bytes.resize(n);
    chunk.due = Clock::now() + std::chrono::milliseconds(delay_ms_.load());
    if (chunk.cut_after) after = After::kReset;  // nothing after the cut is read
    queue.push_back(std::move(chunk));
    st.held.fetch_add(1);
  }
  drop_queue();
}

}  // namespace ferry::testing
