// The test side of ferry-test-peer (engine_peer.cc): its ready line, its commands, and the
// checksum it answers "sum" with. Shared by the integration tests that drive a peer process.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "test_servers.h"

namespace ferry::testing {

// FNV-1a, as ferry-test-peer's "sum" command computes it.
inline uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// A ferry-test-peer process and what it printed when ready.
struct Peer {
  std::unique_ptr<ChildProcess> process;
  std::string name;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t private_addr = 0;

  // Parses "ready name=<segment> addr=<hex> len=<n> private=<hex>"; false when malformed.
  bool ParseReady(const std::string& line) {
    char name_buf[256] = {};
    unsigned long long a = 0, len = 0, priv = 0;
    if (std::sscanf(line.c_str(), "ready name=%255s addr=%llx len=%llu private=%llx", name_buf, &a,
                    &len, &priv) != 4) {
      return false;
    }
    name = name_buf;
    addr = a;
    length = len;
    private_addr = priv;
    return true;
  }
  // One command, one answer line (bounded); "dead" / "no answer: ..." when the peer is gone.
  std::string Ask(const std::string& command) {
    using namespace std::chrono_literals;
    if (!process->WriteLine(command).ok()) return "dead";
    Result<std::string> line = process->ReadLine(10s);
    return line.ok() ? *line : "no answer: " + line.status().ToString();
  }
  uint64_t Sum(uint64_t offset, uint64_t len) {
    const std::string reply = Ask("sum " + std::to_string(offset) + " " + std::to_string(len));
    return reply.rfind("sum ", 0) == 0 ? std::stoull(reply.substr(4), nullptr, 16) : 0;
  }
};

// Starts ferry-test-peer (engine_peer.cc) with `env` ("FERRY_...=..." settings) publishing
// `bytes` of buffer under `name` to `connection`, its stderr in `log_dir`/<name>.log, and reads
// its ready line (within 20 s). On failure the test fails and the Peer has no process (or no
// name).
inline Peer StartTestPeer(const std::vector<std::string>& env, const std::string& connection,
                          const std::string& name, size_t bytes, const std::string& log_dir) {
  using namespace std::chrono_literals;
  Peer peer;
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(),
              {BinDir() + "/ferry-test-peer", connection, name, "0", std::to_string(bytes)});
  auto child = ChildProcess::SpawnPiped(argv, log_dir + "/" + name + ".log");
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return peer;
  peer.process = std::move(child).value();
  Result<std::string> ready = peer.process->ReadLine(20s);
  EXPECT_TRUE(ready.ok()) << ready.status() << "\n" << peer.process->LogTail();
  if (ready.ok()) EXPECT_TRUE(peer.ParseReady(*ready)) << *ready;
  return peer;
}

}  // namespace ferry::testing
