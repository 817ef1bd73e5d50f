#include "transport/rdma/fabric_endpoint.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "common/log.h"
#include "transport/rdma/fabric_info.h"

namespace ferry::rdma {
namespace {

int OpenCq(fid_domain* domain, size_t size, fi_wait_obj wait, fid_cq** cq) {
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_CONTEXT;
  attr.size = size;
  attr.wait_obj = wait;
  return fi_cq_open(domain, &attr, cq, nullptr);
}

}  // namespace

Mutex& FabricSetupMutex() {
  static Mutex* mu = new Mutex();
  return *mu;
}

Result<std::unique_ptr<Endpoint>> Endpoint::Open(fid_domain* domain, fi_info* info, fid_av* av,
                                                 size_t cq_size, int* provider_error) {
  int ignored = 0;
  int& failed = provider_error != nullptr ? *provider_error : ignored;
  failed = 0;
  std::unique_ptr<Endpoint> out(new Endpoint());
  // A wait fd lets the progress thread sleep in poll() instead of spinning; not every provider
  // has one, and then the thread polls.
  if (OpenCq(domain, cq_size, FI_WAIT_FD, &out->cq_) == 0) {
    if (fi_control(&out->cq_->fid, FI_GETWAIT, &out->wait_fd_) != 0) out->wait_fd_ = -1;
  } else {
    out->cq_ = nullptr;
    const int rc = OpenCq(domain, cq_size, FI_WAIT_NONE, &out->cq_);
    if (rc != 0) {
      out->cq_ = nullptr;
      failed = rc;
      return UnavailableError(FiErrorText("rdma: fi_cq_open", rc));
    }
  }
  MutexLock setup(FabricSetupMutex());
  int rc = fi_endpoint(domain, info, &out->ep_, nullptr);
  if (rc != 0) {
    out->ep_ = nullptr;
    failed = rc;
    return UnavailableError(FiErrorText("rdma: fi_endpoint", rc));
  }
  rc = fi_ep_bind(out->ep_, &av->fid, 0);
  if (rc == 0) rc = fi_ep_bind(out->ep_, &out->cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0) {
    failed = rc;
    return UnavailableError(FiErrorText("rdma: fi_ep_bind", rc));
  }
  rc = fi_enable(out->ep_);
  if (rc != 0) {
    failed = rc;
    return UnavailableError(FiErrorText("rdma: fi_enable", rc));
  }
  return out;
}

Endpoint::~Endpoint() {
  CloseEndpoint();
  if (cq_ != nullptr) {
    const int rc = fi_close(&cq_->fid);
    if (rc != 0) FERRY_LOG(kWarn) << FiErrorText("rdma: closing a completion queue", rc);
  }
}

Result<std::string> Endpoint::Name() const {
  std::string name(256, '\0');
  size_t length = name.size();
  const int rc = fi_getname(&ep_->fid, name.data(), &length);
  if (rc != 0 || length > name.size()) {
    return UnavailableError(FiErrorText("rdma: fi_getname", rc == 0 ? FI_ETOOSMALL : rc));
  }
  name.resize(length);
  return name;
}

void Endpoint::CloseEndpoint() {
  if (ep_ == nullptr) return;
  const int rc = fi_close(&ep_->fid);
  if (rc != 0) FERRY_LOG(kWarn) << FiErrorText("rdma: closing an endpoint", rc);
  ep_ = nullptr;
}

}  // namespace ferry::rdma
