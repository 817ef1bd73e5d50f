// The state one started RdmaTransport shares with its domains, its recovery thread and its
// peer links, and the unit of work: a Job per slice, split into Ops (one posted fi_write or
// fi_read each).
//
// Thread contract: Runtime's fields are written by Start before any thread sees them and
// read-only afterwards, except the atomics and the thread-safe members (memory, domains'
// queues). A Job is shared by its Ops, which may end on different threads; its mutex guards the
// completion count. An Op is owned by exactly one queue, thread or in-flight set at a time.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "transport/rdma/memory_table.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/rdma_wire.h"
#include "transport/transport.h"

namespace ferry::rdma {

using Clock = std::chrono::steady_clock;

class Domain;
class Recovery;
class RdmaPeerLink;
struct Runtime;

// Counters since Start, for tests and diagnostics.
struct Counters {
  std::atomic<uint64_t> posted{0};             // operations handed to the provider
  std::atomic<uint64_t> retries{0};            // operations re-posted after an error
  std::atomic<uint64_t> endpoint_rebuilds{0};  // initiator endpoints closed and re-opened
  std::atomic<uint64_t> idle_releases{0};      // idle initiator endpoints re-opened to free peers
  std::atomic<uint64_t> target_rebuilds{0};    // target endpoints re-opened after unregister
  std::atomic<uint64_t> timeouts{0};           // operations failed for want of a completion
  std::atomic<uint64_t> stale{0};              // slices completed Stale
  std::atomic<uint64_t> checks{0};             // access checks asked of peers
  std::atomic<uint64_t> device_registrations{0};  // device memory registered with FI_HMEM
  std::atomic<uint64_t> device_refusals{0};       // device memory the provider did not register
};

// One slice in flight. Completes (ctx->CompleteSlice) when its last Op ends; the first error of
// its Ops is the slice's status.
struct Job {
  Runtime* rt = nullptr;
  Slice* slice = nullptr;              // the engine's, until completion
  std::shared_ptr<RdmaPeerLink> link;  // keeps the peer's addresses alive
  LocalUse local;                      // the local registration, when there is one
  RemoteKey key;
  // The slice's deadline (Clock::time_point::max(): none). Ops not posted by then complete
  // Timeout unposted; posted ones time out then (see Domain).
  Clock::time_point deadline = Clock::time_point::max();
  Mutex mu;
  int ops_left GUARDED_BY(mu) = 0;
  Status error GUARDED_BY(mu);
};

// One fi_write or fi_read (a slice, or a piece of one no longer than the provider's
// max_msg_size). The provider gets the Op's address as its context.
struct Op {
  fi_context2 fi_ctx{};  // first: the provider's scratch space (FI_CONTEXT2 mode)
  std::shared_ptr<Job> job;
  OpCode opcode = OpCode::kWrite;
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;  // the target's virtual address
  uint64_t length = 0;
  // Completes at once with `preset` when it reaches a domain (validation errors, empty slices).
  bool immediate = false;
  Status preset;
  // The route, set by RdmaPeerLink::Route.
  size_t domain = 0;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  uint64_t rkey = 0;
  uint64_t wire_addr = 0;  // remote_addr, or its offset from the key's base
  void* desc = nullptr;    // local MR descriptor on `domain`
  int failures = 0;
  // While posted: when it times out, the earlier of (posting + op_timeout) and job->deadline.
  Clock::time_point deadline{};
  Clock::time_point not_before{};  // a retry is not posted before (the connection resets)
};

// Ends `op` with `status`; its job completes when this was its last op.
void FinishOp(std::unique_ptr<Op> op, const Status& status);

// "write of 65536 bytes to segment 'x'".
std::string DescribeOp(const Op& op);

// The Timeout that ends `op` at `now`: "did not finish by its deadline" when the slice's deadline
// has passed, else "did not complete within op_timeout". `posted` says whether it reached the
// provider (for the message). Counts the timeout.
Status OpTimeout(const Op& op, Clock::time_point now, bool posted);

struct Runtime {
  Runtime() = default;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime();  // closes the remaining MRs, then the domains

  RdmaTransportOptions options;
  TransportContext* ctx = nullptr;
  std::string provider;
  // The domains were opened with FI_HMEM (DomainChoice::hmem): device memory is registered with
  // the provider. Fixed at Start.
  bool hmem = false;
  std::string no_hmem;  // without FI_HMEM: why (DomainChoice::no_hmem)
  std::atomic<bool> device_refusal_logged{false};
  // Software RMA over sockets: an access accepted before an MR closed may still be streaming
  // in, so unregister also re-opens the target endpoint (at the same address).
  bool rebuild_target_on_unregister = false;
  // Where IP-addressed endpoints (which listen on a TCP port) bind: the engine's port_range
  // (TransportStartInfo::ports); unbounded: the kernel picks.
  PortRange ports;
  std::vector<std::unique_ptr<Domain>> domains;
  uint64_t max_chunk = 0;  // the smallest max_msg_size of the domains
  size_t queue_bound = 0;  // slices accepted and not yet complete, at most
  MemoryTable memory;
  std::unique_ptr<Recovery> recovery;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> queued{0};
  std::atomic<uint64_t> next_registration{1};
  std::atomic<uint64_t> next_mr_key{1};
  std::atomic<uint64_t> round_robin{0};
  Counters counters;
};

}  // namespace ferry::rdma
