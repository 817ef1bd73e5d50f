#include "transport/shm/shm_transport.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "transport/samehost/grant_channel.h"
#include "transport/shm/shm_allocations.h"
#include "transport/shm/shm_encoding.h"
#include "transport/shm/shm_mover.h"
#include "transport/shm/shm_peer.h"

namespace ferry {
namespace shm {

constexpr size_t kMaxWorkers = 64;
constexpr auto kWorkerTick = std::chrono::milliseconds(100);  // bound on an idle worker's wait

// One Submit's slices (or a part of at most kMaxBatch of them) for one peer.
struct Job {
  std::shared_ptr<ShmPeer> peer;
  std::vector<Slice*> slices;
};

// What the workers share. Thread contract: thread-safe; the queue is guarded by mu.
struct ShmRuntime {
  ShmTransportOptions options;
  TransportContext* ctx = nullptr;
  ShmCounters counters;
  std::unique_ptr<samehost::GrantServer> server;  // reset by Stop
  std::vector<std::thread> workers;               // joined by Stop

  Mutex mu;
  CondVar cv;
  std::deque<Job> queue GUARDED_BY(mu);
  size_t queued_slices GUARDED_BY(mu) = 0;
  bool stopping GUARDED_BY(mu) = false;

  // Takes the next job, waiting while the queue is empty; nullopt once stopping.
  std::optional<Job> Next() {
    MutexLock lock(mu);
    for (;;) {
      if (stopping) return std::nullopt;
      if (!queue.empty()) {
        Job job = std::move(queue.front());
        queue.pop_front();
        queued_slices -= job.slices.size();
        return job;
      }
      (void)cv.WaitUntil(mu, std::chrono::steady_clock::now() + kWorkerTick);
    }
  }

  void Work(size_t worker) {
    const MoveEnv env{ctx, &counters, options.io_timeout};
    while (std::optional<Job> job = Next()) {
      MoveBatch(env, *job->peer, worker, job->slices);
    }
  }
};

// The PeerLink the engine holds; jobs share its peer, so dropping the link with slices queued
// is safe.
class ShmLink final : public PeerLink {
 public:
  ShmLink(const ShmRuntime* owner, std::shared_ptr<ShmPeer> peer)
      : owner_(owner), peer_(std::move(peer)) {}
  const ShmRuntime* owner() const { return owner_; }
  const std::shared_ptr<ShmPeer>& peer() const { return peer_; }

 private:
  const ShmRuntime* const owner_;
  const std::shared_ptr<ShmPeer> peer_;
};

namespace {

Status Validate(const ShmTransportOptions& o) {
  if (o.socket_dir.empty()) return InvalidArgumentError("shm socket_dir must not be empty");
  if (o.io_timeout.count() <= 0) return InvalidArgumentError("shm io_timeout must be > 0");
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    return InvalidArgumentError("shm workers must be 1.." + std::to_string(kMaxWorkers));
  }
  if (o.max_queued_slices < 1) return InvalidArgumentError("shm max_queued_slices must be > 0");
  return Status::Ok();
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
  return caps;
}

Result<std::string> ShmTransport::Start(TransportContext* ctx, const TransportStartInfo& /*info*/) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_) return BusyError("shm transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("shm Start: null context");
  RETURN_IF_ERROR(shm::Validate(options_));
  auto runtime = std::make_shared<shm::ShmRuntime>();
  runtime->options = options_;
  runtime->ctx = ctx;
  samehost::GrantServer::Options server_options;
  server_options.transport = "shm";
  server_options.dir = options_.socket_dir;
  server_options.fds = [allocations = allocations_.get()](uint64_t id) {
    return allocations->DupFd(id);
  };
  server_options.close_fetched_fds = true;
  server_options.max_ranges_per_acquire = shm::kMaxBatch;
  server_options.drain_timeout = options_.io_timeout;
  ASSIGN_OR_RETURN(runtime->server, samehost::GrantServer::Start(ctx, std::move(server_options)));
  shm::AllowSameUserAttach();
  for (size_t i = 0; i < options_.workers; ++i) {
    runtime->workers.emplace_back([r = runtime.get(), i] { r->Work(i); });
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
  std::deque<shm::Job> canceled;
  {
    MutexLock queue_lock(runtime_->mu);
    runtime_->stopping = true;
    canceled.swap(runtime_->queue);
    runtime_->queued_slices = 0;
    runtime_->cv.NotifyAll();
  }
  const Status why = CanceledError("shm transport stopped");
  for (shm::Job& job : canceled) {
    for (Slice* s : job.slices) runtime_->ctx->CompleteSlice(s, why);
  }
  for (std::thread& t : runtime_->workers) t.join();
  runtime_->server.reset();  // closes every grant connection, dropping their pins
}

Result<std::string> ShmTransport::RegisterMemory(uint64_t addr, uint64_t length,
                                                 const Location& location) {
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
  {
    MutexLock lock(runtime_->mu);
    if (runtime_->stopping) return CanceledError("shm transport stopped");
  }
  const auto it = peer.transports.find("shm");
  if (it == peer.transports.end()) {
    return InvalidArgumentError("segment '" + peer.name + "' publishes no shm address");
  }
  Result<shm::PeerAddress> address = shm::DecodePeerAddress(it->second);
  if (!address.ok()) {
    return InvalidArgumentError("segment '" + peer.name + "': " + address.status().message());
  }
  std::string name = "segment '" + peer.name + "' (pid " + std::to_string(address->pid) + ")";
  auto state = std::make_shared<shm::ShmPeer>(std::move(address).value(), std::move(name),
                                              options_.workers, options_.io_timeout);
  return std::shared_ptr<PeerLink>(std::make_shared<shm::ShmLink>(runtime_.get(), state));
}

Status ShmTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  auto* shm_link = dynamic_cast<shm::ShmLink*>(&link);
  if (shm_link == nullptr || !started_.load(std::memory_order_acquire) ||
      shm_link->owner() != runtime_.get()) {
    return InvalidArgumentError("shm Submit: link was not made by this transport");
  }
  if (slices.size() > options_.max_queued_slices) {
    return InvalidArgumentError("shm Submit: " + std::to_string(slices.size()) +
                                " slices exceed max_queued_slices");
  }
  for (const Slice* s : slices) {
    if (s == nullptr) return InvalidArgumentError("shm Submit: null slice");
    if (s->op != OpCode::kRead && s->op != OpCode::kWrite) {
      return InvalidArgumentError("shm Submit: bad op");
    }
  }
  if (slices.empty()) return Status::Ok();
  shm::ShmRuntime& rt = *runtime_;
  MutexLock lock(rt.mu);
  if (rt.stopping) return CanceledError("shm transport stopped");
  if (rt.queued_slices + slices.size() > options_.max_queued_slices) {
    return AgainError("shm queue full (" + std::to_string(rt.queued_slices) + " slices queued)");
  }
  for (size_t i = 0; i < slices.size(); i += shm::kMaxBatch) {
    const size_t n = std::min(shm::kMaxBatch, slices.size() - i);
    rt.queue.push_back({shm_link->peer(), {slices.begin() + i, slices.begin() + i + n}});
  }
  rt.queued_slices += slices.size();
  rt.cv.NotifyAll();
  return Status::Ok();
}

Result<std::string> ShmTransport::OnExchange(std::string_view /*payload*/) {
  return InvalidArgumentError("shm uses no exchange");
}

ShmTransportStats ShmTransport::stats() const {
  ShmTransportStats out;
  if (!started_.load(std::memory_order_acquire)) return out;
  const shm::ShmCounters& c = runtime_->counters;
  out.cma_slices = c.cma_slices.load(std::memory_order_relaxed);
  out.mapped_slices = c.mapped_slices.load(std::memory_order_relaxed);
  out.failed_slices = c.failed_slices.load(std::memory_order_relaxed);
  out.grant_round_trips = c.grant_round_trips.load(std::memory_order_relaxed);
  out.fd_fetches = c.fd_fetches.load(std::memory_order_relaxed);
  out.mappings_dropped = c.mappings_dropped.load(std::memory_order_relaxed);
  return out;
}

std::unique_ptr<Transport> CreateShmTransport(ShmTransportOptions options) {
  return std::make_unique<ShmTransport>(std::move(options));
}

}  // namespace ferry
