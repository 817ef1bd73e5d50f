// The tcp transport with a cluster secret (TransportStartInfo::auth_secret, common/peer_auth.h),
// over real sockets on 127.0.0.1: the same secret moves bytes; another secret, a missing one or
// one the target does not use fails the slices with PermissionDenied on the initiator, is
// refused (and counted) by the target, and leaves the target's bytes as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/peer_auth.h"
#include "transport/tcp/tcp_transport_fixture.h"

namespace ferry::tcp {
namespace {

constexpr char kSecret[] = "the cluster secret, 32 bytes ...";
constexpr char kOther[] = "some other secret of 32 bytes ..";

class TcpAuthTest : public TcpTransportTest {
 protected:
  void StartBoth(const std::string& target_secret, const std::string& initiator_secret,
                 TcpTransportOptions o = Options()) {
    target_ = std::make_unique<TcpTransport>(o);
    Result<std::string> endpoint = target_->Start(
        &target_ctx_,
        {.local_segment = "target", .bind_host = "127.0.0.1", .auth_secret = target_secret});
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *endpoint;
    initiator_ = std::make_unique<TcpTransport>(o);
    Result<std::string> mine = initiator_->Start(
        &initiator_ctx_,
        {.local_segment = "initiator", .bind_host = "127.0.0.1", .auth_secret = initiator_secret});
    ASSERT_TRUE(mine.ok()) << mine.status();
  }

  // Writes a pattern to the target's region; returns the slice's status.
  Status WriteOnce() {
    std::vector<uint8_t> local(64 * 1024);
    Fill(local.data(), local.size(), 7);
    std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
    if (link == nullptr) return InternalError("no link");
    SliceBatch batch(&initiator_ctx_);
    batch.Add(Make(OpCode::kWrite, local.data(), 4096, local.size()));
    Run(*link, batch);
    const Status status = initiator_ctx_.StatusOf(batch.ptrs[0]);
    if (status.ok() && !std::equal(local.begin(), local.end(), remote_.begin() + 4096)) {
      return InternalError("the write completed but the bytes differ");
    }
    return status;
  }

  void ExpectRefused(const Status& status, const std::string& says) {
    EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << status;
    EXPECT_NE(status.message().find(says), std::string::npos) << status;
    EXPECT_TRUE(std::all_of(remote_.begin(), remote_.end(), [](uint8_t b) { return b == 0xAA; }))
        << "the target's bytes changed";
    EXPECT_TRUE(WaitFor([&] { return target_->stats().auth_refusals >= 1; }, 5s));
    EXPECT_EQ(target_->stats().rejected_accesses, 0u);  // no request ever reached the check
  }
};

TEST_F(TcpAuthTest, TheSameSecretMovesBytes) {
  StartBoth(kSecret, kSecret);
  const Status s = WriteOnce();
  EXPECT_TRUE(s.ok()) << s;
  // And reads back over the authenticated connection.
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> back(64 * 1024);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kRead, back.data(), 4096, back.size()));
  Run(*link, batch);
  ExpectAllOk(batch);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), remote_.begin() + 4096));
  EXPECT_EQ(target_->stats().auth_refusals, 0u);
}

TEST_F(TcpAuthTest, AnotherSecretIsRefusedAndWritesNothing) {
  StartBoth(kSecret, kOther);
  ExpectRefused(WriteOnce(), "failed authentication");
}

TEST_F(TcpAuthTest, AnInitiatorWithoutTheSecretIsRefusedAndWritesNothing) {
  StartBoth(kSecret, "");
  ExpectRefused(WriteOnce(), "requires authentication");
}

TEST_F(TcpAuthTest, ATargetWithoutASecretRefusesAnInitiatorThatRequiresOne) {
  StartBoth("", kSecret);
  ExpectRefused(WriteOnce(), "it has no auth secret");
}

TEST_F(TcpAuthTest, AStalledHandshakeIsClosedWithinTheIoTimeout) {
  StartBoth(kSecret, kSecret, Options(300ms));
  RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
  ASSERT_TRUE(client.SendAll("FAUT\x01\x01", 6));  // the start of a hello, then nothing
  uint8_t byte = 0;
  EXPECT_EQ(client.RecvSome(&byte, 1, 5s), 0);  // closed by the target
  EXPECT_TRUE(WaitFor([&] { return target_->stats().auth_refusals == 1; }, 5s));
}

TEST_F(TcpAuthTest, AShortSecretIsRefusedAtStart) {
  TcpTransport tcp(Options());
  EXPECT_EQ(tcp.Start(&target_ctx_, {.local_segment = "a",
                                      .bind_host = "127.0.0.1",
                                      .auth_secret = "short"})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::tcp
