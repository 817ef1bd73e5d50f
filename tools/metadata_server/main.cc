// ferry-metadata-server: a Mooncake-compatible HTTP metadata server (API in http_handlers.h,
// flags in server_options.cc, persistence in kv_store.h, data_file.h and journal.h).
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/tsan_suppressions.h"
#include "metadata_server/http_handlers.h"
#include "metadata_server/kv_store.h"
#include "metadata_server/server_options.h"

FERRY_TSAN_IGNORE_HTTPLIB()

namespace ferry::metadata_server {
namespace {

using namespace std::chrono_literals;

constexpr auto kSweepInterval = 200ms;

// Waits for a stop signal with sigwait on its own thread and stops `server` when one arrives,
// so no work runs inside a signal handler. The signals must already be blocked in every thread
// (main blocks them before starting any). Thread contract: construct and Finish() on one thread.
class SignalStopper {
 public:
  SignalStopper(httplib::Server& server, const sigset_t& signals)
      : server_(server), signals_(signals), thread_([this] { Run(); }) {}
  ~SignalStopper() { Finish(); }
  SignalStopper(const SignalStopper&) = delete;
  SignalStopper& operator=(const SignalStopper&) = delete;

  // Call once listening has ended: wakes the thread if no signal came and joins it. Returns
  // whether a signal stopped the server.
  bool Finish() {
    if (!thread_.joinable()) return signaled_;
    listen_returned_ = true;
    if (!signaled_) pthread_kill(thread_.native_handle(), SIGTERM);  // stays blocked; wakes sigwait
    thread_.join();
    return signaled_;
  }

 private:
  void Run() {
    int sig = 0;
    while (sigwait(&signals_, &sig) != 0) {
    }
    if (listen_returned_) return;
    signaled_ = true;
    FERRY_LOG(kInfo) << "signal " << sig << ": stopping";
    // stop() acts only once listen_after_bind is running; the signal may come just before.
    while (!server_.is_running() && !listen_returned_) std::this_thread::sleep_for(5ms);
    if (!listen_returned_) server_.stop();
  }

  httplib::Server& server_;
  const sigset_t signals_;
  std::atomic<bool> listen_returned_{false};
  std::atomic<bool> signaled_{false};
  std::thread thread_;  // last: started once the fields above exist
};

// The listening socket's backlog. cpp-httplib listens with 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed
// in Debian's compiled library); every store request is a fresh connection, so a few hundred
// engines connecting at once overflowed it, the kernel dropped their SYNs and each waited a 1 s
// retransmit (bench/scale.sh measured cold opens and publishes at p99 ~1 s).
constexpr int kListenBacklog = 4096;

// Binds `server`; returns the port, or -1.
int Bind(httplib::Server& server, const ServerOptions& options) {
  // Shared, not borrowed: the server keeps the callback after Bind returns.
  auto last_fd = std::make_shared<std::atomic<int>>(-1);
  server.set_socket_options([last_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    *last_fd = sock;  // the last socket set up is the one bound (earlier attempts are closed)
  });
  int port = -1;
  if (options.port == 0) {
    port = server.bind_to_any_port(options.bind);
  } else if (server.bind_to_port(options.bind, options.port)) {
    port = options.port;
  }
  // listen() again on a listening socket only changes its backlog (capped by somaxconn).
  if (const int fd = *last_fd; port >= 0 && fd >= 0 && ::listen(fd, kListenBacklog) != 0) {
    FERRY_LOG(kWarn) << "ferry-metadata-server: could not raise the listen backlog to "
                     << kListenBacklog << ": " << ErrnoText(errno);
  }
  return port;
}

int Serve(const ServerOptions& options) {
  if (LogLevel level; ParseLogLevel(options.log_level, &level)) SetLogLevel(level);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any thread starts
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is an error on that connection only
  signal(SIGXFSZ, SIG_IGN);  // a file size limit fails the write (EFBIG), like a full disk

  Result<std::unique_ptr<KvStore>> store =
      KvStore::Open({.data_path = options.data,
                     .max_keys = options.max_keys,
                     .journal_compact_bytes = options.journal_compact_bytes});
  if (!store.ok()) {
    std::fprintf(stderr, "ferry-metadata-server: %s\n", store.status().ToString().c_str());
    return 2;
  }
  httplib::Server server;
  InstallHandlers(server, **store, options.path, options.max_body);
  const int port = Bind(server, options);
  if (port < 0) {
    std::fprintf(stderr, "ferry-metadata-server: cannot listen on %s:%d (%s)\n",
                 options.bind.c_str(), options.port, ErrnoText(errno).c_str());
    return 1;
  }
  ExpirySweeper sweeper(**store, kSweepInterval);
  sweeper.Start();
  SignalStopper stopper(server, stop_signals);
  std::printf("ready port=%d\n", port);
  std::fflush(stdout);
  FERRY_LOG(kInfo) << "serving " << options.path << " on " << options.bind << ":" << port
                   << (options.data.empty() ? " (memory only)" : " with data file " + options.data);
  server.listen_after_bind();
  const bool signaled = stopper.Finish();
  sweeper.Stop();
  // Every change is on disk already; this folds the journal into the data file, which is then
  // complete by itself (the previous release reads it and not the journal).
  if (Status s = (*store)->Compact(); !s.ok()) {
    std::fprintf(stderr,
                 "ferry-metadata-server: compacting at stop failed (every change is on disk "
                 "already): %s\n",
                 s.ToString().c_str());
  }
  if (!signaled) {
    std::fprintf(stderr, "ferry-metadata-server: the listening socket failed\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ferry::metadata_server

int main(int argc, char** argv) {
  using namespace ferry::metadata_server;
  const std::vector<std::string> args(argv + 1, argv + argc);
  ferry::Result<ServerOptions> options = ParseServerOptions(args);
  if (!options.ok()) {
    std::fprintf(stderr, "ferry-metadata-server: %s\n\n%s", options.status().message().c_str(),
                 ServerUsage().c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(ServerUsage().c_str(), stdout);
    return 0;
  }
  return Serve(*options);
}
