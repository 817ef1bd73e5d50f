#include "rpc/rpc_test_util.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace ferry::rpc::testing {
namespace {

Deadline In(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

}  // namespace

UniqueFd RawConnect(uint16_t port) {
  Result<UniqueFd> fd = ConnectTcp(HostPort{"127.0.0.1", port}, In(std::chrono::seconds(2)));
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? std::move(fd).value() : UniqueFd();
}

bool RawSend(int fd, std::string_view bytes) {
  return SendAll(fd, bytes, In(std::chrono::seconds(2))).ok();
}

std::string RequestFrame(uint16_t type, uint64_t request_id, std::string_view payload) {
  FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  return EncodeFrame(h, payload).value();
}

Result<std::pair<FrameHeader, std::string>> RawReadFrame(int fd,
                                                         std::chrono::milliseconds timeout) {
  const Deadline deadline = In(timeout);
  char bytes[kFrameHeaderSize];
  RETURN_IF_ERROR(RecvExact(fd, bytes, sizeof(bytes), deadline));
  ASSIGN_OR_RETURN(FrameHeader h, DecodeFrameHeader(std::string_view(bytes, sizeof(bytes)),
                                                    kDefaultMaxFrameBytes));
  std::string payload(h.payload_len, '\0');
  RETURN_IF_ERROR(RecvExact(fd, payload.data(), payload.size(), deadline));
  RETURN_IF_ERROR(VerifyFramePayload(h, payload));
  return std::make_pair(h, std::move(payload));
}

bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  const Deadline deadline = In(timeout);
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, PollTimeoutMs(deadline)) <= 0) return false;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset
  }
}

std::unique_ptr<RpcServer> StartEchoServer(RpcServerOptions options) {
  Result<std::unique_ptr<RpcServer>> server = RpcServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  EXPECT_TRUE((*server)
                  ->RegisterHandler(kEchoType,
                                    [](std::string_view payload, const PeerInfo&) {
                                      return Result<std::string>(std::string(payload));
                                    })
                  .ok());
  EXPECT_TRUE((*server)->Start().ok());
  return std::move(server).value();
}

}  // namespace ferry::rpc::testing
