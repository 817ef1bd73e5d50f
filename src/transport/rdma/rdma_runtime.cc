#include "transport/rdma/rdma_runtime.h"

#include <utility>

#include "common/log.h"
#include "transport/rdma/fabric_domain.h"
#include "transport/rdma/rdma_peer_link.h"
#include "transport/rdma/recovery.h"

namespace ferry::rdma {

void FinishOp(std::unique_ptr<Op> op, const Status& status) {
  std::shared_ptr<Job> job = std::move(op->job);
  op.reset();
  Status final_status;
  {
    MutexLock lock(job->mu);
    if (!status.ok() && job->error.ok()) job->error = status;
    if (--job->ops_left > 0) return;
    final_status = job->error;
  }
  job->local.Release();
  Runtime* rt = job->rt;
  if (final_status.code() == StatusCode::kStale) {
    rt->counters.stale.fetch_add(1, std::memory_order_relaxed);
  }
  rt->queued.fetch_sub(1, std::memory_order_acq_rel);
  rt->ctx->CompleteSlice(job->slice, final_status);
}

std::string DescribeOp(const Op& op) {
  return std::string(op.opcode == OpCode::kWrite ? "write" : "read") + " of " +
         std::to_string(op.length) + " bytes " + (op.opcode == OpCode::kWrite ? "to" : "from") +
         " segment '" + op.job->link->peer().name + "'";
}

Runtime::~Runtime() {
  if (recovery) recovery->Stop();
  for (auto& domain : domains) domain->Stop();
  for (const auto& reg : memory.TakeAll()) {
    for (fid_mr* mr : reg->mrs) {
      if (mr == nullptr) continue;
      const int rc = fi_close(&mr->fid);
      if (rc != 0) FERRY_LOG(kWarn) << FiErrorText("rdma: closing a memory region", rc);
    }
  }
  domains.clear();
}

}  // namespace ferry::rdma
