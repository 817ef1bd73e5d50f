// Where ferry listens and what peers are told (README "Deploying across hosts"): wildcard and
// loopback hosts, the local address that routes towards a peer, port ranges, and the one TCP
// listener every ferry listener binds through (the RPC server, the tcp data listener), so that a
// port range bounds them all the same way.
//
// Thread contract: pure functions and value types; safe from any thread.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/host_port.h"
#include "common/unique_fd.h"
#include "ferry/status.h"

namespace ferry {

// Owns a getaddrinfo() result list (freeaddrinfo when it goes).
struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// True for the hosts that mean "every interface": "", "*" and any spelling of the unspecified
// address ("0.0.0.0", "::", "[::]", "0:0::0", ...). Peers can never dial such an address, so it
// is never published.
bool IsWildcardHost(std::string_view host);

// True for "localhost" (and "localhost.", "*.localhost"), 127.0.0.0/8, ::1 and ::ffff:127.x.y.z:
// an address that reaches this host only.
bool IsLoopbackHost(std::string_view host);

// The numeric address of the local interface the kernel would use to reach `peer` (a UDP
// socket connect()ed to it, then getsockname; nothing is sent). `peer.host` may be a name.
// Unavailable, naming the peer, when it does not resolve or no route leads there. `family`
// (AF_INET, AF_INET6) narrows the peer's addresses tried, so that an IPv4 listener is never
// advertised by an IPv6 address; AF_UNSPEC tries every one.
Result<std::string> LocalAddressTowards(const HostPort& peer, int family = AF_UNSPEC);

// The numeric address of the first interface that is up, not loopback and has an IPv4 address
// (IPv6 global addresses when `ipv6`), in getifaddrs order. NotFound when there is none.
Result<std::string> FirstNonLoopbackAddress(bool ipv6);

// The host peers are told for an engine that binds `bind_host`, when no advertise_host was
// given: `bind_host` itself unless it is a wildcard; for a wildcard, the local address that
// routes to `store` (the metadata store's first endpoint), or without a store (`store` null:
// P2PHANDSHAKE) the first non-loopback interface address of the wildcard's family. The error
// (Unavailable) says what was tried and asks for advertise_host.
Result<std::string> DefaultAdvertiseHost(std::string_view bind_host, const HostPort* store);

// An inclusive range of TCP ports listeners may bind. {0, 0}: unbounded (the kernel picks).
struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
  bool unbounded() const { return first == 0; }
  // "20000-20100", or "any" when unbounded.
  std::string ToString() const;
  friend bool operator==(const PortRange&, const PortRange&) = default;
};

// Parses "FIRST-LAST" (1 <= FIRST <= LAST <= 65535) or a single "PORT"; "" is unbounded.
// InvalidArgument quoting the text and the expected form otherwise.
Result<PortRange> ParsePortRange(std::string_view text);

// A listening TCP socket (non-blocking, close-on-exec, SO_REUSEADDR) and its port.
struct BoundListener {
  UniqueFd fd;
  uint16_t port = 0;
};

// Binds and listens on `host` (an IP literal or a name, first getaddrinfo result; a wildcard
// host binds every interface of its family, "" meaning IPv4's 0.0.0.0) at the first port of
// `range` that is free, trying them in order; an unbounded range lets the kernel pick. `what`
// names the listener in errors ("rpc", "tcp data"). InvalidArgument when `host` does not
// resolve; Unavailable "no free port for <what> in <range> on <host>" when every port of the
// range is taken; PermissionDenied for a privileged port; Unavailable for other socket errors.
Result<BoundListener> ListenTcpInRange(const std::string& host, PortRange range,
                                       std::string_view what);

}  // namespace ferry
