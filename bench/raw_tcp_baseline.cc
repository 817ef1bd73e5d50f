// ferry-raw-tcp-baseline: the ceiling ferry's TCP transport is measured against, in the same run.
// One process, one loopback connection (TCP_NODELAY on both ends), two threads.
//
// Stream (the default): a writer thread streams blocks of --block_size bytes with blocking
// send() for --duration seconds while the reader recv()s everything until EOF. No acks, no
// framing: plain one-directional bulk throughput.
//
//   ferry-raw-tcp-baseline [--block_size=64K] [--duration=3]
//   {"mode":"stream","block_size":65536,"gbps":...,"ops_per_s":...,"bytes":...,"seconds":...}
//
// gbps is 10^9 bytes per second, counted from the first send to the reader seeing EOF.
//
// Ping-pong (--pingpong): the raw round trip a single ferry write or read of one block is
// compared with. write: the initiator send()s one block, the peer recv()s all of it and
// answers one byte, the initiator recv()s that byte; read: the initiator sends one byte, the
// peer answers one block, the initiator recv()s all of it. One operation at a time, for
// --duration seconds after 100 untimed round trips; each round trip is timed (steady_clock
// around it) and the JSON line adds "operation", "p50_us", "p99_us" and "mean_us":
//
//   ferry-raw-tcp-baseline --pingpong [--operation=write|read] [--block_size=4K] [--duration=3]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
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
  bool pingpong = false;
  bool write = true;  // --pingpong: which way the block goes
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
    } else if (arg == "--pingpong") {
      o.pingpong = true;
    } else if (arg == "--operation=write" || arg == "--operation=read") {
      o.write = arg == "--operation=write";
    } else {
      std::fprintf(stderr,
                   "unknown argument '%s'\nusage: ferry-raw-tcp-baseline [--block_size=BYTES] "
                   "[--duration=SECONDS] [--pingpong [--operation=write|read]]\n",
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

// Receives exactly `size` bytes: 1 when they came, 0 on EOF before the first, -1 after a message.
int RecvAll(int fd, char* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = recv(fd, data + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      if (got == 0) return 0;
      errno = EPIPE;
      Fail("recv (EOF inside a message)");
      return -1;
    } else if (errno != EINTR) {
      Fail("recv");
      return -1;
    }
  }
  return 1;
}

// --pingpong's peer: accepts one connection and answers each request (a block for a write, a
// byte for a read) with a byte (write) or a block (read) until EOF. Sets `ok` on a clean EOF.
void PingPongPeer(int listen_fd, const Options& o, bool& ok) {
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    Fail("accept");
    return;
  }
  SetNoDelay(fd);
  std::vector<char> block(o.block_size, 'p');
  while (true) {
    const int got = RecvAll(fd, block.data(), o.write ? block.size() : 1);
    if (got == 0) ok = true;
    if (got <= 0) break;
    if (!(o.write ? SendAll(fd, block.data(), 1) : SendAll(fd, block.data(), block.size()))) break;
  }
  close(fd);
}

double PercentileOf(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

// --pingpong's initiator side: connects, runs 100 untimed round trips, then times each round
// trip for the duration, and prints the JSON line. Returns the exit status.
int RunPingPong(const Options& o) {
  int listen_fd = -1;
  uint16_t port = 0;
  if (!Listen(listen_fd, port)) return 1;
  bool peer_ok = false;
  std::thread peer(PingPongPeer, listen_fd, std::cref(o), std::ref(peer_ok));
  bool ok = false;
  std::vector<double> latencies_us;
  Clock::time_point start;
  Clock::time_point end;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = Loopback(port);
  if (fd < 0) {
    Fail("socket");
  } else if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("connect");
  } else {
    SetNoDelay(fd);
    std::vector<char> block(o.block_size, 'f');
    auto round_trip = [&] {
      if (o.write) {
        return SendAll(fd, block.data(), block.size()) && RecvAll(fd, block.data(), 1) == 1;
      }
      return SendAll(fd, block.data(), 1) && RecvAll(fd, block.data(), block.size()) == 1;
    };
    ok = true;
    for (int i = 0; i < 100 && ok; ++i) ok = round_trip();
    const auto duration =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
    start = Clock::now();
    end = start;
    while (ok && end - start < duration) {
      const auto before = Clock::now();
      ok = round_trip();
      end = Clock::now();
      latencies_us.push_back(std::chrono::duration<double, std::micro>(end - before).count());
    }
    shutdown(fd, SHUT_WR);
  }
  if (fd < 0 || !ok) shutdown(listen_fd, SHUT_RDWR);  // unblocks accept if connect never happened
  peer.join();
  if (fd >= 0) close(fd);
  close(listen_fd);
  if (!ok || !peer_ok) return 1;

  double sum = 0;
  for (const double us : latencies_us) sum += us;
  const double mean = latencies_us.empty() ? 0 : sum / static_cast<double>(latencies_us.size());
  std::sort(latencies_us.begin(), latencies_us.end());
  const double seconds = std::chrono::duration<double>(end - start).count();
  const double ops = static_cast<double>(latencies_us.size());
  std::printf(
      "{\"mode\":\"pingpong\",\"operation\":\"%s\",\"block_size\":%llu,\"gbps\":%.6f,"
      "\"ops_per_s\":%.1f,\"bytes\":%.0f,\"seconds\":%.6f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
      "\"mean_us\":%.1f}\n",
      o.write ? "write" : "read", static_cast<unsigned long long>(o.block_size),
      ops * static_cast<double>(o.block_size) / seconds / 1e9, ops / seconds,
      ops * static_cast<double>(o.block_size), seconds, PercentileOf(latencies_us, 50),
      PercentileOf(latencies_us, 99), mean);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = ParseArgs(argc, argv);
  if (!options) return 2;
  if (options->pingpong) return RunPingPong(*options);
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
      "{\"mode\":\"stream\",\"block_size\":%llu,\"gbps\":%.6f,\"ops_per_s\":%.1f,\"bytes\":%llu,"
      "\"seconds\":%.6f}\n",
      static_cast<unsigned long long>(options->block_size),
      static_cast<double>(read.bytes) / seconds / 1e9, blocks / seconds,
      static_cast<unsigned long long>(read.bytes), seconds);
  return 0;
}
