#include "bench/raw_baseline_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>

extern char** environ;

namespace ferry::bench {
namespace {

constexpr size_t kMaxOutput = 64 << 10;  // a baseline prints one short line

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::optional<RawBaselineCommand> RawBaselineFor(const BenchOptions& point) {
  const std::string size = "--block_size=" + std::to_string(point.block_size);
  const std::string duration = "--duration=" + std::to_string(point.duration_s);
  if (point.protocol == "tcp") {
    return RawBaselineCommand{"tcp-stream", "ferry-raw-tcp-baseline", {size, duration}};
  }
  if (point.protocol == "shm") {
    const bool memcpy = point.managed;
    return RawBaselineCommand{memcpy ? "shm-memcpy" : "shm-cma",
                              "ferry-raw-shm-baseline",
                              {memcpy ? "--kind=memcpy" : "--kind=cma",
                               "--operation=" + std::string(OperationName(point.operation)), size,
                               "--batch_size=" + std::to_string(point.batch_size),
                               "--threads=" + std::to_string(point.threads), duration,
                               "--working_set=" + std::to_string(point.WorkingSetBytes())}};
  }
  return std::nullopt;
}

Result<RawPoint> RunRawBaseline(const std::string& folder, const RawBaselineCommand& command,
                                std::chrono::milliseconds timeout) {
  const std::string path = folder + "/" + command.program;
  if (access(path.c_str(), X_OK) != 0) {
    return NotFoundError("raw baseline " + path + ": " + std::strerror(errno));
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return InternalError(Errno("pipe2"));
  Fd out{pipe_fds[0]};
  Fd in{pipe_fds[1]};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, in.fd, STDOUT_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // ferry-bench blocks them (StopSignals)
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> words = {path};
  words.insert(words.end(), command.args.begin(), command.args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    return InternalError("spawning " + path + ": " + std::strerror(spawned));
  }
  close(in.fd);
  in.fd = -1;

  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out.fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline check above ends the wait
    char chunk[4096];
    const ssize_t n = read(out.fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF (or an error): the child is done writing
    if (output.size() < kMaxOutput) output.append(chunk, static_cast<size_t>(n));
  }
  // Reaped within the same deadline: a child that closed its stdout (or whose output ended in
  // an error) may still run; past the deadline it is killed like one that kept writing.
  int wait_status = 0;
  while (!timed_out) {
    const pid_t reaped = waitpid(pid, &wait_status, WNOHANG);
    if (reaped == pid || (reaped < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    usleep(10000);  // 10 ms between looks at a child that is exiting
  }
  if (timed_out) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
  }
  if (timed_out) {
    return TimeoutError(path + " still ran after " + std::to_string(timeout.count()) +
                        " ms (killed)");
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return InternalError(path + " failed (exit status " +
                         (WIFEXITED(wait_status)
                              ? std::to_string(WEXITSTATUS(wait_status))
                              : "signal " + std::to_string(WTERMSIG(wait_status))) +
                         ")");
  }
  const nlohmann::json json = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("gbps") || !json["gbps"].is_number()) {
    return InternalError(path + " printed no \"gbps\": '" + output.substr(0, 200) + "'");
  }
  RawPoint raw;
  raw.baseline = command.name;
  raw.gbps = json["gbps"].get<double>();
  if (json.contains("p99_us") && json["p99_us"].is_number())
    raw.p99_us = json["p99_us"].get<double>();
  if (json.contains("working_set") && json["working_set"].is_number_unsigned()) {
    raw.working_set = json["working_set"].get<uint64_t>();
  }
  return raw;
}

std::string ExecutableFolder() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  std::string exe(path, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash == 0 ? 1 : slash);
}

}  // namespace ferry::bench
