// An FI_EP_RDM endpoint with its own completion queue, bound to a domain's address vector.
//
// Thread contract: used by one thread at a time (the domain's progress thread after Start).
// Closing the endpoint before the queue lets the caller read what the queue still holds; once
// both are closed the provider holds no operation context of theirs.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <memory>
#include <string>

#include "common/mutex.h"
#include "ferry/status.h"

namespace ferry::rdma {

// Held, across every domain of the process, while an endpoint is opened (Endpoint::Open: its
// fi_endpoint, binds and fi_enable) and while an address vector changes (fi_av_insert,
// fi_av_remove). libfabric 1.17's shm provider maps an inserted address into the region of each
// endpoint bound to the vector and into a process-wide map of regions: an insert that meets an
// endpoint being opened writes into a region not yet set up and crashes (a SIGSEGV, first seen
// by TSan as a race in RdmaTransportTest.DeviceMemoryFollowsFiHmem), although the domain is
// FI_THREAD_SAFE. Both are rare setup steps, never on the data path.
Mutex& FabricSetupMutex();

class Endpoint {
 public:
  // Opens, binds and enables an endpoint on `domain` for `info` (its src_addr, when set, is
  // where the endpoint listens), with a completion queue of `cq_size` entries that has a wait
  // fd when the provider offers one. On failure `*provider_error` (when given) gets libfabric's
  // negative error number (-FI_EADDRINUSE: src_addr's port is taken). Opens under
  // FabricSetupMutex().
  static Result<std::unique_ptr<Endpoint>> Open(fid_domain* domain, fi_info* info, fid_av* av,
                                                size_t cq_size, int* provider_error = nullptr);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }
  // The queue's wait fd (readable when fi_trywait says to wait), or -1 when it has none.
  int wait_fd() const { return wait_fd_; }
  // The endpoint's address (fi_getname).
  Result<std::string> Name() const;
  // Closes the endpoint only; the queue stays readable until destruction.
  void CloseEndpoint();

 private:
  Endpoint() = default;
  fid_ep* ep_ = nullptr;
  fid_cq* cq_ = nullptr;
  int wait_fd_ = -1;
};

}  // namespace ferry::rdma
