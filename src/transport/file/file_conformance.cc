// The file transport in the conformance suite, twice: file windows in the temp directory (a
// disk file system, where O_DIRECT works) and in /dev/shm (tmpfs: no O_DIRECT, every I/O through
// the page cache). The target of every case is the initiator's own engine (an engine reaching
// its own file buffers under the registry's pin, see conformance.h): the window, generation,
// drain and completion cases check the transport against that pin, and the bytes and guard
// bytes are read back from the file with pread. Initiator memory is page-aligned, so slices
// whose file offset and length are aligned too go O_DIRECT and the others buffered: both paths
// run. Not run here: the local-only case (a file buffer is always published); a peer that
// reaches a file through the path map without its owner is file_transport_test's matter.
//
// In StoppedPeerFailsWithinTheBound the stopped "peer" is the engine's own transport: the case
// checks that a file buffer's requests fail, within the bound, once its transport stopped.
#include <cstdlib>
#include <memory>
#include <string>

#include "transport/conformance/conformance.h"
#include "transport/file/file_transport.h"

namespace ferry {
namespace {

std::unique_ptr<Transport> MakeFileTransport() {
  Result<std::unique_ptr<Transport>> made = CreateFileTransport(FileTransportOptions{});
  return made.ok() ? std::move(made).value() : nullptr;  // the default options are valid
}

// Where io_uring is refused (a seccomp filter, kernel.io_uring_disabled) the transport cannot
// start: its cases are skipped with the reason.
std::string Unavailable() {
  const Status uring = FileTransportAvailable();
  return uring.ok() ? std::string() : "io_uring unavailable: " + uring.ToString();
}

// Page-aligned heap memory, so that aligned slices may go O_DIRECT.
Result<std::shared_ptr<uint8_t>> AllocateAligned(Transport& /*owner*/, size_t length) {
  constexpr size_t kAlign = 4096;
  void* p = std::aligned_alloc(kAlign, (length + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) return InternalError("aligned_alloc of " + std::to_string(length) + " bytes");
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

const bool registered_disk = conformance::Register({
    .name = "file",
    .transport = "file",
    .make = MakeFileTransport,
    .unavailable = Unavailable,
    .allocate = AllocateAligned,
    .file_directory = {},  // the temp directory
});

const bool registered_devshm = conformance::Register({
    .name = "file_devshm",
    .transport = "file",
    .make = MakeFileTransport,
    .unavailable = Unavailable,
    .allocate = AllocateAligned,
    .file_directory = "/dev/shm",
});

}  // namespace
}  // namespace ferry
