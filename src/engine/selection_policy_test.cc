#include "engine/selection_policy.h"

#include <gtest/gtest.h>

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

BufferDesc Buffer(std::vector<std::string> transports) {
  BufferDesc b;
  b.addr = 0x1000;
  b.length = 0x1000;
  for (auto& t : transports) b.keys[t] = "k";
  return b;
}

const std::vector<Candidate> kInstalled = {
    {"tcp", false}, {"rdma", false}, {"shm", true}, {"cxl", true}, {"cuda-ipc", true}};

struct Case {
  const char* what;
  std::vector<std::string> remote;
  bool same_host;
  std::string hint;
  std::vector<std::string> expected;
};

TEST(SelectionPolicyTest, OrdersByTheTable) {
  ManualClock clock;
  SelectionPolicy policy(&clock);
  const Case cases[] = {
      {"priority on one host",
       {"tcp", "rdma", "shm", "cxl", "cuda-ipc"},
       true,
       "",
       {"cuda-ipc", "cxl", "shm", "rdma", "tcp"}},
      {"same-host-only transports are advertised but the peer is on another host",
       {"tcp", "shm", "cxl", "cuda-ipc"},
       false,
       "",
       {"tcp"}},
      {"only what the remote buffer was registered with", {"tcp"}, true, "", {"tcp"}},
      {"a transport the peer has but we do not install is skipped",
       {"efa", "tcp"},
       false,
       "",
       {"tcp"}},
      {"hint narrows", {"tcp", "rdma", "shm"}, true, "tcp", {"tcp"}},
      {"hint that cannot be used gives nothing", {"tcp"}, true, "rdma", {}},
      {"nothing in common", {"efa"}, true, "", {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(policy.Order(Buffer(c.remote), kInstalled, c.same_host, "peer", c.hint), c.expected)
        << c.what;
  }
}

TEST(SelectionPolicyTest, FailedLinksCoolDownThenRecover) {
  ManualClock clock;
  SelectionPolicy policy(&clock, 5s);
  const BufferDesc b = Buffer({"tcp", "rdma"});
  policy.ReportFailure("rdma", "peer");
  EXPECT_EQ(policy.Order(b, kInstalled, false, "peer"), (std::vector<std::string>{"tcp", "rdma"}));
  EXPECT_EQ(policy.Order(b, kInstalled, false, "other"), (std::vector<std::string>{"rdma", "tcp"}));
  clock.Advance(5s);
  EXPECT_EQ(policy.Order(b, kInstalled, false, "peer"), (std::vector<std::string>{"rdma", "tcp"}));
  policy.ReportFailure("rdma", "peer");
  policy.ReportSuccess("rdma", "peer");
  EXPECT_EQ(policy.Order(b, kInstalled, false, "peer"), (std::vector<std::string>{"rdma", "tcp"}));
}

// A file buffer goes to a file transport first, then through its owner over the other
// transports the owner registered it with (tcp); a memory buffer never to a file transport.
TEST(SelectionPolicyTest, FileBuffersGoToTheFileTransportFirstThenThroughTheOwner) {
  ManualClock clock;
  SelectionPolicy policy(&clock);
  std::vector<Candidate> installed = kInstalled;
  installed.push_back({"file", false, true});
  BufferDesc file = Buffer({"tcp", "file"});
  file.file = FileWindow{};
  EXPECT_EQ(policy.Order(file, installed, false, "peer"),
            (std::vector<std::string>{"file", "tcp"}));
  EXPECT_EQ(policy.Order(file, installed, false, "peer", "tcp"), std::vector<std::string>{"tcp"});
  EXPECT_EQ(policy.Order(Buffer({"tcp", "file"}), installed, false, "peer"),
            std::vector<std::string>{"tcp"});
}

}  // namespace
}  // namespace ferry::engine
