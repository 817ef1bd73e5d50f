// ferry-raw-tcp-baseline: the ceiling ferry's TCP transport is measured against, in the same run.
// One process, one loopback connection (TCP_NODELAY on both ends): a writer thread streams
// blocks of --block_size bytes with blocking send() for --duration seconds while the reader
// recv()s everything until EOF. No acks, no framing: plain one-directional bulk throughput.
//
//   ferry-raw-tcp-baseline [--block_size=64K] [--duration=3]
//   {"block_size":65536,"gbps":...,"ops_per_s":...,"bytes":...,"seconds":...}
//
// gbps is 10^9 bytes per second, counted from the first send to the reader seeing EOF.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "raw_baseline.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  uint64_t block_size = 65536;
  double duration_s = 3;
};

using raw_baseline::ParseBytes;

// Parses argv; nullopt (after a message on stderr) on a bad or unknown flag.
std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.rfind("--block_size=", 0) == 0) {
      const auto bytes = ParseBytes(arg.substr(13));
      if (!bytes) {
        std::fprintf(stderr, "bad --block_size '%s'\n", argv[i]);
        return std::nullopt;
      }
      o.block_size = *bytes;
    } else if (arg.rfind("--duration=", 0) == 0) {
      const std::string_view v = arg.substr(11);
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), o.duration_s);
      if (ec != std::errc() || ptr != v.data() + v.size() || !(o.duration_s > 0)) {
        std::fprintf(stderr, "bad --duration '%s'\n", argv[i]);
        return std::nullopt;
      }
    } else {
      std::fprintf(stderr,
                   "unknown argument '%s'\nusage: ferry-raw-tcp-baseline [--block_size=BYTES] "
                   "[--duration=SECONDS]\n",
                   argv[i]);
      return std::nullopt;
    }
  }
  return o;
}

bool Fail(const char* what) {
  std::fprintf(stderr, "ferry-raw-tcp-baseline: %s: %s\n", what, std::strerror(errno));
  return false;
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// Listens on 127.0.0.1 at a free port; writes the socket and the port on success.
bool Listen(int& listen_fd, uint16_t& port) {
  listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return Fail("socket");
  sockaddr_in addr = Loopback(0);
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return Fail("bind");
  if (listen(listen_fd, 1) != 0) return Fail("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Fail("getsockname");
  }
  port = ntohs(addr.sin_port);
  return true;
}

struct ReaderResult {
  uint64_t bytes = 0;
  Clock::time_point eof;
  bool ok = false;
};

// Accepts one connection and reads until EOF into a block-sized buffer.
void Reader(int listen_fd, uint64_t block_size, ReaderResult& out) {
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    Fail("accept");
    return;
  }
  SetNoDelay(fd);
  std::vector<char> buffer(block_size);
  while (true) {
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
    if (n > 0) {
      out.bytes += static_cast<uint64_t>(n);
    } else if (n == 0) {
      out.ok = true;
      break;
    } else if (errno != EINTR) {
      Fail("recv");
      break;
    }
  }
  out.eof = Clock::now();
  close(fd);
}

// Sends all of `data`; false on an error.
bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail("send");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Connects to the reader and streams blocks for the duration; writes the start time.
bool Writer(uint16_t port, const Options& o, Clock::time_point& start) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail("socket");
  sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return Fail("connect");
  }
  SetNoDelay(fd);
  std::vector<char> block(o.block_size, 'f');
  const auto duration =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  start = Clock::now();
  bool ok = true;
  while (ok && Clock::now() - start < duration) ok = SendAll(fd, block.data(), block.size());
  shutdown(fd, SHUT_WR);
  close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = ParseArgs(argc, argv);
  if (!options) return 2;
  int listen_fd = -1;
  uint16_t port = 0;
  if (!Listen(listen_fd, port)) return 1;

  ReaderResult read;
  std::thread reader(Reader, listen_fd, options->block_size, std::ref(read));
  Clock::time_point start;
  const bool wrote = Writer(port, *options, start);
  if (!wrote) shutdown(listen_fd, SHUT_RDWR);  // unblocks accept if connect never happened
  reader.join();
  close(listen_fd);
  if (!wrote || !read.ok) return 1;

  const double seconds = std::chrono::duration<double>(read.eof - start).count();
  const double blocks = static_cast<double>(read.bytes) / static_cast<double>(options->block_size);
  std::printf(
      "{\"block_size\":%llu,\"gbps\":%.6f,\"ops_per_s\":%.1f,\"bytes\":%llu,\"seconds\":%.6f}\n",
      static_cast<unsigned long long>(options->block_size),
      static_cast<double>(read.bytes) / seconds / 1e9, blocks / seconds,
      static_cast<unsigned long long>(read.bytes), seconds);
  return 0;
}
