// FileTransport ("file"): moves bytes between registered memory and file buffers (a window of a
// file or block device registered with TransferEngine::registerLocalFile) with io_uring.
//
// What it carries: slices whose remote side is a file buffer, and only those. The file buffer
// is either this engine's own (RegisterFile opened it) or another engine's whose file is
// visible on this host: the buffer's path map (FileWindow::paths) names a path for this host
// (gethostname), and the file there is the same one (same device and inode when the owner runs
// on this host, same inode and a size covering the window on another host, where device
// numbers differ; the size alone for a block device there). The first slice to such a buffer
// opens it, once per link; a buffer not visible here fails its slices with NotFound naming the
// host and the path map. The engine sends a request to such a buffer through its owner instead
// (over tcp; TransportContext::StartStagedIo), asking Reaches first, which answers from the same
// identity check (a stat, remembered per buffer and generation). The owner serves it with this
// transport as a slice to its own buffer, between the file and the tcp target's staging (the own
// buffer case below: pinned, checked, drained like any of its slices).
//
// Checks: a slice to an own file buffer is pinned through TransportContext::PinRemoteAccess
// (generation, closing, window: exactly as a remote access to memory; Stale when the buffer was
// re-registered or is being unregistered), and the pin is held until the I/O completed, so an
// unregister waits (bounded by the drain timeout) for the I/O in flight on that buffer. A slice
// to another engine's file buffer is checked against the window of the descriptor it was
// planned with; that owner cannot fence it (as with one-sided RDMA): once the owner
// unregistered, bytes may still move until this engine refreshes the descriptor. Before a
// Submit call's I/Os start, each file is checked once (fstat): deleted gives NotFound
// ("vanished"), shorter than its window InvalidArgument ("truncated"); a read that meets the
// end of file under way fails the same way.
//
// I/O (uring_queue.h): one ring of `queue_depth` I/Os in flight and its thread, made by the first
// file registration or remote file open (Start only checks io_uring works): per slice
// O_DIRECT when the memory address, file offset and length meet the file's direct-I/O alignment
// (statx, else the logical block size) and options.direct_io is on, the page cache otherwise;
// Slice::io_path reports which. Short reads and writes are continued; ENOSPC, EIO and other
// errors fail the slice (Unavailable, the errno and file named). Slice::sync writes complete
// after an fdatasync of their file (one per file per Submit call).
//
// Deadlines: a slice still queued at its deadline completes with Timeout and moves nothing; an
// I/O already in the kernel is not recalled and completes with its result.
//
// Thread contract: thread-safe after Start (the Transport contract).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/transport.h"

namespace ferry {

struct FileTransportOptions {
  // I/Os in the kernel at once (reads, writes and fdatasyncs), 1..4096.
  unsigned queue_depth = 64;
  // Slices waiting beyond queue_depth before Submit answers Again.
  size_t max_queued = 65536;
  // The slice size the engine cuts requests into for this transport (one I/O each).
  uint64_t preferred_slice_size = uint64_t{1} << 20;
  // false: always through the page cache.
  bool direct_io = true;
};

Result<std::unique_ptr<Transport>> CreateFileTransport(const FileTransportOptions& options = {});

// Whether io_uring works in this process (probed once, then remembered): Unavailable naming why
// (ENOSYS, or EPERM from a seccomp filter or kernel.io_uring_disabled) when not. Start fails
// the same way; "auto" leaves the transport out on it. Thread-safe.
Status FileTransportAvailable();

}  // namespace ferry
