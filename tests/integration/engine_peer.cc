// ferry-test-peer: a target engine in its own process, driven by tests over stdin/stdout.
//
//   ferry-test-peer <metadata_conn> <name|""> <rpc_port> <buffer_bytes>
// prints "ready name=<segment> addr=<hex> len=<n> private=<hex>" once reachable, then answers
// one line per command:
//   sum <offset> <len>   FNV-1a of buffer[offset, offset+len)      -> "sum <hex>"
//   byte <offset>        one byte                                 -> "byte <n>"
//   unregister           unregisters the buffer (it stays allocated) -> "ok" | "error <status>"
//   register             registers it again (a new generation)    -> "ok" | "error <status>"
//   notifies             every notification since the last call   -> "notify <name> <payload>"...
//   "end" exit                 -> exits 0
// The second, "private" buffer is registered but not remote-accessible.
// The environment adjusts the engine (for locality and fallback tests):
//   FERRY_PEER_TRANSPORTS=tcp,shm   EngineOptions::transports (default auto)
//   FERRY_PEER_HOST=10.0.0.2        EngineOptions::host (where it listens and is reached)
//   FERRY_PEER_HOST_ID=b            EngineOptions::host_id
//   FERRY_PEER_NONDUMPABLE=1        prctl(PR_SET_DUMPABLE, 0): refuses cross-process access
//   FERRY_PEER_CXL_WINDOW=/dev/shm/w EngineOptions::cxl_window
//   FERRY_PEER_RDMA_PROVIDER=tcp;ofi_rxm EngineOptions::rdma_provider
//   FERRY_PEER_LEASE_TTL_MS=1000    EngineOptions::lease_ttl (default 3000)
//   FERRY_PEER_MANAGED=1            the buffer comes from allocateManagedBuffer (=cxl: from the
//                                   cxl window)
// and, read by the engine itself: FERRY_AUTH_SECRET=<secret> (EngineOptions::auth_secret),
// FERRY_ADVERTISE_HOST=<addr> and FERRY_PORT_RANGE=<first-last> (advertise_host, port_range).
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/transfer_engine.h"

namespace {

uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// Reads [p, p + n) as an outside observer would, through the kernel (process_vm_readv on this
// process). The bytes were written by ferry's receive threads, and the only ordering with this
// read runs through the other process (its transfer completed, then it asked us over the pipe),
// which ThreadSanitizer cannot see; a plain load would be reported as a race.
std::vector<unsigned char> Observe(const unsigned char* p, size_t n) {
  std::vector<unsigned char> copy(n);
  size_t done = 0;
  while (done < n) {
    iovec local{copy.data() + done, n - done};
    iovec remote{const_cast<unsigned char*>(p) + done, n - done};
    const ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (got <= 0) {
      std::perror("process_vm_readv");
      std::exit(1);
    }
    done += static_cast<size_t>(got);
  }
  return copy;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: ferry-test-peer <metadata_conn> <name> <rpc_port> <bytes>\n");
    return 2;
  }
  ferry::EngineOptions options;
  options.metadata_conn = argv[1];
  options.local_server_name = argv[2];
  options.rpc_port = static_cast<uint16_t>(std::atoi(argv[3]));
  options.lease_ttl = std::chrono::milliseconds(3000);
  const size_t bytes = std::strtoull(argv[4], nullptr, 10);
  if (const char* t = std::getenv("FERRY_PEER_TRANSPORTS")) {
    options.transports.clear();
    std::istringstream names(t);
    for (std::string name; std::getline(names, name, ',');) options.transports.push_back(name);
  }
  if (const char* h = std::getenv("FERRY_PEER_HOST")) options.host = h;
  if (const char* id = std::getenv("FERRY_PEER_HOST_ID")) options.host_id = id;
  if (const char* w = std::getenv("FERRY_PEER_CXL_WINDOW")) options.cxl_window = w;
  if (const char* p = std::getenv("FERRY_PEER_RDMA_PROVIDER")) options.rdma_provider = p;
  if (const char* ttl = std::getenv("FERRY_PEER_LEASE_TTL_MS")) {
    options.lease_ttl = std::chrono::milliseconds(std::atoi(ttl));
  }
  if (std::getenv("FERRY_PEER_NONDUMPABLE") != nullptr && prctl(PR_SET_DUMPABLE, 0) != 0) {
    std::perror("prctl");
    return 1;
  }
  const char* managed_env = std::getenv("FERRY_PEER_MANAGED");
  const bool managed = managed_env != nullptr;
  const std::string managed_location = managed && std::string(managed_env) == "cxl" ? "cxl" : "cpu";
  ferry::TransferEngine engine;
  ferry::Status s = engine.init(options);
  if (!s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 1;
  }
  // A fixed address, so a restarted peer has its buffer where the old one was (as a restarted
  // inference worker re-creating its KV pool would): requests planned against the old
  // descriptor then name valid addresses, and only the incarnation tells them apart.
  void* where = nullptr;
  if (managed) {
    ferry::Result<void*> allocated = engine.allocateManagedBuffer(bytes, managed_location);
    if (!allocated.ok()) {
      std::fprintf(stderr, "allocateManagedBuffer: %s\n", allocated.status().ToString().c_str());
      return 1;
    }
    where = *allocated;
  } else {
    where = mmap(reinterpret_cast<void*>(0x7e9000000000), bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (where == MAP_FAILED) {
      std::perror("mmap");
      return 1;
    }
  }
  std::span<unsigned char> buffer(static_cast<unsigned char*>(where), bytes);
  std::vector<unsigned char> secret(4096, 0x5a);

  if (!managed) s = engine.registerLocalMemory(buffer.data(), buffer.size());
  if (s.ok()) s = engine.registerLocalMemory(secret.data(), secret.size(), "*", false);
  if (!s.ok()) {
    std::fprintf(stderr, "register: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ready name=%s addr=%" PRIx64 " len=%zu private=%" PRIx64 "\n",
              engine.localSegmentName().c_str(), reinterpret_cast<uint64_t>(buffer.data()),
              buffer.size(), reinterpret_cast<uint64_t>(secret.data()));
  std::fflush(stdout);

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "sum") {
      size_t off = 0, len = 0;
      in >> off >> len;
      if (off > bytes || len > bytes - off) {
        std::printf("error range\n");
      } else {
        const std::vector<unsigned char> seen = Observe(buffer.data() + off, len);
        std::printf("sum %" PRIx64 "\n", Fnv(seen.data(), seen.size()));
      }
    } else if (cmd == "byte") {
      size_t off = 0;
      in >> off;
      std::printf("byte %d\n", off < bytes ? Observe(buffer.data() + off, 1)[0] : -1);
    } else if (cmd == "unregister" || cmd == "register") {
      s = cmd == "unregister" ? engine.unregisterLocalMemory(buffer.data())
                              : engine.registerLocalMemory(buffer.data(), buffer.size());
      std::printf(s.ok() ? "ok\n" : "error %s\n", s.ToString().c_str());
    } else if (cmd == "notifies") {
      for (const ferry::NotifyMessage& n : engine.getNotifies()) {
        std::printf("notify %s %s\n", n.name.c_str(), n.payload.c_str());
      }
      std::printf("end\n");
    } else if (cmd == "exit") {
      return 0;
    } else {
      std::printf("error unknown command\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
