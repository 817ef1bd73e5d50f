// TransferEngine: the facade users call, with the method names users of Mooncake-style engines
// know and Status/Result returns.
//
//   ferry::TransferEngine engine;
//   RETURN_IF_ERROR(engine.init("P2PHANDSHAKE", "", "127.0.0.1", 0));
//   RETURN_IF_ERROR(engine.registerLocalMemory(buf, len));
//   ASSIGN_OR_RETURN(ferry::SegmentId peer, engine.openSegment("127.0.0.1:15000"));
//   ASSIGN_OR_RETURN(ferry::BatchId batch, engine.allocateBatchID(1));
//   RETURN_IF_ERROR(engine.submitTransfer(batch, {{ferry::OpCode::kWrite, buf, peer, remote,
//   len}}));
//   ... poll getBatchTransferStatus(batch) until it is done ...
//   RETURN_IF_ERROR(engine.freeBatchID(batch));
//
// Behaviour:
//  - Requests are copied at submit; the caller's vector need not outlive the call.
//  - Every task ends as COMPLETED, FAILED, TIMEOUT or CANCELED (cancelBatch), with a reason,
//    by its deadline (EngineOptions::task_timeout). Deadlines are kept by a timer: a TIMEOUT is
//    reported within milliseconds of the deadline, whatever any peer does.
//  - Final means final: once a task is reported TIMEOUT, FAILED or CANCELED, nothing more of it
//    lands, and its batch can be freed at once. Per transport: tcp closes the connection of an
//    expired request and its target refuses any request whose deadline has passed (a request
//    the target accepted before the deadline may finish landing while its payload streams in,
//    at most one slice); shm and cxl never copy after the deadline and close the grant channel
//    of an expired grant; rdma (one-sided) cannot recall a write already handed to the NIC:
//    such a write may still land after TIMEOUT.
//  - A request is never re-aimed. Each task is planned against one incarnation of its target
//    and one generation of the target buffer. When the target restarted (even at the same name,
//    port and address) or re-registered the buffer, the task ends FAILED with Stale and is not
//    retried; the cached descriptor is refreshed so that the next request plans against the new
//    one. Retries happen only where the target is unchanged: a new connection, or another
//    transport after a transport failure.
//  - One peer's trouble stays with that peer: store fetches, connects, retries, notification
//    sends and back-pressured submissions run on that peer's worker (EngineOptions::
//    worker_threads), never on the caller of submitTransfer or on the deadline timer.
//  - A WRITE completes only after the target applied it; a notification reaches the target only
//    after the data of its batch is in place.
//  - The local side of every request must lie inside memory registered with this engine.
//  - A transfer to this engine's own segment is a checked memcpy.
//
// Thread contract: thread-safe after init(); init() once, before anything else.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/metrics.h"
#include "ferry/options.h"
#include "ferry/status.h"
#include "ferry/types.h"

namespace ferry {

struct TransferRequest {
  OpCode opcode = OpCode::kWrite;
  void* source = nullptr;      // local address (registered memory)
  SegmentId target_id = 0;     // from openSegment
  uint64_t target_offset = 0;  // address in the target segment (its BufferDesc::addr space)
  uint64_t length = 0;  // 0 is allowed: checked like any request, then moves nothing
  // Empty: the selection policy chooses. Otherwise the only transport this request may use
  // ("tcp", "shm", ...); the request fails when that transport cannot reach the target.
  std::string transport{};
  // A WRITE to a file buffer completes only after an fdatasync of its file that followed it
  // (the sync writes of one submitTransfer call to one file share one fdatasync). Ignored for
  // memory targets.
  bool sync = false;
};

enum class TransferState : uint8_t { kWaiting, kPending, kCompleted, kFailed, kTimeout, kCanceled };
std::string_view TransferStateName(TransferState state);

struct TransferStatus {
  TransferState state = TransferState::kWaiting;
  // Bytes of the request's range confirmed moved: the slices (of slice_size bytes) a
  // transport reported complete, each counted once however many attempts carried it. COMPLETED:
  // the length. FAILED / TIMEOUT / CANCELED: a write may have written part of its range (the
  // slices that went through before others were refused or lost), and this counts the confirmed
  // part; bytes whose confirmation was lost with a connection are not counted, so the rest of
  // the range is unknown, not untouched. After TIMEOUT it may still grow while slices in flight
  // report (briefly: see EngineOptions::task_timeout). Zero-length requests: 0.
  uint64_t transferred_bytes = 0;
  Status reason;            // why it FAILED / TIMEOUT / CANCELED; Ok otherwise
  std::string transport{};  // the transport that carried (or last tried) it; empty before
  // Per-task figures (what NIXL users read as telemetry), kept without locks on the data path.
  // A default-constructed (epoch) time point means "not yet".
  std::chrono::steady_clock::time_point submitted_at{};  // submitTransfer accepted it
  // Its first slices were handed to a transport, or (the transport's queue being full) to the
  // backlog that hands them over as room frees; epoch: never (e.g. a local copy).
  std::chrono::steady_clock::time_point started_at{};
  std::chrono::steady_clock::time_point ended_at{};  // it ended (epoch while open)
  uint32_t retries = 0;  // attempts after the first (reconnect or another transport)
  // The size the request was cut into slices of (EngineOptions::slice_size, or the preferred
  // size of the transport its first attempt took), kept by every retry; 0 before it went to a
  // transport, and for requests that never do (own segment, zero length).
  uint64_t slice_size = 0;
  // File buffers: how the file transport moved the bytes, "direct" (O_DIRECT: the request's
  // memory address, file offset and length met the file's direct-I/O alignment), "buffered"
  // (the page cache) or "direct+buffered" (slices went each way); empty for memory targets.
  std::string file_io{};
  bool done() const { return state != TransferState::kWaiting && state != TransferState::kPending; }
};

// A batch's summary in O(1): its state is kCompleted when every task completed, kFailed (or
// kTimeout / kCanceled, after first_error) once every task ended and one did not complete,
// kPending otherwise.
struct BatchStatus {
  TransferState state = TransferState::kPending;
  size_t tasks = 0;
  size_t completed = 0;
  size_t failed = 0;  // FAILED, TIMEOUT or CANCELED
  uint64_t transferred_bytes = 0;  // of the COMPLETED tasks (a failed task's are in its status)
  Status first_error;
};

struct NotifyMessage {
  std::string name;     // the sender's segment name (filled in by the engine)
  std::string payload;  // what the sender passed
};

// One buffer of a remote segment, as its published descriptor describes it.
struct SegmentBuffer {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;  // "cpu", "cpu:0", "cuda:1", ...
  uint64_t generation = 0;
  std::vector<std::string> transports;  // transports it is registered with (reachable through)
};

struct BufferEntry {
  void* addr = nullptr;
  size_t length = 0;
};

class TransferEngine {
 public:
  TransferEngine();
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Starts the RPC service and the transports, connects the metadata store and publishes this
  // segment. `local_server_name` empty: "<host>:<rpc port>".
  Status init(const std::string& metadata_conn, const std::string& local_server_name,
              const std::string& host, uint16_t rpc_port);
  Status init(const EngineOptions& options);

  std::string localSegmentName() const;
  uint16_t rpcPort() const;

  // location: "cpu", "cpu:<numa>", "cuda:<n>", ... or "*" (detect).
  Status registerLocalMemory(void* addr, size_t length, const std::string& location = "*",
                             bool remote_accessible = true, bool update_metadata = true);
  Status unregisterLocalMemory(void* addr, bool update_metadata = true);
  // All or nothing; publishes once.
  Status registerLocalMemoryBatch(const std::vector<BufferEntry>& buffers,
                                  const std::string& location = "*");
  Status unregisterLocalMemoryBatch(const std::vector<void*>& addrs);
  // Ok when [addr, addr + length) overlaps no registered region; Overlap naming it otherwise.
  Status checkOverlap(void* addr, size_t length);
  // `length` bytes that same-host peers map once and copy with memcpy (memfd-backed, huge pages
  // when available; inside the cxl window when cxl_window is set and location is "cxl"),
  // already registered as by registerLocalMemory. InvalidArgument when no installed transport
  // can share memory. Location "cuda:<n>": device memory of device n instead (cudaMalloc),
  // registered as "cuda:<n>" (reached by cuda-ipc and, staged, by tcp); Unavailable naming the
  // cause without a CUDA build or device.
  Result<void*> allocateManagedBuffer(size_t length, const std::string& location = "cpu");
  // Unregisters (as unregisterLocalMemory) and frees a buffer from allocateManagedBuffer.
  Status freeManagedBuffer(void* addr);

  // File buffers (the "file" transport, io_uring). Registers the bytes [offset, offset + length)
  // of the file or block device at `path` (opened read-write, or read-only when writing is
  // refused) as a buffer of this segment and publishes it with the file's identity (device,
  // inode, size) and a per-host path map: `host_paths` (host name -> the path of the same file
  // on that host, for a volume several hosts mount), plus this host's name -> `path`.
  // Returns the buffer's address: requests name file bytes as target_offset = address +
  // (file offset - offset), on this engine's own segment (openSegment(localSegmentName())) or,
  // from a peer that sees the file through the path map, on this segment. The address is
  // never memory: it is refused as a request's local side. The window must lie inside the file
  // (extend it first); InvalidArgument otherwise, NotFound / PermissionDenied when it cannot
  // be opened, InvalidArgument when no installed transport carries file buffers. `location`:
  // the memory kind published for the buffer ("cpu" or "cpu:<numa>" near the device).
  Result<uint64_t> registerLocalFile(const std::string& path, uint64_t length, uint64_t offset = 0,
                                     const std::map<std::string, std::string>& host_paths = {},
                                     const std::string& location = "cpu");
  // Unregisters it in the safe order (DESIGN.md): new requests fail Stale, the I/O in flight on
  // it drains (bounded by the drain timeout: Timeout, and it stays closing), then the file is
  // closed and the descriptor republished. NotFound when no file buffer starts at `addr`.
  Status unregisterLocalFile(uint64_t addr);

  Result<SegmentId> openSegment(const std::string& name);
  // Forgets the cached descriptor and drops the engine's links to the segment (connections,
  // grant channels, mappings), released once no task in flight uses them. NotFound for an id
  // openSegment never returned. Reopening by name gives the same id.
  Status closeSegment(SegmentId id);
  // Refetches one segment's descriptor, or every cached one when `name` is empty.
  Status syncSegmentCache(const std::string& name = "");
  // Asks the segment's engine whether it is alive; Ok with its incarnation.
  Result<uint64_t> probeSegment(SegmentId id);
  // The remote-accessible buffers of the segment, in address order, from the cached descriptor
  // (fetched first when not cached; syncSegmentCache refreshes it). NotFound for an id
  // openSegment never returned; the store's error when the descriptor cannot be fetched.
  Result<std::vector<SegmentBuffer>> getSegmentBuffers(SegmentId id);

  Result<BatchId> allocateBatchID(size_t batch_size);
  // Busy while any task of the batch is WAITING or PENDING; once every task ended it frees at
  // once, never waiting on a transport.
  Status freeBatchID(BatchId batch);
  // Never blocks on a peer: planning that needs a store fetch or a new connection, and slices a
  // full transport queue turns back, wait on the target's worker (within the batch's capacity,
  // until their deadline) and the call returns at once.
  // Again when the batch has no room for the requests; InvalidArgument for a malformed request
  // (nothing of this call is queued then).
  Status submitTransfer(BatchId batch, const std::vector<TransferRequest>& requests);
  // As submitTransfer; `notify` is delivered to the target of the requests once all of them
  // completed (all requests must target one segment).
  Status submitTransferWithNotify(BatchId batch, const std::vector<TransferRequest>& requests,
                                  const NotifyMessage& notify);
  Result<TransferStatus> getTransferStatus(BatchId batch, size_t task_id);
  Result<BatchStatus> getBatchTransferStatus(BatchId batch);
  // Blocks until every task of the batch ended (no polling), at most `timeout`: the summary
  // then, Timeout while tasks are still open, NotFound for an unknown batch.
  Result<BatchStatus> waitBatch(BatchId batch, std::chrono::milliseconds timeout);
  // Cancels the open tasks of the batch, best effort: what a transport already holds is not
  // recalled. A task not yet handed to a transport (waiting for a descriptor, a connection, a
  // retry) ends CANCELED at once. One whose slices wait for room in a full transport queue ends
  // when the backlog job on the peer's worker next runs: within milliseconds, unless that
  // worker is busy with a blocking step for the same peer (a descriptor fetch or a connect),
  // bounded by EngineOptions::request_timeout (twice it for a fetch). A task with slices at a
  // transport submits nothing more (no further slice, no retry) and ends when those slices
  // report: COMPLETED if they all completed and nothing was left unsent, CANCELED otherwise,
  // TIMEOUT if its deadline comes first. So a canceled task moves at most the slices a
  // transport held when cancelBatch was called, and they move before the task is reported
  // final, never after; per transport:
  //  - tcp: a request written to the connection is applied by the target unless its deadline
  //    passed; the slice reports on the target's reply.
  //  - shm / cxl: this process copies a slice once the target granted it (before its deadline),
  //    and reports it after the copy.
  //  - rdma: a write posted to the NIC lands, and reports on its completion (one that reports
  //    only by its deadline may still land after, as after TIMEOUT: see Behaviour above).
  // Tasks submitted to the batch after the call are not canceled. NotFound for an unknown batch;
  // Ok, changing nothing, for a batch whose tasks all ended.
  Status cancelBatch(BatchId batch);
  // An eventfd (non-blocking, close-on-exec) owned by the engine, valid until the engine is
  // destroyed (-1 before init()): the engine adds 1 to it each time a batch's last open task
  // ends (also by cancelBatch or a deadline). For event loops (asyncio add_reader): read it to
  // reset the count, then check the batches you wait on. Do not close it.
  int completionFd() const;

  // Notifications received since the last call, in arrival order. The engine keeps at most
  // EngineOptions::max_pending_notifies of them (max_pending_notify_bytes in all) until then.
  std::vector<NotifyMessage> getNotifies();
  // Busy when the target holds as many notifications as its caps allow.
  Status sendNotify(SegmentId target, const NotifyMessage& notify);

  // What the engine has done since init() (include/ferry/metrics.h); empty before init().
  // Cheap enough to call once a second: it copies counters, taking no lock the data path takes.
  EngineMetrics getMetrics() const;
  // The port of the Prometheus endpoint (EngineOptions::metrics_port); 0 when there is none.
  uint16_t metricsPort() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
