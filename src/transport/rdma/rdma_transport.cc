#include "transport/rdma/rdma_transport.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>

#include "common/log.h"
#include "transport/rdma/fabric_domain.h"
#include "transport/rdma/fabric_info.h"
#include "transport/rdma/rdma_peer_link.h"
#include "transport/rdma/rdma_runtime.h"
#include "transport/rdma/rdma_transport_impl.h"
#include "transport/rdma/rdma_wire.h"
#include "transport/rdma/recovery.h"

namespace ferry {
namespace {

using rdma::Op;
using rdma::RdmaPeerLink;
using rdma::Runtime;

constexpr size_t kMinQueueBound = 65536;
constexpr int kMaxRetries = 100;

Status CheckOptions(const RdmaTransportOptions& o) {
  if (o.op_timeout.count() <= 0) return InvalidArgumentError("rdma op_timeout must be > 0");
  if (o.max_retries < 0 || o.max_retries > kMaxRetries) {
    return InvalidArgumentError("rdma max_retries must be 0.." + std::to_string(kMaxRetries));
  }
  if (o.max_inflight < 1) return InvalidArgumentError("rdma max_inflight must be > 0");
  return Status::Ok();
}

// A random start for registration ids and requested MR keys: a restarted engine does not hand
// out the keys its previous incarnation published.
uint64_t RandomStart() {
  std::random_device rd;
  return ((uint64_t{rd()} << 32) | rd()) & 0x0000ffffffffffffULL;
}

// Whether [addr, addr + length) lies within the key's registered range (length may be 0).
bool KeyCovers(const rdma::RemoteKey& key, uint64_t addr, uint64_t length) {
  return addr >= key.base && addr - key.base <= key.length &&
         length <= key.length - (addr - key.base);
}

// Validation of one slice against its key and link; the error completes the slice.
Status CheckSlice(const RdmaPeerLink& link, const Slice& slice, const rdma::RemoteKey& key) {
  const std::string where = "segment '" + link.peer().name + "'";
  if (slice.op != OpCode::kRead && slice.op != OpCode::kWrite) {
    return InvalidArgumentError("rdma: bad op for " + where);
  }
  if (slice.peer_incarnation != 0 && slice.peer_incarnation != link.peer().incarnation) {
    return StaleError("rdma: slice planned against another incarnation of " + where);
  }
  if (key.rkeys.size() != link.peer_endpoints()) {
    return InvalidArgumentError("rdma: key for " + where + " has " +
                                std::to_string(key.rkeys.size()) + " rkeys, the peer " +
                                std::to_string(link.peer_endpoints()) + " endpoints");
  }
  if (!KeyCovers(key, slice.remote_addr, slice.length)) {
    return InvalidArgumentError("rdma: [" + std::to_string(slice.remote_addr) + ", +" +
                                std::to_string(slice.length) + ") leaves the registered range [" +
                                std::to_string(key.base) + ", +" + std::to_string(key.length) +
                                ") of " + where);
  }
  if (slice.local_addr + slice.length < slice.local_addr) {
    return InvalidArgumentError("rdma: local range wraps");
  }
  return Status::Ok();
}

}  // namespace

RdmaTransport::RdmaTransport(RdmaTransportOptions options) : options_(std::move(options)) {}

RdmaTransport::~RdmaTransport() { Stop(); }

TransportCapabilities RdmaTransport::capabilities() const {
  TransportCapabilities caps;
  caps.reaches_other_hosts = true;
  // Device memory with FI_HMEM, known from Start (the provider may not offer it).
  caps.reaches_device_memory = started_.load(std::memory_order_acquire) && runtime_->hmem;
  caps.preferred_slice_size = rdma::PreferredSliceSize(provider());  // by provider, from Start
  return caps;
}

Result<std::string> RdmaTransport::Start(TransportContext* ctx, const TransportStartInfo& info) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_) return BusyError("rdma transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("rdma Start: null context");
  RETURN_IF_ERROR(CheckOptions(options_));
  // libfabric publishes the address an IP-addressed endpoint listens on, so with a wildcard bind
  // such endpoints listen on the advertised address (which must be one of this host's).
  const std::string& host = IsWildcardHost(info.bind_host) && !info.advertise_host.empty()
                                ? info.advertise_host
                                : info.bind_host;
  Result<rdma::DomainChoice> chosen = rdma::ChooseDomains(options_, host);
  if (!chosen.ok() && host != info.bind_host) {
    return chosen.status().WithContext("rdma binds the advertised host '" + host +
                                       "' (host is a wildcard); it must be an address of this "
                                       "host");
  }
  if (!chosen.ok()) return chosen.status();
  rdma::DomainChoice choice = std::move(chosen).value();
  auto rt = std::make_shared<Runtime>();
  rt->options = options_;
  rt->ctx = ctx;
  rt->provider = choice.provider;
  rt->hmem = choice.hmem;
  rt->no_hmem = choice.no_hmem;
  rt->rebuild_target_on_unregister = rdma::UsesSocketAddresses(choice.provider);
  rt->ports = info.ports;
  rt->next_registration.store(RandomStart() + 1);
  rt->next_mr_key.store(RandomStart() + 1);
  rt->max_chunk = std::numeric_limits<uint64_t>::max();
  rdma::PublishedEndpoints published{choice.provider, {}};
  for (size_t i = 0; i < choice.domains.size(); ++i) {
    Result<std::unique_ptr<rdma::Domain>> domain =
        rdma::Domain::Open(rt.get(), i, std::move(choice.domains[i]));
    if (!domain.ok()) return domain.status();
    rdma::Domain& d = **domain;
    rt->max_chunk = std::min<uint64_t>(rt->max_chunk, std::max<uint64_t>(d.max_msg_size(), 1));
    published.endpoints.push_back({d.fabric_name(), d.name(), d.virt_addr(), d.address()});
    rt->domains.push_back(std::move(domain).value());
  }
  rt->queue_bound = std::max(kMinQueueBound, 64 * options_.max_inflight * rt->domains.size());
  rt->recovery = std::make_unique<rdma::Recovery>(rt.get());
  rt->recovery->Start();
  for (auto& domain : rt->domains) domain->Start();
  FERRY_LOG(kInfo) << "rdma: provider " << rt->provider << ", " << rt->domains.size()
                   << " domain(s), device memory "
                   << (rt->hmem ? "registered with the provider (FI_HMEM)"
                                : "not reached (no FI_HMEM: " + rt->no_hmem + ")");
  runtime_ = std::move(rt);
  started_.store(true, std::memory_order_release);
  return rdma::EncodeEndpoints(published);
}

void RdmaTransport::Stop() {
  MutexLock lock(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!started_.load(std::memory_order_acquire)) return;
  runtime_->stopping.store(true);
  for (auto& domain : runtime_->domains) domain->Stop();
  runtime_->recovery->Stop();
}

Result<std::string> RdmaTransport::RegisterMemory(uint64_t addr, uint64_t length,
                                                  const Location& location, MemoryAccess access) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("rdma transport not started");
  Runtime& rt = *runtime_;
  if (location.is_device() && !rt.hmem) {
    return NotFoundError("rdma over " + rt.provider + " reaches host memory only, not " +
                         location.ToString() + " (no FI_HMEM: " + rt.no_hmem + ")");
  }
  if (length == 0 || addr + length < addr) {
    return InvalidArgumentError("rdma: empty or wrapping range");
  }
  auto reg = std::make_shared<rdma::Registration>();
  reg->id = rt.next_registration.fetch_add(1);
  reg->addr = addr;
  reg->length = length;
  reg->location = location;
  auto close_made = [&reg] {
    for (fid_mr* mr : reg->mrs) (void)fi_close(&mr->fid);
  };
  for (auto& domain : rt.domains) {
    Result<fid_mr*> mr =
        domain->RegisterMr(addr, length, rt.next_mr_key.fetch_add(1), access, location);
    if (mr.status().code() == StatusCode::kNotFound) {
      // The provider offers FI_HMEM but this libfabric cannot register this device's memory
      // (built without that device's support): another transport carries it, staged.
      close_made();
      rt.counters.device_refusals.fetch_add(1, std::memory_order_relaxed);
      if (!rt.device_refusal_logged.exchange(true)) {
        FERRY_LOG(kWarn) << mr.status().message() << "; rdma leaves device memory to another "
                         << "transport (tcp, staged through host memory)";
      }
      return NotFoundError(mr.status().message());
    }
    if (!mr.ok()) {
      close_made();
      return mr.status();
    }
    reg->mrs.push_back(*mr);
    reg->descs.push_back(fi_mr_desc(*mr));
    reg->rkeys.push_back(fi_mr_key(*mr));
    if (reg->rkeys.back() == FI_KEY_NOTAVAIL) {
      close_made();
      return UnavailableError("rdma: provider gave no key for the registration (FI_MR_RAW)");
    }
    if (location.is_host() && location.index >= 0 && domain->numa_node() == location.index) {
      reg->near_domains.push_back(domain->index());
    }
  }
  const std::string key = rdma::EncodeKey({reg->id, addr, length, reg->rkeys});
  const Status inserted = rt.memory.Insert(reg);
  if (!inserted.ok()) {
    close_made();
    return inserted;
  }
  if (location.is_device()) {
    rt.counters.device_registrations.fetch_add(1, std::memory_order_relaxed);
  }
  return key;
}

Status RdmaTransport::UnregisterMemory(uint64_t addr, uint64_t length) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("rdma transport not started");
  Runtime& rt = *runtime_;
  std::shared_ptr<rdma::Registration> reg = rt.memory.Remove(addr, length);
  if (!reg) return NotFoundError("rdma: range is not registered");
  const bool unused = rt.memory.WaitUnused(reg.get(), rdma::Clock::now() + rt.options.op_timeout);
  Status closed;
  for (size_t d = 0; d < reg->mrs.size(); ++d) {
    const Status s = rt.domains[d]->CloseMrs({reg->mrs[d]}, rt.options.op_timeout);
    if (!s.ok() && closed.ok()) closed = s;
  }
  if (!unused) {
    return TimeoutError(
        "rdma: local slices still used the range after op_timeout; its memory "
        "regions were closed anyway");
  }
  return closed;
}

Result<std::shared_ptr<PeerLink>> RdmaTransport::Connect(const SegmentDesc& peer) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("rdma transport not started");
  if (runtime_->stopping.load()) return CanceledError("rdma transport stopped");
  ASSIGN_OR_RETURN(std::shared_ptr<RdmaPeerLink> link, RdmaPeerLink::Make(runtime_, peer));
  for (auto& domain : runtime_->domains) RETURN_IF_ERROR(domain->EnsureInitiator());
  return std::shared_ptr<PeerLink>(std::move(link));
}

Status RdmaTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  auto* rdma_link = dynamic_cast<RdmaPeerLink*>(&link);
  if (rdma_link == nullptr || !started_.load(std::memory_order_acquire) ||
      rdma_link->runtime() != runtime_.get()) {
    return InvalidArgumentError("rdma Submit: link was not made by this transport");
  }
  Runtime& rt = *runtime_;
  if (rt.stopping.load()) return CanceledError("rdma transport stopped");
  for (Slice* s : slices) {
    if (s == nullptr) return InvalidArgumentError("rdma Submit: null slice");
  }
  if (slices.size() > rt.queue_bound) {
    return InvalidArgumentError("rdma Submit: more slices than the queue holds (" +
                                std::to_string(rt.queue_bound) + ")");
  }
  const size_t before = rt.queued.fetch_add(slices.size(), std::memory_order_acq_rel);
  if (before + slices.size() > rt.queue_bound) {
    rt.queued.fetch_sub(slices.size(), std::memory_order_acq_rel);
    return AgainError("rdma: queue full");
  }
  std::vector<std::vector<std::unique_ptr<Op>>> by_domain(rt.domains.size());
  for (Slice* slice : slices) Prepare(*rdma_link, slice, by_domain);
  for (size_t d = 0; d < by_domain.size(); ++d) {
    if (by_domain[d].empty() || rt.domains[d]->Enqueue(by_domain[d])) continue;
    for (auto& op : by_domain[d])
      rdma::FinishOp(std::move(op), CanceledError("rdma transport stopped"));
  }
  return Status::Ok();
}

void RdmaTransport::Prepare(RdmaPeerLink& link, Slice* slice,
                            std::vector<std::vector<std::unique_ptr<Op>>>& by_domain) {
  Runtime& rt = *runtime_;
  auto job = std::make_shared<rdma::Job>();
  job->rt = &rt;
  job->slice = slice;
  job->link = link.shared_from_this();
  job->deadline = slice->deadline;
  std::vector<std::unique_ptr<Op>> ops;
  auto fail = [&](Status status) {
    ops.clear();
    auto op = std::make_unique<Op>();
    op->job = job;
    op->immediate = true;
    op->preset = std::move(status);
    ops.push_back(std::move(op));
  };
  Result<rdma::RemoteKey> key = rdma::DecodeKey(slice->remote_key);
  Status valid = key.ok() ? CheckSlice(link, *slice, *key)
                          : InvalidArgumentError("rdma: bad key for segment '" + link.peer().name +
                                                 "': " + key.status().message());
  if (!valid.ok()) {
    fail(std::move(valid));
  } else if (slice->length == 0) {
    fail(Status::Ok());
  } else if (slice->deadline <= rdma::Clock::now()) {
    rt.counters.timeouts.fetch_add(1, std::memory_order_relaxed);
    fail(TimeoutError("rdma: slice for segment '" + link.peer().name +
                      "' submitted after its deadline (never posted)"));
  } else {
    job->key = std::move(key).value();
    job->local = rt.memory.AcquireCovering(slice->local_addr, slice->length);
    const rdma::Registration* local = job->local.get();
    size_t preferred = rt.round_robin.fetch_add(1, std::memory_order_relaxed);
    if (local != nullptr && !local->near_domains.empty()) {
      preferred = local->near_domains[preferred % local->near_domains.size()];
    }
    for (uint64_t done = 0; done < slice->length;) {
      auto op = std::make_unique<Op>();
      op->job = job;
      op->opcode = slice->op;
      op->length = std::min<uint64_t>(rt.max_chunk, slice->length - done);
      op->local_addr = slice->local_addr + done;
      op->remote_addr = slice->remote_addr + done;
      done += op->length;
      const Status routed = link.Route(*op, preferred);
      if (!routed.ok()) {
        fail(routed);
        break;
      }
      ops.push_back(std::move(op));
    }
  }
  {
    MutexLock lock(job->mu);
    job->ops_left = static_cast<int>(ops.size());
  }
  for (auto& op : ops) {
    const size_t d = op->immediate ? 0 : op->domain;
    by_domain[d].push_back(std::move(op));
  }
}

Result<std::string> RdmaTransport::OnExchange(std::string_view payload) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("rdma transport not started");
  Runtime& rt = *runtime_;
  if (rt.stopping.load()) return CanceledError("rdma transport stopped");
  ASSIGN_OR_RETURN(std::vector<rdma::AccessCheck> checks, rdma::DecodeCheckRequest(payload));
  std::vector<Status> results;
  results.reserve(checks.size());
  for (const rdma::AccessCheck& c : checks) {
    if (!rt.memory.Alive(c.id)) {
      results.push_back(StaleError("rdma key " + std::to_string(c.id) +
                                   " is no longer registered (unregistered or re-registered)"));
      continue;
    }
    Result<AccessPin> pin =
        rt.ctx->PinRemoteAccess(c.addr, c.length, c.incarnation, c.generation, "rdma");
    results.push_back(pin.ok() ? Status::Ok() : pin.status());
  }
  return rdma::EncodeCheckReply(results);
}

RdmaTransportStats RdmaTransport::stats() const {
  RdmaTransportStats out;
  if (!started_.load(std::memory_order_acquire)) return out;
  const rdma::Counters& c = runtime_->counters;
  out.posted = c.posted.load(std::memory_order_relaxed);
  out.retries = c.retries.load(std::memory_order_relaxed);
  out.endpoint_rebuilds = c.endpoint_rebuilds.load(std::memory_order_relaxed);
  out.idle_releases = c.idle_releases.load(std::memory_order_relaxed);
  out.target_rebuilds = c.target_rebuilds.load(std::memory_order_relaxed);
  out.timeouts = c.timeouts.load(std::memory_order_relaxed);
  out.stale = c.stale.load(std::memory_order_relaxed);
  out.checks = c.checks.load(std::memory_order_relaxed);
  out.device_registrations = c.device_registrations.load(std::memory_order_relaxed);
  out.device_refusals = c.device_refusals.load(std::memory_order_relaxed);
  out.hmem = runtime_->hmem;
  for (const auto& domain : runtime_->domains) out.peer_addresses += domain->address_count();
  return out;
}

std::string RdmaTransport::provider() const {
  return started_.load(std::memory_order_acquire) ? runtime_->provider : std::string();
}

Result<std::string> ProbeRdmaProvider(const RdmaTransportOptions& options) {
  ASSIGN_OR_RETURN(rdma::DomainChoice choice, rdma::ChooseDomains(options, ""));
  return choice.provider;
}

std::vector<std::pair<std::string, uint64_t>> RdmaTransport::Counters() const {
  const RdmaTransportStats s = stats();
  return {{"posted", s.posted},
          {"retries", s.retries},
          {"endpoint_rebuilds", s.endpoint_rebuilds},
          {"idle_releases", s.idle_releases},
          {"target_rebuilds", s.target_rebuilds},
          {"timeouts", s.timeouts},
          {"stale", s.stale},
          {"checks", s.checks},
          {"device_registrations", s.device_registrations},
          {"device_refusals", s.device_refusals}};
}

std::unique_ptr<Transport> CreateRdmaTransport(RdmaTransportOptions options) {
  return std::make_unique<RdmaTransport>(std::move(options));
}

}  // namespace ferry
