#include "transport/rdma/fabric_domain.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_errno.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/log.h"

namespace ferry::rdma {
namespace {

constexpr size_t kTargetCqSize = 64;

}  // namespace

Domain::Domain(Runtime* rt, size_t index, FiInfoPtr info)
    : rt_(rt), index_(index), info_(std::move(info)) {}

Result<std::unique_ptr<Domain>> Domain::Open(Runtime* rt, size_t index, FiInfoPtr info) {
  std::unique_ptr<Domain> d(new Domain(rt, index, std::move(info)));
  RETURN_IF_ERROR(d->OpenObjects());
  return d;
}

Status Domain::OpenObjects() {
  fi_info* info = info_.get();
  name_ = info->domain_attr->name != nullptr ? info->domain_attr->name : "";
  fabric_name_ = info->fabric_attr->name != nullptr ? info->fabric_attr->name : "";
  numa_node_ = NumaNodeOf(*info);
  if ((info->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0) write_flags_ = FI_DELIVERY_COMPLETE;
  cap_ = std::max<size_t>(1, std::min<size_t>(rt_->options.max_inflight, info->tx_attr->size));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return UnavailableError("rdma: eventfd: " + ErrnoText(errno));
  int rc = fi_fabric(info->fabric_attr, &fabric_, nullptr);
  if (rc != 0) return UnavailableError(FiErrorText("rdma: fi_fabric(" + fabric_name_ + ")", rc));
  rc = fi_domain(fabric_, info, &domain_, nullptr);
  if (rc != 0) return UnavailableError(FiErrorText("rdma: fi_domain(" + name_ + ")", rc));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (rc != 0) return UnavailableError(FiErrorText("rdma: fi_av_open", rc));
  ASSIGN_OR_RETURN(target_, OpenTarget());
  ASSIGN_OR_RETURN(address_, target_->Name());
  return Status::Ok();
}

Result<std::unique_ptr<Endpoint>> Domain::OpenEndpoint(size_t cq_size, std::string_view what) {
  fi_info* base = info_.get();
  if (rt_->ports.unbounded() || !UsesSocketAddresses(rt_->provider)) {
    return Endpoint::Open(domain_, base, av_, cq_size);
  }
  const bool v4 = base->src_addr != nullptr && base->src_addrlen >= sizeof(sockaddr_in) &&
                  static_cast<const sockaddr*>(base->src_addr)->sa_family == AF_INET;
  const bool v6 = base->src_addr != nullptr && base->src_addrlen >= sizeof(sockaddr_in6) &&
                  static_cast<const sockaddr*>(base->src_addr)->sa_family == AF_INET6;
  if (!v4 && !v6) {
    return UnavailableError("rdma: cannot place the " + std::string(what) + " of " + name_ +
                            " in port range " + rt_->ports.ToString() +
                            ": the provider gave no IP source address");
  }
  for (uint32_t port = rt_->ports.first; port <= rt_->ports.last; ++port) {
    FiInfoPtr info(fi_dupinfo(base));
    if (!info) return UnavailableError("rdma: fi_dupinfo failed");
    if (v4) {
      static_cast<sockaddr_in*>(info->src_addr)->sin_port = htons(static_cast<uint16_t>(port));
    } else {
      static_cast<sockaddr_in6*>(info->src_addr)->sin6_port = htons(static_cast<uint16_t>(port));
    }
    int provider_error = 0;
    Result<std::unique_ptr<Endpoint>> ep =
        Endpoint::Open(domain_, info.get(), av_, cq_size, &provider_error);
    if (ep.ok() || provider_error != -FI_EADDRINUSE) return ep;
  }
  return UnavailableError("rdma: no free port for the " + std::string(what) + " of " + name_ +
                          " in port range " + rt_->ports.ToString() +
                          " (every port of the range is taken; widen port_range)");
}

Result<std::unique_ptr<Endpoint>> Domain::OpenTarget() {
  if (address_.empty()) return OpenEndpoint(kTargetCqSize, "target endpoint");
  // Re-open at the published address: a copy of the info whose src_addr is that address.
  FiInfoPtr info(fi_dupinfo(info_.get()));
  if (!info) return UnavailableError("rdma: fi_dupinfo failed");
  void* src = std::malloc(address_.size());  // fi_freeinfo frees it
  if (src == nullptr) return UnavailableError("rdma: out of memory");
  std::memcpy(src, address_.data(), address_.size());
  std::free(info->src_addr);
  info->src_addr = src;
  info->src_addrlen = address_.size();
  ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> ep,
                   Endpoint::Open(domain_, info.get(), av_, kTargetCqSize));
  ASSIGN_OR_RETURN(std::string name, ep->Name());
  if (name != address_) return UnavailableError("rdma: target endpoint moved to another address");
  return ep;
}

Domain::~Domain() {
  Stop();
  initiator_.reset();
  target_.reset();
  {
    MutexLock lock(mu_);
    fresh_initiator_.reset();
    fresh_target_.reset();
  }
  {
    MutexLock lock(av_mu_);
    av_entries_.clear();
  }
  if (av_ != nullptr) (void)fi_close(&av_->fid);
  if (domain_ != nullptr) {
    const int rc = fi_close(&domain_->fid);
    if (rc != 0) FERRY_LOG(kWarn) << FiErrorText("rdma: closing domain " + name_, rc);
  }
  if (fabric_ != nullptr) (void)fi_close(&fabric_->fid);
  if (wake_fd_ >= 0) close(wake_fd_);
}

Result<fid_mr*> Domain::RegisterMr(uint64_t addr, uint64_t length, uint64_t requested_key,
                                   MemoryAccess memory_access, const Location& location) {
  fid_mr* mr = nullptr;
  // RMA is one-sided: the target's CPU never sees an access, so the MR's rights are the only
  // check a local-only region gets. Never grant remote rights it was not registered with.
  uint64_t access = FI_READ | FI_WRITE;
  if (memory_access == MemoryAccess::kRemote) access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
  if (!location.is_device()) {
    const int rc = fi_mr_reg(domain_, reinterpret_cast<const void*>(addr),  // NOLINT
                             length, access, 0, requested_key, 0, &mr, nullptr);
    if (rc != 0) return UnavailableError(FiErrorText("rdma: fi_mr_reg on " + name_, rc));
    return mr;
  }
  iovec range{reinterpret_cast<void*>(addr), length};  // NOLINT
  fi_mr_attr attr{};
  attr.mr_iov = &range;
  attr.iov_count = 1;
  attr.access = access;
  attr.requested_key = requested_key;
  switch (location.kind) {
    case Location::Kind::kCuda:
      attr.iface = FI_HMEM_CUDA;
      attr.device.cuda = location.index;
      break;
    case Location::Kind::kRocm:
      attr.iface = FI_HMEM_ROCR;  // one interface for every ROCm device
      break;
    default:
      return NotFoundError("rdma: libfabric has no memory interface for " + location.ToString());
  }
  const int rc = fi_mr_regattr(domain_, &attr, 0, &mr);
  const std::string what =
      FiErrorText("rdma: fi_mr_regattr of " + location.ToString() + " memory on " + name_, rc);
  // This libfabric has no support for the device's interface: it cannot reach such memory (the
  // engine uses another transport). Any other failure is the registration's.
  if (rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP) return NotFoundError(what);
  if (rc != 0) return UnavailableError(what);
  return mr;
}

Status Domain::CloseMrs(std::vector<fid_mr*> mrs, std::chrono::milliseconds timeout) {
  auto close = std::make_shared<MrClose>();
  close->mrs = std::move(mrs);
  bool queued = false;
  {
    MutexLock lock(mu_);
    if (running_ && !stopped_) {
      closes_.push_back(close);
      queued = true;
    }
  }
  if (!queued) {
    std::vector<std::shared_ptr<MrClose>> now{close};
    RunCloses(now, /*drop_target=*/false);
    return Status::Ok();
  }
  Wake();
  const auto deadline = Clock::now() + timeout;
  bool target_closed = false;
  {
    MutexLock lock(close->mu);
    while (!close->done) {
      if (!close->cv.WaitUntil(close->mu, deadline) && Clock::now() >= deadline) {
        if (close->done) break;
        return TimeoutError("rdma: the memory region on " + name_ +
                            " was not closed within op_timeout (it will be)");
      }
    }
    target_closed = close->target_closed;
  }
  if (target_closed) ReopenTarget();
  return Status::Ok();
}

Result<fi_addr_t> Domain::InsertAddress(const std::string& address) {
  MutexLock lock(av_mu_);
  AvEntry& entry = av_entries_[address];
  if (entry.refs > 0) {
    ++entry.refs;
    return entry.addr;
  }
  fi_addr_t addr = FI_ADDR_UNSPEC;
  int n = 0;
  {
    MutexLock setup(FabricSetupMutex());
    n = fi_av_insert(av_, address.data(), 1, &addr, 0, nullptr);
  }
  if (n != 1) {
    av_entries_.erase(address);
    return UnavailableError(FiErrorText("rdma: fi_av_insert on " + name_, n < 0 ? n : FI_EINVAL));
  }
  entry.addr = addr;
  entry.refs = 1;
  return addr;
}

void Domain::RemoveAddress(fi_addr_t addr) {
  MutexLock lock(av_mu_);
  for (auto it = av_entries_.begin(); it != av_entries_.end(); ++it) {
    if (it->second.addr != addr) continue;
    if (--it->second.refs == 0) {
      fi_addr_t gone = addr;
      {
        MutexLock setup(FabricSetupMutex());
        (void)fi_av_remove(av_, &gone, 1, 0);
      }
      av_entries_.erase(it);
      released_peers_.fetch_add(1);
      Wake();  // the progress thread closes the peer's connection when idle
    }
    return;
  }
}

size_t Domain::address_count() {
  MutexLock lock(av_mu_);
  return av_entries_.size();
}

Status Domain::EnsureInitiator() {
  MutexLock opener(opener_mu_);
  if (initiator_opened_) return Status::Ok();
  Result<std::unique_ptr<Endpoint>> opened = OpenEndpoint(2 * cap_ + 64, "initiator endpoint");
  if (!opened.ok()) return opened.status().WithContext("rdma initiator endpoint on " + name_);
  {
    MutexLock lock(mu_);
    fresh_initiator_ = std::move(opened).value();
  }
  initiator_opened_ = true;
  Wake();
  return Status::Ok();
}

void Domain::ReopenTarget() {
  Result<std::unique_ptr<Endpoint>> target = OpenTarget();
  if (!target.ok()) {
    // The progress thread tries again (target_reopen_at_).
    FERRY_LOG(kError) << "rdma: re-opening the target endpoint of " << name_
                      << " failed: " << target.status() << " (retrying)";
    return;
  }
  {
    MutexLock lock(mu_);
    fresh_target_ = std::move(target).value();
  }
  rt_->counters.target_rebuilds.fetch_add(1, std::memory_order_relaxed);
  Wake();
}

void Domain::Start() {
  MutexLock lifecycle(lifecycle_mu_);
  {
    MutexLock lock(mu_);
    if (running_ || stopped_) return;
    running_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
  // Opens the initiator endpoint in the background, so neither Start nor the first transfer
  // waits for it (Connect waits only if it is still being opened).
  prewarm_ = std::thread([this] {
    const Status s = EnsureInitiator();
    if (!s.ok()) FERRY_LOG(kWarn) << s << " (retried on Connect)";
  });
}

bool Domain::Enqueue(std::vector<std::unique_ptr<Op>>& ops) {
  bool was_empty = false;
  {
    MutexLock lock(mu_);
    if (!running_ || stop_requested_ || stopped_) return false;
    was_empty = incoming_.empty();
    for (auto& op : ops) incoming_.push_back(std::move(op));
  }
  ops.clear();
  // The thread checks incoming_ under mu_ after announcing that it sleeps, so either it sees
  // these ops or this sees it sleeping.
  if (was_empty && sleeping_.load()) Wake();
  return true;
}

void Domain::Stop() {
  MutexLock lifecycle(lifecycle_mu_);
  if (prewarm_.joinable()) prewarm_.join();  // bounded by one endpoint open
  {
    MutexLock lock(mu_);
    stop_requested_ = true;
    if (!running_) {
      stopped_ = true;
      return;
    }
  }
  Wake();
  if (thread_.joinable()) thread_.join();
}

void Domain::Wake() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
    FERRY_LOG(kWarn) << "rdma: waking the progress thread of " << name_ << ": " << ErrnoText(errno);
  }
}

}  // namespace ferry::rdma
