// Command-line options of ferry-bench, parsed once at the edge (STYLE.md 12) with CLI11. Flags
// are gflags-style, as in Mooncake's transfer_engine_bench: "--name=value" (or "--name value"),
// booleans also as a bare "--name", one leading dash accepted as well as two ("-check"), and the
// last of a repeated flag wins (bench scripts append overrides to a base command line).
//
// Thread contract: value type and pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/options.h"
#include "ferry/status.h"

namespace ferry::bench {

enum class BenchMode : uint8_t { kTarget, kInitiator };
enum class BenchOperation : uint8_t { kRead, kWrite };

struct BenchOptions {
  BenchMode mode = BenchMode::kInitiator;
  std::string metadata_server = "P2PHANDSHAKE";
  std::string local_server_name;  // empty: "<host>:<rpc_port>"
  bool take_over_name = false;    // EngineOptions::take_over_name
  std::string host = "127.0.0.1";
  std::string advertise_host;  // EngineOptions::advertise_host; empty: the engine decides
  std::string port_range;      // EngineOptions::port_range ("20000-20100"); empty: unbounded
  uint16_t rpc_port = 0;       // 0: a free port (the target prints its segment name)
  std::string segment_id;      // initiator: the target's segment name
  // initiator: the target's buffer address ("addr=" of its ready line); 0: the first buffer
  // its segment publishes (TransferEngine::getSegmentBuffers).
  uint64_t target_addr = 0;
  // initiator, not a flag: whether the target buffer at target_addr is a file buffer (the
  // target's --target_file; its published transports name "file"), found once the segment
  // was opened. Reported as "target":"file" in --json.
  bool target_is_file = false;
  // Transports to install: a name (tcp, shm, cxl, rdma), a comma list, or "auto". Exactly one
  // name also becomes every request's TransferRequest::transport hint. tcp stays the default so
  // that a bare run measures the same thing on one host and across hosts.
  std::string protocol = "tcp";
  std::string host_id;        // EngineOptions::host_id; empty: the detected host identity
  std::string rdma_provider;  // EngineOptions::rdma_provider
  std::vector<std::string> rdma_devices;  // EngineOptions::rdma_devices ("a,b")
  std::string cxl_window;                 // EngineOptions::cxl_window
  uint64_t cxl_window_size = 0;           // EngineOptions::cxl_window_size; 0: the window's size
  // The buffer comes from allocateManagedBuffer (location "cxl" with --cxl_window, else "cpu")
  // instead of plain registered pages: the target's buffer, and the initiator's local one.
  bool managed = false;
  // Where the buffers live: "cpu" (default), or "cuda:<n>": device memory from
  // allocateManagedBuffer(size, "cuda:<n>") (a CUDA build on a machine with that device), the
  // target's buffer and the initiator's local one; reached over cuda-ipc on one host and over
  // tcp (staged through host memory) anywhere. Never touched by the CPU: not with --check.
  std::string location = "cpu";
  // target: registers [0, buffer_size) of this file (or block device) with registerLocalFile
  // instead of memory, after creating or extending a file to buffer_size and writing the read
  // pattern over that range; the file transport is installed besides --protocol's. Initiators
  // reach it with --protocol=file (the same file through the path map: this host), or through
  // the target (its owner) over a network transport.
  std::string target_file;
  // EngineOptions::file_direct_io and file_queue_depth: O_DIRECT where a request's address,
  // file offset and length are aligned (false: always the page cache), and I/Os in flight.
  bool direct_io = true;
  uint64_t file_queue_depth = 64;
  BenchOperation operation = BenchOperation::kWrite;
  uint64_t block_size = 65536;
  uint64_t batch_size = 32;
  uint64_t threads = 1;
  // Batches each initiator thread keeps in flight: it submits the next while earlier ones run
  // and counts each as it ends (as the raw baselines keep operations in flight). 1: submit,
  // wait for the whole batch, repeat (the drained loop). With --batch_size=1 --inflight=1 the
  // latency percentiles are those of one block's write or read (the latency mode).
  uint64_t inflight = 1;
  // Bytes the run's batches cycle through (both buffers, all threads): 0 (the default) gives
  // every in-flight batch one fixed slice, which stays in the caches for small blocks. A larger
  // value (e.g. past the last-level cache, as the memcpy baseline of bench/shm.sh copies) is
  // rounded down to a multiple of threads * inflight * batch_size * block_size; every batch
  // position then walks through its own ring of slices. See WorkingSetBytes.
  uint64_t working_set = 0;
  // How a thread waits for its open batches: false (--wait=poll, the default) polls
  // getBatchTransferStatus, yielding for the first 50 us of a wait, then sleeping 20 us between
  // polls; true (--wait=block) blocks in waitBatch on the oldest open batch (no polling, but a
  // thread wake-up per completion).
  bool wait_block = false;
  double duration_s = 5;
  bool duration_given = false;  // the target serves forever unless --duration was given
  uint64_t slice_size = 0;      // 0: the engine's default
  uint64_t buffer_size = 0;     // 0: max(256 MiB, threads * batch_size * block_size)
  bool check = false;
  bool json = false;
  bool tcp_payload_checksum = true;  // EngineOptions::tcp_payload_checksum
  bool help = false;

  // --sweep (initiator): instead of one run, one measured run per point of sweep_protocols x
  // sweep_threads x sweep_block_sizes x sweep_operations, each next to the raw baseline of its
  // transport measured just before it, written as CSV to --csv (stdout when empty). See
  // RunSweep (bench_modes.h). After parsing, the lists are never empty: an unset list holds the
  // single value of --protocol, --threads or --operation.
  bool sweep = false;
  std::vector<uint64_t> sweep_block_sizes = {uint64_t{4} << 10,  uint64_t{16} << 10,
                                             uint64_t{64} << 10, uint64_t{256} << 10,
                                             uint64_t{1} << 20,  uint64_t{4} << 20};
  std::vector<uint64_t> sweep_threads;
  std::vector<std::string> sweep_protocols;  // each a single transport name, or "auto"
  std::vector<BenchOperation> sweep_operations;
  std::string csv;  // --csv=FILE
  // Where the sweep finds ferry-raw-tcp-baseline and ferry-raw-shm-baseline: empty (the
  // default) is the folder ferry-bench runs from (build/bin holds them all); "none" measures no
  // raw baseline (its CSV columns stay empty).
  std::string raw_baselines;

  // Bytes one batch spans: batch_size * block_size (one "slice" of the working set).
  uint64_t SliceBytes() const { return batch_size * block_size; }
  // Batch positions of the run: threads * inflight. Position p = t * inflight + k is thread t's
  // k-th in-flight batch; no two positions ever share a slice.
  uint64_t Positions() const { return threads * inflight; }
  // Slices each position cycles through: working_set / (Positions() * SliceBytes()), at least 1.
  uint64_t SlicesPerPosition() const;
  // The offset (in both buffers) of the j-th slice of position p: slices are interleaved,
  // (p + (j mod SlicesPerPosition()) * Positions()) * SliceBytes(), so the positions' rings
  // tile [0, WorkingSetBytes()) without overlap.
  uint64_t SliceOffset(uint64_t position, uint64_t j) const;
  // Bytes all positions' slices span: Positions() * SlicesPerPosition() * SliceBytes(); the
  // same region of the local and the remote buffer.
  uint64_t WorkingSetBytes() const { return Positions() * SlicesPerPosition() * SliceBytes(); }
  // --buffer_size, or its default.
  uint64_t EffectiveBufferSize() const;
  // EngineOptions::transports for --protocol ("auto" -> {"auto"}), plus "file" for a
  // --target_file target whose list does not name it, and "tcp" beside "file" alone (the file
  // transport registers no memory; an engine needs a transport that does for its buffers).
  std::vector<std::string> Transports() const;
  // The TransferRequest::transport hint: the one transport --protocol names; empty for "auto"
  // or a list (the engine's selection policy chooses then).
  std::string TransportHint() const;
  // The allocateManagedBuffer location --managed uses: "cxl" with --cxl_window, else "cpu".
  std::string ManagedLocation() const { return cxl_window.empty() ? "cpu" : "cxl"; }
  // --location names device memory.
  bool OnDevice() const { return location != "cpu"; }
  // What BenchBuffer::Create allocates: from allocateManagedBuffer with BufferLocation() when
  // BufferFromEngine(), else plain registered pages.
  bool BufferFromEngine() const { return managed || OnDevice(); }
  std::string BufferLocation() const { return OnDevice() ? location : ManagedLocation(); }
  // One point of a sweep: these options with --protocol, --operation, --threads and
  // --block_size replaced, and sweep off.
  BenchOptions ForPoint(const std::string& point_protocol, BenchOperation point_operation,
                        uint64_t point_threads, uint64_t point_block_size) const;
  // The sweep's point with the largest working set (the largest block and thread counts; the
  // first protocol and operation): what the buffers must hold. Without --sweep, a copy.
  BenchOptions LargestPoint() const;
};

// Parses argv[1..]. Errors: InvalidArgument naming the flag (unknown flag, missing or bad value,
// a combination that cannot run, e.g. an initiator without --segment_id). --help (-h, -help)
// sets help and skips the checks of the combination.
Result<BenchOptions> ParseBenchOptions(const std::vector<std::string>& args);

// "4096", "64K", "1M", "2G" (binary multiples; "KiB"/"MiB"/"GiB" and lower case also accepted).
// Errors: InvalidArgument for anything else, zero, or a value past 2^48.
Result<uint64_t> ParseByteSize(std::string_view text);

// The engine configuration the flags ask for: metadata, name, host, port, transports, host_id,
// rdma and cxl settings; every other field keeps its EngineOptions default.
EngineOptions MakeEngineOptions(const BenchOptions& options);

// The --help text (CLI11's, from the same flag table the parser uses).
std::string BenchUsage();

std::string_view OperationName(BenchOperation op);

}  // namespace ferry::bench
