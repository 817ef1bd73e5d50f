// Test helpers for the rpc room: raw sockets that speak (or break) the frame protocol by hand,
// and a server with an echo handler. Tests only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/host_port.h"
#include "ferry/status.h"
#include "rpc/frame.h"
#include "rpc/rpc_server.h"
#include "rpc/socket_io.h"

namespace ferry::rpc::testing {

inline constexpr uint16_t kEchoType = 100;

// 127.0.0.1:port, where the tests' servers listen.
inline HostPort Local(uint16_t port) { return HostPort{"127.0.0.1", port}; }

// A connected socket to 127.0.0.1:port (fails the calling test on error).
UniqueFd RawConnect(uint16_t port);

// Sends raw bytes; true when all went out within 2 s.
bool RawSend(int fd, std::string_view bytes);

// A request frame's bytes.
std::string RequestFrame(uint16_t type, uint64_t request_id, std::string_view payload);

// Reads one frame (header, payload) within `timeout`.
Result<std::pair<FrameHeader, std::string>> RawReadFrame(
    int fd, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// True when the peer closes `fd` (EOF or reset) within `timeout`; bytes read meanwhile are
// discarded.
bool ClosedWithin(int fd, std::chrono::milliseconds timeout);

// A started server on 127.0.0.1 with kEchoType answering its payload (fails the test on error).
std::unique_ptr<RpcServer> StartEchoServer(RpcServerOptions options = {});

}  // namespace ferry::rpc::testing
