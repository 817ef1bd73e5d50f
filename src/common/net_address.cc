#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>

#include "common/log.h"

namespace ferry {
namespace {

// getaddrinfo with numeric hosts tried first, so literals never reach DNS. "" (or a wildcard
// written "*") is the passive any-address of IPv4.
Result<AddrInfoPtr> Resolve(std::string_view host_text, int socktype, bool passive,
                            int family = AF_UNSPEC) {
  std::string host(host_text);
  if (host == "*" || (passive && host.empty())) host = "0.0.0.0";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* out = nullptr;
  int rc = getaddrinfo(host.c_str(), "0", &hints, &out);
  if (rc == EAI_NONAME) {
    hints.ai_flags &= ~AI_NUMERICHOST;
    rc = getaddrinfo(host.c_str(), "0", &hints, &out);
  }
  if (rc != 0 || out == nullptr) {
    const std::string why = rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc);
    return UnavailableError("cannot resolve '" + host + "': " + why);
  }
  return AddrInfoPtr(out);
}

void SetPort(sockaddr_storage* addr, uint16_t port) {
  if (addr->ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);  // NOLINT
  } else if (addr->ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);  // NOLINT
  }
}

uint16_t PortOf(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);  // NOLINT
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);  // NOLINT
  }
  return 0;
}

std::string NumericHost(const sockaddr* addr, socklen_t length) {
  char host[NI_MAXHOST] = "";
  if (getnameinfo(addr, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

std::optional<uint16_t> ParsePort(std::string_view text) {
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value == 0 ||
      value > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(value);
}

}  // namespace

bool IsWildcardHost(std::string_view host) {
  if (host.empty() || host == "*") return true;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  // Any spelling of the unspecified address: "0.0.0.0", "::", "0:0::0", "::0", ...
  const std::string text(host);
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&v6);
  in_addr v4{};
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 && v4.s_addr == INADDR_ANY;
}

bool IsLoopbackHost(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost" || host == "localhost.") return true;
  constexpr std::string_view kLocalDomain = ".localhost";
  if (host.size() > kLocalDomain.size() && host.ends_with(kLocalDomain)) return true;
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Result<std::string> LocalAddressTowards(const HostPort& peer, int family) {
  Result<AddrInfoPtr> addrs = Resolve(peer.host, SOCK_DGRAM, false, family);
  if (!addrs.ok()) return addrs.status().WithContext("finding the route to " + peer.ToString());
  std::string why;
  for (const addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      why = "socket: " + ErrnoText(errno);
      continue;
    }
    sockaddr_storage target{};
    std::memcpy(&target, ai->ai_addr, ai->ai_addrlen);
    SetPort(&target, peer.port);
    // A UDP connect only picks the route and the source address; no packet leaves.
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&target), ai->ai_addrlen) != 0) {
      why = "connect: " + ErrnoText(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {  // NOLINT
      why = "getsockname: " + ErrnoText(errno);
      continue;
    }
    std::string host = NumericHost(reinterpret_cast<const sockaddr*>(&local), length);  // NOLINT
    if (!host.empty() && !IsWildcardHost(host)) return host;
    why = "no source address";
  }
  return UnavailableError("no local address routes to " + peer.ToString() + ": " + why);
}

Result<std::string> FirstNonLoopbackAddress(bool ipv6) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return UnavailableError("getifaddrs: " + ErrnoText(errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, freeifaddrs);
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0 ||
        (i->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    const int family = i->ifa_addr->sa_family;
    if (family != (ipv6 ? AF_INET6 : AF_INET)) continue;
    if (family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);  // NOLINT
      if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) continue;
    }
    const socklen_t length = family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    std::string host = NumericHost(i->ifa_addr, length);
    if (!host.empty() && !IsLoopbackHost(host)) return host;
  }
  return NotFoundError(std::string("no interface is up with a non-loopback ") +
                       (ipv6 ? "IPv6" : "IPv4") + " address");
}

Result<std::string> DefaultAdvertiseHost(std::string_view bind_host, const HostPort* store) {
  if (!IsWildcardHost(bind_host)) return std::string(bind_host);
  const std::string ask =
      "; set advertise_host (FERRY_ADVERTISE_HOST, ferry-bench --advertise_host)";
  const std::string bound = "host '" + std::string(bind_host) + "' listens on every interface";
  const bool ipv6 = bind_host == "::" || bind_host == "[::]";
  if (store != nullptr) {
    // An IPv4 wildcard listens on IPv4 only: route over IPv4. "::" (dual-stack) takes either.
    Result<std::string> routed = LocalAddressTowards(*store, ipv6 ? AF_UNSPEC : AF_INET);
    if (!routed.ok()) {
      return UnavailableError(bound + ", and the address peers reach it at cannot be found: " +
                              routed.status().message() + ask);
    }
    if (!IsLoopbackHost(*routed)) return routed;
    // The store is on loopback (a per-host proxy, or one machine): the route says nothing about
    // how other hosts reach this one.
    Result<std::string> first = FirstNonLoopbackAddress(ipv6);
    if (!first.ok()) return routed;  // a machine without other interfaces: loopback it is
    FERRY_LOG(kWarn) << bound << " without advertise_host, and the metadata store is on loopback: "
                     << "advertising " << *first << ", the first non-loopback interface address";
    return first;
  }
  Result<std::string> first = FirstNonLoopbackAddress(ipv6);
  if (!first.ok()) {
    return UnavailableError(bound + " and there is no metadata store to route to, and " +
                            first.status().message() + ask);
  }
  FERRY_LOG(kWarn) << bound << " without advertise_host: advertising " << *first
                   << ", the first non-loopback interface address (no metadata store to route to)";
  return first;
}

std::string PortRange::ToString() const {
  if (unbounded()) return "any";
  return std::to_string(first) + "-" + std::to_string(last);
}

Result<PortRange> ParsePortRange(std::string_view text) {
  if (text.empty()) return PortRange{};
  const size_t dash = text.find('-');
  const std::optional<uint16_t> first = ParsePort(text.substr(0, dash));
  const std::optional<uint16_t> last =
      dash == std::string_view::npos ? first : ParsePort(text.substr(dash + 1));
  if (!first || !last || *last < *first) {
    return InvalidArgumentError("port range '" + std::string(text) +
                                "': expected FIRST-LAST with 1 <= FIRST <= LAST <= 65535 "
                                "(e.g. 20000-20100) or one port");
  }
  return PortRange{*first, *last};
}

Result<BoundListener> ListenTcpInRange(const std::string& host, PortRange range,
                                       std::string_view what) {
  if (!range.unbounded() && range.last < range.first) {
    return InvalidArgumentError("bad port range " + range.ToString() + " for " + std::string(what));
  }
  Result<AddrInfoPtr> addrs = Resolve(host, SOCK_STREAM, true);
  if (!addrs.ok()) {
    return InvalidArgumentError(std::string(what) + " bind host: " + addrs.status().message());
  }
  const addrinfo& ai = **addrs;
  const uint32_t first = range.first;
  const uint32_t last = range.unbounded() ? 0 : range.last;
  for (uint32_t p = first; p <= last; ++p) {
    UniqueFd fd(socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
    if (!fd.valid()) return UnavailableError("socket: " + ErrnoText(errno));
    const int one = 1;
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage addr{};
    std::memcpy(&addr, ai.ai_addr, ai.ai_addrlen);
    SetPort(&addr, static_cast<uint16_t>(p));
    const std::string where = HostPort{host, static_cast<uint16_t>(p)}.ToString();
    if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), ai.ai_addrlen) != 0) {  // NOLINT
      const int err = errno;
      if (err == EADDRINUSE && !range.unbounded()) continue;
      const std::string text = std::string(what) + " bind " + where + ": " + ErrnoText(err);
      if (err == EACCES) return PermissionDeniedError(text);
      return UnavailableError(text);
    }
    // With SO_REUSEADDR two sockets may bind one port before either listens; the loser learns
    // it here.
    if (listen(fd.get(), SOMAXCONN) != 0) {
      const int err = errno;
      if (err == EADDRINUSE && !range.unbounded()) continue;
      return UnavailableError(std::string(what) + " listen " + where + ": " + ErrnoText(err));
    }
    socklen_t length = sizeof(addr);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &length) != 0) {  // NOLINT
      return UnavailableError("getsockname: " + ErrnoText(errno));
    }
    return BoundListener{std::move(fd), PortOf(addr)};
  }
  return UnavailableError("no free port for " + std::string(what) + " in port range " +
                          range.ToString() + " on " + (host.empty() ? "0.0.0.0" : host) +
                          " (every port of the range is taken; widen port_range)");
}

}  // namespace ferry
