// The rdma transport: one-sided RMA (fi_write / fi_read on FI_EP_RDM endpoints) over libfabric
// (DESIGN.md, transport/rdma/). The same code drives real NICs ("verbs;ofi_rxm", "efa") and the
// software "tcp;ofi_rxm" provider. libfabric's headers never leave this folder.
//
// Published bytes (SegmentDesc::transports["rdma"]): the provider and one endpoint address per
// domain in use. Key bytes (BufferDesc::keys["rdma"]): the registration's id, base and length and
// one rkey per domain. Both are ferry's own text formats (rdma_wire.h), decoded strictly.
//
// Access checks. One-sided RMA moves bytes without the target's CPU, so the target cannot pin
// each access. Instead the memory region (MR) is the check: UnregisterMemory closes the MR, so an
// old key is dead at the provider, and a completion error is resolved by asking the target
// (TransportContext::Exchange) whether the key and the planned generation are still live: a dead
// key is Stale. See RdmaTransport (rdma_transport_impl.h) for the full contract.
//
// Deadlines (Slice::deadline, transport.h). Each domain's progress thread checks them every few
// milliseconds, so a slice completes Timeout at most ~10 ms after its deadline (plus the time to
// close an endpoint) when it did not finish:
//   - a slice submitted after its deadline, or still queued (not handed to the provider) when it
//     passes, completes Timeout and is never posted: nothing of it moves;
//   - a posted operation whose deadline passes is ended by closing the domain's initiator
//     endpoint (its connections go with it; a new endpoint is opened for the other operations,
//     which are posted again) and only then is the slice completed Timeout, so no late
//     completion can reach freed state. The same holds for op_timeout, which bounds each posted
//     operation on its own;
//   - a failed operation whose deadline passes while the target is asked about it (a frozen
//     peer does not answer) completes Timeout, not Unavailable.
// Device memory (a location such as cuda:<n>). With FI_HMEM (RdmaTransportOptions::hmem, when
// the provider offers it) RegisterMemory registers device memory with the provider
// (fi_mr_regattr, FI_HMEM_CUDA and the device's ordinal; FI_HMEM_ROCR) and the provider moves it,
// on both sides: capabilities().reaches_device_memory. Without FI_HMEM, and for a device whose
// memory this libfabric cannot register (a build without CUDA: registration fails), it answers
// NotFound, naming why (logged once), and the engine plans that memory on another transport
// (tcp, staged). stats().hmem and the log line of Start say which the transport uses; the
// counters device_registrations and device_refusals (getMetrics) count each device region.
//
// What rdma cannot promise: RMA is one-sided. A WRITE already handed to the provider/NIC may
// still land in the target's memory after the slice completed Timeout (its bytes may be in the
// network or the peer's socket buffer; the target's CPU never sees the access, so it cannot
// refuse it). A READ cannot land after Timeout: the initiator endpoint is closed before Timeout
// is reported, and a closed endpoint writes nothing more into the local buffer.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry {

struct RdmaTransportOptions {
  // e.g. "verbs;ofi_rxm", "efa", "tcp;ofi_rxm"; empty: the first of verbs;ofi_rxm, efa found here
  std::string provider;
  // domain-name filter (e.g. "mlx5_0"); empty: all domains of the provider
  std::vector<std::string> devices;
  // each posted operation not completed by then fails (Timeout); slices also end at their own
  // deadline, whichever comes first
  std::chrono::milliseconds op_timeout{5000};
  // completion errors retried on another endpoint/domain, up to this
  int max_retries = 2;
  // operations in flight per domain; Submit returns Again beyond the queue bound
  size_t max_inflight = 256;
  // Ask the provider for FI_HMEM (device memory registered with it, fi_mr_regattr with the
  // device's interface, and moved by it: GPUDirect RDMA on a NIC). Where the provider does not
  // offer it, or this libfabric cannot register a device's memory, rdma refuses device memory
  // (NotFound) and the engine carries it over tcp, staged through host memory.
  bool hmem = true;
};

// Whether a provider is usable here: Ok(name of the provider chosen) or Unavailable with why.
Result<std::string> ProbeRdmaProvider(const RdmaTransportOptions& options);

// The factory the transport list uses. The transport is not started.
std::unique_ptr<Transport> CreateRdmaTransport(RdmaTransportOptions options);

}  // namespace ferry
