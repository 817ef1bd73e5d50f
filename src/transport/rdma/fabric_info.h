// libfabric discovery for the rdma transport: which provider and domains to use, and small
// helpers around libfabric's error numbers. libfabric headers stay inside transport/rdma/.
//
// Thread contract: free functions; safe from any thread (fi_getinfo is thread-safe).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "transport/rdma/rdma_transport.h"

namespace ferry::rdma {

inline constexpr uint32_t kFiVersion = FI_VERSION(1, 17);

struct FiInfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

// The domains a transport uses: one fi_info per distinct domain name of one provider.
struct DomainChoice {
  std::string provider;            // e.g. "tcp;ofi_rxm"
  std::vector<FiInfoPtr> domains;  // never empty
  // The domains were opened with FI_HMEM: the provider registers and moves device memory.
  bool hmem = false;
  // Without FI_HMEM: why (not asked, the provider's answer, fewer domains).
  std::string no_hmem;
};

// Picks the provider (options.provider, or the first of "verbs;ofi_rxm", "efa" present) and its
// FI_EP_RDM + FI_RMA domains, filtered by options.devices. With options.hmem, the same domains
// with FI_HMEM where the provider offers it on all of them (and delivery completion where it
// offers that without FI_HMEM), else without FI_HMEM: host memory loses nothing to it. For
// providers addressed by IP (tcp, sockets, udp), a non-wildcard `bind_host` restricts the domains
// to the one owning that address and binds endpoints there. Unavailable (with libfabric's reason)
// when none fits; InvalidArgument when `bind_host` does not resolve.
Result<DomainChoice> ChooseDomains(const RdmaTransportOptions& options,
                                   const std::string& bind_host);

// True for providers whose endpoints are IP sockets ("tcp;ofi_rxm", "sockets", "udp;ofi_rxd").
bool UsesSocketAddresses(std::string_view provider);

// True for providers that move bytes with the host's CPU rather than a NIC: the core provider
// (the name's first part) is tcp, sockets, udp, net, shm or sm2.
bool IsSoftwareProvider(std::string_view provider);

// The slice size the rdma transport prefers (TransportCapabilities::preferred_slice_size). A
// software provider pays CPU time per operation (a message, a completion, progress on both
// sides) and has no NICs to stripe over: kSoftwareSliceSize. Any other provider (a NIC:
// verbs, efa, ...) keeps kNicSliceSize, so that a block is cut into slices that spread over the
// domains (NICs) in use.
inline constexpr uint64_t kSoftwareSliceSize = uint64_t{4} << 20;
inline constexpr uint64_t kNicSliceSize = uint64_t{256} << 10;
uint64_t PreferredSliceSize(std::string_view provider);

// For an IP-addressed provider: whether any TCP connection to `address` (fi_getname bytes of a
// listening endpoint, a sockaddr) may exist, judged from the kernel's socket tables of this
// network namespace. Conservative: true unless the tables were read and show no socket on that
// local port other than the listener and closed ones.
bool MayHaveConnections(const std::string& address);

// The NUMA node of the NIC behind `info` (from sysfs), or -1 when unknown.
int NumaNodeOf(const fi_info& info);

// "fi_write: Connection reset by peer (fi errno 104)" style text; `err` may be negative.
std::string FiErrorText(std::string_view call, int err);

}  // namespace ferry::rdma
