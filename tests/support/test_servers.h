// Real servers for tests, started on 127.0.0.1 with free ports and stopped by PID.
//
//   auto etcd = EtcdServer::Start();          // Result<std::unique_ptr<EtcdServer>>
//   ... (*etcd)->endpoint() -> "127.0.0.1:23791"
//   (*etcd)->Restart();                         // same port and data dir
//   (*etcd)->Kill(); (*etcd)->Relaunch();       // a crash, then the same server again
//
// Every wait is bounded; a server that does not come up is an Unavailable error naming its
// log file. Thread contract: each object is used by one thread at a time.
//
// Tests wait on events, never on time (STYLE.md 18): WaitFor polls the condition a test checks,
// with a bound; SilentListener lets a test see a client's connection attempts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry::testing {

// True once `done()` holds, checking it every `poll` until `timeout` has passed (then once more).
// `done` runs on the calling thread.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(5));

// A directory under $TMPDIR (or /tmp) removed with its contents on destruction.
class TempDir {
 public:
  static Result<TempDir> Create(std::string_view tag);
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// A port on 127.0.0.1 that was free a moment ago.
Result<uint16_t> PickFreePort();

// True once something accepts TCP connections on 127.0.0.1:port, polling until `timeout`.
bool WaitForPort(uint16_t port, std::chrono::milliseconds timeout);

// Sends SIGSTOP to `pid` and waits until the kernel shows it stopped (/proc/<pid>/stat state
// 'T'): a signal is delivered asynchronously, and a test that freezes a peer must not act
// before it is frozen. False when it did not stop within `timeout`.
bool FreezeProcess(pid_t pid, std::chrono::milliseconds timeout);

// An HTTP metadata server with Mooncake's behaviour, in this process: GET/PUT/DELETE
// /metadata?key= only (404 for absent keys, also on DELETE), no prefix listing, no TTLs, and a
// second PUT of an "/rpc_meta/" key refused with 400 ("Duplicate rpc_meta key not allowed"), as
// Mooncake's Python server does. It counts the PUTs it receives. Thread contract: thread-safe.
class MooncakeStyleServer {
 public:
  MooncakeStyleServer();
  ~MooncakeStyleServer();
  MooncakeStyleServer(const MooncakeStyleServer&) = delete;
  MooncakeStyleServer& operator=(const MooncakeStyleServer&) = delete;
  uint16_t port() const;  // 0 when it could not bind
  int puts(const std::string& key) const;  // PUTs of `key` received (refused ones included)
  int puts_with_ttl() const;               // PUTs that carried ttl=

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A socket listening on 127.0.0.1 that never answers. Clients connect (the kernel's backlog)
// and wait; the test takes their connections only when it asks, to see that they came:
// a server that accepts but is silent, or, started on a killed server's port, one that is dead.
// Thread contract: one thread at a time.
class SilentListener {
 public:
  // On `port`, or a free port when 0 (a port a killed server just left is fine).
  static Result<std::unique_ptr<SilentListener>> Start(uint16_t port = 0);
  ~SilentListener();  // closes the listener and every connection it took
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  uint16_t port() const { return port_; }

  // Takes connections, holding them open and unanswered, until one of them has sent a byte: a
  // client has sent its request and now waits for the answer. False when none did in `timeout`.
  bool WaitForRequest(std::chrono::milliseconds timeout);
  // Takes connections and closes each at once (the client sees EOF, as from a server that
  // died) until `n` have come since Start(). False when fewer came in `timeout`.
  bool CloseConnections(size_t n, std::chrono::milliseconds timeout);

 private:
  SilentListener(int fd, uint16_t port) : fd_(fd), port_(port) {}
  // Accepts one connection if one arrives by `deadline`; -1 otherwise.
  int AcceptBy(std::chrono::steady_clock::time_point deadline);

  int fd_;
  uint16_t port_;
  size_t accepted_ = 0;
  std::vector<int> held_;
};

// One child process, started with execv, its output in `log_path`.
class ChildProcess {
 public:
  // Output goes to `log_path` (appended).
  static Result<std::unique_ptr<ChildProcess>> Spawn(std::vector<std::string> argv,
                                                     std::string log_path);
  // stdin and stdout are pipes to the test (WriteLine / ReadLine); stderr goes to `log_path`.
  static Result<std::unique_ptr<ChildProcess>> SpawnPiped(std::vector<std::string> argv,
                                                          std::string log_path);
  Status WriteLine(const std::string& line);
  // The next line of the child's stdout, without the newline; Timeout / Unavailable (EOF).
  Result<std::string> ReadLine(std::chrono::milliseconds timeout);
  ~ChildProcess();  // SIGKILL if still running
  pid_t pid() const { return pid_; }
  bool running();
  // SIGTERM, then SIGKILL after `grace`; reaps the child. Returns its wait status, or -1.
  int Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  void Kill();  // SIGKILL and reap
  const std::string& log_path() const { return log_path_; }
  // The last few KiB of the log, for failure messages.
  std::string LogTail() const;

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  static Result<std::unique_ptr<ChildProcess>> SpawnImpl(std::vector<std::string> argv,
                                                         std::string log_path, bool piped);
  pid_t pid_;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffered_;
  std::string log_path_;
  bool reaped_ = false;
};

// A server the tests start, stop, kill and restart on the same port and data.
class TestServer {
 public:
  virtual ~TestServer() = default;
  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  Status Restart();   // SIGTERM, then start again on the same port and data
  void Kill();        // SIGKILL, no restart
  Status Relaunch();  // after Kill(): the same port and data

 protected:
  TestServer(TempDir dir, uint16_t port) : dir_(std::move(dir)), port_(port) {}
  virtual std::vector<std::string> Command() const = 0;
  virtual std::string name() const = 0;
  // Ready once it accepts connections; etcd also answers its /health first.
  virtual bool WaitReady(std::chrono::milliseconds timeout);
  Status Launch();

  TempDir dir_;
  uint16_t port_;
  std::unique_ptr<ChildProcess> process_;
  int launches_ = 0;
};

class EtcdServer final : public TestServer {
 public:
  static Result<std::unique_ptr<EtcdServer>> Start();

 private:
  using TestServer::TestServer;
  std::vector<std::string> Command() const override;
  std::string name() const override { return "etcd"; }
  bool WaitReady(std::chrono::milliseconds timeout) override;
  uint16_t peer_port_ = 0;
};

class RedisServer final : public TestServer {
 public:
  // `password`: when non-empty, requirepass is set.
  static Result<std::unique_ptr<RedisServer>> Start(std::string password = "");

 private:
  using TestServer::TestServer;
  std::vector<std::string> Command() const override;
  std::string name() const override { return "redis"; }
  std::string password_;
};

// build/bin/ferry-metadata-server with --data in its own directory.
class MetadataServer final : public TestServer {
 public:
  static Result<std::unique_ptr<MetadataServer>> Start(std::vector<std::string> extra_args = {});
  std::string data_path() const { return dir_.path() + "/metadata.json"; }

 private:
  using TestServer::TestServer;
  std::vector<std::string> Command() const override;
  std::string name() const override { return "ferry-metadata-server"; }
  std::vector<std::string> extra_args_;
};

// Debian's /usr/bin/prometheus scraping `targets` ("127.0.0.1:9464", ...) at /metrics every
// `scrape_interval`, its TSDB in its own directory; ready once /-/ready answers 200. Query runs
// an instant PromQL query through its HTTP API (GET /api/v1/query) and returns the JSON body.
class PrometheusServer final : public TestServer {
 public:
  static Result<std::unique_ptr<PrometheusServer>> Start(
      std::vector<std::string> targets,
      std::chrono::milliseconds scrape_interval = std::chrono::seconds(1));
  Result<std::string> Query(const std::string& promql) const;

 private:
  using TestServer::TestServer;
  std::vector<std::string> Command() const override;
  std::string name() const override { return "prometheus"; }
  bool WaitReady(std::chrono::milliseconds timeout) override;
};

// GET http://127.0.0.1:<port><path> (path with its query, already URL-encoded): the body of a
// 200 answer; Unavailable (no answer, bounded by `timeout`) or NotFound/Internal (another code).
Result<std::string> HttpGetLocal(uint16_t port, const std::string& path,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(5));

// A store server of one of the three kinds engines publish to, and the connection string that
// reaches it ("etcd://h:p", "redis://h:p", "http://h:p/metadata"), for tests parameterized over
// the stores.
enum class StoreKind { kEtcd, kRedis, kHttp };
struct RunningStore {
  std::unique_ptr<TestServer> server;
  std::string connection;
};
Result<RunningStore> StartStore(StoreKind kind);
std::string StoreKindName(StoreKind kind);  // "etcd", "redis", "http" (test names)

// Directory of ferry's built executables (set at compile time).
std::string BinDir();

}  // namespace ferry::testing
