#include "bench/bench_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iterator>
#include <optional>

namespace ferry::bench {
namespace {

constexpr uint64_t kDefaultBufferSize = uint64_t{256} << 20;
constexpr uint64_t kMaxBytes = uint64_t{1} << 48;

std::optional<uint64_t> ParseUnsigned(std::string_view text, int base = 10) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<bool> ParseBool(std::string_view text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  return std::nullopt;
}

Status BadValue(std::string_view flag, std::string_view value, std::string_view want) {
  return InvalidArgumentError("bad value '" + std::string(value) + "' for --" + std::string(flag) +
                              " (" + std::string(want) + ")");
}

// Parses a positive count no larger than `max` into `out`.
Status ParseCount(std::string_view flag, std::string_view value, uint64_t max, uint64_t& out) {
  const auto n = ParseUnsigned(value);
  if (!n || *n == 0 || *n > max) return BadValue(flag, value, "1.." + std::to_string(max));
  out = *n;
  return Status::Ok();
}

// The comma-separated items of `text`, empty ones included ("a,,b" -> {"a", "", "b"}).
std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> items;
  while (true) {
    const size_t comma = text.find(',');
    items.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return items;
    text.remove_prefix(comma + 1);
  }
}

Status ParseSizeFlag(std::string_view flag, std::string_view value, uint64_t& out) {
  Result<uint64_t> bytes = ParseByteSize(value);
  if (!bytes.ok()) return BadValue(flag, value, "bytes, e.g. 4096, 64K, 4M, 1G");
  out = *bytes;
  return Status::Ok();
}

Status ApplyEnumFlag(std::string_view flag, std::string_view value, BenchOptions& out) {
  if (flag == "mode") {
    if (value == "target") {
      out.mode = BenchMode::kTarget;
    } else if (value == "initiator") {
      out.mode = BenchMode::kInitiator;
    } else {
      return BadValue(flag, value, "target|initiator");
    }
  } else if (flag == "wait") {
    if (value != "poll" && value != "block") return BadValue(flag, value, "poll|block");
    out.wait_block = value == "block";
  } else {  // operation
    if (value == "read") {
      out.operation = BenchOperation::kRead;
    } else if (value == "write") {
      out.operation = BenchOperation::kWrite;
    } else {
      return BadValue(flag, value, "read|write");
    }
  }
  return Status::Ok();
}

Status ApplyNumberFlag(std::string_view flag, std::string_view value, BenchOptions& out) {
  if (flag == "rpc_port") {
    const auto port = ParseUnsigned(value);
    if (!port || *port > 65535) return BadValue(flag, value, "0..65535");
    out.rpc_port = static_cast<uint16_t>(*port);
    return Status::Ok();
  }
  if (flag == "target_addr") {
    std::string_view hex = value;
    if (hex.substr(0, 2) == "0x" || hex.substr(0, 2) == "0X") hex.remove_prefix(2);
    const auto addr = ParseUnsigned(hex, 16);
    if (!addr || *addr == 0) return BadValue(flag, value, "a non-zero hex address");
    out.target_addr = *addr;
    return Status::Ok();
  }
  if (flag == "duration") {
    double seconds = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() ||
        !std::isfinite(seconds) || seconds <= 0 || seconds > 1e7) {
      return BadValue(flag, value, "seconds > 0");
    }
    out.duration_s = seconds;
    out.duration_given = true;
    return Status::Ok();
  }
  if (flag == "cxl_window_size") {
    if (value == "0") {
      out.cxl_window_size = 0;
      return Status::Ok();
    }
    return ParseSizeFlag(flag, value, out.cxl_window_size);
  }
  if (flag == "block_size") return ParseSizeFlag(flag, value, out.block_size);
  if (flag == "buffer_size") return ParseSizeFlag(flag, value, out.buffer_size);
  if (flag == "slice_size") return ParseSizeFlag(flag, value, out.slice_size);
  if (flag == "batch_size") return ParseCount(flag, value, 1 << 16, out.batch_size);
  if (flag == "threads") return ParseCount(flag, value, 1024, out.threads);
  if (flag == "inflight") return ParseCount(flag, value, 1024, out.inflight);
  if (flag == "working_set") {
    if (value == "0") {
      out.working_set = 0;
      return Status::Ok();
    }
    return ParseSizeFlag(flag, value, out.working_set);
  }
  return InvalidArgumentError("unknown flag '--" + std::string(flag) + "'");
}

// Applies one "--flag=value" to `out`. `has_value` is false for a bare "--flag".
Status ApplyFlag(std::string_view flag, std::string_view value, bool has_value, BenchOptions& out) {
  if (flag == "check" || flag == "json" || flag == "managed" || flag == "tcp_payload_checksum" ||
      flag == "take_over_name") {
    const auto on = has_value ? ParseBool(value) : std::optional<bool>(true);
    if (!on) return BadValue(flag, value, "true|false");
    (flag == "check"                  ? out.check
     : flag == "json"                 ? out.json
     : flag == "tcp_payload_checksum" ? out.tcp_payload_checksum
     : flag == "take_over_name"       ? out.take_over_name
                                      : out.managed) = *on;
    return Status::Ok();
  }
  if (!has_value) {
    static constexpr std::string_view kValueFlags[] = {
        "mode",           "operation",    "metadata_server", "local_server_name", "host",
        "rpc_port",       "segment_id",   "target_addr",     "protocol",          "block_size",
        "batch_size",     "threads",      "duration",        "buffer_size",       "host_id",
        "rdma_provider",  "rdma_devices", "cxl_window",      "cxl_window_size",   "slice_size",
        "advertise_host", "port_range",   "inflight",        "working_set",       "wait"};
    const bool known =
        std::find(std::begin(kValueFlags), std::end(kValueFlags), flag) != std::end(kValueFlags);
    return InvalidArgumentError(known ? "flag --" + std::string(flag) + " needs =<value>"
                                      : "unknown flag '--" + std::string(flag) + "'");
  }
  if (flag == "mode" || flag == "operation" || flag == "wait") {
    return ApplyEnumFlag(flag, value, out);
  }
  static constexpr std::string_view kNonEmpty[] = {
      "metadata_server", "host",         "segment_id", "protocol",       "host_id",
      "rdma_provider",   "rdma_devices", "cxl_window", "advertise_host", "port_range"};
  if (value.empty() &&
      std::find(std::begin(kNonEmpty), std::end(kNonEmpty), flag) != std::end(kNonEmpty)) {
    return BadValue(flag, value, "a non-empty string");
  }
  if (flag == "metadata_server") {
    out.metadata_server = std::string(value);
  } else if (flag == "local_server_name") {
    out.local_server_name = std::string(value);
  } else if (flag == "host") {
    out.host = std::string(value);
  } else if (flag == "advertise_host") {
    out.advertise_host = std::string(value);
  } else if (flag == "port_range") {
    out.port_range = std::string(value);  // checked by the engine's init (one parser)
  } else if (flag == "segment_id") {
    out.segment_id = std::string(value);
  } else if (flag == "protocol") {
    out.protocol = std::string(value);
  } else if (flag == "host_id") {
    out.host_id = std::string(value);
  } else if (flag == "rdma_provider") {
    out.rdma_provider = std::string(value);
  } else if (flag == "cxl_window") {
    out.cxl_window = std::string(value);
  } else if (flag == "rdma_devices") {
    out.rdma_devices = SplitList(value);
    if (std::find(out.rdma_devices.begin(), out.rdma_devices.end(), "") != out.rdma_devices.end()) {
      return BadValue(flag, value, "device names separated by commas, e.g. mlx5_0,mlx5_1");
    }
  } else {
    return ApplyNumberFlag(flag, value, out);
  }
  return Status::Ok();
}

// Checks --protocol against the other transport flags: names are non-empty and distinct, "auto"
// stands alone, cxl comes with a window, and --managed with a transport that shares memory.
Status ValidateTransports(const BenchOptions& o) {
  const std::vector<std::string> names = SplitList(o.protocol);
  auto named = [&](std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty() || std::find(names.begin() + static_cast<ptrdiff_t>(i) + 1, names.end(),
                                      names[i]) != names.end()) {
      return BadValue("protocol", o.protocol, "distinct transport names, e.g. tcp,shm");
    }
  }
  const bool automatic = named("auto");
  if (automatic && names.size() > 1) return BadValue("protocol", o.protocol, "auto stands alone");
  if (named("cxl") && o.cxl_window.empty()) {
    return InvalidArgumentError("--protocol=" + o.protocol + " needs --cxl_window");
  }
  if (o.cxl_window_size != 0 && o.cxl_window.empty()) {
    return InvalidArgumentError("--cxl_window_size needs --cxl_window");
  }
  if (o.managed) {
    const char* needed = o.cxl_window.empty() ? "shm" : "cxl";
    if (!automatic && !named(needed)) {
      return InvalidArgumentError(
          std::string("--managed") + (o.cxl_window.empty() ? "" : " with --cxl_window") +
          " needs the " + needed + " transport (--protocol=" + needed + " or auto)");
    }
  }
  return Status::Ok();
}

// Checks the combination of flags; the single flags were checked as they were parsed.
Status Validate(const BenchOptions& o) {
  if (o.help) return Status::Ok();
  RETURN_IF_ERROR(ValidateTransports(o));
  if (o.mode == BenchMode::kInitiator) {
    if (o.segment_id.empty()) return InvalidArgumentError("initiator needs --segment_id");
  }
  // Each factor is at most 2^48 (block) or 2^16 (the counts), so no product below overflows.
  if (o.threads * o.inflight * o.batch_size > kMaxBytes / o.block_size) {
    return InvalidArgumentError("threads * inflight * batch_size * block_size is too large");
  }
  if (o.buffer_size != 0 && o.buffer_size < o.WorkingSetBytes()) {
    return InvalidArgumentError("--buffer_size " + std::to_string(o.buffer_size) +
                                " is smaller than the working set (threads * inflight * "
                                "batch_size * block_size, or --working_set) = " +
                                std::to_string(o.WorkingSetBytes()));
  }
  return Status::Ok();
}

}  // namespace

uint64_t BenchOptions::SlicesPerPosition() const {
  return std::max<uint64_t>(1, working_set / (Positions() * SliceBytes()));
}

uint64_t BenchOptions::SliceOffset(uint64_t position, uint64_t j) const {
  return (position + (j % SlicesPerPosition()) * Positions()) * SliceBytes();
}

uint64_t BenchOptions::EffectiveBufferSize() const {
  if (buffer_size != 0) return buffer_size;
  return std::max(kDefaultBufferSize, WorkingSetBytes());
}

std::vector<std::string> BenchOptions::Transports() const {
  std::vector<std::string> names = SplitList(protocol);
  names.erase(std::remove(names.begin(), names.end(), ""), names.end());
  return names;
}

std::string BenchOptions::TransportHint() const {
  const std::vector<std::string> names = Transports();
  return names.size() == 1 && names[0] != "auto" ? names[0] : "";
}

EngineOptions MakeEngineOptions(const BenchOptions& o) {
  EngineOptions e;
  e.metadata_conn = o.metadata_server;
  e.local_server_name = o.local_server_name;
  e.take_over_name = o.take_over_name;
  e.host = o.host;
  e.advertise_host = o.advertise_host;
  e.port_range = o.port_range;
  e.rpc_port = o.rpc_port;
  e.transports = o.Transports();
  e.host_id = o.host_id;
  e.rdma_provider = o.rdma_provider;
  e.rdma_devices = o.rdma_devices;
  e.cxl_window = o.cxl_window;
  e.cxl_window_size = o.cxl_window_size;
  if (o.slice_size != 0) e.slice_size = o.slice_size;
  e.tcp_payload_checksum = o.tcp_payload_checksum;
  return e;
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const auto number = ParseUnsigned(text.substr(0, digits));
  std::string suffix(text.substr(digits));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  int shift = -1;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    shift = 30;
  }
  if (!number || shift < 0 || *number == 0 || *number > (kMaxBytes >> shift)) {
    return InvalidArgumentError("bad byte size '" + std::string(text) + "'");
  }
  return *number << shift;
}

Result<BenchOptions> ParseBenchOptions(const std::vector<std::string>& args) {
  BenchOptions out;
  for (const std::string& arg_string : args) {
    std::string_view arg = arg_string;
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      out.help = true;
      continue;
    }
    if (arg.substr(0, 2) == "--") {
      arg.remove_prefix(2);
    } else if (arg.substr(0, 1) == "-") {
      arg.remove_prefix(1);  // gflags accepts one dash too
    } else {
      return InvalidArgumentError("unexpected argument '" + arg_string + "'");
    }
    const size_t eq = arg.find('=');
    const bool has_value = eq != std::string_view::npos;
    RETURN_IF_ERROR(
        ApplyFlag(arg.substr(0, eq), has_value ? arg.substr(eq + 1) : "", has_value, out));
  }
  RETURN_IF_ERROR(Validate(out));
  return out;
}

std::string_view OperationName(BenchOperation op) {
  return op == BenchOperation::kRead ? "read" : "write";
}

std::string BenchUsage() {
  return R"(usage: ferry-bench --mode=target|initiator [flags]

Measures ferry transfers between two processes, as Mooncake's transfer_engine_bench does.

  target:     ferry-bench --mode=target [--check]
              registers --buffer_size bytes and prints, once reachable:
                ready segment=<name> addr=<hex address> len=<bytes> protocol=<p> managed=0|1
              then serves until SIGINT/SIGTERM (or --duration, when given).
  initiator:  ferry-bench --mode=initiator --segment_id=<name> [--target_addr=<hex>] [flags]
              runs --threads threads for --duration seconds; each submits batches of
              --batch_size blocks of --block_size bytes to its own slices of the target's
              buffer, keeping --inflight batches in flight (1: waits for each whole batch).

flags:
  --mode=target|initiator     (default initiator)
  --metadata_server=CONN      P2PHANDSHAKE, etcd://h:p, redis://h:p, http://h:p/metadata
                              (default P2PHANDSHAKE)
  --local_server_name=NAME    this engine's segment name (default: <host>:<rpc_port>)
  --take_over_name            take the name over even from a live engine holding it (default:
                              init fails naming the holder; a dead holder is taken over anyway)
  --host=ADDR                 address this engine listens on (default 127.0.0.1; 0.0.0.0 or
                              :: listens on every interface)
  --advertise_host=ADDR       address peers are told (segment name, RPC and transport
                              endpoints); default: --host, or for a wildcard --host the
                              address routing to the metadata server (FERRY_ADVERTISE_HOST)
  --port_range=FIRST-LAST     every listener without an explicit port (RPC, tcp data, rdma
                              over tcp;ofi_rxm) binds a port of this range (FERRY_PORT_RANGE)
  --rpc_port=N                RPC port; 0 picks a free one (default 0)
  --segment_id=NAME           initiator: the target's segment name (its ready line)
  --target_addr=HEX           initiator: the target buffer's address (its ready line)
                              (default: the first buffer the target's segment publishes,
                              from getSegmentBuffers, as Mooncake's bench does)
  --protocol=NAME             transport(s) to install: tcp, shm, cxl, rdma, a comma list, or
                              auto (tcp + shm, + cxl with --cxl_window, + rdma when a NIC or
                              --rdma_provider is there) (default tcp). Exactly one name also
                              makes every request ask for that transport (TransferRequest::
                              transport); a list or auto lets the engine choose.
  --host_id=ID                this engine's host identity: engines with different ids never
                              use same-host transports between them (default: detected)
  --rdma_provider=P           rdma: libfabric provider, e.g. "verbs;ofi_rxm" (default: probe)
  --rdma_devices=a,b          rdma: the NICs to use (default: all)
  --cxl_window=PATH           cxl: the shared window (DAX device or file) to map
  --cxl_window_size=BYTES     cxl: bytes of the window to use (default 0: all of it)
  --managed                   allocate the buffer with allocateManagedBuffer (shareable memfd
                              memory; in the cxl window with --cxl_window) instead of plain
                              pages: the target's buffer, and the initiator's local one
  --operation=read|write      (default write)
  --block_size=BYTES          bytes per request; K/M/G suffixes (default 64K)
  --batch_size=N              requests per batch (default 32)
  --threads=N                 initiator threads (default 1)
  --inflight=N                batches each thread keeps in flight: it submits the next as
                              soon as one ends, each into its own slices (default 1: submit,
                              wait for the whole batch, repeat). --batch_size=1 --inflight=1
                              is the latency mode: p50/p99/mean of one block's write or read
  --wait=poll|block           how a thread waits for its batches: poll getBatchTransferStatus
                              (yield for 50 us, then sleep 20 us between polls; default), or
                              block in waitBatch on the oldest open batch
  --working_set=BYTES         bytes the batches cycle through, in both buffers (default 0:
                              each in-flight batch reuses one slice of batch_size*block_size,
                              cache-hot for small blocks); rounded down to a multiple of
                              threads*inflight*batch_size*block_size. Pass the same value the
                              memcpy baseline reports to compare with it out of cache
  --duration=SECONDS          initiator run time (default 5); target: serve this long
  --buffer_size=BYTES         registered bytes (default max(256M, the working set:
                              threads*inflight*batch*block, or --working_set))
  --slice_size=BYTES          the engine cuts requests into slices of at most this
                              (EngineOptions::slice_size; unset or 0: the carrying
                              transport's preference, 256K, or 4M for rdma on a
                              software provider)
  --tcp_payload_checksum=false
                              tcp: send payloads without their CRC32C (headers keep theirs;
                              EngineOptions::tcp_payload_checksum, default true)
  --check                     target: fill the buffer with the read pattern.
                              initiator read: verify every block read (against a target
                              started with --check, before any write ran against it).
                              initiator write: write a fresh pattern, read it back into a
                              second buffer at the end and compare every byte.
  --json                      initiator: print one JSON line instead of the summary; its
                              "transport" names what carried the tasks ("shm", "tcp", or
                              several joined by '+'), sampled from one task per batch
  --help

The initiator exits 1 when a task failed or --check found a mismatch, 2 on bad flags.
Latency is per batch, from submit until the initiator saw every task of the batch done
(see --wait).
)";
}

}  // namespace ferry::bench
