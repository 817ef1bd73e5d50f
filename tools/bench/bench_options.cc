#include "bench/bench_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
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

Status BadValue(std::string_view flag, std::string_view value, std::string_view want) {
  return InvalidArgumentError("bad value '" + std::string(value) + "' for --" + std::string(flag) +
                              " (" + std::string(want) + ")");
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

// A value's own parser: the text after "--flag=" in, a Status naming the flag out.
using ValueParser = std::function<Status(std::string_view value)>;

// The flag table: every flag of ferry-bench, declared once on a CLI11 app that parses into `out`
// and formats --help. A value is parsed by the flag's ValueParser when CLI11 runs the option's
// callback (after every argument was read; the last of a repeated flag wins); a parser's error
// is thrown as CLI::ValidationError, which CLI11 passes out of App::parse as a ParseError.
// Thread contract: one thread; `out` outlives the table.
class FlagTable {
 public:
  explicit FlagTable(BenchOptions& out);
  FlagTable(const FlagTable&) = delete;
  FlagTable& operator=(const FlagTable&) = delete;

  CLI::App& app() { return app_; }

 private:
  // "--name=VALUE" handed to `parse`; `empty_ok`: "--name=" is a value (the empty string).
  void Value(const std::string& name, const std::string& type, const std::string& help,
             ValueParser parse, bool empty_ok = false);
  // "--name=TEXT" copied into `field`; empty text is an error unless `empty_ok`.
  void Text(const std::string& name, std::string& field, const std::string& type,
            const std::string& help, bool empty_ok = false);
  // A boolean: a bare "--name" is true; "--name=true|false" (also 1|0, yes|no, on|off).
  void Bool(const std::string& name, bool& field, const std::string& help);
  // "--name=BYTES" (ParseByteSize) into `field`; `zero_ok`: "0" is a value too.
  void Bytes(const std::string& name, uint64_t& field, const std::string& help,
             bool zero_ok = false);
  // "--name=N", 1..max, into `field`.
  void Count(const std::string& name, uint64_t& field, uint64_t max, const std::string& help);

  CLI::App app_;
};

void FlagTable::Value(const std::string& name, const std::string& type, const std::string& help,
                      ValueParser parse, bool empty_ok) {
  CLI::Option* option = app_.add_option_function<std::string>(
      "--" + name,
      [name, parse = std::move(parse)](const std::string& value) {
        if (Status s = parse(value); !s.ok()) throw CLI::ValidationError(s.message());
      },
      help);
  option->type_name(type)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  if (empty_ok) option->expected(0, 1);
}

void FlagTable::Text(const std::string& name, std::string& field, const std::string& type,
                     const std::string& help, bool empty_ok) {
  Value(
      name, type, help,
      [name, &field, empty_ok](std::string_view value) {
        if (value.empty() && !empty_ok) return BadValue(name, value, "a non-empty string");
        field = std::string(value);
        return Status::Ok();
      },
      empty_ok);
}

void FlagTable::Bool(const std::string& name, bool& field, const std::string& help) {
  app_.add_flag("--" + name, field, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void FlagTable::Bytes(const std::string& name, uint64_t& field, const std::string& help,
                      bool zero_ok) {
  Value(name, "BYTES", help, [name, &field, zero_ok](std::string_view value) {
    if (zero_ok && value == "0") {
      field = 0;
      return Status::Ok();
    }
    Result<uint64_t> bytes = ParseByteSize(value);
    if (!bytes.ok()) return BadValue(name, value, "bytes, e.g. 4096, 64K, 4M, 1G");
    field = *bytes;
    return Status::Ok();
  });
}

void FlagTable::Count(const std::string& name, uint64_t& field, uint64_t max,
                      const std::string& help) {
  Value(name, "N", help, [name, &field, max](std::string_view value) {
    const auto n = ParseUnsigned(value);
    if (!n || *n == 0 || *n > max) return BadValue(name, value, "1.." + std::to_string(max));
    field = *n;
    return Status::Ok();
  });
}

// A parser choosing one of `choices` by name.
template <typename T>
ValueParser Choice(const std::string& name, T& field,
                   std::vector<std::pair<std::string, T>> choices) {
  return [name, &field, choices = std::move(choices)](std::string_view value) {
    std::string want;
    for (const auto& [text, choice] : choices) {
      if (value == text) {
        field = choice;
        return Status::Ok();
      }
      want += (want.empty() ? "" : "|") + text;
    }
    return BadValue(name, value, want);
  };
}

FlagTable::FlagTable(BenchOptions& o)
    : app_(
          R"(Measures ferry transfers between two processes, as Mooncake's
transfer_engine_bench does.

  target:     ferry-bench --mode=target [--check] [--target_file=PATH]
              registers --buffer_size bytes (memory, or a window of PATH) and prints, once
              reachable:
                ready segment=<name> addr=<hex address> len=<bytes> protocol=<p> managed=0|1
                [file=PATH]
              then serves until SIGINT/SIGTERM (or --duration, when given).
  initiator:  ferry-bench --mode=initiator --segment_id=<name> [--target_addr=<hex>] [flags]
              runs --threads threads for --duration seconds; each submits batches of
              --batch_size blocks of --block_size bytes to its own slices of the target's
              buffer, keeping --inflight batches in flight (1: waits for each whole batch).
              On a terminal (stderr), a progress line (GB/s, ops/s, errors) once a second.
  sweep:      ferry-bench --mode=initiator --segment_id=<name> --sweep [--csv=FILE] [flags]
              one initiator run per block size (and thread count, protocol, operation), each
              after the raw baseline of its transport, as CSV (bench/sweep.sh, bench/plot.sh).

Flags take "--name=value" (or "--name value"; one leading dash works too).
)",
          "ferry-bench") {
  app_.set_help_flag("-h,--help", "print this and exit");
  app_.get_formatter()->column_width(30);
  app_.footer(
      R"(The initiator exits 1 when a task failed or --check found a mismatch, 2 on bad flags.
Latency is per batch, from submit until the initiator saw every task of the batch done
(see --wait).)");

  Value("mode", "target|initiator", "(default initiator)",
        Choice<BenchMode>("mode", o.mode,
                          {{"target", BenchMode::kTarget}, {"initiator", BenchMode::kInitiator}}));
  Text("metadata_server", o.metadata_server, "CONN",
       "P2PHANDSHAKE, etcd://h:p, redis://h:p, http://h:p/metadata\n(default P2PHANDSHAKE)");
  Text("local_server_name", o.local_server_name, "NAME",
       "this engine's segment name (default: <host>:<rpc_port>)", /*empty_ok=*/true);
  Bool("take_over_name", o.take_over_name,
       "take the name over even from a live engine holding it (default:\n"
       "init fails naming the holder; a dead holder is taken over anyway)");
  Text("host", o.host, "ADDR",
       "address this engine listens on (default 127.0.0.1; 0.0.0.0 or\n"
       ":: listens on every interface)");
  Text("advertise_host", o.advertise_host, "ADDR",
       "address peers are told (segment name, RPC and transport\n"
       "endpoints); default: --host, or for a wildcard --host the\n"
       "address routing to the metadata server (FERRY_ADVERTISE_HOST)");
  // Checked by the engine's init (one parser).
  Text("port_range", o.port_range, "FIRST-LAST",
       "every listener without an explicit port (RPC, tcp data, rdma\n"
       "over tcp;ofi_rxm) binds a port of this range (FERRY_PORT_RANGE)");
  Value("rpc_port", "N", "RPC port; 0 picks a free one (default 0)", [&o](std::string_view v) {
    const auto port = ParseUnsigned(v);
    if (!port || *port > 65535) return BadValue("rpc_port", v, "0..65535");
    o.rpc_port = static_cast<uint16_t>(*port);
    return Status::Ok();
  });
  Text("segment_id", o.segment_id, "NAME", "initiator: the target's segment name (its ready line)");
  Value("target_addr", "HEX",
        "initiator: the target buffer's address (its ready line)\n"
        "(default: the first buffer the target's segment publishes,\n"
        "from getSegmentBuffers, as Mooncake's bench does)",
        [&o](std::string_view v) {
          std::string_view hex = v;
          if (hex.substr(0, 2) == "0x" || hex.substr(0, 2) == "0X") hex.remove_prefix(2);
          const auto addr = ParseUnsigned(hex, 16);
          if (!addr || *addr == 0) return BadValue("target_addr", v, "a non-zero hex address");
          o.target_addr = *addr;
          return Status::Ok();
        });
  Text("protocol", o.protocol, "NAME",
       "transport(s) to install: tcp, shm, cxl, rdma, file (with tcp\n"
       "beside it, which registers the memory), a comma\n"
       "list, or auto (tcp + shm + file where io_uring works, + cxl with\n"
       "--cxl_window, + rdma when a NIC or --rdma_provider is there)\n"
       "(default tcp). Exactly one name also\n"
       "makes every request ask for that transport (TransferRequest::\n"
       "transport); a list or auto lets the engine choose.");
  Text("host_id", o.host_id, "ID",
       "this engine's host identity: engines with different ids never\n"
       "use same-host transports between them (default: detected)");
  Text("rdma_provider", o.rdma_provider, "P",
       "rdma: libfabric provider, e.g. \"verbs;ofi_rxm\" (default: probe)");
  Value("rdma_devices", "a,b", "rdma: the NICs to use (default: all)", [&o](std::string_view v) {
    o.rdma_devices = SplitList(v);
    if (std::find(o.rdma_devices.begin(), o.rdma_devices.end(), "") != o.rdma_devices.end()) {
      return BadValue("rdma_devices", v, "device names separated by commas, e.g. mlx5_0,mlx5_1");
    }
    return Status::Ok();
  });
  Text("cxl_window", o.cxl_window, "PATH", "cxl: the shared window (DAX device or file) to map");
  Bytes("cxl_window_size", o.cxl_window_size,
        "cxl: bytes of the window to use (default 0: all of it)",
        /*zero_ok=*/true);
  Bool("managed", o.managed,
       "allocate the buffer with allocateManagedBuffer (shareable memfd\n"
       "memory; in the cxl window with --cxl_window) instead of plain\n"
       "pages: the target's buffer, and the initiator's local one");
  Text("location", o.location, "cpu|cuda:N",
       "where the buffers live: cpu (default), or device memory of\n"
       "cuda:N (allocateManagedBuffer; a CUDA build with that device),\n"
       "moved over cuda-ipc or tcp (staged); not with --check or\n"
       "--managed");
  Text("target_file", o.target_file, "PATH",
       "target: register [0, --buffer_size) of this file or block\n"
       "device (registerLocalFile) instead of memory: a file is made or\n"
       "extended to --buffer_size; that range is overwritten with the\n"
       "read pattern first. Installs the file transport too. Initiators\n"
       "reach it with --protocol=file on this host (the file itself,\n"
       "through the path map), or through this target (e.g. tcp)");
  Bool("direct_io", o.direct_io,
       "file buffers: O_DIRECT where a request's address, file offset\n"
       "and length are aligned (=false: always the page cache;\n"
       "EngineOptions::file_direct_io, default true)");
  Count("file_queue_depth", o.file_queue_depth, 4096,
        "file buffers: io_uring I/Os in flight (EngineOptions::\n"
        "file_queue_depth, default 64)");
  Value(
      "operation", "read|write", "(default write)",
      Choice<BenchOperation>("operation", o.operation,
                             {{"read", BenchOperation::kRead}, {"write", BenchOperation::kWrite}}));
  Bytes("block_size", o.block_size, "bytes per request; K/M/G suffixes (default 64K)");
  Count("batch_size", o.batch_size, 1 << 16, "requests per batch (default 32)");
  Count("threads", o.threads, 1024, "initiator threads (default 1)");
  Count("inflight", o.inflight, 1024,
        "batches each thread keeps in flight: it submits the next as\n"
        "soon as one ends, each into its own slices (default 1: submit,\n"
        "wait for the whole batch, repeat). --batch_size=1 --inflight=1\n"
        "is the latency mode: p50/p99/mean of one block's write or read");
  Value("wait", "poll|block",
        "how a thread waits for its batches: poll getBatchTransferStatus\n"
        "(yield for 50 us, then sleep 20 us between polls; default), or\n"
        "block in waitBatch on the oldest open batch",
        Choice<bool>("wait", o.wait_block, {{"poll", false}, {"block", true}}));
  Bytes("working_set", o.working_set,
        "bytes the batches cycle through, in both buffers (default 0:\n"
        "each in-flight batch reuses one slice of batch_size*block_size,\n"
        "cache-hot for small blocks); rounded down to a multiple of\n"
        "threads*inflight*batch_size*block_size. Pass the same value the\n"
        "memcpy baseline reports to compare with it out of cache",
        /*zero_ok=*/true);
  Value("duration", "SECONDS", "initiator run time (default 5); target: serve this long",
        [&o](std::string_view v) {
          double seconds = 0;
          auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
          if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() ||
              !std::isfinite(seconds) || seconds <= 0 || seconds > 1e7) {
            return BadValue("duration", v, "seconds > 0");
          }
          o.duration_s = seconds;
          o.duration_given = true;
          return Status::Ok();
        });
  Bytes("buffer_size", o.buffer_size,
        "registered bytes (default max(256M, the working set:\n"
        "threads*inflight*batch*block, or --working_set))");
  Bytes("slice_size", o.slice_size,
        "the engine cuts requests into slices of at most this\n"
        "(EngineOptions::slice_size; unset or 0: the carrying\n"
        "transport's preference, 256K, or 4M for rdma on a\n"
        "software provider)");
  Bool("tcp_payload_checksum", o.tcp_payload_checksum,
       "=false: tcp sends payloads without their CRC32C (headers keep\n"
       "theirs; EngineOptions::tcp_payload_checksum, default true)");
  Bool("check", o.check,
       "target: fill the buffer with the read pattern.\n"
       "initiator read: verify every block read (against a target\n"
       "started with --check, before any write ran against it).\n"
       "initiator write: write a fresh pattern, read it back into a\n"
       "second buffer at the end and compare every byte.");
  Bool("json", o.json,
       "initiator: print one JSON line instead of the summary; its\n"
       "\"transport\" names what carried the tasks (\"shm\", \"tcp\", or\n"
       "several joined by '+'), sampled from one task per batch");
  Bool("sweep", o.sweep,
       "initiator: one run per point of the --sweep_* lists, each\n"
       "after its transport's raw baseline (tcp: one loopback stream,\n"
       "shm: process_vm_writev/readv, or memcpy with --managed), as\n"
       "CSV: protocol,operation,block_size,threads,batch_size,inflight,\n"
       "gbps,ops_per_s,p50_us,p99_us,raw_baseline,raw_gbps,raw_p99_us,\n"
       "ratio,transport,errors");
  Value("sweep_block_sizes", "LIST", "--sweep: block sizes (default 4K,16K,64K,256K,1M,4M)",
        [&o](std::string_view v) {
          o.sweep_block_sizes.clear();
          for (const std::string& item : SplitList(v)) {
            Result<uint64_t> bytes = ParseByteSize(item);
            if (!bytes.ok()) return BadValue("sweep_block_sizes", v, "byte sizes, e.g. 4K,64K,1M");
            o.sweep_block_sizes.push_back(*bytes);
          }
          return Status::Ok();
        });
  Value("sweep_threads", "LIST", "--sweep: thread counts, e.g. 1,2 (default: --threads)",
        [&o](std::string_view v) {
          o.sweep_threads.clear();
          for (const std::string& item : SplitList(v)) {
            const auto n = ParseUnsigned(item);
            if (!n || *n == 0 || *n > 1024) return BadValue("sweep_threads", v, "counts 1..1024");
            o.sweep_threads.push_back(*n);
          }
          return Status::Ok();
        });
  Value("sweep_protocols", "LIST",
        "--sweep: one series per transport, e.g. tcp,shm, each run with\n"
        "only that transport installed (default: --protocol)",
        [&o](std::string_view v) {
          o.sweep_protocols = SplitList(v);
          return Status::Ok();  // checked with the other transport flags
        });
  Value("sweep_operations", "LIST", "--sweep: write, read or write,read (default: --operation)",
        [&o](std::string_view v) {
          o.sweep_operations.clear();
          for (const std::string& item : SplitList(v)) {
            BenchOperation op{};
            RETURN_IF_ERROR(Choice<BenchOperation>(
                "sweep_operations", op,
                {{"read", BenchOperation::kRead}, {"write", BenchOperation::kWrite}})(item));
            o.sweep_operations.push_back(op);
          }
          return Status::Ok();
        });
  Text("csv", o.csv, "FILE", "--sweep: write the CSV here (default: stdout)");
  Text("raw_baselines", o.raw_baselines, "DIR|none",
       "--sweep: the folder holding ferry-raw-tcp-baseline and\n"
       "ferry-raw-shm-baseline (default: ferry-bench's own folder);\n"
       "none: measure no raw baseline");
}

// Checks `protocol` (a --protocol value) against the other transport flags: names are non-empty
// and distinct, "auto" stands alone, cxl comes with a window, and --managed with a transport
// that shares memory. `flag` names where the value came from.
Status ValidateTransports(const BenchOptions& o, const std::string& protocol,
                          const std::string& flag) {
  const std::vector<std::string> names = SplitList(protocol);
  auto named = [&](std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty() || std::find(names.begin() + static_cast<ptrdiff_t>(i) + 1, names.end(),
                                      names[i]) != names.end()) {
      return BadValue(flag, protocol, "distinct transport names, e.g. tcp,shm");
    }
  }
  const bool automatic = named("auto");
  if (automatic && names.size() > 1) return BadValue(flag, protocol, "auto stands alone");
  if (named("cxl") && o.cxl_window.empty()) {
    return InvalidArgumentError("--" + flag + "=" + protocol + " needs --cxl_window");
  }
  if (o.cxl_window_size != 0 && o.cxl_window.empty()) {
    return InvalidArgumentError("--cxl_window_size needs --cxl_window");
  }
  if (o.managed) {
    const char* needed = o.cxl_window.empty() ? "shm" : "cxl";
    if (!automatic && !named(needed)) {
      return InvalidArgumentError(
          std::string("--managed") + (o.cxl_window.empty() ? "" : " with --cxl_window") +
          " needs the " + needed + " transport (--" + flag + "=" + needed + " or auto)");
    }
  }
  return Status::Ok();
}

// Checks the sizes of one run: no product overflows, --buffer_size holds the working set.
Status ValidateSizes(const BenchOptions& o) {
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

// Fills the sweep lists left unset from --protocol, --threads and --operation.
void DefaultSweepLists(BenchOptions& o) {
  if (o.sweep_threads.empty()) o.sweep_threads = {o.threads};
  if (o.sweep_protocols.empty()) o.sweep_protocols = {o.protocol};
  if (o.sweep_operations.empty()) o.sweep_operations = {o.operation};
}

// Checks the combination of flags; the single flags were checked as they were parsed.
Status Validate(const BenchOptions& o) {
  if (o.help) return Status::Ok();
  if (o.mode == BenchMode::kInitiator) {
    if (o.segment_id.empty()) return InvalidArgumentError("initiator needs --segment_id");
    if (!o.target_file.empty()) {
      return InvalidArgumentError(
          "--target_file is the target's (--mode=target); an initiator reaches the file "
          "buffer the target published");
    }
  }
  if (!o.target_file.empty() && o.managed) {
    return InvalidArgumentError("--target_file registers a file, --managed memory: one of them");
  }
  if (o.OnDevice()) {
    const std::string& l = o.location;
    const bool device_index = l.size() > 5 && l.rfind("cuda:", 0) == 0 &&
                              l.find_first_not_of("0123456789", 5) == std::string::npos &&
                              l.size() <= 8;
    if (!device_index) {
      return InvalidArgumentError("--location=" + l + ": cpu or cuda:<device index>");
    }
    if (o.check) {
      return InvalidArgumentError("--location=" + l +
                                  " is device memory, which --check cannot fill or read (the CPU "
                                  "never touches it); measure without --check");
    }
    if (o.managed) return InvalidArgumentError("--location=" + l + " and --managed: one of them");
    if (!o.target_file.empty()) {
      return InvalidArgumentError("--target_file registers a file, --location=" + l +
                                  " device memory: one of them");
    }
  }
  if (!o.sweep) {
    RETURN_IF_ERROR(ValidateTransports(o, o.protocol, "protocol"));
    return ValidateSizes(o);
  }
  if (o.mode != BenchMode::kInitiator)
    return InvalidArgumentError("--sweep needs --mode=initiator");
  if (o.json) return InvalidArgumentError("--sweep writes CSV (--csv); --json is for one run");
  if (o.check) return InvalidArgumentError("--sweep only measures; --check is for one run");
  for (const std::string& protocol : o.sweep_protocols) {
    if (protocol.find(',') != std::string::npos || protocol.empty()) {
      return BadValue("sweep_protocols", protocol, "single transport names");
    }
    RETURN_IF_ERROR(ValidateTransports(o, protocol, "sweep_protocols"));
  }
  return ValidateSizes(o.LargestPoint());
}

// gflags accepts one leading dash as well as two: "-check" is "--check". CLI11 reads one dash as
// a cluster of one-letter flags, so a single-dash word is given its second dash first.
std::vector<std::string> WithDoubleDashes(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  for (const std::string& arg : args) {
    const bool single_dash_word = arg.size() > 2 && arg[0] == '-' && arg[1] != '-';
    out.push_back(single_dash_word ? "-" + arg : arg);
  }
  return out;
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
  auto named = [&](std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  // The file transport registers no memory, and an engine registers its buffers only with a
  // transport that does: file alone brings tcp along (the requests still ask for file).
  if (names == std::vector<std::string>{"file"}) names.push_back("tcp");
  if (!target_file.empty() && !named("auto") && !named("file")) names.push_back("file");
  return names;
}

std::string BenchOptions::TransportHint() const {
  std::vector<std::string> names = SplitList(protocol);
  names.erase(std::remove(names.begin(), names.end(), ""), names.end());
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
  e.file_direct_io = o.direct_io;
  e.file_queue_depth = static_cast<uint32_t>(o.file_queue_depth);
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

BenchOptions BenchOptions::ForPoint(const std::string& point_protocol,
                                    BenchOperation point_operation, uint64_t point_threads,
                                    uint64_t point_block_size) const {
  BenchOptions point = *this;
  point.sweep = false;
  point.protocol = point_protocol;
  point.operation = point_operation;
  point.threads = point_threads;
  point.block_size = point_block_size;
  return point;
}

BenchOptions BenchOptions::LargestPoint() const {
  if (!sweep) return *this;
  const auto max_of = [](const std::vector<uint64_t>& values, uint64_t fallback) {
    return values.empty() ? fallback : *std::max_element(values.begin(), values.end());
  };
  return ForPoint(sweep_protocols.empty() ? protocol : sweep_protocols.front(),
                  sweep_operations.empty() ? operation : sweep_operations.front(),
                  max_of(sweep_threads, threads), max_of(sweep_block_sizes, block_size));
}

Result<BenchOptions> ParseBenchOptions(const std::vector<std::string>& args) {
  BenchOptions out;
  FlagTable table(out);
  std::vector<std::string> argv = WithDoubleDashes(args);
  std::reverse(argv.begin(), argv.end());  // CLI11 takes the vector back to front
  try {
    table.app().parse(argv);
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    return out;
  } catch (const CLI::ParseError& e) {
    return InvalidArgumentError(e.what());
  }
  DefaultSweepLists(out);
  RETURN_IF_ERROR(Validate(out));
  return out;
}

std::string_view OperationName(BenchOperation op) {
  return op == BenchOperation::kRead ? "read" : "write";
}

std::string BenchUsage() {
  BenchOptions unused;
  FlagTable table(unused);
  return table.app().help();
}

}  // namespace ferry::bench
