// Authenticated engines (EngineOptions::auth_secret / FERRY_AUTH_SECRET), two real processes:
// this test's engine holds the cluster secret; ferry-test-peer processes get theirs from
// FERRY_AUTH_SECRET. A peer with the same secret transfers; a peer with another one refuses the
// data connection (tcp) or grant channel (shm) with PermissionDenied, its buffer stays as it
// was, and it logs the refusal once however often it is tried. Descriptors come from an HTTP
// metadata server, so the refusal happens on the data path itself, not at openSegment.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/transfer_engine.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::Fnv;
using testing::Peer;
using testing::TempDir;
using testing::WaitFor;

constexpr char kSecret[] = "the cluster secret, 32 bytes ...";
constexpr char kOther[] = "some other secret of 32 bytes ..";
constexpr size_t kPeerBytes = 4 << 20;
constexpr size_t kWrite = 1 << 20;

// Lines of `path` that record a refusal (common/peer_auth.h's RefusalLog wording).
size_t RefusalLines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("further refusals of this peer are not logged") != std::string::npos) ++n;
  }
  return n;
}

class AuthTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("auth");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    auto server = testing::MetadataServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    metadata_ = std::move(server).value();
    connection_ = "http://" + metadata_->endpoint() + "/metadata";
    EngineOptions options;
    options.metadata_conn = connection_;
    options.transports = {GetParam()};
    options.auth_secret = kSecret;
    options.task_timeout = 8s;
    options.request_timeout = 2s;
    ASSERT_TRUE(engine_.init(options).ok());
    local_.assign(kPeerBytes, 0);
    for (size_t i = 0; i < local_.size(); ++i) local_[i] = static_cast<unsigned char>(i * 13 + 1);
    ASSERT_TRUE(engine_.registerLocalMemory(local_.data(), local_.size()).ok());
  }

  // A peer holding `secret`, named `name`, its stderr in <dir>/<name>.log.
  Peer StartPeer(const std::string& name, const std::string& secret) {
    return testing::StartTestPeer(
        {"FERRY_AUTH_SECRET=" + secret, std::string("FERRY_PEER_TRANSPORTS=") + GetParam()},
        connection_, name, kPeerBytes, dir_->path());
  }

  BatchStatus Write(SegmentId target, uint64_t remote) {
    Result<BatchId> batch = engine_.allocateBatchID(1);
    EXPECT_TRUE(batch.ok());
    const TransferRequest request{OpCode::kWrite, local_.data(), target, remote, kWrite};
    EXPECT_TRUE(engine_.submitTransfer(*batch, {request}).ok());
    Result<BatchStatus> summary = engine_.waitBatch(*batch, 30s);
    EXPECT_TRUE(summary.ok()) << summary.status();
    EXPECT_TRUE(engine_.freeBatchID(*batch).ok());
    return summary.ok() ? *summary : BatchStatus{};
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<testing::MetadataServer> metadata_;
  std::string connection_;
  TransferEngine engine_;
  std::vector<unsigned char> local_;
};

TEST_P(AuthTest, ThePeerWithTheSecretTransfersAndTheOneWithAnotherRefuses) {
  Peer good = StartPeer("good", kSecret);
  ASSERT_TRUE(good.process);
  Result<SegmentId> good_seg = engine_.openSegment(good.name);
  ASSERT_TRUE(good_seg.ok()) << good_seg.status();
  BatchStatus ok = Write(*good_seg, good.addr);
  EXPECT_EQ(ok.state, TransferState::kCompleted) << ok.first_error;
  EXPECT_EQ(good.Sum(0, kWrite), Fnv(local_.data(), kWrite));

  Peer bad = StartPeer("bad", kOther);
  ASSERT_TRUE(bad.process);
  Result<SegmentId> bad_seg = engine_.openSegment(bad.name);
  ASSERT_TRUE(bad_seg.ok()) << bad_seg.status();
  const uint64_t before = bad.Sum(0, bad.length);
  for (int attempt = 0; attempt < 3; ++attempt) {
    BatchStatus refused = Write(*bad_seg, bad.addr);
    EXPECT_EQ(refused.state, TransferState::kFailed);
    EXPECT_EQ(refused.first_error.code(), StatusCode::kPermissionDenied) << refused.first_error;
    EXPECT_NE(refused.first_error.message().find("failed authentication"), std::string::npos)
        << refused.first_error;
  }
  EXPECT_EQ(bad.Sum(0, bad.length), before) << "the refusing peer's buffer changed";
  // The refusing peer logged it, once for every attempt of this process together.
  const std::string log = bad.process->log_path();
  EXPECT_TRUE(WaitFor([&] { return RefusalLines(log) >= 1; }, 10s)) << bad.process->LogTail();
  EXPECT_EQ(RefusalLines(log), 1u) << bad.process->LogTail();
  EXPECT_EQ(RefusalLines(good.process->log_path()), 0u) << good.process->LogTail();

  // The peer with the secret still serves (the refusals touched nothing of it).
  BatchStatus again = Write(*good_seg, good.addr + kWrite);
  EXPECT_EQ(again.state, TransferState::kCompleted) << again.first_error;
}

TEST(AuthOptionsTest, AShortSecretIsABadOption) {
  EngineOptions options;
  options.transports = {"tcp"};
  options.auth_secret = "short";
  TransferEngine engine;
  const Status s = engine.init(options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("at least 16 bytes"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(Transports, AuthTest, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ferry
