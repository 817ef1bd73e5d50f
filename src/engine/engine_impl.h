// TransferEngine::Impl: the engine behind the facade. It owns the registry, the RPC service,
// the metadata store with its directory and publisher, the transports, the batches and a
// progress thread (deadlines, STALE retries, notifications after their data).
//
// Thread contract: thread-safe after Init; Init once. Destruction stops the progress thread,
// the RPC service and the transports (failing what is in flight), removes the published
// segment, then frees the rest.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "core/segment_desc.h"
#include "engine/batch.h"
#include "engine/selection_policy.h"
#include "ferry/transfer_engine.h"
#include "metadata/metadata_store.h"
#include "metadata/p2p/rpc_descriptor_source.h"
#include "metadata/segment_directory.h"
#include "registry/local_registry.h"
#include "rpc/rpc_client.h"
#include "rpc/rpc_server.h"
#include "transport/transport.h"

namespace ferry {

class TransferEngine::Impl final : public TransportContext {
 public:
  Impl() = default;
  ~Impl() override;

  Status Init(const EngineOptions& options);
  const std::string& name() const { return name_; }
  uint16_t rpc_port() const;

  // Memory.
  Status RegisterMemory(const std::vector<BufferEntry>& buffers, const std::string& location,
                        bool remote_accessible, bool publish);
  Status UnregisterMemory(const std::vector<void*>& addrs, bool publish);
  Status CheckOverlap(void* addr, size_t length);
  Result<void*> AllocateManaged(size_t length, const std::string& location);
  Status FreeManaged(void* addr);

  // Segments.
  Result<SegmentId> OpenSegment(const std::string& name);
  Status CloseSegment(SegmentId id);
  Status SyncSegmentCache(const std::string& name);
  Result<uint64_t> Probe(SegmentId id);
  Status SendNotify(SegmentId target, const NotifyMessage& notify);
  std::vector<NotifyMessage> TakeNotifies();

  // Batches (data_path.cc).
  Result<BatchId> AllocateBatch(size_t capacity);
  Status FreeBatch(BatchId id);
  Status Submit(BatchId id, const std::vector<TransferRequest>& requests,
                const NotifyMessage* notify);
  Result<TransferStatus> TaskStatus(BatchId id, size_t task);
  Result<BatchStatus> Summary(BatchId id);

  // TransportContext.
  Result<AccessPin> PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                    uint64_t generation, std::string_view transport) override;
  void CompleteSlice(Slice* slice, const Status& status) override;
  Result<std::string> Exchange(const SegmentDesc& peer, std::string_view transport,
                               std::string_view payload,
                               std::chrono::milliseconds timeout) override;
  uint64_t incarnation() const override { return incarnation_; }

 private:
  struct LinkEntry {
    uint64_t incarnation = 0;
    std::shared_ptr<PeerLink> link;
  };

  Status RegisterRpcHandlers();
  Status StartTransports();
  Status Publish() EXCLUDES(publish_mu_);
  Transport* FindTransport(std::string_view name) const;
  bool SameHost(const SegmentDesc& peer) const;

  // Data path (data_path.cc).
  engine::Batch* FindBatch(BatchId id);
  void StartTask(engine::Task* task);
  // Plans `task`; finishes it at once when it failed to plan or needs no transport (own segment,
  // zero bytes). True when its slices are to be submitted.
  bool PlanAndFinishEarly(engine::Task* task);
  // Resolves the target and plans slices; Ok with no slices when it was done locally.
  Status PlanTask(engine::Task* task);
  // A request to this engine's own segment: both ranges pinned, then memmove.
  Status LocalCopy(engine::Task* task);
  // Submits the slices of `tasks`, which share one transport and peer link.
  void SubmitSlices(std::span<engine::Task* const> tasks);
  void OnAllSlicesDone(engine::Task* task);
  void EndAttempt(engine::Task* task);
  // Hands `task` to the progress thread for another attempt (RetryTask).
  void QueueRetry(engine::Task* task);
  // Whether another transport than the failed one may still carry `task` (tried once only).
  bool CanFallBack(engine::Task* task);
  // The transports that may carry `task` to `buffer`, best first: the selection policy's order,
  // narrowed to those the task's (pinned) local region is registered with.
  std::vector<std::string> TransportsFor(const engine::Task& task, const BufferDesc& buffer);
  // A STALE or Unavailable attempt, on the progress thread: plan again against a refreshed
  // descriptor (Unavailable only when the peer's incarnation changed), or fail.
  void RetryTask(engine::Task* task);
  Result<std::shared_ptr<PeerLink>> GetLink(Transport* transport, const SegmentDesc& peer);
  void DropLink(std::string_view transport, std::string_view peer);
  void QueueNotifyIfDone(engine::Batch* batch);
  void ProgressLoop();
  void ExpireTasks();

  EngineOptions options_;
  uint64_t incarnation_ = 0;
  std::string name_;
  SegmentDesc base_desc_;  // everything but the buffers; fixed after Init

  // Declared first so that it is destroyed last: batches and transports hold pins on it.
  std::unique_ptr<LocalRegistry> registry_;
  std::unique_ptr<RpcClient> rpc_client_;
  std::unique_ptr<RpcDescriptorSource> p2p_source_;
  std::unique_ptr<MetadataStore> store_;
  std::unique_ptr<SegmentDirectory> directory_;
  std::unique_ptr<SegmentPublisher> publisher_;
  std::unique_ptr<engine::SelectionPolicy> policy_;

  Mutex publish_mu_;
  std::map<std::string, std::string> published_ GUARDED_BY(publish_mu_);  // key -> value

  Mutex batches_mu_;
  std::map<BatchId, std::unique_ptr<engine::Batch>> batches_ GUARDED_BY(batches_mu_);
  BatchId next_batch_ GUARDED_BY(batches_mu_) = 1;

  Mutex links_mu_;
  std::map<std::string, LinkEntry> links_ GUARDED_BY(links_mu_);  // "<transport>|<segment>"

  Mutex managed_mu_;
  std::map<void*, Transport*> managed_ GUARDED_BY(managed_mu_);  // buffer -> its allocator

  Mutex notify_mu_;
  std::deque<NotifyMessage> notifies_ GUARDED_BY(notify_mu_);

  Mutex progress_mu_;
  CondVar progress_cv_;
  bool stopping_ GUARDED_BY(progress_mu_) = false;
  std::deque<engine::Task*> retries_ GUARDED_BY(progress_mu_);
  std::deque<engine::Batch*> notify_ready_ GUARDED_BY(progress_mu_);
  std::thread progress_;

  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<engine::Candidate> candidates_;  // transports_ as the selection policy sees them
  std::unique_ptr<RpcServer> rpc_server_;      // destroyed first of the services
};

}  // namespace ferry
