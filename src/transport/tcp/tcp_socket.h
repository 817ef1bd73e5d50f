// Small POSIX socket helpers for the tcp transport: an owning fd, address resolution, a
// non-blocking connect, a listener. Every socket is non-blocking and close-on-exec; callers send
// with MSG_NOSIGNAL. Nothing here blocks: waits belong to the IoLoop.
//
// Thread contract: UniqueFd is thread-compatible; the functions are thread-safe.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "ferry/status.h"

namespace ferry::tcp {

using ::ferry::UniqueFd;

// A resolved socket address (IPv4 or IPv6).
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  // "1.2.3.4:5" or "[::1]:5".
  std::string ToString() const;
};

// Resolves `host` (an IP literal first, then a name via getaddrinfo) with `port`; the first
// stream address wins. Unavailable when it cannot be resolved.
Result<SocketAddress> ResolveAddress(const std::string& host, uint16_t port);

// A new non-blocking socket with a connect to `addr` begun. `*connected` says whether it already
// completed; otherwise wait for writability and call FinishConnect. Unavailable on failure.
Result<UniqueFd> BeginConnect(const SocketAddress& addr, bool* connected);
// The outcome of a connect begun by BeginConnect once the socket is writable (or in error).
Status FinishConnect(int fd);

// One non-blocking recv into [buf, buf + len), retried on EINTR. kProgress with *got > 0;
// kWouldBlock when nothing is there; kPeerClosed at end of stream; kError with errno set.
enum class RecvOutcome { kProgress, kWouldBlock, kPeerClosed, kError };
RecvOutcome RecvSome(int fd, void* buf, size_t len, size_t* got);

// Prepares a connected data socket: no Nagle (requests and responses are written whole and
// latency matters), and TCP keepalive (60 s idle, 3 probes 10 s apart), so an idle connection
// whose peer host vanished is reaped by the kernel instead of holding a slot forever.
void ConfigureDataSocket(int fd);

// Makes the next close of `fd` reset the connection (SO_LINGER 0): what is still unsent is
// dropped and the peer sees the reset at once, not after the data queued ahead of a FIN.
void ResetOnClose(int fd);

// Listening sockets come from common/net_address.h (ListenTcpInRange), shared with the RPC
// server so that one port range bounds both.

}  // namespace ferry::tcp
