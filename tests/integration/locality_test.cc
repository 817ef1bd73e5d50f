// Locality and selection across real processes: which transport the engine picks for a peer on
// this host, on "another host" (forced with host_id), in another network namespace of this
// machine, when cross-process access is refused, and for managed (shared) buffers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "ferry/transfer_engine.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Fnv;
using testing::Peer;
using testing::TempDir;

constexpr size_t kPeerBytes = 4 << 20;

class LocalityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("locality");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
  }

  void StartEngine(EngineOptions options = {}) {
    options.task_timeout = 8s;
    options.request_timeout = 2s;
    ASSERT_TRUE(engine_.init(options).ok());
    local_.assign(kPeerBytes, 0);
    ASSERT_TRUE(engine_.registerLocalMemory(local_.data(), local_.size()).ok());
  }

  // Starts ferry-test-peer with P2P metadata; `env` are NAME=value settings for it (see
  // engine_peer.cc), `prefix` runs it under another command (ip netns exec ...).
  Peer StartPeer(const std::vector<std::string>& env, std::vector<std::string> prefix = {}) {
    Peer peer;
    std::vector<std::string> argv = std::move(prefix);
    argv.push_back(argv.empty() ? "/usr/bin/env" : "env");
    argv.insert(argv.end(), env.begin(), env.end());
    for (std::string a : {testing::BinDir() + "/ferry-test-peer", std::string("P2PHANDSHAKE"),
                          std::string(""), std::string("0"), std::to_string(kPeerBytes)}) {
      argv.push_back(a);
    }
    auto child = ChildProcess::SpawnPiped(argv, dir_->path() + "/peer.log");
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return peer;
    peer.process = std::move(child).value();
    Result<std::string> ready = peer.process->ReadLine(20s);
    EXPECT_TRUE(ready.ok()) << ready.status() << "\n" << peer.process->LogTail();
    if (!ready.ok()) return peer;
    EXPECT_TRUE(peer.ParseReady(*ready)) << *ready;
    return peer;
  }

  // Writes `n` bytes to the peer's buffer and reads them back; returns the transport that
  // carried the write ("" on failure, with the reason reported).
  std::string WriteReadVerify(Peer& peer, size_t n = 1 << 20, std::string hint = "") {
    Result<SegmentId> target = engine_.openSegment(peer.name);
    EXPECT_TRUE(target.ok()) << target.status();
    if (!target.ok()) return "";
    for (size_t i = 0; i < n; ++i) local_[i] = static_cast<unsigned char>(i * 13 + seed_);
    ++seed_;
    TransferStatus w = RunOne({OpCode::kWrite, local_.data(), *target, peer.addr, n, hint});
    EXPECT_EQ(w.state, TransferState::kCompleted) << w.reason;
    EXPECT_EQ(peer.Sum(0, n), Fnv(local_.data(), n));
    std::memset(local_.data() + n, 0, n);
    TransferStatus r = RunOne({OpCode::kRead, local_.data() + n, *target, peer.addr, n, hint});
    EXPECT_EQ(r.state, TransferState::kCompleted) << r.reason;
    EXPECT_EQ(0, std::memcmp(local_.data(), local_.data() + n, n));
    EXPECT_EQ(w.transport, r.transport);
    return w.state == TransferState::kCompleted ? w.transport : "";
  }

  TransferStatus RunOne(const TransferRequest& request) {
    Result<BatchId> batch = engine_.allocateBatchID(1);
    EXPECT_TRUE(batch.ok());
    Status s = engine_.submitTransfer(*batch, {request});
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(engine_.waitBatch(*batch, 30s).ok());
    TransferStatus status = *engine_.getTransferStatus(*batch, 0);
    EXPECT_TRUE(engine_.freeBatchID(*batch).ok());  // every task ended: frees at once
    return status;
  }

  std::unique_ptr<TempDir> dir_;
  TransferEngine engine_;
  std::vector<unsigned char> local_;
  int seed_ = 1;
};

TEST_F(LocalityTest, AutoPicksShmOnOneHost) {
  StartEngine();
  Peer peer = StartPeer({});
  ASSERT_TRUE(peer.process);
  EXPECT_EQ(WriteReadVerify(peer), "shm");
}

TEST_F(LocalityTest, ForcedDifferentHostsUseTcp) {
  EngineOptions options;
  options.host_id = "host-a";
  StartEngine(options);
  Peer peer = StartPeer({"FERRY_PEER_HOST_ID=host-b"});
  ASSERT_TRUE(peer.process);
  EXPECT_EQ(WriteReadVerify(peer), "tcp");
}

TEST_F(LocalityTest, EqualHostIdsAreOneHost) {
  EngineOptions options;
  options.host_id = "rack1-node7";
  StartEngine(options);
  Peer peer = StartPeer({"FERRY_PEER_HOST_ID=rack1-node7"});
  ASSERT_TRUE(peer.process);
  EXPECT_EQ(WriteReadVerify(peer), "shm");
}

TEST_F(LocalityTest, ExplicitHintIsObeyed) {
  StartEngine();
  Peer peer = StartPeer({});
  ASSERT_TRUE(peer.process);
  EXPECT_EQ(WriteReadVerify(peer, 256 << 10, "tcp"), "tcp");
  // A hint no side can use fails clearly instead of silently taking another transport.
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  TransferStatus s = RunOne({OpCode::kWrite, local_.data(), *target, peer.addr, 4096, "cxl"});
  EXPECT_EQ(s.state, TransferState::kFailed);
  EXPECT_NE(s.reason.message().find("'cxl'"), std::string::npos) << s.reason;
}

TEST_F(LocalityTest, ManagedBuffersAcrossProcesses) {
  StartEngine();
  Peer peer = StartPeer({"FERRY_PEER_MANAGED=1"});
  ASSERT_TRUE(peer.process);
  EXPECT_EQ(WriteReadVerify(peer, 2 << 20), "shm");
  // A managed buffer of our own, as the local side.
  Result<void*> mine = engine_.allocateManagedBuffer(1 << 20);
  ASSERT_TRUE(mine.ok()) << mine.status();
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  std::memset(*mine, 0x3c, 1 << 20);
  TransferStatus w = RunOne({OpCode::kWrite, *mine, *target, peer.addr, 1 << 20});
  EXPECT_EQ(w.state, TransferState::kCompleted) << w.reason;
  EXPECT_EQ(peer.Sum(0, 1 << 20), Fnv(static_cast<unsigned char*>(*mine), 1 << 20));
  EXPECT_TRUE(engine_.freeManagedBuffer(*mine).ok());
  EXPECT_EQ(engine_.freeManagedBuffer(*mine).code(), StatusCode::kNotFound);
}

TEST_F(LocalityTest, CxlWindowIsPreferredWhenBothSidesLieInIt) {
  const std::string window = dir_->path() + "/cxl-window";
  {
    // A 64 MiB window file both engines map (grown by the transport when shorter).
    FILE* f = std::fopen(window.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  EngineOptions options;
  options.cxl_window = window;
  options.cxl_window_size = 64 << 20;
  StartEngine(options);
  Peer peer = StartPeer({"FERRY_PEER_CXL_WINDOW=" + window, "FERRY_PEER_MANAGED=cxl"});
  ASSERT_TRUE(peer.process);
  // Our plain buffer lies outside the window: shm carries it.
  EXPECT_EQ(WriteReadVerify(peer, 256 << 10), "shm");
  // A buffer inside the window on both sides: cxl.
  Result<void*> mine = engine_.allocateManagedBuffer(1 << 20, "cxl");
  ASSERT_TRUE(mine.ok()) << mine.status();
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  std::memset(*mine, 0x6b, 1 << 20);
  TransferStatus w = RunOne({OpCode::kWrite, *mine, *target, peer.addr, 1 << 20});
  EXPECT_EQ(w.state, TransferState::kCompleted) << w.reason;
  EXPECT_EQ(w.transport, "cxl");
  EXPECT_EQ(peer.Sum(0, 1 << 20), Fnv(static_cast<unsigned char*>(*mine), 1 << 20));
  EXPECT_TRUE(engine_.freeManagedBuffer(*mine).ok());
}

// Drops CAP_SYS_PTRACE from this thread's effective set (threads made afterwards inherit it),
// so that a non-dumpable peer refuses process_vm_writev even to root. Restored on destruction.
class NoPtraceCapability {
 public:
  NoPtraceCapability() {
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    if (syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct lowered[2];
    std::memcpy(lowered, saved_, sizeof(lowered));
    lowered[0].effective &= ~(1u << CAP_SYS_PTRACE);
    ok_ = syscall(SYS_capset, &header_, lowered) == 0;
  }
  ~NoPtraceCapability() {
    if (ok_) syscall(SYS_capset, &header_, saved_);
  }
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  bool ok_ = false;
};

TEST_F(LocalityTest, RefusedCrossProcessAccessFallsBackToTcp) {
  NoPtraceCapability no_ptrace;
  ASSERT_TRUE(no_ptrace.ok());
  StartEngine();
  Peer peer = StartPeer({"FERRY_PEER_NONDUMPABLE=1"});
  ASSERT_TRUE(peer.process);
  EXPECT_EQ(WriteReadVerify(peer), "tcp");
}

// Two network namespaces made by this test, joined by a veth pair; removed on destruction.
class NamespacePair {
 public:
  explicit NamespacePair(const std::string& tag)
      : a_("ferry-" + tag + "a"), b_("ferry-" + tag + "b"), veth_("fv" + tag) {
    const std::string cmds[] = {
        "ip netns add " + a_,
        "ip netns add " + b_,
        "ip link add " + veth_ + "a netns " + a_ + " type veth peer name " + veth_ + "b netns " +
            b_,
        "ip -n " + a_ + " addr add 10.213.7.1/30 dev " + veth_ + "a",
        "ip -n " + b_ + " addr add 10.213.7.2/30 dev " + veth_ + "b",
        "ip -n " + a_ + " link set " + veth_ + "a up",
        "ip -n " + b_ + " link set " + veth_ + "b up",
        "ip -n " + a_ + " link set lo up",
        "ip -n " + b_ + " link set lo up",
    };
    for (const std::string& c : cmds) {
      if (std::system((c + " 2>/dev/null").c_str()) != 0) {
        error_ = "'" + c + "' failed";
        return;
      }
    }
  }
  ~NamespacePair() {
    std::system(("ip netns del " + a_ + " 2>/dev/null").c_str());
    std::system(("ip netns del " + b_ + " 2>/dev/null").c_str());
  }
  const std::string& error() const { return error_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_, veth_, error_;
};

// Moves the calling thread into a named network namespace; back on destruction.
class InNamespace {
 public:
  explicit InNamespace(const std::string& name)
      : home_(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {
    const int target = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    ok_ = home_ >= 0 && target >= 0 && setns(target, CLONE_NEWNET) == 0;
    if (target >= 0) close(target);
  }
  ~InNamespace() {
    if (ok_) setns(home_, CLONE_NEWNET);
    if (home_ >= 0) close(home_);
  }
  bool ok() const { return ok_; }

 private:
  int home_;
  bool ok_ = false;
};

TEST_F(LocalityTest, NetworkNamespacesOfOneMachineAreOneHost) {
  if (geteuid() != 0 || std::system("ip netns list >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "needs root and iproute2 to make network namespaces";
  }
  NamespacePair pair(std::to_string(getpid() % 100000));
  ASSERT_TRUE(pair.error().empty()) << pair.error();
  // This engine lives in namespace a (its threads are made from this thread), the peer in b;
  // they reach each other only over the veth pair.
  InNamespace in_a(pair.a());
  ASSERT_TRUE(in_a.ok());
  EngineOptions options;
  options.host = "10.213.7.1";
  StartEngine(options);
  {
    Peer peer = StartPeer({"FERRY_PEER_HOST=10.213.7.2"},
                          {"/usr/bin/env", "ip", "netns", "exec", pair.b()});
    ASSERT_TRUE(peer.process);
    EXPECT_EQ(peer.name.rfind("10.213.7.2:", 0), 0u) << peer.name;
    EXPECT_EQ(WriteReadVerify(peer), "shm");
  }
  // Forced apart, the same two engines use tcp over the veth pair.
  Peer apart = StartPeer({"FERRY_PEER_HOST=10.213.7.2", "FERRY_PEER_HOST_ID=elsewhere"},
                         {"/usr/bin/env", "ip", "netns", "exec", pair.b()});
  ASSERT_TRUE(apart.process);
  EXPECT_EQ(WriteReadVerify(apart), "tcp");
}

}  // namespace
}  // namespace ferry
