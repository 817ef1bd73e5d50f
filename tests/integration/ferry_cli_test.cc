// The `ferry` command (tools/ferry) as a real subprocess against each real metadata store the
// engines publish to (etcd, redis, ferry-metadata-server), with a real engine (ferry-test-peer)
// publishing a segment: segments lists it, show prints its buffers (and --json parses), probe
// finds it alive, watch sees a registration change, and the documented exit codes for an
// unknown segment (3), a malformed entry written straight into the store (4, naming the field)
// and an unreachable store (2); stats reads the engine's metrics endpoint.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/tsan_suppressions.h"
#include "metadata/segment_directory.h"
#include "metadata/store_factory.h"
#include "peer_client.h"
#include "test_servers.h"

FERRY_TSAN_IGNORE_HTTPLIB()  // MooncakeStyleServer serves from this process

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::Peer;
using testing::StoreKind;
using testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// One finished run of the ferry command.
struct FerryRun {
  int code = -1;  // exit code; -1 when it did not exit by itself (killed by `timeout`)
  std::string out;
  std::string err;
};

// Runs build/bin/ferry with `args` (plain words, no quoting needed) to completion, bounded at
// 30 s, its stdout and stderr in files of `dir` (stdout into `stdout_path` when one is given).
FerryRun RunFerry(const TempDir& dir, const std::string& args,
                  const std::string& stdout_path = "") {
  const std::string out = stdout_path.empty() ? dir.path() + "/ferry.out" : stdout_path;
  const std::string err = dir.path() + "/ferry.err";
  const std::string command = "timeout 30 " + testing::BinDir() + "/ferry " + args + " >" + out +
                              " 2>" + err + " </dev/null";
  const int status = std::system(command.c_str());
  FerryRun run;
  run.code = WIFEXITED(status) && WEXITSTATUS(status) != 124 ? WEXITSTATUS(status) : -1;
  run.out = stdout_path.empty() ? ReadFile(out) : "";
  run.err = ReadFile(err);
  return run;
}

std::string Describe(const FerryRun& run) {
  return "exit " + std::to_string(run.code) + "\nstdout:\n" + run.out + "stderr:\n" + run.err;
}

// Reads `watch`'s lines until one contains every string of `want` (bounded); the lines read
// are appended to *seen.
bool ReadUntil(testing::ChildProcess& watch, const std::vector<std::string>& want,
               std::string* seen) {
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < deadline) {
    Result<std::string> line = watch.ReadLine(std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()));
    if (!line.ok()) return false;
    *seen += *line + "\n";
    bool all = true;
    for (const std::string& w : want) all = all && line->find(w) != std::string::npos;
    if (all) return true;
  }
  return false;
}

// A hostile metrics endpoint on 127.0.0.1: answers the first connection "200 OK" with a long
// Content-Length, then sends the body one byte every 50 ms of quiet (each read well within a
// read timeout) until the client hangs up or the server is destroyed.
class TricklingServer {
 public:
  TricklingServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd_, 4) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TricklingServer() {
    stop_ = true;
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);  // wakes accept
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  void Serve() {
    const int client = accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n";
    bool open =
        send(client, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size());
    while (open && !stop_) {
      pollfd p{client, POLLIN, 0};
      if (poll(&p, 1, 50) != 0) {  // the request (read and dropped), or the client hung up
        char drop[4096];
        if (recv(client, drop, sizeof(drop), 0) <= 0) break;
        continue;
      }
      open = send(client, "#", 1, MSG_NOSIGNAL) == 1;
    }
    close(client);
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class FerryCliTest : public ::testing::TestWithParam<StoreKind> {};

TEST_P(FerryCliTest, InspectsAPublishedSegmentAndReportsBadEntries) {
  Result<TempDir> dir = TempDir::Create("ferry-cli");
  ASSERT_TRUE(dir.ok()) << dir.status();
  Result<testing::RunningStore> running = testing::StartStore(GetParam());
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string conn = running->connection;
  const std::string store_flag = " --metadata_server=" + conn;
  const std::string name = "cli-" + testing::StoreKindName(GetParam());
  Result<uint16_t> metrics_port = testing::PickFreePort();
  ASSERT_TRUE(metrics_port.ok()) << metrics_port.status();
  Peer peer = testing::StartTestPeer(
      {"FERRY_PEER_TRANSPORTS=tcp", "FERRY_METRICS_PORT=" + std::to_string(*metrics_port)}, conn,
      name, 1 << 16, dir->path());
  ASSERT_NE(peer.process, nullptr);
  ASSERT_EQ(peer.name, name);

  // segments: a table row and a JSON entry for the engine's segment (two buffers: the shared
  // one and the private one).
  FerryRun run = RunFerry(*dir, "segments" + store_flag);
  ASSERT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find("NAME"), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find(name), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find("tcp"), std::string::npos) << Describe(run);
  run = RunFerry(*dir, "segments --json" + store_flag);
  ASSERT_EQ(run.code, 0) << Describe(run);
  nlohmann::json listed = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(listed.is_array()) << Describe(run);
  ASSERT_EQ(listed.size(), 1u) << Describe(run);
  EXPECT_EQ(listed[0].value("name", ""), name);
  EXPECT_EQ(listed[0].value("buffers", 0), 2);
  EXPECT_GE(listed[0].value("bytes", uint64_t{0}), uint64_t{1} << 16);
  EXPECT_EQ(listed[0]["transports"], nlohmann::json::array({"tcp"}));
  // Output that cannot be written is a failure, not an ok with nothing printed.
  run = RunFerry(*dir, "segments" + store_flag, "/dev/full");
  EXPECT_EQ(run.code, 1) << Describe(run);
  EXPECT_NE(run.err.find("writing the output failed"), std::string::npos) << Describe(run);

  // show: the buffer the peer registered, as a table and as the published JSON.
  run = RunFerry(*dir, "show " + name + store_flag);
  ASSERT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find(Hex(peer.addr)), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find(Hex(peer.private_addr)), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find("incarnation"), std::string::npos) << Describe(run);
  run = RunFerry(*dir, "show " + name + " --json" + store_flag);
  ASSERT_EQ(run.code, 0) << Describe(run);
  nlohmann::json shown = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(shown.is_object()) << Describe(run);
  EXPECT_EQ(shown.value("name", ""), name);
  EXPECT_GT(shown.value("incarnation", uint64_t{0}), 0u);
  bool found = false;
  for (const auto& buffer : shown["buffers"]) {
    if (buffer.value("addr", uint64_t{0}) == peer.addr) {
      found = true;
      EXPECT_EQ(buffer.value("length", uint64_t{0}), peer.length);
      EXPECT_TRUE(buffer["keys"].contains("tcp"));
    }
  }
  EXPECT_TRUE(found) << Describe(run);

  // probe: the engine answers as the incarnation the store describes, twice.
  run = RunFerry(*dir, "probe " + name + " --count=2 --interval=0" + store_flag);
  ASSERT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find("alive, incarnation " + std::to_string(shown.value("incarnation", 0ull))),
            std::string::npos)
      << Describe(run);
  EXPECT_NE(run.out.find("2 probes, 2 alive, 0 failed"), std::string::npos) << Describe(run);

  // stats: the engine's Prometheus endpoint, read as a table; --filter keeps one family.
  const std::string metrics = "http://127.0.0.1:" + std::to_string(*metrics_port) + "/metrics";
  run = RunFerry(*dir, "stats " + metrics);
  ASSERT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find("METRIC"), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find("ferry_registrations_total"), std::string::npos) << Describe(run);
  run = RunFerry(*dir, "stats " + metrics + " --filter=ferry_engine_info");
  ASSERT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find("segment=\"" + name + "\""), std::string::npos) << Describe(run);
  EXPECT_EQ(run.out.find("ferry_registrations_total"), std::string::npos) << Describe(run);

  // watch: sees the segment, then the buffer unregistered and registered again (a new
  // generation), then stops on SIGTERM with exit 0.
  {
    auto watch = testing::ChildProcess::SpawnPiped(
        {testing::BinDir() + "/ferry", "watch", "--metadata_server=" + conn, "--interval=100"},
        dir->path() + "/watch.log");
    ASSERT_TRUE(watch.ok()) << watch.status();
    std::string seen;
    ASSERT_TRUE(ReadUntil(**watch, {"watching"}, &seen)) << seen << (*watch)->LogTail();
    ASSERT_TRUE(ReadUntil(**watch, {"present", name}, &seen)) << seen << (*watch)->LogTail();
    ASSERT_EQ(peer.Ask("unregister"), "ok");
    EXPECT_TRUE(ReadUntil(**watch, {"changed", name, "-" + Hex(peer.addr)}, &seen))
        << seen << (*watch)->LogTail();
    ASSERT_EQ(peer.Ask("register"), "ok");
    EXPECT_TRUE(ReadUntil(**watch, {"changed", name, "+" + Hex(peer.addr)}, &seen))
        << seen << (*watch)->LogTail();
    const int status = (*watch)->Stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status << "\n"
                                                               << seen << (*watch)->LogTail();
  }

  // watch --duration ends by itself (exit 0) after listing what is there.
  run = RunFerry(*dir, "watch --duration=0.3 --interval=100" + store_flag);
  EXPECT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find("present"), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find(name), std::string::npos) << Describe(run);

  // An unknown segment: exit 3, named.
  for (const char* command : {"show", "probe"}) {
    run = RunFerry(*dir, std::string(command) + " no-such-segment" + store_flag);
    EXPECT_EQ(run.code, 3) << command << ": " << Describe(run);
    EXPECT_NE(run.err.find("no segment 'no-such-segment'"), std::string::npos)
        << command << ": " << Describe(run);
  }

  // A malformed entry written straight into the store: the engine's own descriptor with one
  // buffer's length zeroed, and one that is not JSON at all. show and probe exit 4 naming the
  // field; segments still lists the good segment and exits 4.
  Result<std::unique_ptr<MetadataStore>> store = CreateMetadataStore(conn, StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  Result<std::string> good = (*store)->Get(SegmentDescKey("ferry", name));
  ASSERT_TRUE(good.ok()) << good.status();
  nlohmann::json bad = nlohmann::json::parse(*good);
  bad["name"] = "cli-bad";
  ASSERT_FALSE(bad["buffers"].empty());
  bad["buffers"][0]["length"] = 0;
  ASSERT_TRUE((*store)->Put(SegmentDescKey("ferry", "cli-bad"), bad.dump()).ok());
  ASSERT_TRUE((*store)->Put(SegmentDescKey("ferry", "cli-garbage"), "{\"schema_version\":").ok());
  // A well-formed descriptor whose engine is gone (nothing listens at its RPC port): probe
  // reports no answer (5).
  Result<uint16_t> dead_port = testing::PickFreePort();
  ASSERT_TRUE(dead_port.ok()) << dead_port.status();
  nlohmann::json dead = nlohmann::json::parse(*good);
  dead["name"] = "cli-dead";
  dead["rpc"] = {{"host", "127.0.0.1"}, {"port", *dead_port}};
  ASSERT_TRUE((*store)->Put(SegmentDescKey("ferry", "cli-dead"), dead.dump()).ok());
  run = RunFerry(*dir, "probe cli-dead --timeout=2000" + store_flag);
  EXPECT_EQ(run.code, 5) << Describe(run);
  EXPECT_NE(run.out.find("cli-dead at 127.0.0.1:" + std::to_string(*dead_port) + ": no answer"),
            std::string::npos)
      << Describe(run);
  EXPECT_TRUE((*store)->Delete(SegmentDescKey("ferry", "cli-dead")).ok());

  for (const char* command : {"show", "probe"}) {
    run = RunFerry(*dir, std::string(command) + " cli-bad" + store_flag);
    EXPECT_EQ(run.code, 4) << command << ": " << Describe(run);
    EXPECT_NE(run.err.find("buffers[0].length"), std::string::npos)
        << command << ": " << Describe(run);
  }
  run = RunFerry(*dir, "show cli-garbage" + store_flag);
  EXPECT_EQ(run.code, 4) << Describe(run);
  EXPECT_NE(run.err.find("segment 'cli-garbage': malformed descriptor"), std::string::npos)
      << Describe(run);
  run = RunFerry(*dir, "segments" + store_flag);
  EXPECT_EQ(run.code, 4) << Describe(run);
  EXPECT_NE(run.out.find(name), std::string::npos) << Describe(run);
  EXPECT_NE(run.out.find("cli-bad"), std::string::npos) << Describe(run);
  EXPECT_NE(run.err.find("buffers[0].length"), std::string::npos) << Describe(run);
  EXPECT_NE(run.err.find("cli-garbage"), std::string::npos) << Describe(run);
  EXPECT_TRUE((*store)->Delete(SegmentDescKey("ferry", "cli-bad")).ok());
  EXPECT_TRUE((*store)->Delete(SegmentDescKey("ferry", "cli-garbage")).ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, FerryCliTest,
                         ::testing::Values(StoreKind::kEtcd, StoreKind::kRedis, StoreKind::kHttp),
                         [](const auto& info) { return testing::StoreKindName(info.param); });

// No store behind the address: exit 2, naming the store; strings that name no store to read:
// exit 1 with the reason.
TEST(FerryCliErrorsTest, UnreachableStoreAndNonStores) {
  Result<TempDir> dir = TempDir::Create("ferry-cli-errors");
  ASSERT_TRUE(dir.ok()) << dir.status();
  Result<uint16_t> port = testing::PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string where = "127.0.0.1:" + std::to_string(*port);
  for (const std::string& conn :
       {"etcd://" + where, "redis://" + where, "http://" + where + "/metadata"}) {
    for (const std::string& command : {"segments", "show some-segment", "watch --duration=1"}) {
      FerryRun run = RunFerry(*dir, command + " --timeout=2000 --metadata_server=" + conn);
      EXPECT_EQ(run.code, 2) << conn << " " << command << ": " << Describe(run);
      EXPECT_NE(run.err.find(where), std::string::npos) << conn << ": " << Describe(run);
    }
  }
  FerryRun run = RunFerry(*dir, "segments --metadata_server=P2PHANDSHAKE");
  EXPECT_EQ(run.code, 1) << Describe(run);
  EXPECT_NE(run.err.find("P2PHANDSHAKE is not a store"), std::string::npos) << Describe(run);
  run = RunFerry(*dir, "segments --metadata_server=bogus://x");
  EXPECT_EQ(run.code, 1) << Describe(run);
  run = RunFerry(*dir, "segments");  // --metadata_server is required
  EXPECT_EQ(run.code, 1) << Describe(run);
  EXPECT_NE(run.err.find("--metadata_server"), std::string::npos) << Describe(run);
  run = RunFerry(*dir, "watch --duration=nan --metadata_server=" + std::string("etcd://") + where);
  EXPECT_EQ(run.code, 1) << Describe(run);
  EXPECT_NE(run.err.find("--duration"), std::string::npos) << Describe(run);
  run = RunFerry(*dir, "frobnicate");
  EXPECT_EQ(run.code, 1) << Describe(run);
  run = RunFerry(*dir, "--help");
  EXPECT_EQ(run.code, 0) << Describe(run);
  EXPECT_NE(run.out.find("exit codes"), std::string::npos) << Describe(run);
  // A Mooncake-style HTTP server has no prefix listing: segments says so (2).
  testing::MooncakeStyleServer mooncake;
  ASSERT_NE(mooncake.port(), 0);
  run = RunFerry(*dir, "segments --metadata_server=http://127.0.0.1:" +
                           std::to_string(mooncake.port()) + "/metadata");
  EXPECT_EQ(run.code, 2) << Describe(run);
  EXPECT_NE(run.err.find("listing"), std::string::npos) << Describe(run);
  // A metrics endpoint nobody serves: no answer (5).
  run = RunFerry(*dir, "stats http://" + where + "/metrics --timeout=2000");
  EXPECT_EQ(run.code, 5) << Describe(run);
  // One that trickles its body without end: stopped at --timeout, no answer (5).
  TricklingServer trickling;
  ASSERT_NE(trickling.port(), 0);
  run = RunFerry(*dir, "stats 127.0.0.1:" + std::to_string(trickling.port()) + " --timeout=500");
  EXPECT_EQ(run.code, 5) << Describe(run);
  EXPECT_NE(run.err.find("did not arrive within --timeout=500 ms"), std::string::npos)
      << Describe(run);
}

}  // namespace
}  // namespace ferry
