// GrantServer: the target side of the grant channel (grant_channel.h, grant_wire.h). One accept
// thread and one thread per connection; every thread waits in poll on its socket and on an
// eventfd that the destructor makes readable, so stopping is prompt. A connection thread that
// ends signals another eventfd, and the accept thread joins it at once.
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/mutex.h"
#include "common/peer_auth.h"
#include "transport/samehost/grant_channel.h"
#include "transport/samehost/grant_wire.h"

namespace ferry::samehost {
namespace {

using wire::FrameType;

constexpr size_t kMaxConnections = 1024;  // more are closed at once
// An initiator holds at most one Acquire's pins at a time; a few more are tolerated, more are
// refused (Again) so one connection cannot pile up pins (and memory) without releasing.
constexpr size_t kMaxHeldPinsPerConnection = 4 * wire::kMaxRanges;
constexpr size_t kRecvChunk = 64 * 1024;

std::string RandomHex() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

// One accepted connection. `fd` is closed only after `thread` was joined, so other threads may
// shutdown() it meanwhile.
struct ServerConnection {
  UniqueFd fd;
  std::thread thread;
  std::atomic<bool> done{false};
};

// Thread contract: see GrantServer.
class UnixGrantServer final : public GrantServer {
 public:
  UnixGrantServer(TransportContext* ctx, Options options, std::string path, UniqueFd listen_fd,
                  UniqueFd wake_fd, UniqueFd reap_fd)
      : ctx_(ctx),
        options_(std::move(options)),
        path_(std::move(path)),
        listen_fd_(std::move(listen_fd)),
        wake_fd_(std::move(wake_fd)),
        reap_fd_(std::move(reap_fd)) {}

  ~UnixGrantServer() override {
    Drain();
    const uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof(one)) < 0) {
      FERRY_LOG(kWarn) << "grant server wake: " << ErrnoText(errno);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<std::unique_ptr<ServerConnection>> conns;
    {
      MutexLock lock(mu_);
      // Wakes a thread blocked sending a reply; its fd stays open until joined.
      for (auto& c : conns_) ::shutdown(c->fd.get(), SHUT_RDWR);
      conns.swap(conns_);
    }
    for (auto& c : conns) c->thread.join();
    ::unlink(path_.c_str());
  }

  void StartAccepting() {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  const std::string& path() const override { return path_; }
  int held_pins() const override { return held_pins_.load(std::memory_order_acquire); }
  uint64_t bad_frames() const override { return bad_frames_.load(std::memory_order_relaxed); }
  uint64_t auth_refusals() const override { return refusals_.count(); }

 private:
  // Refuses new grants and waits (bounded) for the held ones to be released.
  void Drain() {
    draining_.store(true);
    const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
    int left = 0;
    {
      MutexLock lock(drain_mu_);
      while ((left = held_pins_.load()) > 0 && std::chrono::steady_clock::now() < deadline) {
        (void)drained_cv_.WaitUntil(drain_mu_, deadline);
      }
    }
    if (left > 0) {
      FERRY_LOG(kWarn) << "grant server " << path_ << ": " << left
                       << " pins not released within the drain timeout; closing anyway";
    }
  }

  bool Stopping() const {
    pollfd p{wake_fd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  void AcceptLoop() {
    pollfd fds[3] = {
        {listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}, {reap_fd_.get(), POLLIN, 0}};
    for (;;) {
      const int n = ::poll(fds, 3, -1);  // the wake eventfd ends the wait at destruction
      if (n < 0 && errno != EINTR) {
        FERRY_LOG(kError) << "grant server " << path_ << " poll: " << ErrnoText(errno);
        return;
      }
      if (n <= 0) continue;
      if ((fds[1].revents & POLLIN) != 0) return;
      if ((fds[2].revents & POLLIN) != 0) {
        uint64_t count = 0;
        (void)!::read(reap_fd_.get(), &count, sizeof(count));
        ReapFinished();
      }
      if ((fds[0].revents & POLLIN) == 0) continue;
      UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
          FERRY_LOG(kWarn) << "grant server " << path_ << " accept: " << ErrnoText(errno);
        }
        continue;
      }
      Admit(std::move(fd));
    }
  }

  void Admit(UniqueFd fd) {
    MutexLock lock(mu_);
    if (conns_.size() >= kMaxConnections) {
      FERRY_LOG(kWarn) << "grant server " << path_ << ": " << kMaxConnections
                       << " connections already served; closing a new one";
      return;
    }
    auto conn = std::make_unique<ServerConnection>();
    conn->fd = std::move(fd);
    ServerConnection* raw = conn.get();
    conns_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }

  void ReapFinished() {
    std::list<std::unique_ptr<ServerConnection>> finished;
    {
      MutexLock lock(mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done.load(std::memory_order_acquire)) {
          finished.splice(finished.end(), conns_, it++);
        } else {
          ++it;
        }
      }
    }
    for (auto& c : finished) c->thread.join();
  }

  // The connection's loop: reads frames, answers them, and lets its pins go when it ends.
  void Serve(ServerConnection* conn) {
    std::vector<AccessPin> pins;
    try {
      std::string first;  // what the handshake read of the first frame (no secret here)
      if (Authenticate(conn->fd.get(), &first)) {
        ServeFrames(conn->fd.get(), std::move(first), &pins);
      }
    } catch (const std::exception& e) {
      FERRY_LOG(kError) << "grant server " << path_ << ": connection failed: " << e.what();
    } catch (...) {
      FERRY_LOG(kError) << "grant server " << path_ << ": connection failed";
    }
    DropPins(&pins);
    ::shutdown(conn->fd.get(), SHUT_RDWR);
    conn->done.store(true, std::memory_order_release);
    const uint64_t one = 1;
    (void)!::write(reap_fd_.get(), &one, sizeof(one));  // the accept thread joins this one
  }

  void DropPins(std::vector<AccessPin>* pins) {
    const auto n = static_cast<int>(pins->size());
    if (n == 0) return;
    pins->clear();  // releases each pin
    held_pins_.fetch_sub(n);
    if (draining_.load()) {  // seq_cst with Drain's store and load: no wake-up is lost
      MutexLock lock(drain_mu_);
      drained_cv_.NotifyAll();
    }
  }

  // Runs the server side of the handshake (common/peer_auth.h). With a secret it must finish
  // within reply_timeout; without one it only waits for the first frame's first bytes (which
  // it hands back in `first`) and refuses a peer that asks to authenticate. False: refused or
  // gone (a refusal is logged once per peer process); close the connection.
  bool Authenticate(int fd, std::string* first) {
    ucred cred{};
    socklen_t cred_size = sizeof(cred);
    const std::string peer =
        ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_size) == 0
            ? "pid " + std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")"
            : "an unknown process";
    Result<auth::Handshake> handshake = auth::Handshake::Server(
        GrantAuthChannel(options_.transport), options_.auth_secret, peer);
    if (!handshake.ok()) {
      FERRY_LOG(kError) << "grant server " << path_ << ": " << handshake.status();
      return false;
    }
    const Deadline deadline = handshake->has_secret()
                                  ? std::chrono::steady_clock::now() + options_.reply_timeout
                                  : Deadline::max();  // as an idle connection, until a frame
    const Status s = auth::RunHandshake(*handshake, fd, deadline);
    if (s.ok()) {
      const std::span<const uint8_t> bytes = handshake->passthrough();
      first->assign(bytes.begin(), bytes.end());
      return true;
    }
    if (s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kTimeout) {
      if (s.code() == StatusCode::kPermissionDenied) auth::FlushRefusal(*handshake, fd);
      refusals_.Refused("grant server " + path_, peer, s);
    }
    return false;
  }

  // `in`: the first bytes of the first frame, already read (at most 4: never a whole frame).
  void ServeFrames(int fd, std::string in, std::vector<AccessPin>* pins) {
    size_t consumed = 0;  // bytes of `in` already handled
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    for (;;) {
      const int n = ::poll(fds, 2, -1);  // the wake eventfd ends the wait at destruction
      if (n < 0 && errno != EINTR) return;
      if ((fds[1].revents & POLLIN) != 0) return;
      if (n <= 0) continue;
      const size_t old = in.size();
      in.resize(old + kRecvChunk);
      const ssize_t got = ::recv(fd, in.data() + old, kRecvChunk, MSG_DONTWAIT);
      if (got == 0) return;  // the initiator closed
      if (got < 0) {
        in.resize(old);
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return;
      }
      in.resize(old + static_cast<size_t>(got));
      if (!HandleFrames(fd, in, &consumed, pins)) return;
      in.erase(0, consumed);
      consumed = 0;
    }
  }

  // Handles every complete frame in `in` from `*consumed` on. False: close the connection.
  bool HandleFrames(int fd, const std::string& in, size_t* consumed, std::vector<AccessPin>* pins) {
    while (in.size() - *consumed >= wire::kHeaderSize) {
      const auto* head = reinterpret_cast<const uint8_t*>(in.data() + *consumed);
      Result<wire::FrameHeader> header = wire::ParseHeader(head);
      if (!header.ok()) return BadFrame(header.status().message());
      const size_t total = wire::kHeaderSize + header->payload_length;
      if (in.size() - *consumed < total) return true;  // wait for the rest
      std::string_view payload(in.data() + *consumed + wire::kHeaderSize, header->payload_length);
      *consumed += total;
      if (!HandleFrame(fd, header->type, payload, pins)) return false;
    }
    return true;
  }

  bool HandleFrame(int fd, FrameType type, std::string_view payload, std::vector<AccessPin>* pins) {
    switch (type) {
      case FrameType::kAcquire:
        return HandleAcquire(fd, payload, pins);
      case FrameType::kRelease:
        if (!payload.empty()) return BadFrame("Release with a payload");
        DropPins(pins);
        return true;
      case FrameType::kFetchFd:
        return HandleFetchFd(fd, payload);
      default:
        return BadFrame("a reply frame sent to the server");
    }
  }

  bool HandleAcquire(int fd, std::string_view payload, std::vector<AccessPin>* pins) {
    wire::Reader reader(payload);
    uint32_t count = 0;
    if (!reader.GetU32(&count) || count == 0 || count > wire::kMaxRanges ||
        reader.remaining() != size_t{count} * wire::kRangeSize) {
      return BadFrame("malformed Acquire");
    }
    std::string reply;
    wire::PutHeader(&reply, FrameType::kAcquireReply, 0);
    if (draining_.load(std::memory_order_acquire)) {
      wire::PutStatus(&reply, UnavailableError("grant server " + path_ + " is stopping"));
      wire::PutU32(&reply, 0);
      return SendReply(fd, &reply, -1);
    }
    if (count > options_.max_ranges_per_acquire) {
      wire::PutStatus(&reply,
                      InvalidArgumentError("grant Acquire of " + std::to_string(count) +
                                           " ranges exceeds the server's limit of " +
                                           std::to_string(options_.max_ranges_per_acquire)));
      wire::PutU32(&reply, 0);
      return SendReply(fd, &reply, -1);
    }
    wire::PutStatus(&reply, Status::Ok());
    wire::PutU32(&reply, count);
    // One clock reading for the request: a range whose deadline passed before the request was
    // read is refused, so a target that was frozen never starts an access that is too late.
    const auto now = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < count; ++i) {
      RangeRequest r;
      uint64_t deadline = wire::kNoDeadline;
      (void)(reader.GetU64(&r.addr) && reader.GetU64(&r.length) && reader.GetU64(&r.incarnation) &&
             reader.GetU64(&r.generation) && reader.GetU64(&deadline));
      r.deadline = wire::DecodeDeadline(deadline);
      if (r.deadline <= now) {
        wire::PutStatus(&reply, TimeoutError("the deadline passed before the target read the "
                                             "grant request"));
        continue;
      }
      wire::PutStatus(&reply, Pin(r, pins));
    }
    return SendReply(fd, &reply, -1);
  }

  Status Pin(const RangeRequest& r, std::vector<AccessPin>* pins) {
    if (pins->size() >= kMaxHeldPinsPerConnection) {
      return AgainError("grant connection holds too many pins; release first");
    }
    Result<AccessPin> pin =
        ctx_->PinRemoteAccess(r.addr, r.length, r.incarnation, r.generation, options_.transport);
    if (!pin.ok()) return pin.status();
    pins->push_back(std::move(pin).value());
    held_pins_.fetch_add(1, std::memory_order_acq_rel);
    return Status::Ok();
  }

  bool HandleFetchFd(int fd, std::string_view payload) {
    wire::Reader reader(payload);
    uint64_t id = 0;
    if (!reader.GetU64(&id) || reader.remaining() != 0) return BadFrame("malformed FetchFd");
    Result<int> found =
        options_.fds ? options_.fds(id) : Result<int>(NotFoundError("no shareable buffers here"));
    std::string reply;
    wire::PutHeader(&reply, FrameType::kFetchFdReply, 0);
    if (found.ok() && *found < 0) found = InternalError("fd lookup returned a negative fd");
    wire::PutStatus(&reply, found.status());
    const bool sent = SendReply(fd, &reply, found.ok() ? *found : -1);
    if (found.ok() && options_.close_fetched_fds) ::close(*found);
    return sent;
  }

  // Fills in the payload length of `reply` (header first) and sends it.
  bool SendReply(int fd, std::string* reply, int pass_fd) {
    const auto n = static_cast<uint32_t>(reply->size() - wire::kHeaderSize);
    for (int i = 0; i < 4; ++i) (*reply)[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    const Status sent = wire::SendAll(
        fd, *reply, std::chrono::steady_clock::now() + options_.reply_timeout, pass_fd);
    if (!sent.ok() && !Stopping()) {
      FERRY_LOG(kDebug) << "grant server " << path_ << ": reply not sent: " << sent;
    }
    return sent.ok();
  }

  bool BadFrame(const std::string& what) {
    bad_frames_.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kWarn) << "grant server " << path_ << ": bad frame (" << what
                     << "); closing the connection";
    return false;
  }

  TransportContext* const ctx_;
  const Options options_;
  const std::string path_;
  const UniqueFd listen_fd_;
  const UniqueFd wake_fd_;  // eventfd; written once by the destructor, never read
  const UniqueFd reap_fd_;  // eventfd; written by each connection thread as it ends
  std::atomic<int> held_pins_{0};
  std::atomic<uint64_t> bad_frames_{0};
  auth::RefusalLog refusals_;  // connections refused by the authentication
  std::atomic<bool> draining_{false};  // set once destruction begins
  Mutex drain_mu_;                     // with drained_cv_: Drain waits for held_pins_ to drop
  CondVar drained_cv_;
  Mutex mu_;
  std::list<std::unique_ptr<ServerConnection>> conns_ GUARDED_BY(mu_);
  std::thread accept_thread_;
};

// True when nothing listens on the Unix socket at `path` any more (connect is refused).
bool NobodyListens(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return false;
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 &&
         errno == ECONNREFUSED;
}

// Removes the socket files that servers of `transport` left in `dir` when their process died
// without stopping (SIGKILL, a crash): ours by name and owner, older than kSweepMinAge (a
// server binds and listens within microseconds), and refusing connections. A listening server
// is never touched, whatever pid namespace it lives in.
void SweepDeadSockets(const std::string& dir, const std::string& transport) {
  constexpr time_t kSweepMinAge = 60;  // seconds
  constexpr int kMaxEntries = 4096;    // bounds the cost of one Start
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string prefix = "ferry-" + transport + "-";
  const time_t now = ::time(nullptr);
  int seen = 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    if (++seen > kMaxEntries) break;
    const std::string_view name(e->d_name);
    if (name.substr(0, prefix.size()) != prefix || name.size() < prefix.size() + 5 ||
        name.substr(name.size() - 5) != ".sock") {
      continue;
    }
    const std::string path = dir + "/" + std::string(name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid() ||
        now - st.st_mtime < kSweepMinAge || !NobodyListens(path)) {
      continue;
    }
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  if (removed > 0) {
    FERRY_LOG(kInfo) << "grant server: removed " << removed << " dead " << transport
                     << " socket files from " << dir;
  }
}

// Binds a fresh path under `dir` (retrying a name already taken), readable by this user only.
Result<std::pair<std::string, UniqueFd>> BindUnique(const std::string& dir,
                                                    const std::string& transport) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string path = dir + "/ferry-" + transport + "-" + std::to_string(::getpid()) + "-" +
                       RandomHex() + ".sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) {
      return InvalidArgumentError("grant socket path '" + path + "' is too long (max " +
                                  std::to_string(sizeof(addr.sun_path) - 1) + " bytes)");
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return UnavailableError("grant socket: " + ErrnoText(errno));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      if (err == EADDRINUSE) continue;
      const std::string what = "bind grant socket " + path + ": " + ErrnoText(err);
      if (err == EACCES || err == EPERM || err == EROFS) return PermissionDeniedError(what);
      if (err == ENOENT || err == ENOTDIR) return InvalidArgumentError(what);
      return UnavailableError(what);
    }
    // Before listen() nobody can connect, so no peer ever sees wider permissions.
    if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      const std::string what = "set up grant socket " + path + ": " + ErrnoText(errno);
      ::unlink(path.c_str());
      return UnavailableError(what);
    }
    return std::make_pair(std::move(path), std::move(fd));
  }
  return UnavailableError("no free grant socket name under " + dir);
}

}  // namespace

Result<std::unique_ptr<GrantServer>> GrantServer::Start(TransportContext* ctx, Options options) {
  if (ctx == nullptr) return InvalidArgumentError("grant server: null context");
  if (options.transport.empty()) return InvalidArgumentError("grant server: no transport name");
  if (options.dir.empty()) return InvalidArgumentError("grant server: no socket directory");
  if (options.max_ranges_per_acquire < 1 || options.max_ranges_per_acquire > wire::kMaxRanges) {
    return InvalidArgumentError("grant server: max_ranges_per_acquire must be 1.." +
                                std::to_string(wire::kMaxRanges));
  }
  RETURN_IF_ERROR(auth::ValidateSecret(options.auth_secret).WithContext("grant server"));
  if (options.reply_timeout.count() <= 0 || options.drain_timeout.count() < 0) {
    return InvalidArgumentError("grant server: reply_timeout must be > 0, drain_timeout >= 0");
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd reap(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid() || !reap.valid()) {
    return UnavailableError("grant server eventfd: " + ErrnoText(errno));
  }
  SweepDeadSockets(options.dir, options.transport);
  ASSIGN_OR_RETURN(auto bound, BindUnique(options.dir, options.transport));
  auto server =
      std::make_unique<UnixGrantServer>(ctx, std::move(options), std::move(bound.first),
                                        std::move(bound.second), std::move(wake), std::move(reap));
  server->StartAccepting();
  return std::unique_ptr<GrantServer>(std::move(server));
}

}  // namespace ferry::samehost
