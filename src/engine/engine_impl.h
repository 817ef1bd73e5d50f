// TransferEngine::Impl: the engine behind the facade. It wires the rooms together and owns the
// data path (data_path.cc: planning, slices, completions, retries); each other job lives in an
// object of its own, with its own header and tests:
//   BatchTable       batches by id, shared ownership, Free never waits   (batch_table.h)
//   DeadlineTimer    task deadlines, kept by a timer, never by a scan     (deadline_timer.h)
//   PeerWorkers      retries, refreshes, notifications, backlogs, per peer (peer_workers.h)
//   LinkCache        per-peer transport links, dropped on close/restart/idle (link_cache.h)
//   NotificationBox  received notifications, capped                       (notification_box.h)
//   PeerHealth       bounded failure logs, descriptor refresh backoff     (peer_health.h)
//   EngineRpc        the RPC handlers this engine answers                 (engine_rpc.cc)
//   EngineCounters   metrics, lock-free on the data path (getMetrics)     (engine_metrics.h)
//   InstrumentedStore  counts the metadata store's calls                  (instrumented_store.h)
//   MetricsExporter  the optional Prometheus endpoint                     (metrics_exporter.h)
//
// Isolation: no call on a peer (store fetch, connect, RPC) runs on the caller of
// submitTransfer or on the timer thread; such work goes to the peer's queue in PeerWorkers, so
// a frozen peer delays only its own work.
//
// Thread contract: thread-safe after Init; Init once. Destruction stops the RPC service, the
// timer, the workers and the transports (failing what is in flight), removes the published
// segment, then frees the rest.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/net_address.h"
#include "common/unique_fd.h"
#include "core/segment_desc.h"
#include "engine/batch.h"
#include "engine/batch_table.h"
#include "engine/deadline_timer.h"
#include "engine/engine_metrics.h"
#include "engine/link_cache.h"
#include "engine/metrics_exporter.h"
#include "engine/notification_box.h"
#include "engine/peer_health.h"
#include "engine/peer_workers.h"
#include "engine/selection_policy.h"
#include "engine/staging_copier.h"
#include "ferry/transfer_engine.h"
#include "metadata/metadata_store.h"
#include "metadata/p2p/rpc_descriptor_source.h"
#include "metadata/segment_directory.h"
#include "registry/local_registry.h"
#include "rpc/messages.h"
#include "rpc/rpc_client.h"
#include "rpc/rpc_server.h"
#include "transport/transport.h"

namespace ferry {

class TransferEngine::Impl final : public TransportContext {
 public:
  Impl() = default;
  ~Impl() override;

  Status Init(const EngineOptions& options);
  // Init succeeded: the facade refuses every other call until then.
  bool ready() const { return ready_.load(); }
  const std::string& name() const { return name_; }
  uint16_t rpc_port() const;

  // Memory.
  Status RegisterMemory(const std::vector<BufferEntry>& buffers, const std::string& location,
                        bool remote_accessible, bool publish);
  Status UnregisterMemory(const std::vector<void*>& addrs, bool publish);
  Status CheckOverlap(void* addr, size_t length);
  Result<void*> AllocateManaged(size_t length, const std::string& location);
  Status FreeManaged(void* addr);
  // File buffers (file_buffers.cc).
  Result<uint64_t> RegisterFile(const std::string& path, uint64_t length, uint64_t offset,
                                const std::map<std::string, std::string>& host_paths,
                                const std::string& location);
  Status UnregisterFile(uint64_t addr);

  // Segments.
  Result<SegmentId> OpenSegment(const std::string& name);
  Status CloseSegment(SegmentId id);
  Status SyncSegmentCache(const std::string& name);
  Result<uint64_t> Probe(SegmentId id);
  // Asks the engine at `desc`'s RPC endpoint who it is; `answers_as_desc` (when given) is set to
  // whether that is the very engine `desc` describes (its name and incarnation).
  Result<ProbeResponse> ProbePeer(const SegmentDesc& desc, bool* answers_as_desc);
  Result<std::vector<SegmentBuffer>> SegmentBuffers(SegmentId id);
  Status SendNotify(SegmentId target, const NotifyMessage& notify);
  std::vector<NotifyMessage> TakeNotifies() { return notify_box_->TakeAll(); }

  // Batches (data_path.cc).
  Result<BatchId> AllocateBatch(size_t capacity) { return batches_.Allocate(capacity); }
  Status FreeBatch(BatchId id);
  Status Submit(BatchId id, const std::vector<TransferRequest>& requests,
                const NotifyMessage* notify);
  Result<TransferStatus> TaskStatus(BatchId id, size_t task);
  Result<BatchStatus> Summary(BatchId id);
  Result<BatchStatus> WaitBatch(BatchId id, std::chrono::milliseconds timeout);
  Status CancelBatch(BatchId id);
  int completion_fd() const { return completion_fd_.get(); }

  // Metrics (engine_metrics.h): the snapshot getMetrics() returns, and the endpoint's port.
  EngineMetrics Metrics() const;
  uint16_t metrics_port() const { return exporter_ != nullptr ? exporter_->port() : 0; }

  // TransportContext.
  Result<AccessPin> PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                    uint64_t generation, std::string_view transport) override;
  Result<RegionLease> LeaseRemoteRegion(uint64_t addr, uint64_t length, uint64_t incarnation,
                                        uint64_t generation, std::string_view transport,
                                        std::function<void()> on_revoke) override;
  void CompleteSlice(Slice* slice, const Status& status) override;
  Result<std::string> Exchange(const SegmentDesc& peer, std::string_view transport,
                               std::string_view payload,
                               std::chrono::milliseconds timeout) override;
  uint64_t incarnation() const override { return incarnation_; }
  // Staged memory served through this engine: file buffers (file_buffers.cc) and device memory
  // (the staging copier).
  bool IsStagedAddress(uint64_t addr) const override {
    return IsFileAddress(addr) ||
           (device_registered_.load(std::memory_order_acquire) && registry_->IsDeviceMemory(addr));
  }
  Status StartStagedIo(StagedIo io, AccessPin pin) override;

 private:
  using BatchPtr = std::shared_ptr<engine::Batch>;
  enum class Plan { kReady, kEnded, kDeferred };

  // Where file buffers' addresses lie (file_buffers.cc): [kFileAddressBase, 2^64), a range no
  // process memory occupies.
  static constexpr uint64_t kFileAddressBase = uint64_t{0xf} << 60;

  Status RegisterRpcHandlers();  // engine_rpc.cc
  bool IsFileAddress(uint64_t addr) const { return addr >= kFileAddressBase; }
  // file_buffers.cc: StartStagedIo of a file buffer, through the file transport.
  Status StartFileIo(StagedIo io, AccessPin pin);
  // file_buffers.cc: whether `slice` is one of StartFileIo's (then it is finished here: its
  // `done` runs and it is freed); false for a task's slice.
  bool CompleteFileIo(Slice* slice, const Status& status);
  // The file transport's link to this engine's own segment (made on first use).
  Result<std::shared_ptr<PeerLink>> OwnFileLink(Transport* carrier) EXCLUDES(file_link_mu_);
  // Init: reads advertise_host / port_range (or FERRY_ADVERTISE_HOST / FERRY_PORT_RANGE) into
  // advertise_host_ and ports_, resolving a wildcard bind to an address peers can dial; warns
  // once when a loopback address goes into a store that is not on loopback.
  Status ResolveAddresses();
  Status StartTransports();
  // Snapshots the registry and publishes it, both under publish_mu_, so that the store ends up
  // with the registry's latest state whatever order concurrent calls finish in.
  Status Publish() EXCLUDES(publish_mu_);
  // Init, before the first Publish (name_claim.cc): AlreadyExists naming the holder when a live
  // engine holds name_ in the store and take_over_name is off; otherwise lets the first Publish
  // replace whatever entries are there (a dead holder's, or, told to, a live one's).
  Status ClaimName();
  Transport* FindTransport(std::string_view name) const;
  // The size a task whose first attempt takes `transport` is cut into (slice_sizes_).
  uint64_t SliceSizeFor(const Transport* transport) const;
  bool SameHost(const SegmentDesc& peer) const;

  // Data path (data_path.cc).
  // Plans `task`. `may_block` false (the submitting thread): only from the cached descriptor
  // and links; kDeferred when a fetch or a connect is needed. Ends the task (kEnded) when it
  // fails to plan or needs no transport (own segment, zero bytes).
  Plan PlanOrEnd(engine::Task* task, bool may_block);
  Status PlanTask(engine::Task* task, bool may_block, bool* deferred);
  // A request to this engine's own segment: both ranges pinned, then memmove.
  // `*file_target`: set when the target is a file buffer (nothing copied; the caller plans it
  // for the file transport).
  Status LocalCopy(engine::Task* task, bool* file_target);
  // Plans `task` on its peer's worker (may block there), then submits it.
  void DeferPlan(const BatchPtr& batch, engine::Task* task);
  // Submits the slices of `tasks`, which share one transport and peer link. Never blocks:
  // slices a full transport queue turns back go to the peer's backlog on its worker.
  void SubmitSlices(std::span<engine::Task* const> tasks);
  void OnAllSlicesDone(engine::Task* task);
  // A failed attempt whose target identity is unchanged, on the peer's worker: reconnect or
  // fall back to another transport, never towards another incarnation or generation.
  void RetryTask(engine::Task* task, Status error);
  // Ends `task` (unless it already ended) and does what follows a task's end.
  void EndTask(engine::Task* task, TransferState state, const Status& reason);
  // After the last open task of `batch` ended: wakes waitBatch and completion_fd_, cancels the
  // batch's timer and sends its notification (only when every task completed).
  void AfterBatchEnded(engine::Batch* batch);
  void ReleaseAttempt(engine::Task* task);
  bool CanFallBack(engine::Task* task);
  std::vector<std::string> TransportsFor(const engine::Task& task, const BufferDesc& buffer);
  // Deadlines: arms the batch's timer entry for its earliest open task (under batch->mu).
  void ArmTimerLocked(engine::Batch* batch, size_t first_open) REQUIRES(batch->mu);
  void ExpireDue(const std::weak_ptr<engine::Batch>& weak);
  void SweepIdleLinks();
  // The PeerWorkers key of a segment id (its name when known).
  std::string PeerKey(SegmentId id) const;
  // Init: the log level and metrics options (or FERRY_LOG_LEVEL / FERRY_METRICS_PORT).
  Status ApplyObservabilityOptions();

  EngineOptions options_;
  Clock* const clock_ = Clock::Real();
  // Declared before everything that ends tasks, so that it outlives them (completionFd()).
  UniqueFd completion_fd_;
  // Made first in Init, so that it outlives everything that counts into it.
  std::unique_ptr<engine::EngineCounters> counters_;
  uint64_t incarnation_ = 0;
  std::atomic<bool> ready_{false};  // set last in Init
  std::string name_;
  // What peers are told (EngineOptions::advertise_host, resolved) and where listeners without
  // an explicit port bind (EngineOptions::port_range, parsed); fixed after Init.
  std::string advertise_host_;
  PortRange ports_;
  SegmentDesc base_desc_;  // everything but the buffers; fixed after Init

  // Declared first so that it is destroyed last: batches and transports hold pins on it.
  std::unique_ptr<LocalRegistry> registry_;
  std::unique_ptr<RpcClient> rpc_client_;
  std::unique_ptr<RpcDescriptorSource> p2p_source_;
  std::unique_ptr<MetadataStore> store_;
  std::unique_ptr<SegmentDirectory> directory_;
  std::unique_ptr<SegmentPublisher> publisher_;
  std::unique_ptr<engine::SelectionPolicy> policy_;
  std::unique_ptr<engine::NotificationBox> notify_box_;
  std::unique_ptr<engine::PeerHealth> health_;

  Mutex publish_mu_;  // serializes snapshot + publication
  Mutex served_mu_;
  std::map<std::string, std::string> served_ GUARDED_BY(served_mu_);  // P2P: key -> value

  Mutex managed_mu_;
  // buffer -> its allocator (nullptr: device memory, AllocateDeviceMemory)
  std::map<void*, Transport*> managed_ GUARDED_BY(managed_mu_);
  // Where the next file buffer's addresses start (file_buffers.cc): a range no process memory
  // can occupy, never reused.
  std::atomic<uint64_t> next_file_addr_{kFileAddressBase};
  Mutex file_link_mu_;
  std::shared_ptr<PeerLink> own_file_link_ GUARDED_BY(file_link_mu_);  // OwnFileLink

  engine::BatchTable batches_;
  engine::DeadlineTimer timer_{Clock::Real()};
  std::unique_ptr<engine::PeerWorkers> workers_;
  std::vector<std::unique_ptr<Transport>> transports_;
  engine::LinkCache links_{Clock::Real()};     // after transports_: its links go first
  std::vector<engine::Candidate> candidates_;  // transports_ as the selection policy sees them
  // Per transports_ entry, fixed after Init: EngineOptions::slice_size, or (0) the transport's
  // preferred_slice_size, clamped to the smallest max_slice_size of transports_, so that any
  // installed transport can carry a task's slices when a retry falls back to it.
  std::vector<uint64_t> slice_sizes_;
  // Device memory through staging (staging_copier.h): made at Init when this build and machine
  // have a device (DeviceStagingOps), null otherwise; stopped after the transports, whose
  // bounced slices it completes. device_registered_: some device memory was registered (then
  // IsStagedAddress asks the registry).
  std::unique_ptr<engine::StagingCopier> stager_;
  std::atomic<bool> device_registered_{false};
  std::unique_ptr<RpcServer> rpc_server_;      // destroyed first of the services
  // The Prometheus endpoint (EngineOptions::metrics_port); stopped first of all in ~Impl.
  std::unique_ptr<engine::MetricsExporter> exporter_;
  bool metrics_port_from_env_ = false;  // FERRY_METRICS_PORT set it: a taken port only warns
};

}  // namespace ferry
