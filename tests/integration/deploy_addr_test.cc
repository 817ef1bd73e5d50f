// Deploying across hosts (README "Deploying across hosts"): what an engine that binds a wildcard
// tells its peers, and the port range that fences every listener it opens. Two network
// namespaces joined by a veth pair stand for two hosts: the metadata server and the target
// engines run in namespace a (10.99.0.1), the initiating engines in this process, in b.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "ferry/transfer_engine.h"
#include "netns.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Fnv;
using testing::NetnsPair;
using testing::Peer;
using testing::TempDir;

constexpr size_t kPeerBytes = 1 << 20;
constexpr uint16_t kFirstPort = 21000;  // the range lives inside namespace a: nothing else there
constexpr uint16_t kLastPort = 21009;
constexpr const char* kExtraAddress = "10.99.0.3";  // a second address of a, advertised by hand

// The TCP ports process `pid` listens on, from its network namespace's socket tables and the
// socket inodes among its open files.
std::set<uint16_t> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* dir = opendir(fd_dir.c_str())) {
    while (dirent* e = readdir(dir)) {
      char target[128] = {};
      const std::string link = fd_dir + "/" + e->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      const std::string text(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (text.rfind("socket:[", 0) == 0) inodes.insert(text.substr(8, text.size() - 9));
    }
    closedir(dir);
  }
  std::set<uint16_t> ports;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
            inode)) {
        continue;
      }
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      ports.insert(
          static_cast<uint16_t>(std::stoul(local.substr(local.rfind(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

// The bytes of `"name":"<base64>"` in a descriptor's transports map ("" when absent).
std::string TransportBytes(const std::string& desc, const std::string& name) {
  const std::string field = "\"" + name + "\":\"";
  const size_t at = desc.find(field, desc.find("\"transports\""));
  if (at == std::string::npos) return "";
  const size_t begin = at + field.size();
  const std::string b64 = desc.substr(begin, desc.find('"', begin) - begin);
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : b64) {
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) break;  // '=' padding
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

class DeployAddrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = testing::NetworkFaultsUnsupported(); !why.empty()) GTEST_SKIP() << why;
    auto dir = TempDir::Create("deploy");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    auto pair = NetnsPair::Create("addr");
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(pair).value();
    ASSERT_TRUE(pair_
                    ->Run(NetnsPair::kA, std::string("ip addr add ") + kExtraAddress + "/24 dev " +
                                             pair_->veth_a())
                    .ok());
    // This thread, and the engines it starts, live in b.
    in_b_ = std::make_unique<testing::InNamespace>(pair_->b());
    ASSERT_TRUE(in_b_->ok());
    // The metadata server listens on a's veth address only.
    std::vector<std::string> argv = pair_->ExecPrefix(NetnsPair::kA);
    for (std::string a :
         {testing::BinDir() + "/ferry-metadata-server", std::string("--bind"),
          std::string(NetnsPair::kAddressA), std::string("--port"), std::string("0"),
          std::string("--data"), dir_->path() + "/metadata.json"}) {
      argv.push_back(a);
    }
    auto server = ChildProcess::SpawnPiped(argv, dir_->path() + "/metadata.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    Result<std::string> ready = server_->ReadLine(20s);
    ASSERT_TRUE(ready.ok()) << ready.status() << server_->LogTail();
    ASSERT_EQ(ready->rfind("ready port=", 0), 0u) << *ready;
    store_ = std::string("http://") + NetnsPair::kAddressA + ":" + ready->substr(11) + "/metadata";
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
    in_b_.reset();
  }

  // ferry-test-peer in namespace a. `env` are NAME=value settings (engine_peer.cc; FERRY_*
  // settings are read by the engine itself). Its stderr goes to a log of its own.
  std::unique_ptr<ChildProcess> Spawn(const std::string& store, const std::vector<std::string>& env,
                                      const std::string& log) {
    std::vector<std::string> argv = pair_->ExecPrefix(NetnsPair::kA);
    argv.push_back("env");
    argv.insert(argv.end(), env.begin(), env.end());
    for (std::string a : {testing::BinDir() + "/ferry-test-peer", store, std::string(""),
                          std::string("0"), std::to_string(kPeerBytes)}) {
      argv.push_back(a);
    }
    auto child = ChildProcess::SpawnPiped(argv, dir_->path() + "/" + log);
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? std::move(child).value() : nullptr;
  }

  Peer StartPeer(const std::string& store, const std::vector<std::string>& env,
                 const std::string& log) {
    Peer peer;
    peer.process = Spawn(store, env, log);
    if (peer.process == nullptr) return peer;
    Result<std::string> ready = peer.process->ReadLine(20s);
    EXPECT_TRUE(ready.ok()) << ready.status() << "\n" << peer.process->LogTail();
    if (ready.ok()) EXPECT_TRUE(peer.ParseReady(*ready)) << *ready;
    return peer;
  }

  // A peer whose init must fail: its log once it exited ("" when it did not exit).
  std::string FailedInit(const std::string& store, const std::vector<std::string>& env,
                         const std::string& log) {
    std::unique_ptr<ChildProcess> child = Spawn(store, env, log);
    if (child == nullptr) return "";
    Result<std::string> line = child->ReadLine(20s);  // EOF when it exits
    EXPECT_FALSE(line.ok()) << "started: " << *line;
    EXPECT_TRUE(testing::WaitFor([&] { return !child->running(); }, 10s));
    return child->LogTail();
  }

  // An engine in namespace b (this thread's), reaching namespace a over the veth pair only.
  std::unique_ptr<TransferEngine> StartInitiator(const std::string& store,
                                                 std::vector<std::string> transports) {
    auto engine = std::make_unique<TransferEngine>();
    EngineOptions options;
    options.metadata_conn = store;
    options.host = NetnsPair::kAddressB;
    options.transports = std::move(transports);
    options.rdma_provider = "tcp;ofi_rxm";
    options.task_timeout = 10s;
    options.request_timeout = 3s;
    Status s = engine->init(options);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return nullptr;
    local_.assign(2 * kPeerBytes, 0);
    EXPECT_TRUE(engine->registerLocalMemory(local_.data(), local_.size()).ok());
    return engine;
  }

  // Writes 256 KiB to the peer over `transport`, checks them there, reads them back.
  void WriteReadVerify(TransferEngine& engine, Peer& peer, const std::string& transport) {
    SCOPED_TRACE(peer.name + " over " + transport);
    Result<SegmentId> target = engine.openSegment(peer.name);
    ASSERT_TRUE(target.ok()) << target.status();
    const size_t n = 256 << 10;
    for (size_t i = 0; i < n; ++i) local_[i] = static_cast<unsigned char>(i * 7 + ++seed_);
    EXPECT_EQ(RunOne(engine, {OpCode::kWrite, local_.data(), *target, peer.addr, n, transport}),
              TransferState::kCompleted);
    EXPECT_EQ(peer.Sum(0, n), Fnv(local_.data(), n));
    EXPECT_EQ(RunOne(engine,
                     {OpCode::kRead, local_.data() + kPeerBytes, *target, peer.addr, n, transport}),
              TransferState::kCompleted);
    EXPECT_EQ(0, std::memcmp(local_.data(), local_.data() + kPeerBytes, n));
  }

  TransferState RunOne(TransferEngine& engine, const TransferRequest& request) {
    Result<BatchId> batch = engine.allocateBatchID(1);
    EXPECT_TRUE(batch.ok());
    EXPECT_TRUE(engine.submitTransfer(*batch, {request}).ok());
    EXPECT_TRUE(engine.waitBatch(*batch, 30s).ok());
    TransferStatus status = *engine.getTransferStatus(*batch, 0);
    EXPECT_EQ(status.state, TransferState::kCompleted) << status.reason;
    EXPECT_TRUE(engine.freeBatchID(*batch).ok());
    return status.state;
  }

  // GET <store>?key=<key> from this thread's namespace (b): the body, "" on any failure.
  std::string Fetch(const std::string& key) {
    const std::string rest = store_.substr(std::string("http://").size());
    const size_t colon = rest.find(':');
    const size_t slash = rest.find('/');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(rest.substr(colon + 1, slash))));
    inet_pton(AF_INET, rest.substr(0, colon).c_str(), &addr.sin_addr);
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const timeval bound{5, 0};  // every wait below is bounded
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof(bound));
    std::string reply;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      const std::string request =
          "GET " + rest.substr(slash) + "?key=" + key + " HTTP/1.0\r\nHost: store\r\n\r\n";
      if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
        char buf[4096];
        for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
      }
    }
    close(fd);
    EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << key << ": " << reply;
    const size_t body = reply.find("\r\n\r\n");
    return body == std::string::npos ? "" : reply.substr(body + 4);
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<NetnsPair> pair_;
  std::unique_ptr<testing::InNamespace> in_b_;
  std::unique_ptr<ChildProcess> server_;
  std::string store_;
  std::vector<unsigned char> local_;
  int seed_ = 0;
};

// A target that binds 0.0.0.0 with a port range: it advertises the address that routes to the
// store, a peer on the other "host" reaches it over tcp and rdma (tcp;ofi_rxm), every socket it
// listens on lies in the range, and a range whose ports are taken fails init naming it.
TEST_F(DeployAddrTest, WildcardBindAdvertisesTheRouteAndPortsStayInTheRange) {
  const std::string range = std::to_string(kFirstPort) + "-" + std::to_string(kLastPort);
  Peer target = StartPeer(store_,
                          {"FERRY_PEER_HOST=0.0.0.0", "FERRY_PEER_TRANSPORTS=tcp,rdma",
                           "FERRY_PEER_RDMA_PROVIDER=tcp;ofi_rxm", "FERRY_PORT_RANGE=" + range},
                          "wildcard.log");
  ASSERT_TRUE(target.process);
  EXPECT_EQ(target.name.rfind(std::string(NetnsPair::kAddressA) + ":210", 0), 0u) << target.name;

  // What the store holds names the veth address, never the wildcard or a host name.
  const std::string desc = Fetch("ferry/ram/" + target.name);
  const std::string tcp = TransportBytes(desc, "tcp");
  EXPECT_EQ(tcp.rfind(std::string(NetnsPair::kAddressA) + ":210", 0), 0u) << tcp << "\n" << desc;
  EXPECT_NE(desc.find(NetnsPair::kAddressA), std::string::npos) << desc;  // the RPC endpoint
  EXPECT_EQ(desc.find("0.0.0.0"), std::string::npos) << desc;
  const std::string rpc_meta = Fetch("ferry/rpc_meta/" + target.name);
  EXPECT_NE(rpc_meta.find(std::string("\"ip_or_host_name\":\"") + NetnsPair::kAddressA + "\""),
            std::string::npos)
      << rpc_meta;

  std::unique_ptr<TransferEngine> initiator = StartInitiator(store_, {"tcp", "rdma"});
  ASSERT_NE(initiator, nullptr);
  WriteReadVerify(*initiator, target, "tcp");
  WriteReadVerify(*initiator, target, "rdma");

  // RPC, tcp data, and rdma's target and initiator endpoints (each listens with tcp;ofi_rxm; the
  // initiator's opens in the background).
  std::set<uint16_t> ports;
  EXPECT_TRUE(testing::WaitFor(
      [&] { return (ports = ListeningPorts(target.process->pid())).size() >= 4; }, 10s))
      << ports.size();
  for (uint16_t p : ports) {
    EXPECT_GE(p, kFirstPort);
    EXPECT_LE(p, kLastPort);
  }
  EXPECT_EQ(target.process->LogTail().find("loopback"), std::string::npos);

  // The range exhausted: the ports the target holds first, then all of them but one more.
  const uint16_t held_last = *ports.rbegin();
  ASSERT_EQ(*ports.begin(), kFirstPort);
  std::string log = FailedInit(
      store_,
      {"FERRY_PEER_HOST=0.0.0.0", "FERRY_PEER_TRANSPORTS=tcp",
       "FERRY_PORT_RANGE=" + std::to_string(kFirstPort) + "-" + std::to_string(held_last)},
      "exhausted-rpc.log");
  EXPECT_NE(log.find("no free port for rpc in port range " + std::to_string(kFirstPort) + "-" +
                     std::to_string(held_last)),
            std::string::npos)
      << log;
  const std::string one_more = std::to_string(kFirstPort) + "-" + std::to_string(held_last + 1);
  log = FailedInit(
      store_,
      {"FERRY_PEER_HOST=0.0.0.0", "FERRY_PEER_TRANSPORTS=tcp", "FERRY_PORT_RANGE=" + one_more},
      "exhausted-tcp.log");
  EXPECT_NE(log.find("no free port for tcp data in port range " + one_more), std::string::npos)
      << log;
  log = FailedInit(store_, {"FERRY_PEER_TRANSPORTS=tcp", "FERRY_PORT_RANGE=30-20"}, "bad.log");
  EXPECT_NE(log.find("port range '30-20'"), std::string::npos) << log;
}

// advertise_host (from FERRY_ADVERTISE_HOST) names what peers dial, here with P2PHANDSHAKE (no
// store); and a loopback address published into a store that is not on loopback is warned
// about, once.
TEST_F(DeployAddrTest, AdvertiseHostAndTheLoopbackWarning) {
  Peer target = StartPeer("P2PHANDSHAKE",
                          {"FERRY_PEER_HOST=0.0.0.0", "FERRY_PEER_TRANSPORTS=tcp",
                           std::string("FERRY_ADVERTISE_HOST=") + kExtraAddress},
                          "advertised.log");
  ASSERT_TRUE(target.process);
  EXPECT_EQ(target.name.rfind(std::string(kExtraAddress) + ":", 0), 0u) << target.name;
  std::unique_ptr<TransferEngine> initiator = StartInitiator("P2PHANDSHAKE", {"tcp"});
  ASSERT_NE(initiator, nullptr);
  WriteReadVerify(*initiator, target, "tcp");

  Peer loopback =
      StartPeer(store_, {"FERRY_PEER_HOST=127.0.0.1", "FERRY_PEER_TRANSPORTS=tcp"}, "lo.log");
  ASSERT_TRUE(loopback.process);
  EXPECT_EQ(loopback.name.rfind("127.0.0.1:", 0), 0u) << loopback.name;
  const std::string log = loopback.process->LogTail();
  const std::string warning = "advertising the loopback address 127.0.0.1 in the metadata store";
  const size_t first = log.find(warning);
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find(warning, first + 1), std::string::npos) << log;  // once
}

// Checks at init, without namespaces: a malformed range and a wildcard advertise_host.
TEST(DeployAddrOptionsTest, BadOptionsFailInitClearly) {
  EngineOptions options;
  options.transports = {"tcp"};
  options.port_range = "20100-20000";
  TransferEngine a;
  Status s = a.init(options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("FIRST-LAST"), std::string::npos) << s;
  options.port_range = "";
  options.advertise_host = "0.0.0.0";
  TransferEngine b;
  s = b.init(options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("advertise_host '0.0.0.0' is a wildcard"), std::string::npos) << s;
}

}  // namespace
}  // namespace ferry
