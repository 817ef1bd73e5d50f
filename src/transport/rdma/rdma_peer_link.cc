#include "transport/rdma/rdma_peer_link.h"

#include <utility>

#include "common/log.h"
#include "transport/rdma/fabric_domain.h"

namespace ferry::rdma {

RdmaPeerLink::RdmaPeerLink(std::shared_ptr<Runtime> rt, SegmentDesc peer, size_t peer_endpoints,
                           std::vector<std::vector<Target>> routes)
    : rt_(std::move(rt)),
      peer_(std::move(peer)),
      peer_endpoints_(peer_endpoints),
      routes_(std::move(routes)) {}

Result<std::shared_ptr<RdmaPeerLink>> RdmaPeerLink::Make(std::shared_ptr<Runtime> rt,
                                                         const SegmentDesc& peer) {
  const auto it = peer.transports.find("rdma");
  if (it == peer.transports.end()) {
    return InvalidArgumentError("segment '" + peer.name + "' publishes no rdma endpoints");
  }
  Result<PublishedEndpoints> published = DecodeEndpoints(it->second);
  if (!published.ok()) {
    return InvalidArgumentError("segment '" + peer.name +
                                "': bad rdma endpoints: " + published.status().message());
  }
  if (published->provider != rt->provider) {
    return UnavailableError("segment '" + peer.name + "' uses libfabric provider '" +
                            published->provider + "', this engine '" + rt->provider + "'");
  }
  // Endpoints reach each other within a fabric; when no fabric name matches, try every pair.
  const auto& endpoints = published->endpoints;
  bool any_match = false;
  for (const auto& domain : rt->domains) {
    for (const EndpointDesc& ep : endpoints)
      any_match = any_match || ep.fabric == domain->fabric_name();
  }
  std::vector<std::vector<Target>> routes(rt->domains.size());
  size_t inserted = 0;
  for (const auto& domain : rt->domains) {
    for (size_t j = 0; j < endpoints.size(); ++j) {
      if (any_match && endpoints[j].fabric != domain->fabric_name()) continue;
      Result<fi_addr_t> addr = domain->InsertAddress(endpoints[j].address);
      if (!addr.ok()) {
        FERRY_LOG(kInfo) << "rdma: domain " << domain->name() << " cannot address endpoint " << j
                         << " of segment '" << peer.name << "': " << addr.status();
        continue;
      }
      routes[domain->index()].push_back(Target{j, *addr, endpoints[j].virt_addr});
      ++inserted;
    }
  }
  auto link = std::shared_ptr<RdmaPeerLink>(
      new RdmaPeerLink(rt, peer, endpoints.size(), std::move(routes)));
  if (inserted == 0) {
    return UnavailableError("rdma: no local domain reaches segment '" + peer.name + "'");
  }
  return link;
}

RdmaPeerLink::~RdmaPeerLink() {
  for (size_t d = 0; d < routes_.size(); ++d) {
    for (const Target& t : routes_[d]) rt_->domains[d]->RemoveAddress(t.addr);
  }
}

Status RdmaPeerLink::Route(Op& op, size_t preferred) {
  const size_t n = routes_.size();
  size_t d = preferred % n;
  for (size_t k = 0; k < n && routes_[d].empty(); ++k) d = (d + 1) % n;
  const std::vector<Target>& targets = routes_[d];
  if (targets.empty()) return UnavailableError("rdma: no route to segment '" + peer_.name + "'");
  const Target& t = targets[next_.fetch_add(1, std::memory_order_relaxed) % targets.size()];
  const RemoteKey& key = op.job->key;
  op.domain = d;
  op.dest = t.addr;
  op.rkey = key.rkeys[t.endpoint];
  op.wire_addr = t.virt_addr ? op.remote_addr : op.remote_addr - key.base;
  const Registration* local = op.job->local.get();
  op.desc = local != nullptr ? local->descs[d] : nullptr;
  if (op.desc == nullptr && rt_->domains[d]->needs_local_desc()) {
    return InvalidArgumentError("rdma: local memory at " + std::to_string(op.local_addr) +
                                " is not registered with rdma (provider needs FI_MR_LOCAL)");
  }
  return Status::Ok();
}

}  // namespace ferry::rdma
