#include "transport/tcp/tcp_transport.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <thread>
#include <utility>

#include "common/host_port.h"
#include "common/net_address.h"
#include "common/peer_auth.h"
#include "transport/tcp/io_loop.h"
#include "transport/tcp/target_server.h"
#include "transport/tcp/tcp_peer_link.h"
#include "transport/tcp/tcp_protocol.h"
#include "transport/tcp/tcp_runtime.h"
#include "transport/tcp/tcp_socket.h"

namespace ferry {
namespace {

constexpr size_t kMaxIoThreads = 8;

// Options with defaults applied, or InvalidArgument naming the bad field.
Result<TcpTransportOptions> Resolve(TcpTransportOptions o) {
  if (o.connections_per_peer < 1 || o.connections_per_peer > 64) {
    return InvalidArgumentError("tcp connections_per_peer must be 1..64");
  }
  if (o.window < 1 || o.window > 4096) return InvalidArgumentError("tcp window must be 1..4096");
  if (o.max_queued_per_peer < 1) return InvalidArgumentError("tcp max_queued_per_peer must be > 0");
  if (o.max_target_connections < 1) {
    return InvalidArgumentError("tcp max_target_connections must be > 0");
  }
  if (o.bytes_per_turn < 1) return InvalidArgumentError("tcp bytes_per_turn must be > 0");
  if (o.stripe_size == 0 || o.stripe_size % 4096 != 0) {
    return InvalidArgumentError("tcp stripe_size must be a positive multiple of 4096, got " +
                                std::to_string(o.stripe_size));
  }
  if (o.io_timeout.count() <= 0) return InvalidArgumentError("tcp io_timeout must be > 0");
  if (o.staging_bytes < 4096) {
    return InvalidArgumentError("tcp staging_bytes must be >= 4096, got " +
                                std::to_string(o.staging_bytes));
  }
  if (o.idle_timeout.count() < 0) return InvalidArgumentError("tcp idle_timeout must be >= 0");
  if (o.io_threads == 0) {
    o.io_threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, kMaxIoThreads);
  }
  o.io_threads = std::min(o.io_threads, kMaxIoThreads);
  return o;
}

// The host peers should dial: the advertised host, else the bind host; a wildcard is never
// published (the engine always passes an advertised host; a bare transport falls back to this
// machine's name).
std::string PublishedHost(const TransportStartInfo& info) {
  if (!info.advertise_host.empty() && !IsWildcardHost(info.advertise_host)) {
    return info.advertise_host;
  }
  if (!IsWildcardHost(info.bind_host)) return info.bind_host;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TcpTransport::TcpTransport(const TcpTransportOptions& options) : options_(options) {}

TcpTransport::~TcpTransport() { Stop(); }

TransportCapabilities TcpTransport::capabilities() const {
  TransportCapabilities caps;
  caps.reaches_other_hosts = true;
  caps.reaches_device_memory = false;
  caps.stages_device_memory = true;  // through the target's staging and the engine's bounce
  // One request frame's payload, and what a target may stage for a file buffer or device.
  caps.max_slice_size = std::min(tcp::kMaxPayloadBytes, options_.staging_bytes);
  return caps;
}

Result<std::string> TcpTransport::Start(TransportContext* ctx, const TransportStartInfo& info) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_) return BusyError("tcp transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("tcp Start: null context");
  ASSIGN_OR_RETURN(TcpTransportOptions options, Resolve(options_));
  RETURN_IF_ERROR(auth::ValidateSecret(info.auth_secret).WithContext("tcp transport"));
  auto runtime = std::make_shared<tcp::TcpRuntime>();
  runtime->options = options;
  runtime->ctx = ctx;
  runtime->auth_secret = info.auth_secret;
  // An explicit data port wins; otherwise the engine's port range (or the kernel) decides.
  const PortRange ports = options.port != 0 ? PortRange{options.port, options.port} : info.ports;
  ASSIGN_OR_RETURN(BoundListener listener, ListenTcpInRange(info.bind_host, ports, "tcp data"));
  // A tick of a quarter of io_timeout (5 ms..kDeadlineTick) keeps every timeout within 1.25
  // io_timeout and every slice deadline within kDeadlineTick.
  const auto tick = std::clamp(options.io_timeout / 4, std::chrono::milliseconds(5), kDeadlineTick);
  for (size_t i = 0; i < options.io_threads; ++i) {
    Result<std::unique_ptr<tcp::IoLoop>> loop = tcp::IoLoop::Create(tick);
    if (!loop.ok()) {
      for (auto& made : runtime->loops) made->Stop(CanceledError("tcp start failed"));
      return loop.status();
    }
    runtime->loops.push_back(std::move(loop).value());
  }
  auto server =
      std::make_shared<tcp::TargetServer>(runtime, runtime->loops[0].get(), std::move(listener.fd));
  (void)server->Start();  // the loop is new: the post is accepted
  runtime_ = std::move(runtime);
  started_.store(true, std::memory_order_release);
  return HostPort{PublishedHost(info), listener.port}.ToString();
}

void TcpTransport::Stop() {
  MutexLock lock(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!started_.load(std::memory_order_acquire)) return;
  runtime_->stopped.store(true, std::memory_order_release);
  const Status why = CanceledError("tcp transport stopped");
  for (auto& loop : runtime_->loops) loop->RequestStop(why);
  for (auto& loop : runtime_->loops) loop->Join();
}

Result<std::string> TcpTransport::RegisterMemory(uint64_t /*addr*/, uint64_t /*length*/,
                                                 const Location& location,
                                                 MemoryAccess /*access*/) {
  // Device memory too (stages_device_memory): the target never touches it but stages each
  // access (IsStagedAddress), and the engine bounces the local side through host chunks.
  (void)location;
  return std::string();
}

Status TcpTransport::UnregisterMemory(uint64_t /*addr*/, uint64_t /*length*/) {
  return Status::Ok();
}

Result<std::shared_ptr<PeerLink>> TcpTransport::Connect(const SegmentDesc& peer) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("tcp transport not started");
  if (runtime_->stopped.load(std::memory_order_acquire)) {
    return CanceledError("tcp transport stopped");
  }
  const auto it = peer.transports.find("tcp");
  if (it == peer.transports.end()) {
    return InvalidArgumentError("segment '" + peer.name + "' publishes no tcp endpoint");
  }
  Result<HostPort> endpoint = ParseHostPort(it->second, "tcp endpoint");
  if (!endpoint.ok()) {
    return InvalidArgumentError("segment '" + peer.name +
                                "': bad tcp endpoint: " + endpoint.status().message());
  }
  Result<tcp::SocketAddress> address = tcp::ResolveAddress(endpoint->host, endpoint->port);
  if (!address.ok()) {
    return address.status().WithContext("segment '" + peer.name + "' tcp endpoint");
  }
  std::string peer_name = "segment '" + peer.name + "' at " + endpoint->ToString();
  return std::shared_ptr<PeerLink>(
      std::make_shared<tcp::TcpPeerLink>(runtime_, *address, std::move(peer_name)));
}

Status TcpTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  auto* tcp_link = dynamic_cast<tcp::TcpPeerLink*>(&link);
  if (tcp_link == nullptr || !started_.load(std::memory_order_acquire) ||
      tcp_link->runtime() != runtime_.get()) {
    return InvalidArgumentError("tcp Submit: link was not made by this transport");
  }
  return tcp_link->Submit(slices);
}

Result<std::string> TcpTransport::OnExchange(std::string_view /*payload*/) {
  return InvalidArgumentError("tcp uses no exchange");
}

TcpTransportStats TcpTransport::stats() const {
  TcpTransportStats out;
  if (!started_.load(std::memory_order_acquire)) return out;
  const tcp::TcpCounters& c = runtime_->counters;
  out.bad_frames = c.bad_frames.load(std::memory_order_relaxed);
  out.connections_opened = c.connections_opened.load(std::memory_order_relaxed);
  out.connections_failed = c.connections_failed.load(std::memory_order_relaxed);
  out.connections_accepted = c.connections_accepted.load(std::memory_order_relaxed);
  out.timeouts = c.timeouts.load(std::memory_order_relaxed);
  out.rejected_accesses = c.rejected_accesses.load(std::memory_order_relaxed);
  out.expired_slices = c.expired_slices.load(std::memory_order_relaxed);
  out.deadline_resets = c.deadline_resets.load(std::memory_order_relaxed);
  out.idle_closes = c.idle_closes.load(std::memory_order_relaxed);
  out.expired_accesses = c.expired_accesses.load(std::memory_order_relaxed);
  out.auth_refusals = runtime_->refusals.count();
  out.staged_accesses = c.staged_accesses.load(std::memory_order_relaxed);
  out.staging_waits = c.staging_waits.load(std::memory_order_relaxed);
  return out;
}

std::vector<std::pair<std::string, uint64_t>> TcpTransport::Counters() const {
  const TcpTransportStats s = stats();
  return {{"bad_frames", s.bad_frames},
          {"connections_opened", s.connections_opened},
          {"connections_failed", s.connections_failed},
          {"connections_accepted", s.connections_accepted},
          {"timeouts", s.timeouts},
          {"rejected_accesses", s.rejected_accesses},
          {"expired_slices", s.expired_slices},
          {"deadline_resets", s.deadline_resets},
          {"idle_closes", s.idle_closes},
          {"expired_accesses", s.expired_accesses},
          {"auth_refusals", s.auth_refusals},
          {"staged_accesses", s.staged_accesses},
          {"staging_waits", s.staging_waits}};
}

std::unique_ptr<Transport> CreateTcpTransport(const TcpTransportOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

}  // namespace ferry
