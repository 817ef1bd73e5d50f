#include "transport/shm/shm_cma.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "common/log.h"

namespace ferry::shm {
namespace {

constexpr size_t kIovMax = 1024;  // UIO_MAXIOV

struct Progress {
  size_t done = 0;  // copies completed, from the start of the run
  int err = 0;      // errno of the call that stopped the run; 0 when all completed
};

Status ErrorFor(pid_t pid, OpCode op, int err) {
  const std::string what = std::string(op == OpCode::kWrite ? "process_vm_writev to pid "
                                                            : "process_vm_readv from pid ") +
                           std::to_string(pid) + ": " + ErrnoText(err);
  switch (err) {
    case EPERM:
      return PermissionDeniedError(what + "; the engine falls back to another transport");
    case ESRCH:
      return UnavailableError(what + " (the peer process is gone); the engine falls back to " +
                              "another transport");
    case EFAULT:
      return InvalidArgumentError(what + " (a local or remote address is not mapped)");
    default:
      return InternalError(what);
  }
}

bool FailsEverything(int err) { return err == EPERM || err == ESRCH; }

// Moves `copies` with as few calls as the kernel allows; stops at the first error.
Progress MoveRun(pid_t pid, OpCode op, std::span<const CmaCopy> copies) {
  iovec local[kIovMax];
  iovec remote[kIovMax];
  const size_t n = copies.size();
  for (size_t i = 0; i < n; ++i) {
    local[i] = {reinterpret_cast<void*>(copies[i].local), copies[i].length};
    remote[i] = {reinterpret_cast<void*>(copies[i].remote), copies[i].length};
  }
  size_t first = 0;  // the first iovec not wholly moved
  while (first < n) {
    const auto count = static_cast<unsigned long>(n - first);
    const ssize_t moved =
        op == OpCode::kWrite
            ? ::process_vm_writev(pid, local + first, count, remote + first, count, 0)
            : ::process_vm_readv(pid, local + first, count, remote + first, count, 0);
    if (moved < 0) {
      if (errno == EINTR) continue;
      return {first, errno};
    }
    if (moved == 0) return {first, EFAULT};  // no progress: treat as a bad address
    // Local and remote iovecs have equal lengths in the same order: advance both alike.
    auto left = static_cast<size_t>(moved);
    while (left > 0 && first < n) {
      if (left >= local[first].iov_len) {
        left -= local[first].iov_len;
        ++first;
      } else {
        local[first].iov_base = static_cast<char*>(local[first].iov_base) + left;
        remote[first].iov_base = static_cast<char*>(remote[first].iov_base) + left;
        local[first].iov_len -= left;
        remote[first].iov_len -= left;
        left = 0;
      }
    }
  }
  return {n, 0};
}

}  // namespace

std::vector<Status> CmaTransfer(pid_t pid, OpCode op, std::span<const CmaCopy> copies) {
  std::vector<Status> statuses(copies.size());
  size_t i = 0;
  while (i < copies.size()) {
    const size_t end = std::min(copies.size(), i + kIovMax);
    const Progress p = MoveRun(pid, op, copies.subspan(i, end - i));
    i += p.done;
    if (p.err == 0) continue;
    if (FailsEverything(p.err)) {
      const Status why = ErrorFor(pid, op, p.err);
      for (; i < copies.size(); ++i) statuses[i] = why;
      return statuses;
    }
    // Something in this run is bad: retry its rest one copy at a time to find which.
    for (; i < end; ++i) {
      const Progress one = MoveRun(pid, op, copies.subspan(i, 1));
      if (one.err == 0) continue;
      statuses[i] = ErrorFor(pid, op, one.err);
      if (FailsEverything(one.err)) {
        for (++i; i < copies.size(); ++i) statuses[i] = statuses[i - 1];
        return statuses;
      }
    }
  }
  return statuses;
}

}  // namespace ferry::shm
