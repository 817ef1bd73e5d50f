// Recovery: decides what a failed operation means, off the progress threads.
//
// A completion error does not say why (a dead key, a reset connection and a dead peer all look
// alike over rxm), so Recovery asks the target: one Exchange per peer per batch carrying an
// access check for each failed operation. The target answers from its registrations and its
// engine's registry (PinRemoteAccess):
//   - the key was unregistered, or the planned generation/incarnation is gone -> Stale (or the
//     registry's answer), final;
//   - the peer does not answer -> Unavailable, final;
//   - the access is still valid -> the operation is re-posted, on the next domain with a route,
//     up to max_retries times; then Unavailable with the last error.
//
// Thread contract: thread-safe; one thread of its own between Start and Stop.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "transport/rdma/rdma_runtime.h"

namespace ferry::rdma {

class Recovery {
 public:
  explicit Recovery(Runtime* rt) : rt_(rt) {}  // `rt` is borrowed for the object's life
  ~Recovery();                                 // Stop()
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  void Start();
  // Takes `op` (it failed with `error`; op->failures counts this failure) and returns true;
  // false, with `op` untouched, once stopping.
  bool Push(std::unique_ptr<Op>& op, const Status& error);
  // Completes what is queued with Canceled and joins the thread (an Exchange in progress ends
  // within its bound first). Idempotent.
  void Stop();

 private:
  struct Failure {
    std::unique_ptr<Op> op;
    Status error;
  };
  void Loop();
  void Resolve(std::vector<Failure>& batch);
  void ResolvePeer(RdmaPeerLink& link, std::vector<Failure*>& failures);
  void Retry(Failure& failure);

  Runtime* const rt_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Failure> queue_ GUARDED_BY(mu_);
  bool running_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
  Mutex lifecycle_mu_;
};

}  // namespace ferry::rdma
