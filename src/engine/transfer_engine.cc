#include "ferry/transfer_engine.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <random>

#include "common/env.h"
#include "common/log.h"
#include "common/net_address.h"
#include "common/peer_auth.h"
#include "core/location.h"
#include "engine/builtin_transports.h"
#include "engine/engine_impl.h"
#include "engine/host_identity.h"
#include "engine/instrumented_store.h"
#include "metadata/p2p/p2p_store.h"
#include "metadata/store_factory.h"
#include "rpc/messages.h"

namespace ferry {

std::string_view TransferStateName(TransferState state) {
  switch (state) {
    case TransferState::kWaiting:
      return "WAITING";
    case TransferState::kPending:
      return "PENDING";
    case TransferState::kCompleted:
      return "COMPLETED";
    case TransferState::kFailed:
      return "FAILED";
    case TransferState::kTimeout:
      return "TIMEOUT";
    case TransferState::kCanceled:
      return "CANCELED";
  }
  return "?";
}

namespace {

// A (un)registration is done when the name it would be published under was taken over by
// another engine: the memory serves this engine's local side and its current peers, and the
// loss was logged once when the publisher learned it (SegmentPublisher::Publish).
Status PublishedOrNameLost(Status published, const SegmentPublisher& publisher,
                           std::string_view name) {
  if (published.code() == StatusCode::kAlreadyExists && publisher.taken_over(name)) {
    return Status::Ok();
  }
  return published;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

// True for an IPv6 literal (without brackets or a zone).
bool IsIpv6Literal(const std::string& host) {
  in6_addr addr{};
  return inet_pton(AF_INET6, host.c_str(), &addr) == 1;
}

// With P2PHANDSHAKE peers reach a segment at the address its name gives: "host:port" (IPv6 in
// brackets) must name this engine's RPC port; a bare host ("10.0.0.1", "localhost", "::1",
// "[::1]") gets the port appended, as Mooncake does. Refused (InvalidArgument): a host that is
// neither a name nor an IP literal ("abc:def" is a host with a port that is not a number), an
// empty port ("1.2.3.4:"), and a wildcard ("0.0.0.0", "::"), which peers cannot dial.
Result<std::string> P2PSegmentName(const std::string& name, uint16_t rpc_port) {
  auto refuse = [&](const std::string& why) {
    return InvalidArgumentError(
        "with P2PHANDSHAKE the segment name must be host or host:" + std::to_string(rpc_port) +
        " (the RPC port), not '" + name + "': " + why);
  };
  std::string host;
  std::optional<std::string> port;
  if (!name.empty() && name.front() == '[') {
    const size_t close = name.find(']');
    if (close == std::string::npos) return refuse("unterminated [IPv6] host");
    host = name.substr(1, close - 1);
    if (!IsIpv6Literal(host)) return refuse("'" + host + "' in brackets is not an IPv6 address");
    const std::string rest = name.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return refuse("text after the [IPv6] host");
      port = rest.substr(1);
    }
  } else if (std::count(name.begin(), name.end(), ':') > 1) {
    // Unbracketed: an IPv6 literal without a port, and nothing else.
    if (!IsIpv6Literal(name)) return refuse("not a host name, host:port or an IP literal");
    host = name;
  } else if (const size_t colon = name.find(':'); colon != std::string::npos) {
    host = name.substr(0, colon);
    port = name.substr(colon + 1);
  } else {
    host = name;
  }
  if (port.has_value() && port->empty()) return refuse("the port after ':' is empty");
  if (IsWildcardHost(host)) {
    return refuse("'" + host +
                  "' means every interface, and peers cannot dial it: name an address of this "
                  "host (or leave the name empty and set advertise_host)");
  }
  const std::string host_text = IsIpv6Literal(host) ? "[" + host + "]" : host;
  Result<HostPort> parsed =
      ParseHostPort(host_text + ":" + port.value_or(std::to_string(rpc_port)), "P2P segment name");
  if (!parsed.ok()) return refuse(parsed.status().message());
  if (parsed->port != rpc_port) {
    return refuse("port " + std::to_string(parsed->port) + " is not the RPC port");
  }
  return parsed->ToString();
}

}  // namespace

// ---- Impl: life cycle ----------------------------------------------------------------------

TransferEngine::Impl::~Impl() {
  // Inbound first, then the threads that start work, then the transports (which fail what is in
  // flight, releasing the batches it held), then the store entries. The metrics endpoint goes
  // before all of them: its scrapes read them.
  exporter_.reset();
  if (rpc_server_ != nullptr) rpc_server_->Stop();
  timer_.Stop();
  if (workers_ != nullptr) workers_->Stop();
  // The staging copier stops first (what waits in it is canceled, nothing more goes to a
  // transport), the transports then fail what is in flight (bounced slices come back through
  // it), and it is freed, with its chunks, only after them.
  if (stager_ != nullptr) stager_->Stop();
  for (auto& t : transports_) t->Stop();  // fails what is in flight
  stager_.reset();
  links_.Clear();
  {
    MutexLock lock(file_link_mu_);
    own_file_link_.reset();  // the file transport's link, before the transport goes
  }
  if (publisher_ != nullptr) {
    Status s = publisher_->Remove();
    if (!s.ok()) FERRY_LOG(kWarn) << "removing segment '" << name_ << "' at shutdown: " << s;
  }
  directory_.reset();
  publisher_.reset();
  store_.reset();
  batches_.TakeAll().clear();  // releases the local pins tasks still hold
}

Status TransferEngine::Impl::Init(const EngineOptions& options) {
  if (registry_ != nullptr) return BusyError("init() was already called");
  options_ = options;
  if (options_.task_timeout.count() <= 0) return InvalidArgumentError("task_timeout must be > 0");
  if (options_.request_timeout.count() <= 0) {
    return InvalidArgumentError("request_timeout must be > 0");
  }
  if (options_.worker_threads == 0) return InvalidArgumentError("worker_threads must be > 0");
  if (options_.auth_secret.empty()) {
    if (std::optional<std::string> secret = GetFerryEnv("AUTH_SECRET")) {
      options_.auth_secret = std::move(*secret);
    }
  }
  RETURN_IF_ERROR(auth::ValidateSecret(options_.auth_secret));
  if (options_.max_segment_buffers == 0) {
    return InvalidArgumentError("max_segment_buffers must be > 0");
  }
  RETURN_IF_ERROR(ApplyObservabilityOptions());
  completion_fd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!completion_fd_.valid()) {
    return InternalError(std::string("creating the completion eventfd: ") + std::strerror(errno));
  }
  notify_box_ = std::make_unique<engine::NotificationBox>(options_.max_pending_notifies,
                                                          options_.max_pending_notify_bytes);
  health_ = std::make_unique<engine::PeerHealth>(clock_, engine::PeerHealthOptions{});
  workers_ = std::make_unique<engine::PeerWorkers>(
      engine::PeerWorkersOptions{.max_threads = options_.worker_threads});
  incarnation_ = NewIncarnation();
  registry_ = std::make_unique<LocalRegistry>(
      RegistryOptions{.drain_timeout = options_.unregister_drain_timeout,
                      .max_regions = options_.max_segment_buffers,
                      .max_regions_setting = "EngineOptions::max_segment_buffers"});
  policy_ = std::make_unique<engine::SelectionPolicy>(Clock::Real());

  RETURN_IF_ERROR(ResolveAddresses());
  RpcServerOptions rpc_options;
  rpc_options.bind_host = options_.host;
  rpc_options.port = options_.rpc_port;
  rpc_options.port_range_end = options_.rpc_port_range_end;
  rpc_options.fallback_ports = ports_;
  rpc_options.auth_secret = options_.auth_secret;
  ASSIGN_OR_RETURN(rpc_server_, RpcServer::Create(rpc_options));
  name_ = options_.local_server_name.empty()
              ? HostPort{advertise_host_, rpc_server_->port()}.ToString()
              : options_.local_server_name;
  if (Result<StoreAddress> conn = ParseStoreAddress(options_.metadata_conn);
      conn.ok() && conn->kind == StoreAddress::Kind::kP2P) {
    // Before the RPC service starts: its handlers read name_.
    ASSIGN_OR_RETURN(name_, P2PSegmentName(name_, rpc_server_->port()));
  }
  RETURN_IF_ERROR(RegisterRpcHandlers());
  RETURN_IF_ERROR(rpc_server_->Start());

  rpc_client_ = std::make_unique<RpcClient>(RpcClientOptions{.auth_secret = options_.auth_secret});
  p2p_source_ = std::make_unique<RpcDescriptorSource>(rpc_client_.get(), options_.request_timeout);
  Result<StoreAddress> address = ParseStoreAddress(options_.metadata_conn);
  if (!address.ok()) return address.status();
  ASSIGN_OR_RETURN(store_, CreateMetadataStore(options_.metadata_conn,
                                               {.request_timeout = options_.request_timeout,
                                                .lease_ttl = options_.lease_ttl},
                                               p2p_source_.get()));
  store_ = std::make_unique<engine::InstrumentedStore>(std::move(store_), counters_.get());
  DirectoryOptions directory{.prefix = options_.metadata_prefix,
                             .cache_ttl = options_.segment_cache_ttl,
                             .fetch_timeout = options_.request_timeout * 2};
  directory.limits.max_buffers = options_.max_segment_buffers;
  directory.limits.max_buffers_setting = "EngineOptions::max_segment_buffers";
  // A peer that restarted under its name: the links made for its old incarnation go.
  directory.on_restarted = [this](std::string_view peer, uint64_t, uint64_t now) {
    links_.DropOtherIncarnations(peer, now);
  };
  // The store answered NotFound for a peer we know (it lost the keys: their TTL passed while it
  // was down, it restarted without them, a delete event): the peer itself says whether it is
  // gone. Its RPC service serves its own descriptor (as for P2PHANDSHAKE); the directory keeps
  // it only when it names the very incarnation cached. A peer that is gone does not answer, and
  // a restarted one answers as another incarnation: either is dropped (never re-aimed).
  directory.ask_peer = [this](const SegmentDesc& cached) -> Result<std::string> {
    return p2p_source_->FetchFromPeer(HostPort{cached.rpc.host, cached.rpc.port},
                                      SegmentDescKey(options_.metadata_prefix, cached.name));
  };
  ASSIGN_OR_RETURN(directory_, SegmentDirectory::Create(store_.get(), std::move(directory)));
  publisher_ = std::make_unique<SegmentPublisher>(store_.get(), options_.metadata_prefix);

  base_desc_.name = name_;
  base_desc_.incarnation = incarnation_;
  base_desc_.rpc = {advertise_host_, rpc_server_->port()};
  base_desc_.host = LocalHostIdentity();
  if (!options_.host_id.empty()) base_desc_.host.boot_id = "host-id:" + options_.host_id;
  RETURN_IF_ERROR(StartTransports());
  RETURN_IF_ERROR(ClaimName());
  RETURN_IF_ERROR(Publish());
  timer_.Start();
  SweepIdleLinks();
  if (options_.metrics_port >= 0) {
    Result<std::unique_ptr<engine::MetricsExporter>> exporter = engine::MetricsExporter::Start(
        options_.metrics_host, static_cast<uint16_t>(options_.metrics_port),
        [this] { return Metrics(); });
    if (exporter.ok()) {
      exporter_ = std::move(exporter).value();
    } else if (metrics_port_from_env_) {
      // Every engine of a process reads the variable; the first one serves the port.
      FERRY_LOG(kWarn) << "engine '" << name_ << "' serves no metrics endpoint: "
                       << exporter.status().WithContext("FERRY_METRICS_PORT");
    } else {
      return exporter.status().WithContext("EngineOptions::metrics_port");
    }
  }
  ready_.store(true);
  FERRY_LOG(kInfo) << "engine '" << name_ << "' up, incarnation " << incarnation_;
  return Status::Ok();
}

uint16_t TransferEngine::Impl::rpc_port() const { return rpc_server_->port(); }

Status TransferEngine::Impl::ApplyObservabilityOptions() {
  if (!options_.log_level.empty()) {
    LogLevel level = LogLevel::kWarn;
    if (!ParseLogLevel(options_.log_level, &level)) {
      return InvalidArgumentError("log_level '" + options_.log_level +
                                  "': use trace, debug, info, warn, error or off");
    }
    SetLogLevel(level);
  }
  if (options_.metrics_max_peers == 0) {
    return InvalidArgumentError("metrics_max_peers must be > 0");
  }
  if (options_.metrics_port < 0) {
    if (std::optional<std::string> text = GetFerryEnv("METRICS_PORT"); text && !text->empty()) {
      // [host:]port; the host (an address to listen on) replaces metrics_host.
      const size_t colon = text->rfind(':');
      const std::string_view digits = colon == std::string::npos
                                          ? std::string_view(*text)
                                          : std::string_view(*text).substr(colon + 1);
      int port = -1;
      const char* end = digits.data() + digits.size();
      const auto [ptr, ec] = std::from_chars(digits.data(), end, port);
      if (ec != std::errc() || ptr != end || port < 0 || port > 65535 || colon == 0) {
        return InvalidArgumentError("FERRY_METRICS_PORT '" + *text +
                                    "' is not [host:]port (port 0..65535; 0: a free one)");
      }
      if (colon != std::string::npos) options_.metrics_host = text->substr(0, colon);
      options_.metrics_port = port;
      metrics_port_from_env_ = true;
    }
  }
  if (options_.metrics_port < -1 || options_.metrics_port > 65535) {
    return InvalidArgumentError("metrics_port " + std::to_string(options_.metrics_port) +
                                " is not a port (-1: off, 0: a free one, else 1..65535)");
  }
  counters_ = std::make_unique<engine::EngineCounters>(options_.metrics_max_peers);
  return Status::Ok();
}

EngineMetrics TransferEngine::Impl::Metrics() const {
  EngineMetrics out = counters_->Snapshot();
  out.segment = name_;
  out.incarnation = incarnation_;
  out.metadata.store = std::string(store_->scheme());
  for (TransportMetrics& t : out.transports) {
    if (const Transport* transport = FindTransport(t.name)) t.counters = transport->Counters();
  }
  out.notifications.refused = notify_box_->refused();
  return out;
}

Status TransferEngine::Impl::ResolveAddresses() {
  if (options_.advertise_host.empty()) {
    options_.advertise_host = GetFerryEnv("ADVERTISE_HOST").value_or("");
  }
  if (options_.port_range.empty()) options_.port_range = GetFerryEnv("PORT_RANGE").value_or("");
  Result<PortRange> ports = ParsePortRange(options_.port_range);
  if (!ports.ok()) return ports.status().WithContext("port_range (or FERRY_PORT_RANGE)");
  ports_ = *ports;
  if (options_.host.empty()) {
    return InvalidArgumentError("host is empty; to listen on every interface use 0.0.0.0 or ::");
  }
  ASSIGN_OR_RETURN(StoreAddress store, ParseStoreAddress(options_.metadata_conn));
  const HostPort* store_endpoint = store.endpoints.empty() ? nullptr : &store.endpoints.front();
  if (!options_.advertise_host.empty()) {
    if (IsWildcardHost(options_.advertise_host)) {
      return InvalidArgumentError("advertise_host '" + options_.advertise_host +
                                  "' is a wildcard; peers need an address they can dial");
    }
    advertise_host_ = options_.advertise_host;
  } else {
    ASSIGN_OR_RETURN(advertise_host_, DefaultAdvertiseHost(options_.host, store_endpoint));
  }
  // Peers elsewhere cannot dial a loopback address; say so once, where it is decided.
  if (IsLoopbackHost(advertise_host_)) {
    for (const HostPort& endpoint : store.endpoints) {
      if (IsLoopbackHost(endpoint.host)) continue;
      FERRY_LOG(kWarn) << "advertising the loopback address " << advertise_host_
                       << " in the metadata store at " << endpoint.ToString()
                       << ", which is not on loopback: engines on other hosts cannot reach this "
                          "one (set host or advertise_host to an address they can dial)";
      break;
    }
  }
  return Status::Ok();
}

Status TransferEngine::Impl::StartTransports() {
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Transport>> created,
                   CreateBuiltinTransports(options_));
  const bool automatic = options_.transports.empty() ||
                         (options_.transports.size() == 1 && options_.transports[0] == "auto");
  // Device memory over a transport that stages it (tcp): only where this build and machine have
  // a device (without one no device memory can be registered, so nothing needs it). Made before
  // the transports start, so their threads only ever see it made.
  const bool stages = std::any_of(created.begin(), created.end(), [](const auto& t) {
    return t->capabilities().stages_device_memory;
  });
  if (stages) {
    if (Result<engine::StagingOps> ops = DeviceStagingOps(); ops.ok()) {
      engine::StagingOptions staging;
      staging.canceled = [](const Slice* s) {
        return static_cast<const engine::Task*>(s->task)->canceled.load();
      };
      stager_ =
          std::make_unique<engine::StagingCopier>(std::move(ops).value(), std::move(staging), this);
    }
  }
  for (auto& t : created) {
    Result<std::string> bytes = t->Start(this, {.local_segment = name_,
                                                .bind_host = options_.host,
                                                .advertise_host = advertise_host_,
                                                .ports = ports_,
                                                .auth_secret = options_.auth_secret});
    if (!bytes.ok()) {
      const Status error =
          bytes.status().WithContext("starting transport '" + std::string(t->name()) + "'");
      // Chosen automatically, a transport that cannot run here is left out; named, it is an
      // error.
      if (automatic && t->name() != "tcp") {
        FERRY_LOG(kWarn) << error << "; continuing without it";
        continue;
      }
      return error;
    }
    base_desc_.transports[std::string(t->name())] = *bytes;
    counters_->ForTransport(t->name());  // snapshots list transports in priority order
    candidates_.push_back({std::string(t->name()), !t->capabilities().reaches_other_hosts,
                           t->capabilities().file_buffers});
    transports_.push_back(std::move(t));
  }
  uint64_t smallest_max = UINT64_MAX;
  for (const auto& t : transports_) {
    smallest_max = std::min(smallest_max, std::max<uint64_t>(t->capabilities().max_slice_size, 1));
  }
  for (const auto& t : transports_) {
    const uint64_t wanted =
        options_.slice_size != 0 ? options_.slice_size : t->capabilities().preferred_slice_size;
    slice_sizes_.push_back(std::clamp<uint64_t>(wanted, 1, smallest_max));
  }
  return Status::Ok();
}

Transport* TransferEngine::Impl::FindTransport(std::string_view name) const {
  for (const auto& t : transports_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

uint64_t TransferEngine::Impl::SliceSizeFor(const Transport* transport) const {
  for (size_t i = 0; i < transports_.size(); ++i) {
    if (transports_[i].get() == transport) return slice_sizes_[i];
  }
  return uint64_t{256} << 10;  // unreachable: tasks only take installed transports
}

bool TransferEngine::Impl::SameHost(const SegmentDesc& peer) const {
  return IsSameHost(base_desc_.host, peer.host);
}

Status TransferEngine::Impl::Publish() {
  // The snapshot is taken under the same lock as the write: whichever call publishes last
  // publishes the registry's latest state.
  MutexLock lock(publish_mu_);
  SegmentDesc desc = base_desc_;
  desc.buffers = registry_->Snapshot();
  std::string encoded;
  RETURN_IF_ERROR(publisher_->Publish(desc, &encoded));
  MutexLock served(served_mu_);
  served_[SegmentDescKey(options_.metadata_prefix, name_)] = std::move(encoded);
  served_[RpcMetaKey(options_.metadata_prefix, name_)] = RpcMetaValue(desc);
  return Status::Ok();
}

// ---- Impl: memory --------------------------------------------------------------------------

Status TransferEngine::Impl::RegisterMemory(const std::vector<BufferEntry>& buffers,
                                            const std::string& location, bool remote_accessible,
                                            bool publish) {
  ASSIGN_OR_RETURN(Location requested, Location::Parse(location));
  // Peers with the same bound would refuse the descriptor this makes. Checked here before any
  // transport registers, to refuse early; the registry enforces it exactly (under its lock, so
  // two registrations racing past this check cannot together pass it).
  if (const size_t held = registry_->size(); buffers.size() > options_.max_segment_buffers ||
                                             held > options_.max_segment_buffers - buffers.size()) {
    return InvalidArgumentError(
        "registering " + std::to_string(buffers.size()) + " more regions would make segment '" +
        name_ + "' hold " + std::to_string(held + buffers.size()) + " buffers, over the limit of " +
        std::to_string(options_.max_segment_buffers) +
        " (EngineOptions::max_segment_buffers) that peers decode");
  }
  std::vector<RegionSpec> specs;
  // Transport registrations made so far, undone if anything fails.
  std::vector<std::pair<Transport*, BufferEntry>> made;
  auto fail = [&](const Status& error) {
    for (auto& [t, b] : made) {
      t->UnregisterMemory(reinterpret_cast<uint64_t>(b.addr), b.length).IgnoreError();
    }
    return error;
  };
  for (const BufferEntry& b : buffers) {
    const uint64_t addr = reinterpret_cast<uint64_t>(b.addr);
    if (b.addr == nullptr || b.length == 0) {
      return fail(InvalidArgumentError("cannot register a null address or zero bytes"));
    }
    // Every installed transport registers every buffer, so any overlap with a registered
    // region is an error; checking first keeps transports from touching a live registration.
    if (Status overlap = registry_->CheckOverlap(addr, b.length); !overlap.ok()) {
      Result<BufferDesc> same = registry_->Lookup(addr);
      if (same.ok() && same->addr == addr && same->length == b.length) {
        return fail(AlreadyExistsError(overlap.message()));
      }
      return fail(overlap);
    }
    Location where = requested;
    if (where.kind == Location::Kind::kDetect) {
      // Device memory (cuda:<n>) first, then the host's NUMA node.
      Result<Location> detected = DetectMemoryLocation(b.addr);
      if (!detected.ok()) return fail(detected.status());
      where = *detected;
    } else if (Status device = CheckMemoryLocation(b.addr, b.length, where); !device.ok()) {
      return fail(device);  // an explicit device location must be that device's memory
    }
    // From now on a staging transport's target asks the registry (IsStagedAddress); set before
    // the region exists, so no access to it can miss it.
    if (where.is_device()) device_registered_.store(true, std::memory_order_release);
    // A local-only region gets no remote rights on any transport (an RDMA MR without remote
    // access), and the registry publishes no key for it.
    const MemoryAccess access = remote_accessible ? MemoryAccess::kRemote : MemoryAccess::kLocal;
    for (auto& t : transports_) {
      engine::TransportCounters* counted = counters_->ForTransport(t->name());
      const auto began = std::chrono::steady_clock::now();
      Result<std::string> key = t->RegisterMemory(addr, b.length, where, access);
      if (key.status().code() == StatusCode::kNotFound) continue;  // cannot reach this memory
      counted->RecordRegistration(b.length, key.ok(), std::chrono::steady_clock::now() - began);
      if (!key.ok()) {
        return fail(key.status().WithContext("transport '" + std::string(t->name()) + "'"));
      }
      made.emplace_back(t.get(), b);
      RegionSpec spec{.addr = addr,
                      .length = b.length,
                      .location = where,
                      .remote_accessible = remote_accessible};
      spec.binding.transport = std::string(t->name());
      spec.binding.key = std::move(key).value();
      Transport* transport = t.get();
      const uint64_t length = b.length;
      spec.binding.on_unregister = [transport, counted, addr, length] {
        counted->unregistrations.fetch_add(1, std::memory_order_relaxed);
        return transport->UnregisterMemory(addr, length);
      };
      specs.push_back(std::move(spec));
    }
    if (specs.empty() || specs.back().addr != addr) {
      return fail(InvalidArgumentError("no installed transport can reach the memory at " +
                                       std::to_string(addr) + " (location " + where.ToString() +
                                       ")"));
    }
  }
  Result<std::vector<uint64_t>> registered = registry_->RegisterBatch(specs);
  if (!registered.ok()) return fail(registered.status());
  return publish ? PublishedOrNameLost(Publish(), *publisher_, name_) : Status::Ok();
}

Status TransferEngine::Impl::UnregisterMemory(const std::vector<void*>& addrs, bool publish) {
  std::vector<uint64_t> starts;
  for (void* a : addrs) starts.push_back(reinterpret_cast<uint64_t>(a));
  Status s =
      starts.size() == 1 ? registry_->Unregister(starts[0]) : registry_->UnregisterBatch(starts);
  if (!s.ok() && s.code() != StatusCode::kInternal) return s;  // nothing (or not all) removed
  if (publish) {
    Status p = PublishedOrNameLost(Publish(), *publisher_, name_);
    if (s.ok()) return p;
  }
  return s;
}

Result<void*> TransferEngine::Impl::AllocateManaged(size_t length, const std::string& location) {
  if (length == 0) return InvalidArgumentError("cannot allocate zero bytes");
  const bool in_window = location == "cxl";
  Location where = Location::Cpu();
  if (!in_window) {
    ASSIGN_OR_RETURN(where, Location::Parse(location));
    if (where.is_device()) {  // cudaMalloc'd, registered as that device's memory
      ASSIGN_OR_RETURN(void* device, AllocateDeviceMemory(length, where));
      Status registered = RegisterMemory({{device, length}}, where.ToString(), true, true);
      if (!registered.ok()) {
        FreeDeviceMemory(device);
        return registered;
      }
      MutexLock lock(managed_mu_);
      managed_[device] = nullptr;  // no transport owns it: FreeDeviceMemory frees it
      return device;
    }
    if (!where.is_host()) {
      return InvalidArgumentError("managed buffers are host or device memory, not '" + location +
                                  "'");
    }
  }
  Transport* owner = FindTransport(in_window ? "cxl" : "shm");
  if (owner == nullptr || !owner->capabilities().allocates_shared_memory) {
    return InvalidArgumentError(std::string("no installed transport shares memory") +
                                (in_window ? " in a cxl window (set cxl_window)" : " (shm)"));
  }
  ASSIGN_OR_RETURN(void* addr, owner->AllocateShared(length, where));
  Status registered = RegisterMemory({{addr, length}}, where.ToString(), true, true);
  if (!registered.ok()) {
    owner->FreeShared(addr).IgnoreError();
    return registered;
  }
  MutexLock lock(managed_mu_);
  managed_[addr] = owner;
  return addr;
}

Status TransferEngine::Impl::FreeManaged(void* addr) {
  Transport* owner = nullptr;
  {
    MutexLock lock(managed_mu_);
    auto it = managed_.find(addr);
    if (it == managed_.end()) {
      return NotFoundError("no managed buffer at " +
                           std::to_string(reinterpret_cast<uint64_t>(addr)));
    }
    owner = it->second;
  }
  RETURN_IF_ERROR(UnregisterMemory({addr}, true));
  {
    MutexLock lock(managed_mu_);
    managed_.erase(addr);
  }
  if (owner == nullptr) {  // device memory (AllocateManaged)
    FreeDeviceMemory(addr);
    return Status::Ok();
  }
  return owner->FreeShared(addr);
}

Status TransferEngine::Impl::CheckOverlap(void* addr, size_t length) {
  return registry_->CheckOverlap(reinterpret_cast<uint64_t>(addr), length);
}

// ---- Impl: segments ------------------------------------------------------------------------

Result<SegmentId> TransferEngine::Impl::OpenSegment(const std::string& name) {
  ASSIGN_OR_RETURN(SegmentHandle handle, directory_->Open(name));
  return handle.id;
}

Status TransferEngine::Impl::CloseSegment(SegmentId id) {
  ASSIGN_OR_RETURN(std::string name, directory_->Name(id));
  if (Result<SegmentHandle> cached = directory_->Cached(id); cached.ok()) {
    rpc_client_->CloseIdleConnections(HostPort{cached->desc->rpc.host, cached->desc->rpc.port});
  }
  directory_->Close(id);
  // The links go now; each one's connections, grant channels and mappings are released once
  // the last task that uses it lets go.
  links_.DropPeer(name);
  health_->Forget(name);
  return Status::Ok();
}

Status TransferEngine::Impl::SyncSegmentCache(const std::string& name) {
  return name.empty() ? directory_->SyncAll() : directory_->Sync(name);
}

Result<uint64_t> TransferEngine::Impl::Probe(SegmentId id) {
  ASSIGN_OR_RETURN(SegmentHandle handle, directory_->Get(id));
  bool same = false;
  ASSIGN_OR_RETURN(ProbeResponse probe, ProbePeer(*handle.desc, &same));
  if (!same) {
    directory_->Invalidate(handle.desc->name);
    return StaleError("segment '" + handle.desc->name + "' restarted (incarnation " +
                      std::to_string(probe.incarnation) + ", cached " +
                      std::to_string(handle.desc->incarnation) + ")");
  }
  return probe.incarnation;
}

Result<ProbeResponse> TransferEngine::Impl::ProbePeer(const SegmentDesc& desc,
                                                      bool* answers_as_desc) {
  ASSIGN_OR_RETURN(std::string reply,
                   rpc_client_->Call(HostPort{desc.rpc.host, desc.rpc.port},
                                     ToWire(RpcType::kProbe), "", options_.request_timeout));
  ASSIGN_OR_RETURN(ProbeResponse probe, UnpackProbeResponse(reply));
  if (answers_as_desc != nullptr) {
    *answers_as_desc = probe.incarnation == desc.incarnation && probe.name == desc.name;
  }
  return probe;
}

Result<std::vector<SegmentBuffer>> TransferEngine::Impl::SegmentBuffers(SegmentId id) {
  ASSIGN_OR_RETURN(SegmentHandle handle, directory_->Get(id));
  std::vector<SegmentBuffer> out;
  for (const BufferDesc& b : handle.desc->buffers) {
    if (!b.remote_accessible) continue;
    SegmentBuffer buffer{.addr = b.addr,
                         .length = b.length,
                         .location = b.location.ToString(),
                         .generation = b.generation,
                         .transports = {}};
    for (const auto& [transport, key] : b.keys) buffer.transports.push_back(transport);
    out.push_back(std::move(buffer));
  }
  std::sort(out.begin(), out.end(),
            [](const SegmentBuffer& a, const SegmentBuffer& b) { return a.addr < b.addr; });
  return out;
}

Status TransferEngine::Impl::SendNotify(SegmentId target, const NotifyMessage& notify) {
  ASSIGN_OR_RETURN(SegmentHandle handle, directory_->Get(target));
  HostPort peer{handle.desc->rpc.host, handle.desc->rpc.port};
  Status sent = rpc_client_
                    ->Call(peer, ToWire(RpcType::kNotify),
                           Pack(NotifyRequest{name_, notify.payload}), options_.request_timeout)
                    .status();
  (sent.ok() ? counters_->notifications().sent : counters_->notifications().send_failures)
      .fetch_add(1, std::memory_order_relaxed);
  return sent;
}

Result<std::string> TransferEngine::Impl::Exchange(const SegmentDesc& peer,
                                                   std::string_view transport,
                                                   std::string_view payload,
                                                   std::chrono::milliseconds timeout) {
  return rpc_client_->Call(HostPort{peer.rpc.host, peer.rpc.port}, ToWire(RpcType::kExchange),
                           Pack(ExchangeRequest{std::string(transport), std::string(payload)}),
                           timeout);
}

namespace {

// A remote access (a pin or a lease) must have been planned against this incarnation of
// engine `name` (`current`): Stale naming both otherwise.
Status CheckRemoteIncarnation(uint64_t incarnation, uint64_t current, const std::string& name) {
  if (incarnation == current) return Status::Ok();
  return StaleError("access planned against incarnation " + std::to_string(incarnation) + " of '" +
                    name + "', which is now " + std::to_string(current));
}

// What the registry checks of a remote access planned against `generation` for `transport`.
PinCheck RemotePinCheck(uint64_t generation, std::string_view transport) {
  return {.generation = generation, .transport = transport, .require_remote_accessible = true};
}

}  // namespace

Result<AccessPin> TransferEngine::Impl::PinRemoteAccess(uint64_t addr, uint64_t length,
                                                        uint64_t incarnation, uint64_t generation,
                                                        std::string_view transport) {
  RETURN_IF_ERROR(CheckRemoteIncarnation(incarnation, incarnation_, name_));
  Result<PinGuard> pin = registry_->Pin(addr, length, RemotePinCheck(generation, transport));
  if (pin.status().code() == StatusCode::kNotFound && IsFileAddress(addr)) {
    // File buffer addresses are never reused (file_buffers.cc): an access planned against one
    // that is gone was planned against a registration that ended (unregistered, or registered
    // again elsewhere). Stale, so that the initiator refreshes its descriptor.
    return StaleError("file buffer access at " + std::to_string(addr) + " (generation " +
                      std::to_string(generation) + "): no file buffer of '" + name_ +
                      "' is there any more (unregistered or registered again)");
  }
  if (!pin.ok()) return pin.status();
  return AccessPin(&LocalRegistry::ReleaseDetachedPin, registry_.get(), pin->Detach());
}

Status TransferEngine::Impl::StartStagedIo(StagedIo io, AccessPin pin) {
  if (IsFileAddress(io.addr)) return StartFileIo(std::move(io), std::move(pin));
  if (io.staging == nullptr || (io.op != OpCode::kRead && io.op != OpCode::kWrite) ||
      !registry_->IsDeviceMemory(io.addr)) {
    return InvalidArgumentError("StartStagedIo: [" + std::to_string(io.addr) + ", +" +
                                std::to_string(io.length) +
                                ") is not a staged access (a file buffer or device memory) with a "
                                "staging buffer");
  }
  if (stager_ == nullptr) {
    return UnavailableError("device memory at " + std::to_string(io.addr) +
                            ": this engine has no staging copier (no CUDA device)");
  }
  engine::StagingCopier::Copy copy;
  void* device = reinterpret_cast<void*>(io.addr);
  copy.dst = io.op == OpCode::kWrite ? device : io.staging;
  copy.src = io.op == OpCode::kWrite ? static_cast<const void*>(io.staging) : device;
  copy.length = io.length;
  copy.deadline = io.deadline;
  copy.pin = std::move(pin);
  copy.done = std::move(io.done);
  return stager_->StartCopy(std::move(copy));
}

Result<RegionLease> TransferEngine::Impl::LeaseRemoteRegion(uint64_t addr, uint64_t length,
                                                            uint64_t incarnation,
                                                            uint64_t generation,
                                                            std::string_view transport,
                                                            std::function<void()> on_revoke) {
  RETURN_IF_ERROR(CheckRemoteIncarnation(incarnation, incarnation_, name_));
  ASSIGN_OR_RETURN(LocalRegistry::RevocablePin pin,
                   registry_->PinRevocable(addr, length, RemotePinCheck(generation, transport),
                                           std::move(on_revoke)));
  return RegionLease{AccessPin(&LocalRegistry::ReleaseRevocablePin, registry_.get(), pin.token),
                     pin.region_addr, pin.region_length};
}

// ---- the facade ----------------------------------------------------------------------------

namespace {

// What every call but init() answers until init() succeeded.
Status NotInitialized(std::string_view call) {
  return InvalidArgumentError(std::string(call) +
                              ": the engine is not initialized (init() was not called, or it "
                              "failed)");
}

}  // namespace

#define FERRY_REQUIRE_INIT(call) \
  if (!impl_->ready()) return NotInitialized(call)

TransferEngine::TransferEngine() : impl_(std::make_unique<Impl>()) {}
TransferEngine::~TransferEngine() = default;

Status TransferEngine::init(const std::string& metadata_conn, const std::string& local_server_name,
                            const std::string& host, uint16_t rpc_port) {
  EngineOptions options;
  options.metadata_conn = metadata_conn;
  options.local_server_name = local_server_name;
  options.host = host;
  options.rpc_port = rpc_port;
  return init(options);
}

Status TransferEngine::init(const EngineOptions& options) { return impl_->Init(options); }
std::string TransferEngine::localSegmentName() const {
  return impl_->ready() ? impl_->name() : std::string();
}
uint16_t TransferEngine::rpcPort() const { return impl_->ready() ? impl_->rpc_port() : 0; }

Status TransferEngine::registerLocalMemory(void* addr, size_t length, const std::string& location,
                                           bool remote_accessible, bool update_metadata) {
  FERRY_REQUIRE_INIT("registerLocalMemory");
  return impl_->RegisterMemory({{addr, length}}, location, remote_accessible, update_metadata);
}
Status TransferEngine::unregisterLocalMemory(void* addr, bool update_metadata) {
  FERRY_REQUIRE_INIT("unregisterLocalMemory");
  return impl_->UnregisterMemory({addr}, update_metadata);
}
Status TransferEngine::registerLocalMemoryBatch(const std::vector<BufferEntry>& buffers,
                                                const std::string& location) {
  FERRY_REQUIRE_INIT("registerLocalMemoryBatch");
  return impl_->RegisterMemory(buffers, location, true, true);
}
Status TransferEngine::unregisterLocalMemoryBatch(const std::vector<void*>& addrs) {
  FERRY_REQUIRE_INIT("unregisterLocalMemoryBatch");
  return impl_->UnregisterMemory(addrs, true);
}
Status TransferEngine::checkOverlap(void* addr, size_t length) {
  FERRY_REQUIRE_INIT("checkOverlap");
  return impl_->CheckOverlap(addr, length);
}
Result<void*> TransferEngine::allocateManagedBuffer(size_t length, const std::string& location) {
  FERRY_REQUIRE_INIT("allocateManagedBuffer");
  return impl_->AllocateManaged(length, location);
}
Status TransferEngine::freeManagedBuffer(void* addr) {
  FERRY_REQUIRE_INIT("freeManagedBuffer");
  return impl_->FreeManaged(addr);
}
Result<uint64_t> TransferEngine::registerLocalFile(
    const std::string& path, uint64_t length, uint64_t offset,
    const std::map<std::string, std::string>& host_paths, const std::string& location) {
  FERRY_REQUIRE_INIT("registerLocalFile");
  return impl_->RegisterFile(path, length, offset, host_paths, location);
}
Status TransferEngine::unregisterLocalFile(uint64_t addr) {
  FERRY_REQUIRE_INIT("unregisterLocalFile");
  return impl_->UnregisterFile(addr);
}
Result<SegmentId> TransferEngine::openSegment(const std::string& name) {
  FERRY_REQUIRE_INIT("openSegment");
  return impl_->OpenSegment(name);
}
Status TransferEngine::closeSegment(SegmentId id) {
  FERRY_REQUIRE_INIT("closeSegment");
  return impl_->CloseSegment(id);
}
Status TransferEngine::syncSegmentCache(const std::string& name) {
  FERRY_REQUIRE_INIT("syncSegmentCache");
  return impl_->SyncSegmentCache(name);
}
Result<uint64_t> TransferEngine::probeSegment(SegmentId id) {
  FERRY_REQUIRE_INIT("probeSegment");
  return impl_->Probe(id);
}
Result<std::vector<SegmentBuffer>> TransferEngine::getSegmentBuffers(SegmentId id) {
  FERRY_REQUIRE_INIT("getSegmentBuffers");
  return impl_->SegmentBuffers(id);
}
Result<BatchId> TransferEngine::allocateBatchID(size_t batch_size) {
  FERRY_REQUIRE_INIT("allocateBatchID");
  return impl_->AllocateBatch(batch_size);
}
Status TransferEngine::freeBatchID(BatchId batch) {
  FERRY_REQUIRE_INIT("freeBatchID");
  return impl_->FreeBatch(batch);
}
Status TransferEngine::submitTransfer(BatchId batch, const std::vector<TransferRequest>& requests) {
  FERRY_REQUIRE_INIT("submitTransfer");
  return impl_->Submit(batch, requests, nullptr);
}
Status TransferEngine::submitTransferWithNotify(BatchId batch,
                                                const std::vector<TransferRequest>& requests,
                                                const NotifyMessage& notify) {
  FERRY_REQUIRE_INIT("submitTransferWithNotify");
  return impl_->Submit(batch, requests, &notify);
}
Result<TransferStatus> TransferEngine::getTransferStatus(BatchId batch, size_t task_id) {
  FERRY_REQUIRE_INIT("getTransferStatus");
  return impl_->TaskStatus(batch, task_id);
}
Result<BatchStatus> TransferEngine::getBatchTransferStatus(BatchId batch) {
  FERRY_REQUIRE_INIT("getBatchTransferStatus");
  return impl_->Summary(batch);
}
Result<BatchStatus> TransferEngine::waitBatch(BatchId batch, std::chrono::milliseconds timeout) {
  FERRY_REQUIRE_INIT("waitBatch");
  return impl_->WaitBatch(batch, timeout);
}
Status TransferEngine::cancelBatch(BatchId batch) {
  FERRY_REQUIRE_INIT("cancelBatch");
  return impl_->CancelBatch(batch);
}
int TransferEngine::completionFd() const { return impl_->ready() ? impl_->completion_fd() : -1; }
std::vector<NotifyMessage> TransferEngine::getNotifies() {
  if (!impl_->ready()) return {};
  return impl_->TakeNotifies();
}
Status TransferEngine::sendNotify(SegmentId target, const NotifyMessage& notify) {
  FERRY_REQUIRE_INIT("sendNotify");
  return impl_->SendNotify(target, notify);
}
EngineMetrics TransferEngine::getMetrics() const {
  return impl_->ready() ? impl_->Metrics() : EngineMetrics{};
}
uint16_t TransferEngine::metricsPort() const { return impl_->ready() ? impl_->metrics_port() : 0; }

#undef FERRY_REQUIRE_INIT

}  // namespace ferry
