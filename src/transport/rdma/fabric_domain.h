// One libfabric domain (a NIC, or an interface for the tcp provider) in use by an RdmaTransport:
// its fabric, domain and address vector, a target endpoint (the published address, which peers
// read and write through) and an initiator endpoint (which posts this side's operations), and a
// progress thread that owns both endpoints.
//
// The progress thread posts queued Ops (up to max_inflight at once, in order per peer), reads
// completions, hands failed Ops to the Recovery and enforces op_timeout and each slice's
// deadline: an Op still queued when its slice's deadline passes completes Timeout without being
// posted; one that cannot be posted for op_timeout fails Unavailable; one posted and not
// completed by the earlier of op_timeout and its slice's deadline fails Timeout, after the
// initiator endpoint was closed (and a new one opened), since only closing it gets the Op back
// from the provider and stops it from touching the Op's local buffer. It sleeps in poll() on the
// completion queues' wait fds when there is nothing to do, so an idle transport costs no CPU.
//
// Software RMA providers (tcp) also need the target side's progress: the thread reads the target
// endpoint's queue too, which is where peers' accesses are served.
//
// Thread contract: Enqueue, EnsureInitiator, CloseMrs, RegisterMr, InsertAddress and
// RemoveAddress are thread-safe; Start and Stop are called by the owning transport's lifecycle
// only. Everything else runs on the progress thread (endpoint opening also on helper threads,
// handed over under mu_).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "ferry/types.h"
#include "transport/rdma/fabric_endpoint.h"
#include "transport/rdma/fabric_info.h"
#include "transport/rdma/rdma_runtime.h"

namespace ferry::rdma {

class Domain {
 public:
  // Opens the fabric, domain, address vector and the target endpoint for `info` (the initiator
  // endpoint opens in the background from Start). `rt` is borrowed for the Domain's life.
  static Result<std::unique_ptr<Domain>> Open(Runtime* rt, size_t index, FiInfoPtr info);
  ~Domain();  // Stop(), then closes endpoints, address vector, domain and fabric
  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;

  size_t index() const { return index_; }
  const std::string& name() const { return name_; }
  const std::string& fabric_name() const { return fabric_name_; }
  bool virt_addr() const { return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0; }
  bool needs_local_desc() const { return (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0; }
  uint64_t max_msg_size() const { return info_->ep_attr->max_msg_size; }
  int numa_node() const { return numa_node_; }
  // The target endpoint's address, published to peers; fixed for the Domain's life.
  const std::string& address() const { return address_; }

  // Registers [addr, addr + length) for local read and write (the local side of this
  // process's RMA: FI_READ | FI_WRITE), and for remote read and write (FI_REMOTE_READ |
  // FI_REMOTE_WRITE) only when `access` is kRemote: the provider then refuses a peer's RMA on a
  // kLocal region whatever key it presents. `requested_key` is used unless the provider picks
  // keys (FI_MR_PROV_KEY). Device memory (`location` cuda:<n>, rocm:<n>) is registered with
  // its interface (fi_mr_regattr), which needs the domain opened with FI_HMEM; NotFound when
  // libfabric has no support for that interface.
  Result<fid_mr*> RegisterMr(uint64_t addr, uint64_t length, uint64_t requested_key,
                             MemoryAccess access, const Location& location);
  // Closes `mrs`. Where the runtime says so (software RMA) and peers may be connected, the
  // progress thread also closes the target endpoint right after (so no access accepted before
  // the MR closed can land later) and this re-opens it at the same address before returning.
  // Runs on the progress thread while it runs (waiting up to `timeout`: Timeout leaves the
  // close queued), else here.
  Status CloseMrs(std::vector<fid_mr*> mrs, std::chrono::milliseconds timeout);

  // A peer address in the address vector; inserting the same bytes again shares the entry.
  Result<fi_addr_t> InsertAddress(const std::string& address);
  // Drops one reference; the last removes the entry. rxm keeps its connection to that peer in
  // the initiator endpoint even then, so the progress thread re-opens the endpoint (closing
  // every connection) the next time it has nothing queued or in flight (idle_releases).
  void RemoveAddress(fi_addr_t addr);
  // Peer addresses in the address vector now (entries, not references).
  size_t address_count();

  void Start();
  // Opens the initiator endpoint here, on the calling thread, unless done before (Start begins
  // it in the background; this waits for that), and hands it to the progress thread. Opening
  // one costs tens to hundreds of milliseconds with rxm: neither Start, the first transfer nor
  // the progress thread wait for it (except to re-open one after a hang). Unavailable when the
  // provider refuses.
  Status EnsureInitiator();
  // Queues `ops` (taking them; `ops` is left empty). False, with `ops` untouched, once stopping.
  bool Enqueue(std::vector<std::unique_ptr<Op>>& ops);
  // Completes everything queued or in flight (Canceled), closes both endpoints and joins the
  // thread. Queued MR closes still run. Idempotent.
  void Stop();

 private:
  struct MrClose {
    std::vector<fid_mr*> mrs;
    Mutex mu;
    CondVar cv;
    bool done GUARDED_BY(mu) = false;
    // Set when this close also closed the target endpoint: its caller opens the new one.
    bool target_closed GUARDED_BY(mu) = false;
  };
  // Operations waiting to be posted to one peer address, in order.
  struct PeerQueue {
    std::deque<std::unique_ptr<Op>> ops;
    Clock::time_point blocked_since{};  // when posting to this peer last began to fail
  };
  struct AvEntry {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    int refs = 0;
  };

  Domain(Runtime* rt, size_t index, FiInfoPtr info);
  Status OpenObjects();
  Result<std::unique_ptr<Endpoint>> OpenTarget();
  // A new endpoint at info_'s address. An IP-addressed provider's endpoint listens on a TCP
  // port: with a bounded rt_->ports it takes the first free port of the range (Unavailable,
  // naming the range and `what`, when every one is taken).
  Result<std::unique_ptr<Endpoint>> OpenEndpoint(size_t cq_size, std::string_view what);
  // Opens the target endpoint again at its address and hands it to the progress thread.
  void ReopenTarget();
  void Wake();

  // Progress thread (domain_progress.cc).
  void Loop();
  bool Intake();  // false when stopping
  // Closes the MRs; with `drop_target`, also the target endpoint where the runtime asks so and
  // peers may be connected (the first close then carries target_closed).
  void RunCloses(std::vector<std::shared_ptr<MrClose>>& closes, bool drop_target);
  bool PollInitiator(Clock::time_point now);
  bool PollTarget();
  void ReadError(Clock::time_point now);
  void Completed(Op* op);
  void Failed(Op* raw, const std::string& why, Clock::time_point now);
  bool PostPending(Clock::time_point now);
  // Posts from one peer's queue while in-flight room lasts; false when the peer pushed back.
  bool PostQueue(PeerQueue& queue, Clock::time_point now, bool* posted);
  ssize_t Post(Op& op);
  void MaybeRebuildInitiator(Clock::time_point now);
  void DrainClosedInitiator(Clock::time_point now, bool canceling);
  // Times out in-flight ops past op_timeout or their slice's deadline (by re-opening the
  // initiator endpoint: only closing it gets an op back from the provider), expires queued ones
  // and fails queues that could not post for op_timeout.
  void CheckDeadlines(Clock::time_point now);
  // Completes every queued (unposted) op whose slice's deadline passed with Timeout.
  void ExpireQueued(Clock::time_point now);
  void Wait(Clock::time_point now);
  void Shutdown();

  Runtime* const rt_;
  const size_t index_;
  const FiInfoPtr info_;
  std::string name_;
  std::string fabric_name_;
  int numa_node_ = -1;
  uint64_t write_flags_ = 0;
  size_t cap_ = 1;  // operations in flight at once
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  std::string address_;
  int wake_fd_ = -1;

  Mutex av_mu_;
  std::map<std::string, AvEntry> av_entries_ GUARDED_BY(av_mu_);

  Mutex mu_;
  std::vector<std::unique_ptr<Op>> incoming_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<MrClose>> closes_ GUARDED_BY(mu_);
  std::unique_ptr<Endpoint> fresh_initiator_ GUARDED_BY(mu_);  // opened by EnsureInitiator
  std::unique_ptr<Endpoint> fresh_target_ GUARDED_BY(mu_);     // opened by ReopenTarget
  bool opener_done_ GUARDED_BY(mu_) = false;                   // opener_ has finished
  bool running_ GUARDED_BY(mu_) = false;
  bool stop_requested_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::atomic<bool> sleeping_{false};
  // Peers whose last address entry went since the initiator endpoint was last closed.
  std::atomic<uint64_t> released_peers_{0};
  Mutex opener_mu_;  // one EnsureInitiator at a time
  bool initiator_opened_ GUARDED_BY(opener_mu_) = false;
  std::thread thread_;
  std::thread prewarm_;  // Start's background EnsureInitiator
  Mutex lifecycle_mu_;   // serializes Start and Stop

  // Owned by the progress thread once it runs (by Open before).
  std::unique_ptr<Endpoint> initiator_;
  std::unique_ptr<Endpoint> target_;
  std::map<fi_addr_t, PeerQueue> pending_;  // queued, not yet posted, by peer address
  fi_addr_t next_peer_ = 0;                 // where the next posting pass starts
  // No op in pending_ has an earlier slice deadline (a lower bound; max(): none).
  Clock::time_point next_pending_deadline_ = Clock::time_point::max();
  std::unordered_set<Op*> inflight_;  // posted; owned here (raw) until they complete
  bool reopen_ = false;       // an operation hung, or a peer's connection seems stuck: re-open
  bool opening_ = false;      // opener_ is opening a new initiator endpoint
  bool reopen_idle_ = false;  // the endpoint was closed to free released peers: open one now
  std::thread opener_;
  Clock::time_point last_reopen_{};
  Clock::time_point reopen_at_{};
  Clock::time_point target_reopen_at_{};
  Clock::time_point next_check_{};
};

}  // namespace ferry::rdma
