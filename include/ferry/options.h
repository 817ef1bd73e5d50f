// EngineOptions: typed configuration, parsed once at the edge (CLI, environment, Python).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

// An on/off setting whose default the engine decides.
enum class Toggle { kAuto, kOn, kOff };

struct EngineOptions {
  // Where descriptors are published (see README: etcd://, redis://, http://, P2PHANDSHAKE,
  // memory://).
  std::string metadata_conn = "P2PHANDSHAKE";
  // This engine's segment name. Empty: "<advertised host>:<rpc_port>" (the only form
  // P2PHANDSHAKE accepts).
  std::string local_server_name;
  // Address the RPC service and every transport listen on (bind). A wildcard ("0.0.0.0", "::")
  // listens on every interface; peers are then told advertise_host.
  std::string host = "127.0.0.1";
  // Address peers are told (README "Deploying across hosts"): the host of the RPC endpoint in
  // the published descriptor and rpc_meta, of the default segment name, and of every
  // transport's published endpoint (tcp "host:port"; rdma over an IP provider binds its
  // endpoints there when `host` is a wildcard, since libfabric publishes where it listens).
  // Empty: FERRY_ADVERTISE_HOST when set; else `host` unless it is a wildcard; for a wildcard,
  // the local address that routes to the metadata store (its first endpoint), or with
  // P2PHANDSHAKE (no store) the first non-loopback IPv4 interface address (IPv6 for "::"),
  // logged. Init fails (InvalidArgument / Unavailable) when none can be found, or when it is
  // itself a wildcard. A loopback address published into a store that is not on loopback logs a
  // warning once.
  std::string advertise_host;
  // RPC port; 0 picks a free one (within port_range when set). With rpc_port_range_end, the
  // first free port of [rpc_port, rpc_port_range_end]. An explicit rpc_port wins over
  // port_range.
  uint16_t rpc_port = 0;
  uint16_t rpc_port_range_end = 0;
  // "FIRST-LAST" (e.g. "20000-20100") or one port: every listener this engine opens without an
  // explicit port (the RPC service when rpc_port is 0, the tcp data listener, rdma endpoints of
  // IP-addressed providers such as "tcp;ofi_rxm") binds the first free port of the range. Init
  // fails with Unavailable, naming the range and the listener, when the range is exhausted;
  // InvalidArgument for a malformed range. Empty: FERRY_PORT_RANGE when set, else the kernel
  // picks. (shm/cxl grant channels are unix sockets and take no port.)
  std::string port_range;
  // Transports to install: names ("tcp", "shm", "cxl", "rdma", "file") or {"auto"}: tcp, shm
  // and file (when io_uring works here), plus cxl when cxl_window is set, plus rdma when
  // rdma_provider is set or an RDMA NIC is found.
  std::vector<std::string> transports = {"auto"};
  // Locality: engines on one running kernel that see each other's processes are one host, and
  // use same-host transports (shm, cxl) between them. A non-empty host_id replaces the detected
  // identity: engines with equal host_ids on one machine are one host, different ones are not
  // (to force "another host" in tests and benchmarks).
  std::string host_id;
  // shm: where the same-host control sockets live (a directory every local peer can reach).
  std::string shm_dir = "/dev/shm";
  // shm copies registered heap memory with process_vm_writev/readv (cross-memory attach), which
  // the kernel allows only to a process that may ptrace the target. Under Linux Yama with
  // kernel.yama.ptrace_scope = 1 only an ancestor may, so for peers to copy into this process
  // it calls prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) at start. Consequence: every process of
  // the same user may then ptrace this whole process (read and write all of its memory, not
  // only the registered regions). Without Yama, or with ptrace_scope 0, that is already so and
  // the call changes nothing; with ptrace_scope 2 or 3 it cannot help.
  //   kAuto: on when the shm transport is installed (it copies heap memory with CMA), else off.
  //   kOn:   the same, but Init fails (InvalidArgument) when no shm transport is installed.
  //   kOff:  never. Where Yama restricts ptrace, a peer's CMA copy into this process then fails
  //          (PermissionDenied; the engine falls back to another transport, e.g. tcp); managed
  //          buffers (allocateManagedBuffer: a shared memfd peers copy with memcpy) still move
  //          over shm.
  Toggle allow_same_user_ptrace = Toggle::kAuto;
  // cxl: the shared window every engine on the host maps (a DAX device or a mappable file) and
  // how many bytes of it; 0 = its size. Empty: no cxl transport.
  std::string cxl_window;
  uint64_t cxl_window_size = 0;
  // rdma (libfabric): the provider ("verbs;ofi_rxm", "efa", "tcp;ofi_rxm"); empty: a hardware
  // provider if one is found. rdma_devices narrows the NICs used (e.g. "mlx5_0").
  std::string rdma_provider;
  std::vector<std::string> rdma_devices;
  // file (io_uring; file buffers, registerLocalFile): I/Os in flight at once (1..4096), and
  // whether a request whose memory address, file offset and length meet the file's direct-I/O
  // alignment goes O_DIRECT (else every request goes through the page cache).
  uint32_t file_queue_depth = 64;
  bool file_direct_io = true;
  // Every task ends by this deadline: COMPLETED, FAILED or TIMEOUT. A task reported TIMEOUT
  // (or FAILED) has nothing more land afterwards (see transfer_engine.h for what each
  // transport can promise).
  std::chrono::milliseconds task_timeout{30000};
  // Requests are cut into slices of at most this many bytes, spread over connections (and
  // NICs). 0: the size the carrying transport prefers (tcp, shm, cxl: 256 KiB; rdma: 256 KiB on
  // a NIC provider, so that a block stripes over several NICs, 4 MiB on a software provider
  // such as "tcp;ofi_rxm", which pays per operation). An explicit value is used for every
  // transport. Either is clamped to the smallest maximum of the installed transports (tcp: 1
  // GiB, one frame), so that a task keeps the size of its first plan when a retry takes another
  // transport. TransferStatus::slice_size reports each task's.
  uint64_t slice_size = 0;
  // tcp: every payload carries a CRC32C checked as it lands, so bytes corrupted in transit fail
  // their task instead of being written or reported as read (headers are always checksummed).
  // Off saves the checksum's CPU time at the price of that detection (README, tcp numbers).
  // Each initiator decides for the transfers it starts.
  bool tcp_payload_checksum = true;
  // Metadata key prefix ("<prefix>/ram/<segment>").
  std::string metadata_prefix = "ferry";
  // Published entries vanish this long after the engine dies.
  std::chrono::milliseconds lease_ttl{10000};
  // Names are owned. init() fails with AlreadyExists, naming the holder, when another engine
  // that still answers its RPC (probed, bounded by request_timeout) holds local_server_name in
  // the metadata store; a holder that does not answer (dead or frozen, its lease not yet run
  // out) is taken over, and logged. true: take the name over from a live holder too (it keeps
  // running, but peers resolving the name reach this engine, and its refreshes and clean stop
  // leave this engine's entries alone). Not used with P2PHANDSHAKE (the name is host:port).
  bool take_over_name = false;
  // Remote descriptor cache lifetime when the store cannot watch.
  std::chrono::milliseconds segment_cache_ttl{5000};
  // The most buffers (registered regions) one segment descriptor may hold. A peer's descriptor
  // holding more is refused when fetched (InvalidArgument: "buffers: N entries, over the limit
  // of M (EngineOptions::max_segment_buffers)"), before more than this many are decoded; a
  // registration that would take this engine's own descriptor past it is refused whole
  // (InvalidArgument naming this option; enforced under the registry's lock, so concurrent
  // registrations cannot pass it together), since peers with the same bound could not open it.
  // A decoded buffer costs about 440 bytes and 1 us with the usual two keys, and at most about
  // 2.1 KiB and 10 us (16 keys, the most a buffer may hold: one per transport; README, "Cost at
  // scale"), so this bounds what one peer's descriptor can cost: ~135 MiB at the default, ~30
  // MiB for a usual one. Must be > 0.
  size_t max_segment_buffers = 65536;
  // Bound on waiting for in-flight accesses when unregistering memory.
  std::chrono::milliseconds unregister_drain_timeout{5000};
  // Bound on each metadata / RPC round trip, and on every transport's wait for a peer that
  // makes no progress (a connect, a grant answer, a stalled connection).
  std::chrono::milliseconds request_timeout{5000};
  // Links to a peer (connections, grant channels, mappings) unused for this long are closed,
  // and re-opened on next use. 0: never.
  std::chrono::milliseconds idle_link_timeout{60000};
  // Notifications received and not yet taken by getNotifies: past either cap the sender's
  // sendNotify fails with Busy, and nothing more is kept.
  size_t max_pending_notifies = 4096;
  uint64_t max_pending_notify_bytes = uint64_t{64} << 20;
  // Cluster secret: when set, every connection between engines (RPC, tcp data, shm/cxl grant
  // channels) starts with a mutual HMAC-SHA256 challenge over fresh nonces, and a peer that
  // does not hold the same secret is refused with PermissionDenied before anything is read or
  // written (logged once per peer address). Empty: FERRY_AUTH_SECRET when set, else no
  // authentication (and a peer that requires it refuses this engine). At least 16 bytes. It
  // authenticates peers only: payloads are not encrypted, and rdma's one-sided accesses are
  // checked by the NIC's keys, not by this secret.
  std::string auth_secret;
  // Threads doing slow per-peer work (retries, descriptor refreshes, notifications after
  // batches, submissions a full transport queue turned back). Each peer's work runs on one
  // thread at a time, so a frozen peer holds at most one; the pool grows on demand up to this
  // many and shrinks when idle.
  size_t worker_threads = 32;
  // Metrics (include/ferry/metrics.h; always counted, read with TransferEngine::getMetrics()).
  // A Prometheus endpoint serving them at http://<metrics_host>:<port>/metrics: -1 off (the
  // default; FERRY_METRICS_PORT, when set, gives the port instead), 0 a free port
  // (TransferEngine::metricsPort() says which), else that port. Init fails (Unavailable) when
  // it cannot listen, e.g. when another engine of the process took the port FERRY_METRICS_PORT
  // names (give each engine its own port). The figures are read from a snapshot at scrape
  // time: serving costs the data path nothing.
  int32_t metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  // Peer segments with a series of their own, per transport; later ones are counted together
  // under the peer "other" (metrics.h kOtherPeer), so labels stay bounded. Must be > 0.
  size_t metrics_max_peers = 64;
  // Log threshold of the process's log facade ("trace", "debug", "info", "warn", "error",
  // "off"), set by init(). Empty: FERRY_LOG_LEVEL when set, else warn. The level is one per
  // process: the last engine to init() with a non-empty level sets it.
  std::string log_level;
};

}  // namespace ferry
