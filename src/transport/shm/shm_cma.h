// Cross-memory attach: copies between this process and another process's address space with
// process_vm_writev / process_vm_readv (see ShmTransport for when the kernel allows it).
//
// Thread contract: thread-safe (no state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <vector>

#include "ferry/status.h"
#include "ferry/types.h"

namespace ferry::shm {

// One contiguous copy: WRITE local -> remote, READ remote -> local.
struct CmaCopy {
  uint64_t local = 0;
  uint64_t remote = 0;
  uint64_t length = 0;
};

// Moves every copy between this process and `pid`, batching up to 1024 copies per system call
// and continuing partial transfers. Returns one status per copy: Ok once all its bytes moved;
// PermissionDenied (EPERM: the kernel refuses access to `pid`) and Unavailable (ESRCH: no such
// process) fail every copy not yet done, with a message that names the call, the pid and the
// errno and says that the engine falls back to another transport; InvalidArgument (EFAULT) or
// Internal fail only the copy that caused them.
std::vector<Status> CmaTransfer(pid_t pid, OpCode op, std::span<const CmaCopy> copies);

}  // namespace ferry::shm
