#include "test_servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "common/mutex.h"
#include "common/wait_for.h"

namespace ferry::testing {

using namespace std::chrono_literals;

Result<TempDir> TempDir::Create(std::string_view tag) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ferry-" +
                      std::string(tag) + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return InternalError("mkdtemp " + templ + ": " + std::strerror(errno));
  }
  return TempDir(std::string(buf.data()));
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Result<uint16_t> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return InternalError(std::string("bind: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll) {
  return ferry::WaitFor(done, timeout, poll);
}

namespace {

// A TCP connect to 127.0.0.1:port; the connected socket, or -1.
int ConnectLocal(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Milliseconds from now to `deadline`, for poll(): at least 0.
int MillisUntil(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0));
}

}  // namespace

bool FreezeProcess(pid_t pid, std::chrono::milliseconds timeout) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  const std::string stat_path = "/proc/" + std::to_string(pid) + "/stat";
  return WaitFor(
      [&] {
        std::ifstream in(stat_path);
        const std::string stat((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        const size_t close = stat.rfind(')');  // the name may hold spaces and parentheses
        return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
      },
      timeout, std::chrono::milliseconds(1));
}

bool WaitForPort(uint16_t port, std::chrono::milliseconds timeout) {
  return WaitFor(
      [port] {
        const int fd = ConnectLocal(port);
        if (fd < 0) return false;
        ::close(fd);
        return true;
      },
      timeout, 20ms);
}

// ---- SilentListener ---------------------------------------------------------------------------

Result<std::unique_ptr<SilentListener>> SilentListener::Start(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    return UnavailableError("listen on 127.0.0.1:" + std::to_string(port) + ": " + error);
  }
  return std::unique_ptr<SilentListener>(new SilentListener(fd, ntohs(addr.sin_port)));
}

SilentListener::~SilentListener() {
  for (int fd : held_) ::close(fd);
  ::close(fd_);
}

int SilentListener::AcceptBy(std::chrono::steady_clock::time_point deadline) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, MillisUntil(deadline)) <= 0) return -1;
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ++accepted_;
  return fd;
}

bool SilentListener::WaitForRequest(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // One poll over the listener and every held connection: a new client, or a request.
    std::vector<pollfd> fds{{fd_, POLLIN, 0}};
    for (int fd : held_) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), MillisUntil(deadline)) <= 0) return false;
    bool request = false;
    held_.clear();
    for (size_t i = 1; i < fds.size(); ++i) {
      char byte = 0;
      const ssize_t n =
          fds[i].revents == 0 ? -1 : ::recv(fds[i].fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && fds[i].revents != 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        ::close(fds[i].fd);  // its client gave up
        continue;
      }
      request = request || n > 0;
      held_.push_back(fds[i].fd);
    }
    if (request) return true;
    if ((fds[0].revents & POLLIN) != 0) {
      const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        ++accepted_;
        held_.push_back(fd);
      }
    }
  }
}

bool SilentListener::CloseConnections(size_t n, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (accepted_ < n) {
    const int fd = AcceptBy(deadline);
    if (fd < 0) return accepted_ >= n;
    ::close(fd);
  }
  return true;
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(std::vector<std::string> argv,
                                                          std::string log_path) {
  return SpawnImpl(std::move(argv), std::move(log_path), /*piped=*/false);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::SpawnPiped(std::vector<std::string> argv,
                                                               std::string log_path) {
  return SpawnImpl(std::move(argv), std::move(log_path), /*piped=*/true);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::SpawnImpl(std::vector<std::string> argv,
                                                              std::string log_path, bool piped) {
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return InternalError("open " + log_path + ": " + std::strerror(errno));
  int in_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  if (piped && (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0)) {
    ::close(log_fd);
    return InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return InternalError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(piped ? out_pipe[1] : log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(piped ? in_pipe[0] : devnull, STDIN_FILENO);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test that started it
    ::execv(args[0], args.data());
    std::fprintf(stderr, "execv %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log_fd);
  std::unique_ptr<ChildProcess> child(new ChildProcess(pid, std::move(log_path)));
  if (piped) {
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    child->stdin_fd_ = in_pipe[1];
    child->stdout_fd_ = out_pipe[0];
  }
  return child;
}

Status ChildProcess::WriteLine(const std::string& line) {
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(stdin_fd_, data.data() + done, data.size() - done);
    if (n <= 0) return UnavailableError("child's stdin is closed");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<std::string> ChildProcess::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const size_t newline = buffered_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return TimeoutError("no line from the child in time");
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) return UnavailableError("the child closed its stdout");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

ChildProcess::~ChildProcess() {
  Kill();
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

bool ChildProcess::running() {
  if (reaped_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) reaped_ = true;
  return r == 0;
}

int ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (reaped_) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  if (WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, grace, 10ms)) {
    reaped_ = true;
    return status;
  }
  Kill();
  return -1;
}

void ChildProcess::Kill() {
  if (reaped_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  reaped_ = true;
}

std::string ChildProcess::LogTail() const {
  std::ifstream in(log_path_);
  std::stringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  return text.size() > 4096 ? text.substr(text.size() - 4096) : text;
}

Status TestServer::Launch() {
  const std::string log = dir_.path() + "/" + name() + "." + std::to_string(launches_++) + ".log";
  ASSIGN_OR_RETURN(process_, ChildProcess::Spawn(Command(), log));
  if (!WaitReady(15s) || !process_->running()) {
    std::string tail = process_->LogTail();
    process_->Kill();
    return UnavailableError(name() + " did not start on port " + std::to_string(port_) + "; log " +
                            log + ":\n" + tail);
  }
  return Status::Ok();
}

bool TestServer::WaitReady(std::chrono::milliseconds timeout) {
  return WaitForPort(port_, timeout);
}

Status TestServer::Restart() {
  if (process_ != nullptr) process_->Stop();
  return Launch();
}

void TestServer::Kill() {
  if (process_ != nullptr) process_->Kill();
}

Status TestServer::Relaunch() { return Launch(); }

// ---- etcd -------------------------------------------------------------------------------------

// A port PickFreePort found free can be taken by another test before the server binds it
// (ctest runs tests in parallel): a first start that fails is tried again on fresh ports.
constexpr int kStartAttempts = 3;

Result<std::unique_ptr<EtcdServer>> EtcdServer::Start() {
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("etcd"));
    ASSIGN_OR_RETURN(uint16_t port, PickFreePort());
    ASSIGN_OR_RETURN(uint16_t peer_port, PickFreePort());
    std::unique_ptr<EtcdServer> server(new EtcdServer(std::move(dir), port));
    server->peer_port_ = peer_port;
    last = server->Launch();
    if (last.ok()) return server;
  }
  return last;
}

// etcd accepts connections a moment before it serves them: wait for GET /health to say so.
bool EtcdServer::WaitReady(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!WaitForPort(port_, timeout)) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return WaitFor(
      [this] {
        const int fd = ConnectLocal(port_);
        if (fd < 0) return false;
        timeval tv{0, 200000};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        std::string reply;
        const char request[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if (::send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL) > 0) {
          char buf[512];
          ssize_t n = 0;
          while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
            reply.append(buf, static_cast<size_t>(n));
          }
        }
        ::close(fd);
        return reply.find("\"health\":\"true\"") != std::string::npos;
      },
      left, 50ms);
}

std::vector<std::string> EtcdServer::Command() const {
  const std::string client = "http://127.0.0.1:" + std::to_string(port_);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  return {"/usr/bin/etcd",
          "--name=ferry-test",
          "--data-dir=" + dir_.path() + "/data",
          "--listen-client-urls=" + client,
          "--advertise-client-urls=" + client,
          "--listen-peer-urls=" + peer,
          "--initial-advertise-peer-urls=" + peer,
          "--initial-cluster=ferry-test=" + peer,
          "--log-level=warn",
          "--logger=zap"};
}

// ---- redis ------------------------------------------------------------------------------------

Result<std::unique_ptr<RedisServer>> RedisServer::Start(std::string password) {
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("redis"));
    ASSIGN_OR_RETURN(uint16_t port, PickFreePort());
    std::unique_ptr<RedisServer> server(new RedisServer(std::move(dir), port));
    server->password_ = password;
    last = server->Launch();
    if (last.ok()) return server;
  }
  return last;
}

std::vector<std::string> RedisServer::Command() const {
  std::vector<std::string> cmd = {"/usr/bin/redis-server",
                                  "--bind",
                                  "127.0.0.1",
                                  "--port",
                                  std::to_string(port_),
                                  "--dir",
                                  dir_.path(),
                                  "--save",
                                  "",
                                  "--appendonly",
                                  "yes",
                                  "--daemonize",
                                  "no"};
  if (!password_.empty()) {
    cmd.push_back("--requirepass");
    cmd.push_back(password_);
  }
  return cmd;
}

// ---- prometheus -------------------------------------------------------------------------------

Result<std::string> HttpGetLocal(uint16_t port, const std::string& path,
                                 std::chrono::milliseconds timeout) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  httplib::Result reply = client.Get(path);
  if (!reply) {
    return UnavailableError("GET 127.0.0.1:" + std::to_string(port) + path + ": " +
                            httplib::to_string(reply.error()));
  }
  if (reply->status != 200) {
    return Status(reply->status == 404 ? StatusCode::kNotFound : StatusCode::kInternal,
                  "GET 127.0.0.1:" + std::to_string(port) + path + ": HTTP " +
                      std::to_string(reply->status) + ": " + reply->body);
  }
  return reply->body;
}

Result<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(
    std::vector<std::string> targets, std::chrono::milliseconds scrape_interval) {
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("prometheus"));
    ASSIGN_OR_RETURN(uint16_t port, PickFreePort());
    {
      std::ofstream config(dir.path() + "/prometheus.yml");
      const std::string interval = std::to_string(scrape_interval.count()) + "ms";
      config << "global:\n  scrape_interval: " << interval
             << "\n  evaluation_interval: " << interval
             << "\nscrape_configs:\n  - job_name: ferry\n    static_configs:\n"
             << "      - targets: [";
      for (size_t i = 0; i < targets.size(); ++i) {
        config << (i == 0 ? "" : ", ") << "'" << targets[i] << "'";
      }
      config << "]\n";
      if (!config) return InternalError("cannot write " + dir.path() + "/prometheus.yml");
    }
    std::unique_ptr<PrometheusServer> server(new PrometheusServer(std::move(dir), port));
    last = server->Launch();
    if (last.ok()) return server;
  }
  return last;
}

std::vector<std::string> PrometheusServer::Command() const {
  return {"/usr/bin/prometheus", "--config.file=" + dir_.path() + "/prometheus.yml",
          "--web.listen-address=127.0.0.1:" + std::to_string(port_),
          "--storage.tsdb.path=" + dir_.path() + "/data", "--log.level=warn"};
}

// Prometheus listens before its TSDB is open: wait for /-/ready to answer 200.
bool PrometheusServer::WaitReady(std::chrono::milliseconds timeout) {
  return WaitFor([this] { return HttpGetLocal(port_, "/-/ready", 1s).ok(); }, timeout, 50ms);
}

Result<std::string> PrometheusServer::Query(const std::string& promql) const {
  return HttpGetLocal(port_, "/api/v1/query?query=" + httplib::detail::encode_query_param(promql));
}

// ---- ferry-metadata-server --------------------------------------------------------------------

std::string BinDir() { return FERRY_TEST_BIN_DIR; }

Result<std::unique_ptr<MetadataServer>> MetadataServer::Start(std::vector<std::string> extra_args) {
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("metasrv"));
    ASSIGN_OR_RETURN(uint16_t port, PickFreePort());
    std::unique_ptr<MetadataServer> server(new MetadataServer(std::move(dir), port));
    server->extra_args_ = extra_args;
    last = server->Launch();
    if (last.ok()) return server;
  }
  return last;
}

std::vector<std::string> MetadataServer::Command() const {
  std::vector<std::string> cmd = {BinDir() + "/ferry-metadata-server",
                                  "--bind",
                                  "127.0.0.1",
                                  "--port",
                                  std::to_string(port_),
                                  "--data",
                                  data_path()};
  cmd.insert(cmd.end(), extra_args_.begin(), extra_args_.end());
  return cmd;
}

// ---- MooncakeStyleServer ---------------------------------------------------------------------

struct MooncakeStyleServer::State {
  httplib::Server server;
  int port = -1;
  std::thread thread;
  mutable Mutex mu;
  std::map<std::string, std::string> values GUARDED_BY(mu);
  std::map<std::string, int> puts GUARDED_BY(mu);
  int puts_with_ttl GUARDED_BY(mu) = 0;
};

MooncakeStyleServer::MooncakeStyleServer() : state_(std::make_unique<State>()) {
  State* st = state_.get();
  st->server.Get("/metadata", [st](const httplib::Request& req, httplib::Response& res) {
    MutexLock lock(st->mu);
    auto it = st->values.find(req.get_param_value("key"));
    if (it == st->values.end()) {
      res.status = 404;
      res.set_content(R"({"error":"metadata not found"})", "application/json");
      return;
    }
    res.set_content(it->second, "application/json");
  });
  st->server.Put("/metadata", [st](const httplib::Request& req, httplib::Response& res) {
    MutexLock lock(st->mu);
    const std::string key = req.get_param_value("key");
    ++st->puts[key];
    if (req.has_param("ttl")) ++st->puts_with_ttl;
    if (key.find("/rpc_meta/") != std::string::npos && st->values.count(key) > 0) {
      res.status = 400;
      res.set_content("Duplicate rpc_meta key not allowed", "text/plain");
      return;
    }
    st->values[key] = req.body;
    res.set_content("metadata updated", "text/plain");
  });
  st->server.Delete("/metadata", [st](const httplib::Request& req, httplib::Response& res) {
    MutexLock lock(st->mu);
    if (st->values.erase(req.get_param_value("key")) == 0) {
      res.status = 404;
      return;
    }
    res.set_content("metadata deleted", "text/plain");
  });
  st->port = st->server.bind_to_any_port("127.0.0.1");
  if (st->port > 0) st->thread = std::thread([st] { st->server.listen_after_bind(); });
}

MooncakeStyleServer::~MooncakeStyleServer() {
  if (!state_->thread.joinable()) return;
  // stop() only reaches a server that is listening; bind_to_any_port already queues clients.
  WaitFor([this] { return state_->server.is_running(); }, std::chrono::seconds(10));
  state_->server.stop();
  state_->thread.join();
}

uint16_t MooncakeStyleServer::port() const {
  return state_->port > 0 ? static_cast<uint16_t>(state_->port) : 0;
}

int MooncakeStyleServer::puts(const std::string& key) const {
  MutexLock lock(state_->mu);
  auto it = state_->puts.find(key);
  return it == state_->puts.end() ? 0 : it->second;
}

int MooncakeStyleServer::puts_with_ttl() const {
  MutexLock lock(state_->mu);
  return state_->puts_with_ttl;
}

Result<RunningStore> StartStore(StoreKind kind) {
  RunningStore out;
  switch (kind) {
    case StoreKind::kEtcd: {
      ASSIGN_OR_RETURN(std::unique_ptr<EtcdServer> etcd, EtcdServer::Start());
      out.connection = "etcd://" + etcd->endpoint();
      out.server = std::move(etcd);
      break;
    }
    case StoreKind::kRedis: {
      ASSIGN_OR_RETURN(std::unique_ptr<RedisServer> redis, RedisServer::Start());
      out.connection = "redis://" + redis->endpoint();
      out.server = std::move(redis);
      break;
    }
    case StoreKind::kHttp: {
      ASSIGN_OR_RETURN(std::unique_ptr<MetadataServer> http, MetadataServer::Start());
      out.connection = "http://" + http->endpoint() + "/metadata";
      out.server = std::move(http);
      break;
    }
  }
  return out;
}

std::string StoreKindName(StoreKind kind) {
  switch (kind) {
    case StoreKind::kEtcd:
      return "etcd";
    case StoreKind::kRedis:
      return "redis";
    case StoreKind::kHttp:
      return "http";
  }
  return "?";
}

}  // namespace ferry::testing
