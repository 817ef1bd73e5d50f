// Two processes on one window: this test binary runs itself again as the child (the
// CxlChildProcess case, which is skipped unless the parent's environment names a window). The
// parent is the target; the child maps the same window file, connects through the published
// bytes, writes into the parent's region and reads back what the parent put there.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "transport/cxl/cxl_test_support.h"
#include "transport/cxl/cxl_transport.h"

extern char** environ;  // NOLINT: POSIX

// A namespace of its own: a unity build compiles this file with the other cxl tests, whose
// helpers (kWindow, Options, ...) differ.
namespace ferry::cxl::two_process_test {
namespace {

using namespace std::chrono_literals;
using testing::Addr;
using testing::Fill;
using testing::kMiB;
using testing::SliceBatch;
using testing::TempWindowFile;
using testing::TestContext;

constexpr uint64_t kWindow = 16 * kMiB;
constexpr uint64_t kRegion = kMiB;
constexpr uint64_t kHalf = kRegion / 2;
constexpr uint64_t kParentIncarnation = 0x5eed;
constexpr uint64_t kGeneration = 9;
constexpr uint32_t kParentSeed = 5;  // the first half, written by the parent, read by the child
constexpr uint32_t kChildSeed = 6;   // the second half, written by the child

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

std::string Unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

CxlTransportOptions Options(const std::string& path) {
  CxlTransportOptions o;
  o.window_path = path;
  o.window_size = kWindow;
  o.io_timeout = 5s;
  return o;
}

// Runs this binary's CxlChildProcess case with `extra` added to the environment; returns its
// wait status, or -1 when it could not start or ran past `timeout` (it is killed then).
int RunChild(const std::vector<std::string>& extra, std::chrono::milliseconds timeout) {
  std::vector<std::string> env_strings(extra);
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=CxlChildProcess.*";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  // A thread waits for the child's exit; the test waits for that thread's answer, bounded.
  std::promise<int> exited;
  std::future<int> status = exited.get_future();
  std::thread waiter([pid, &exited] {
    int s = 0;
    while (waitpid(pid, &s, 0) < 0 && errno == EINTR) {
    }
    exited.set_value(s);
  });
  if (status.wait_for(timeout) != std::future_status::ready) {
    kill(pid, SIGKILL);  // the waiter reaps it
    waiter.join();
    return -1;
  }
  waiter.join();
  return status.get();
}

TEST(CxlTwoProcessTest, ChildWritesAndReadsThroughTheWindow) {
  TempWindowFile file;
  TestContext ctx(kParentIncarnation);
  CxlTransport target(Options(file.path()));
  Result<std::string> published = target.Start(&ctx, {"parent", ""});
  ASSERT_TRUE(published.ok()) << published.status();
  Result<void*> memory = target.AllocateShared(kRegion, Location::Cpu());
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto* region = static_cast<uint8_t*>(*memory);
  Fill(region, kHalf, kParentSeed);
  std::memset(region + kHalf, 0xAA, kHalf);
  Result<std::string> key =
      target.RegisterMemory(Addr(region), kRegion, Location::Cpu(), MemoryAccess::kRemote);
  ASSERT_TRUE(key.ok()) << key.status();
  ctx.AddRegion(region, kRegion, kGeneration, true, "cxl");

  const int status = RunChild(
      {"FERRY_CXL_TEST_WINDOW=" + file.path(), "FERRY_CXL_TEST_ENDPOINT=" + Hex(*published),
       "FERRY_CXL_TEST_REGION=" + std::to_string(Addr(region)), "FERRY_CXL_TEST_KEY=" + Hex(*key)},
      20s);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child wait status " << status;
  std::vector<uint8_t> expected(kHalf);
  Fill(expected.data(), kHalf, kChildSeed);
  EXPECT_EQ(0, std::memcmp(region + kHalf, expected.data(), kHalf)) << "the child's write";
  EXPECT_EQ(ctx.pin_calls(), 2u) << "both accesses were pinned here";
  EXPECT_TRUE(ctx.WaitNoPins(5s));
  target.Stop();
}

// The child's half of the test above; skipped when run on its own.
TEST(CxlChildProcess, WritesAndReadsThroughTheWindow) {
  const char* window = std::getenv("FERRY_CXL_TEST_WINDOW");
  const char* endpoint = std::getenv("FERRY_CXL_TEST_ENDPOINT");
  const char* region_text = std::getenv("FERRY_CXL_TEST_REGION");
  const char* key_text = std::getenv("FERRY_CXL_TEST_KEY");
  if (window == nullptr || endpoint == nullptr || region_text == nullptr || key_text == nullptr) {
    GTEST_SKIP() << "runs only as the child of CxlTwoProcessTest";
  }
  const std::string key = Unhex(key_text);
  const uint64_t region = std::stoull(region_text);
  TestContext ctx(0xc41d);
  CxlTransport initiator(Options(window));
  ASSERT_TRUE(initiator.Start(&ctx, {"child", ""}).ok());
  SegmentDesc parent;
  parent.name = "parent";
  parent.incarnation = kParentIncarnation;
  parent.transports["cxl"] = Unhex(endpoint);
  Result<std::shared_ptr<PeerLink>> link = initiator.Connect(parent);
  ASSERT_TRUE(link.ok()) << link.status();
  Result<void*> memory = initiator.AllocateShared(kRegion, Location::Cpu());
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto* local = static_cast<uint8_t*>(*memory);
  Fill(local, kHalf, kChildSeed);
  std::memset(local + kHalf, 0, kHalf);

  SliceBatch batch(&ctx);
  Slice write;
  write.op = OpCode::kWrite;
  write.local_addr = Addr(local);
  write.remote_addr = region + kHalf;
  write.length = kHalf;
  write.remote_generation = kGeneration;
  write.peer_incarnation = kParentIncarnation;
  write.remote_key = key;
  batch.Add(write);
  Slice read = write;
  read.op = OpCode::kRead;
  read.local_addr = Addr(local + kHalf);
  read.remote_addr = region;
  batch.Add(read);
  ASSERT_TRUE(initiator.Submit(**link, batch.ptrs).ok());
  ASSERT_TRUE(ctx.WaitAll(batch.ptrs, 10s));
  for (Slice* s : batch.ptrs) ASSERT_TRUE(ctx.StatusOf(s).ok()) << ctx.StatusOf(s);
  std::vector<uint8_t> expected(kHalf);
  Fill(expected.data(), kHalf, kParentSeed);
  EXPECT_EQ(0, std::memcmp(local + kHalf, expected.data(), kHalf)) << "the parent's bytes";
  initiator.Stop();
}

}  // namespace
}  // namespace ferry::cxl::two_process_test
