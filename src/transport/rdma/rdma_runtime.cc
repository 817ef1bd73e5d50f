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
  Slice* slice = job->slice;
  // The last op held the last reference: the job, and with it the job's reference to the link,
  // goes before the engine hears of the slice, so a link the engine drops afterwards is freed
  // (its address-vector entries removed) when the engine's last reference goes.
  job.reset();
  rt->ctx->CompleteSlice(slice, final_status);
}

std::string DescribeOp(const Op& op) {
  return std::string(op.opcode == OpCode::kWrite ? "write" : "read") + " of " +
         std::to_string(op.length) + " bytes " + (op.opcode == OpCode::kWrite ? "to" : "from") +
         " segment '" + op.job->link->peer().name + "'";
}

Status OpTimeout(const Op& op, Clock::time_point now, bool posted) {
  Runtime* rt = op.job->rt;
  rt->counters.timeouts.fetch_add(1, std::memory_order_relaxed);
  if (op.job->deadline <= now) {
    return TimeoutError("rdma: " + DescribeOp(op) + " did not finish by its deadline (" +
                        (posted ? "posted; its endpoint was closed" : "never posted") + ")");
  }
  return TimeoutError("rdma: " + DescribeOp(op) + " did not complete within op_timeout (" +
                      std::to_string(rt->options.op_timeout.count()) + " ms)");
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
