// ferry-raw-file-baseline: the io_uring ceiling bench/file.sh measures ferry's file transport
// against, in the same run. No ferry code: one thread, one ring, a plain read/write loop that
// keeps --qd I/Os of --block_size bytes in flight on a file opened with O_DIRECT (--direct=0:
// buffered), at random block-aligned offsets of the file (seeded, so both programs see the same
// sequence), from / into a page-aligned buffer of qd blocks. Every completion is checked to
// have moved the whole block (a short one is an error here: the file is preallocated).
//
//   ferry-raw-file-baseline --file=PATH [--operation=read|write] [--block_size=64K] [--qd=8]
//                           [--duration=2] [--direct=1]
//   {"kind":"raw_io_uring","operation":"read","block_size":65536,"qd":8,"direct":true,
//    "gbps":...,"ops_per_s":...,"bytes":...,"seconds":...}
//
// gbps is 10^9 bytes per second. Exit status: 0 success, 1 a failed call, 2 bad flags.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "file_bench_flags.h"

namespace {

int Fail(const char* what, int err) {
  std::fprintf(stderr, "ferry-raw-file-baseline: %s: %s\n", what, std::strerror(err));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ferry::file_bench::Flags flags;
  if (!ferry::file_bench::ParseFlags(argc, argv, "ferry-raw-file-baseline", &flags)) return 2;
  const std::string& path = flags.path;
  const std::string& operation = flags.operation;
  const uint64_t block = flags.block;
  const unsigned qd = flags.qd;
  const double duration = flags.duration;
  const bool direct = flags.direct;
  const bool write = operation == "write";
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return Fail("open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Fail("fstat", errno);
  const uint64_t blocks = static_cast<uint64_t>(st.st_size) / block;
  if (blocks == 0) return Fail("file smaller than one block", EINVAL);
  auto* memory = static_cast<uint8_t*>(std::aligned_alloc(4096, qd * block));
  std::memset(memory, 0x3c, qd * block);

  io_uring ring{};
  if (int rc = io_uring_queue_init(qd, &ring, 0); rc < 0) return Fail("io_uring_queue_init", -rc);
  std::mt19937_64 rng(42);
  auto submit = [&](unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    const uint64_t offset = (rng() % blocks) * block;
    void* mem = memory + slot * block;
    if (write) {
      io_uring_prep_write(sqe, fd, mem, static_cast<unsigned>(block), offset);
    } else {
      io_uring_prep_read(sqe, fd, mem, static_cast<unsigned>(block), offset);
    }
    io_uring_sqe_set_data64(sqe, slot);
  };
  for (unsigned s = 0; s < qd; ++s) submit(s);
  io_uring_submit(&ring);
  uint64_t ops = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto stop = start + std::chrono::duration<double>(duration);
  auto now = start;
  while (now < stop) {
    io_uring_cqe* cqe = nullptr;
    if (int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) return Fail("io_uring_wait_cqe", -rc);
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      if (cqe->res < 0) return Fail(write ? "write" : "read", -cqe->res);
      if (static_cast<uint64_t>(cqe->res) != block) return Fail("short I/O", EIO);
      ++ops;
      submit(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)));
    }
    io_uring_cq_advance(&ring, seen);
    io_uring_submit(&ring);
    now = std::chrono::steady_clock::now();
  }
  const double seconds = std::chrono::duration<double>(now - start).count();
  const double bytes = static_cast<double>(ops) * static_cast<double>(block);
  std::printf(
      "{\"kind\":\"raw_io_uring\",\"operation\":\"%s\",\"block_size\":%llu,\"qd\":%u,"
      "\"direct\":%s,\"gbps\":%.4f,\"ops_per_s\":%.1f,\"bytes\":%.0f,\"seconds\":%.3f}\n",
      operation.c_str(), static_cast<unsigned long long>(block), qd, direct ? "true" : "false",
      bytes / seconds / 1e9, ops / seconds, bytes, seconds);
  io_uring_queue_exit(&ring);  // the I/Os still in flight are waited for
  ::close(fd);
  std::free(memory);
  return 0;
}
