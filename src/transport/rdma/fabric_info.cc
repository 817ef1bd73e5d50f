#include "transport/rdma/fabric_info.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fi_errno.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace ferry::rdma {
namespace {

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

// The first address `host` resolves to (numeric first: no DNS for IP literals).
Result<sockaddr_storage> Resolve(const std::string& host, socklen_t* length) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    hints.ai_flags = AI_ADDRCONFIG;
    rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  }
  if (rc != 0 || found == nullptr) {
    return InvalidArgumentError("rdma: bind host '" + host +
                                "' does not resolve: " + gai_strerror(rc));
  }
  sockaddr_storage out{};
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  freeaddrinfo(found);
  return out;
}

// fi_getinfo for `provider` with ferry's requirements. `delivery_complete` asks for
// FI_DELIVERY_COMPLETE writes (a write completes once the target placed it); `hmem` for FI_HMEM
// (device memory registered with the provider and moved by it).
int Query(const std::string& provider, const sockaddr_storage* src, socklen_t src_length,
          bool delivery_complete, bool hmem, fi_info** out) {
  FiInfoPtr hints(fi_allocinfo());
  if (!hints) return -FI_ENOMEM;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if (hmem) hints->caps |= FI_HMEM;
  // Every operation carries a struct fi_context2 the provider may use.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // The modes ferry supports: local descriptors, virtual or offset addressing, provider keys,
  // and (with FI_HMEM) registering device memory before it is used, which ferry always does.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  if (hmem) hints->domain_attr->mr_mode |= FI_MR_HMEM;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (delivery_complete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (src != nullptr) {
    void* copy = std::malloc(src_length);  // fi_freeinfo frees it
    if (copy == nullptr) return -FI_ENOMEM;
    std::memcpy(copy, src, src_length);
    hints->addr_format = src->ss_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
    hints->src_addr = copy;
    hints->src_addrlen = src_length;
  }
  return fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints.get(), out);
}

// The domains of one provider, deduplicated by name and filtered by `devices`, with FI_HMEM when
// `hmem`; with FI_DELIVERY_COMPLETE writes where the provider offers them.
Result<std::vector<FiInfoPtr>> DomainsOf(const std::string& provider,
                                         const std::vector<std::string>& devices,
                                         const sockaddr_storage* src, socklen_t src_length,
                                         bool hmem) {
  fi_info* list = nullptr;
  int rc = Query(provider, src, src_length, /*delivery_complete=*/true, hmem, &list);
  if (rc == -FI_ENODATA) rc = Query(provider, src, src_length, false, hmem, &list);
  if (rc != 0) {
    return UnavailableError(
        FiErrorText("fi_getinfo(" + provider + (hmem ? ", FI_HMEM" : "") + ")", rc));
  }
  FiInfoPtr owner(list);
  std::vector<FiInfoPtr> out;
  std::set<std::string> seen;
  for (fi_info* info = list; info != nullptr; info = info->next) {
    if (info->fabric_attr->prov_name == nullptr || provider != info->fabric_attr->prov_name) {
      continue;
    }
    const std::string name = info->domain_attr->name ? info->domain_attr->name : "";
    if (!seen.insert(name).second) continue;
    if (!devices.empty()) {
      bool wanted = false;
      for (const std::string& d : devices) wanted = wanted || d == name;
      if (!wanted) continue;
    }
    FiInfoPtr copy(fi_dupinfo(info));
    if (!copy) return UnavailableError("rdma: fi_dupinfo failed");
    out.push_back(std::move(copy));
  }
  if (out.empty()) {
    return UnavailableError("rdma: provider '" + provider + "' has no domain" +
                            (devices.empty() ? std::string() : " among the requested devices"));
  }
  return out;
}

// Whether `with_hmem` has every domain of `plain` (by name), each with FI_DELIVERY_COMPLETE
// where `plain`'s has it.
bool SameDomains(const std::vector<FiInfoPtr>& with_hmem, const std::vector<FiInfoPtr>& plain) {
  auto name = [](const FiInfoPtr& info) {
    return std::string(info->domain_attr->name ? info->domain_attr->name : "");
  };
  auto delivery_complete = [](const FiInfoPtr& info) {
    return (info->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
  };
  for (const FiInfoPtr& p : plain) {
    auto found = std::find_if(with_hmem.begin(), with_hmem.end(),
                              [&](const FiInfoPtr& h) { return name(h) == name(p); });
    if (found == with_hmem.end()) return false;
    if (delivery_complete(p) && !delivery_complete(*found)) return false;
  }
  return with_hmem.size() == plain.size();
}

}  // namespace

bool UsesSocketAddresses(std::string_view provider) {
  const std::string_view core = provider.substr(0, provider.find(';'));
  return core == "tcp" || core == "sockets" || core == "udp" || core == "net";
}

bool IsSoftwareProvider(std::string_view provider) {
  const std::string_view core = provider.substr(0, provider.find(';'));
  return UsesSocketAddresses(provider) || core == "shm" || core == "sm2";
}

uint64_t PreferredSliceSize(std::string_view provider) {
  return IsSoftwareProvider(provider) ? kSoftwareSliceSize : kNicSliceSize;
}

Result<DomainChoice> ChooseDomains(const RdmaTransportOptions& options,
                                   const std::string& bind_host) {
  std::vector<std::string> candidates;
  if (options.provider.empty()) {
    candidates = {"verbs;ofi_rxm", "efa"};
  } else {
    candidates = {options.provider};
  }
  std::string why;
  for (const std::string& provider : candidates) {
    sockaddr_storage src{};
    socklen_t src_length = 0;
    const bool bind = UsesSocketAddresses(provider) && !IsWildcard(bind_host);
    if (bind) {
      ASSIGN_OR_RETURN(src, Resolve(bind_host, &src_length));
    }
    Result<std::vector<FiInfoPtr>> domains =
        DomainsOf(provider, options.devices, bind ? &src : nullptr, src_length, /*hmem=*/false);
    if (domains.ok()) {
      DomainChoice choice;
      choice.provider = provider;
      choice.domains = std::move(domains).value();
      if (!options.hmem) {
        choice.no_hmem = "FI_HMEM not asked";
        return choice;
      }
      // FI_HMEM only where it costs host memory nothing: the same domains, each with delivery
      // completion where it had it. A provider may offer it on fewer NICs, or not at all.
      Result<std::vector<FiInfoPtr>> with_hmem =
          DomainsOf(provider, options.devices, bind ? &src : nullptr, src_length, /*hmem=*/true);
      if (!with_hmem.ok()) {
        choice.no_hmem = with_hmem.status().message();
      } else if (!SameDomains(*with_hmem, choice.domains)) {
        choice.no_hmem =
            "the provider offers FI_HMEM on fewer domains, or without delivery "
            "completion";
      } else {
        choice.domains = std::move(with_hmem).value();
        choice.hmem = true;
      }
      return choice;
    }
    if (!why.empty()) why += "; ";
    why += domains.status().message();
  }
  return UnavailableError("rdma: no usable libfabric provider: " + why);
}

bool MayHaveConnections(const std::string& address) {
  uint16_t port = 0;
  if (address.size() >= sizeof(sockaddr_in)) {
    sockaddr_storage ss{};
    std::memcpy(&ss, address.data(), std::min(address.size(), sizeof(ss)));
    if (ss.ss_family == AF_INET) {
      port = ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);  // NOLINT
    } else if (ss.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);  // NOLINT
    }
  }
  if (port == 0) return true;
  char wanted[8];
  std::snprintf(wanted, sizeof(wanted), ":%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    if (!in) return true;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // "  sl: local_address rem_address st ...": local_address is HEXIP:HEXPORT.
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state)) return true;
      const bool ours = local.size() > 5 && local.compare(local.size() - 5, 5, wanted) == 0;
      // 0A: listening; 06: TIME_WAIT; 07: closed. Anything else may carry bytes.
      if (ours && state != "0A" && state != "06" && state != "07") return true;
    }
  }
  return false;
}

int NumaNodeOf(const fi_info& info) {
  if (info.nic == nullptr || info.nic->bus_attr == nullptr ||
      info.nic->bus_attr->bus_type != FI_BUS_PCI) {
    return -1;
  }
  const fi_pci_attr& pci = info.nic->bus_attr->attr.pci;
  char path[96];
  std::snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node",
                pci.domain_id, pci.bus_id, pci.device_id, pci.function_id);
  std::ifstream in(path);
  int node = -1;
  if (!(in >> node) || node < 0) return -1;
  return node;
}

std::string FiErrorText(std::string_view call, int err) {
  const int positive = err < 0 ? -err : err;
  return std::string(call) + ": " + fi_strerror(positive) + " (fi errno " +
         std::to_string(positive) + ")";
}

}  // namespace ferry::rdma
