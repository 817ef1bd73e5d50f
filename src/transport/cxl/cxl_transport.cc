#include "transport/cxl/cxl_transport.h"

#include <atomic>
#include <system_error>
#include <utility>

#include "transport/cxl/cxl_peer_link.h"
#include "transport/cxl/cxl_runtime.h"
#include "transport/cxl/cxl_wire.h"

namespace ferry {
namespace {

constexpr size_t kMaxWorkers = 64;

std::atomic<uint64_t> g_next_runtime_id{1};

Status Validate(const CxlTransportOptions& o) {
  if (o.window_path.empty()) {
    return InvalidArgumentError(
        "cxl window_path is empty: the cxl transport is not usable without a window");
  }
  if (o.socket_dir.empty()) return InvalidArgumentError("cxl socket_dir is empty");
  if (o.io_timeout.count() <= 0) return InvalidArgumentError("cxl io_timeout must be > 0");
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    return InvalidArgumentError("cxl workers must be 1..64");
  }
  if (o.max_queued_slices < 1) return InvalidArgumentError("cxl max_queued_slices must be > 0");
  return Status::Ok();
}

// Maps the window and makes its allocator.
Result<std::shared_ptr<cxl::WindowState>> OpenWindow(const CxlTransportOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<cxl::CxlWindow> window,
                   cxl::CxlWindow::Open(o.window_path, o.window_size));
  auto state = std::make_shared<cxl::WindowState>();
  state->window = std::move(window);
  state->allocator = std::make_unique<cxl::CxlAllocator>(state->window.get());
  return state;
}

// Stops the workers already started and joins them (Start failed half-way, or Stop).
void JoinWorkers(cxl::CxlRuntime& rt) {
  {
    MutexLock lock(rt.mu);
    rt.stopping = true;
  }
  rt.stop_requested.store(true, std::memory_order_release);
  rt.work_cv.NotifyAll();
  for (std::thread& t : rt.workers) t.join();
  rt.workers.clear();
}

}  // namespace

CxlTransport::CxlTransport(CxlTransportOptions options) : options_(std::move(options)) {}

CxlTransport::~CxlTransport() { Stop(); }

TransportCapabilities CxlTransport::capabilities() const {
  TransportCapabilities caps;
  caps.reaches_other_hosts = false;
  caps.reaches_device_memory = false;
  caps.allocates_shared_memory = true;
  return caps;
}

Result<std::string> CxlTransport::Start(TransportContext* ctx, const TransportStartInfo& /*info*/) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_) return BusyError("cxl transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("cxl Start: null context");
  RETURN_IF_ERROR(Validate(options_));
  auto rt = std::make_shared<cxl::CxlRuntime>();
  rt->id = g_next_runtime_id.fetch_add(1);
  rt->options = options_;
  rt->ctx = ctx;
  ASSIGN_OR_RETURN(rt->window, OpenWindow(options_));
  samehost::GrantServer::Options grant;
  grant.transport = "cxl";
  grant.dir = options_.socket_dir;
  grant.max_ranges_per_acquire = cxl::kMaxRangesPerAcquire;
  ASSIGN_OR_RETURN(rt->grant_server, samehost::GrantServer::Start(ctx, std::move(grant)));
  try {
    for (size_t i = 0; i < options_.workers; ++i) {
      rt->workers.emplace_back(cxl::RunWorker, rt.get());
    }
  } catch (const std::system_error& e) {
    JoinWorkers(*rt);
    return InternalError(std::string("cxl worker thread: ") + e.what());
  }
  const cxl::CxlWindow& window = *rt->window->window;
  cxl::Endpoint endpoint{window.identity(), reinterpret_cast<uint64_t>(window.base()),  // NOLINT
                         rt->grant_server->path()};
  runtime_ = std::move(rt);
  started_.store(true, std::memory_order_release);
  return cxl::EncodeEndpoint(endpoint);
}

void CxlTransport::Stop() {
  MutexLock lock(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!started_.load(std::memory_order_acquire)) return;
  cxl::CxlRuntime& rt = *runtime_;
  std::deque<cxl::Batch> queued;
  {
    MutexLock queue_lock(rt.mu);
    rt.stopping = true;
    queued.swap(rt.queue);
    rt.queued_slices = 0;
  }
  const Status canceled = CanceledError("cxl transport stopped");
  for (cxl::Batch& batch : queued) {
    for (Slice* s : batch.slices) rt.ctx->CompleteSlice(s, canceled);
  }
  JoinWorkers(rt);
  rt.grant_server.reset();  // closes peers' connections, releasing their pins
}

Result<std::string> CxlTransport::RegisterMemory(uint64_t addr, uint64_t length,
                                                 const Location& location) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  if (length == 0) return InvalidArgumentError("cxl RegisterMemory: length 0");
  if (location.is_device()) {
    return NotFoundError("cxl reaches only its window in host memory, not " + location.ToString());
  }
  const cxl::CxlWindow& window = *runtime_->window->window;
  if (!window.Contains(addr, length)) {
    return NotFoundError("cxl: the region is not inside the window '" + window.identity().path +
                         "'");
  }
  return cxl::EncodeKey({window.OffsetOf(addr), length});
}

Status CxlTransport::UnregisterMemory(uint64_t /*addr*/, uint64_t /*length*/) {
  return Status::Ok();
}

Result<void*> CxlTransport::AllocateShared(size_t length, const Location& location) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  if (location.is_device()) {
    return InvalidArgumentError("cxl allocates host memory in its window, not " +
                                location.ToString());
  }
  return runtime_->window->allocator->Allocate(length);
}

Status CxlTransport::FreeShared(void* addr) {
  if (!started_.load(std::memory_order_acquire)) {
    return NotFoundError("cxl transport not started: it allocated nothing");
  }
  return runtime_->window->allocator->Free(addr);
}

Result<std::shared_ptr<PeerLink>> CxlTransport::Connect(const SegmentDesc& peer) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  {
    MutexLock lock(runtime_->mu);
    if (runtime_->stopping) return CanceledError("cxl transport stopped");
  }
  const std::string peer_name = "segment '" + peer.name + "'";
  const auto it = peer.transports.find("cxl");
  if (it == peer.transports.end()) {
    return InvalidArgumentError(peer_name + " publishes no cxl endpoint");
  }
  Result<cxl::Endpoint> endpoint = cxl::DecodeEndpoint(it->second);
  if (!endpoint.ok()) return endpoint.status().WithContext(peer_name);
  const cxl::WindowIdentity& ours = runtime_->window->window->identity();
  if (!endpoint->window.SameWindowAs(ours)) {
    return UnavailableError(peer_name + ": peer maps another cxl window ('" +
                            endpoint->window.path + "', " + std::to_string(endpoint->window.size) +
                            " bytes; ours is '" + ours.path + "', " + std::to_string(ours.size) +
                            " bytes)");
  }
  return std::shared_ptr<PeerLink>(
      std::make_shared<cxl::CxlPeerLink>(runtime_->id, std::move(*endpoint), peer_name));
}

Status CxlTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  auto* cxl_link = dynamic_cast<cxl::CxlPeerLink*>(&link);
  if (cxl_link == nullptr || cxl_link->owner_id() != runtime_->id) {
    return InvalidArgumentError("cxl Submit: link was not made by this transport");
  }
  std::shared_ptr<cxl::CxlPeerLink> held = cxl_link->weak_from_this().lock();
  if (held == nullptr) return InvalidArgumentError("cxl Submit: link is not owned by a shared_ptr");
  if (slices.size() > options_.max_queued_slices) {
    return InvalidArgumentError("cxl Submit: " + std::to_string(slices.size()) +
                                " slices exceed max_queued_slices");
  }
  for (const Slice* s : slices) {
    if (s == nullptr) return InvalidArgumentError("cxl Submit: null slice");
    if (s->op != OpCode::kRead && s->op != OpCode::kWrite) {
      return InvalidArgumentError("cxl Submit: bad op");
    }
  }
  if (slices.empty()) return Status::Ok();
  return cxl::Enqueue(*runtime_, cxl::Batch{std::move(held), {slices.begin(), slices.end()}});
}

Result<std::string> CxlTransport::OnExchange(std::string_view /*payload*/) {
  return InvalidArgumentError("cxl uses no exchange");
}

void* CxlTransport::window_base() const {
  if (!started_.load(std::memory_order_acquire)) return nullptr;
  return runtime_->window->window->base();
}

uint64_t CxlTransport::window_size() const {
  if (!started_.load(std::memory_order_acquire)) return 0;
  return runtime_->window->window->size();
}

std::shared_ptr<cxl::WindowState> CxlTransport::window_state() const {
  if (!started_.load(std::memory_order_acquire)) return nullptr;
  return runtime_->window;
}

std::unique_ptr<Transport> CreateCxlTransport(CxlTransportOptions options) {
  return std::make_unique<CxlTransport>(std::move(options));
}

}  // namespace ferry
