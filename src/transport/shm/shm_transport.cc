#include "transport/shm/shm_transport.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/log.h"
#include "transport/samehost/copy_engine.h"
#include "transport/samehost/grant_channel.h"
#include "transport/shm/shm_allocations.h"
#include "transport/shm/shm_copier.h"
#include "transport/shm/shm_encoding.h"

namespace ferry {
namespace shm {

// What a started transport shares with its links. Thread contract: written by Start, then
// read-only; the members are thread-safe.
struct ShmRuntime {
  std::shared_ptr<ShmCounters> counters = std::make_shared<ShmCounters>();
  bool ptracer_requested = false;                 // Start called prctl(PR_SET_PTRACER, ANY)
  std::unique_ptr<samehost::GrantServer> server;  // reset by Stop
  std::unique_ptr<samehost::CopyEngine> engine;   // stopped by Stop
};

namespace {

Status Validate(const ShmTransportOptions& o) {
  if (o.socket_dir.empty()) return InvalidArgumentError("shm socket_dir must not be empty");
  return Status::Ok();  // the rest is checked by the copy engine
}

// Lets any process of this user ptrace (and so process_vm_* into) this one under Yama's
// "restricted" mode. EINVAL means Yama is not there: nothing to do.
void AllowSameUserAttach() {
  if (::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0 && errno != EINVAL) {
    FERRY_LOG(kWarn) << "shm: prctl(PR_SET_PTRACER, ANY) failed: " << ErrnoText(errno)
                     << "; peers may be refused process_vm_writev into this process";
  }
}

}  // namespace
}  // namespace shm

ShmTransport::ShmTransport(ShmTransportOptions options)
    : options_(std::move(options)), allocations_(std::make_unique<shm::SharedAllocations>()) {}

ShmTransport::~ShmTransport() { Stop(); }

TransportCapabilities ShmTransport::capabilities() const {
  TransportCapabilities caps;
  caps.reaches_other_hosts = false;
  caps.reaches_device_memory = false;
  caps.allocates_shared_memory = true;
  caps.preferred_slice_size = uint64_t{256} << 10;  // the copy workers share a request's slices
  return caps;
}

Result<std::string> ShmTransport::Start(TransportContext* ctx, const TransportStartInfo& info) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_) return BusyError("shm transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("shm Start: null context");
  RETURN_IF_ERROR(shm::Validate(options_));
  auto runtime = std::make_shared<shm::ShmRuntime>();
  samehost::CopyEngineOptions engine_options;
  engine_options.transport = "shm";
  engine_options.io_timeout = options_.io_timeout;
  engine_options.workers = options_.workers;
  engine_options.max_queued_slices = options_.max_queued_slices;
  engine_options.max_batch = shm::kMaxBatch;
  engine_options.idle_timeout = options_.idle_timeout;
  engine_options.auth_secret = info.auth_secret;  // grant connections authenticate with it
  ASSIGN_OR_RETURN(runtime->engine, samehost::CopyEngine::Start(ctx, engine_options));
  samehost::GrantServer::Options server_options;
  server_options.transport = "shm";
  server_options.auth_secret = info.auth_secret;
  server_options.dir = options_.socket_dir;
  server_options.fds = [allocations = allocations_.get()](uint64_t id) {
    return allocations->DupFd(id);
  };
  server_options.close_fetched_fds = true;
  server_options.max_ranges_per_acquire = shm::kMaxBatch;
  server_options.drain_timeout = options_.io_timeout;
  server_options.lease_table_entries = options_.lease_table_entries;
  ASSIGN_OR_RETURN(runtime->server, samehost::GrantServer::Start(ctx, std::move(server_options)));
  if (options_.allow_same_user_ptrace) {
    shm::AllowSameUserAttach();
    runtime->ptracer_requested = true;
  }
  const std::string published = shm::EncodePeerAddress({::getpid(), runtime->server->path()});
  runtime_ = std::move(runtime);
  started_.store(true, std::memory_order_release);
  return published;
}

void ShmTransport::Stop() {
  MutexLock lock(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!started_.load(std::memory_order_acquire)) return;
  runtime_->engine->Stop();
  runtime_->server.reset();  // closes every grant connection, dropping their pins
}

Result<std::string> ShmTransport::RegisterMemory(uint64_t addr, uint64_t length,
                                                 const Location& location,
                                                 MemoryAccess /*access*/) {
  if (location.is_device()) {
    return NotFoundError("shm reaches host memory only, not " + location.ToString());
  }
  if (length == 0) return InvalidArgumentError("shm RegisterMemory: length must be > 0");
  std::optional<shm::SharedPlace> place = allocations_->Find(addr, length);
  if (!place) return shm::EncodeBufferKey({});
  return shm::EncodeBufferKey({true, place->buffer_id, place->offset, place->buffer_length, addr});
}

Status ShmTransport::UnregisterMemory(uint64_t /*addr*/, uint64_t /*length*/) {
  return Status::Ok();  // keys hold no state; pins are checked against the engine's registry
}

Result<void*> ShmTransport::AllocateShared(size_t length, const Location& location) {
  return allocations_->Allocate(length, location);
}

Status ShmTransport::FreeShared(void* addr) { return allocations_->Free(addr); }

Result<std::shared_ptr<PeerLink>> ShmTransport::Connect(const SegmentDesc& peer) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("shm transport not started");
  const auto it = peer.transports.find("shm");
  if (it == peer.transports.end()) {
    return InvalidArgumentError("segment '" + peer.name + "' publishes no shm address");
  }
  Result<shm::PeerAddress> address = shm::DecodePeerAddress(it->second);
  if (!address.ok()) {
    return InvalidArgumentError("segment '" + peer.name + "': " + address.status().message());
  }
  std::string name = "segment '" + peer.name + "' (pid " + std::to_string(address->pid) + ")";
  std::string path = address->socket_path;
  auto copier =
      std::make_unique<shm::ShmCopier>(std::move(address).value(), name, runtime_->counters);
  return runtime_->engine->MakeLink(std::move(path), std::move(name), std::move(copier));
}

Status ShmTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  if (!started_.load(std::memory_order_acquire)) {
    return InvalidArgumentError("shm Submit: link was not made by this transport");
  }
  return runtime_->engine->Submit(link, slices);
}

Result<std::string> ShmTransport::OnExchange(std::string_view /*payload*/) {
  return InvalidArgumentError("shm uses no exchange");
}

ShmTransportStats ShmTransport::stats() const {
  ShmTransportStats out;
  if (!started_.load(std::memory_order_acquire)) return out;
  const shm::ShmCounters& c = *runtime_->counters;
  const samehost::CopyEngineStats e = runtime_->engine->stats();
  out.cma_slices = c.cma_slices.load(std::memory_order_relaxed);
  out.mapped_slices = c.mapped_slices.load(std::memory_order_relaxed);
  out.failed_slices = e.failed_slices;
  out.grant_round_trips = e.grant_round_trips;
  out.table_pinned_slices = e.table_pinned_slices;
  out.fd_fetches = c.fd_fetches.load(std::memory_order_relaxed);
  out.mappings_dropped = c.mappings_dropped.load(std::memory_order_relaxed);
  out.timed_out_slices = e.timed_out_slices;
  out.mappings_alive = c.mappings_alive.load(std::memory_order_relaxed);
  out.idle_connections_closed = e.idle_connections_closed;
  out.same_user_ptrace_requested = runtime_->ptracer_requested;
  return out;
}

std::vector<std::pair<std::string, uint64_t>> ShmTransport::Counters() const {
  const ShmTransportStats s = stats();
  return {{"cma_slices", s.cma_slices},
          {"mapped_slices", s.mapped_slices},
          {"failed_slices", s.failed_slices},
          {"grant_round_trips", s.grant_round_trips},
          {"table_pinned_slices", s.table_pinned_slices},
          {"fd_fetches", s.fd_fetches},
          {"mappings_dropped", s.mappings_dropped},
          {"timed_out_slices", s.timed_out_slices},
          {"idle_connections_closed", s.idle_connections_closed}};
}

std::unique_ptr<Transport> CreateShmTransport(ShmTransportOptions options) {
  return std::make_unique<ShmTransport>(std::move(options));
}

}  // namespace ferry
