// POSIX socket helpers for the RPC room: an owning fd, TCP connect/listen with getaddrinfo, and
// deadline-bounded send/receive on non-blocking sockets (every wait is a poll() with a timeout).
// Sockets are created non-blocking and close-on-exec; sends never raise SIGPIPE.
//
// Thread contract: UniqueFd is thread-compatible; the functions are thread-safe (distinct fds
// may be used from distinct threads).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/host_port.h"
#include "common/net_address.h"
#include "common/unique_fd.h"
#include "ferry/status.h"

namespace ferry::rpc {

using Deadline = std::chrono::steady_clock::time_point;

using ::ferry::UniqueFd;

// Milliseconds from now until `deadline` for poll(): 0 when past, rounded up, capped at 1 h.
int PollTimeoutMs(Deadline deadline);

// Resolves `peer` (IP literal or name, via getaddrinfo) and connects to the first address that
// accepts, waiting at most until `deadline`. Unavailable on any failure (refused, unreachable,
// unresolvable, or the deadline passed), with the reason in the message.
Result<UniqueFd> ConnectTcp(const HostPort& peer, Deadline deadline);

// A listening socket and the port it is bound to.
struct TcpListener {
  UniqueFd fd;
  uint16_t port = 0;
};

// Binds and listens on `host` (an address or name; resolved with getaddrinfo, first result) through
// common/net_address.h's ListenTcpInRange. An explicit `port` wins: exactly that port, or with
// `port_range_end` every port in [port, port_range_end] in order, the first free one taken.
// port 0 takes the first free port of `fallback` (the engine's port_range), or lets the kernel
// pick when it is unbounded. InvalidArgument for a bad range or host; Unavailable (naming the
// range) when no port in it is free; PermissionDenied for a privileged port.
Result<TcpListener> ListenTcp(std::string_view host, uint16_t port, uint16_t port_range_end,
                              PortRange fallback = {});

// Sends every byte of `bytes` before `deadline`. Timeout when the deadline passes first;
// Unavailable when the connection fails (the bytes may be partly sent).
Status SendAll(int fd, std::string_view bytes, Deadline deadline);

// Receives exactly `size` bytes into `out` before `deadline`. Timeout when the deadline passes
// first; Unavailable when the peer closes the connection or it fails.
Status RecvExact(int fd, char* out, size_t size, Deadline deadline);

// True when `fd` has something to read or a hang-up/error pending right now (no wait). An idle
// pooled connection for which this is true is dead or out of step and must not be reused.
bool HasPendingInputOrError(int fd);

// The numeric address of a peer ("127.0.0.1", port) from accept()'s address.
HostPort NumericAddress(const sockaddr_storage& addr, socklen_t len);

}  // namespace ferry::rpc
