// ferry-gpu-test-peer: a target engine whose buffer is CUDA device memory, in its own process,
// driven by tests/gpu over stdin/stdout (as tests/integration/engine_peer.cc does for host
// memory).
//
//   ferry-gpu-test-peer <region_bytes> <guard_bytes> <location>
// allocates one cudaMalloc allocation of guard + region + guard bytes, sets every byte to 0xEE,
// registers the region in the middle (remote-accessible, with <location>: "*" or "cuda:0"), and
// prints "ready name=<segment> addr=<hex> len=<n> private=0" once reachable. Offsets of the
// commands are relative to the allocation's start (so guards are [0, guard) and
// [guard + region, 2 * guard + region)). One answer line per command:
//   sum <offset> <len>      FNV-1a of those device bytes (copied to the host)   -> "sum <hex>"
//   fill <offset> <len> <s> device bytes := byte (s * 131 + i * 31) of pattern   -> "ok"
//   unregister_mark <b>     unregisters the region, then sets all of it to byte <b> and waits
//                           for the device: whatever lands later is a bug       -> "ok" | "error
//                           .."
//   register                registers the region again (a new generation)      -> "ok" | "error .."
//   exit                    exits 0
// Engine: P2P metadata, transports from FERRY_PEER_TRANSPORTS (default cuda-ipc; a comma list),
// rdma's provider from FERRY_PEER_RDMA_PROVIDER, 127.0.0.1.
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <iostream>
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

bool Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ferry-gpu-test-peer <region_bytes> <guard_bytes> <location>\n");
    return 2;
  }
  const size_t region = std::strtoull(argv[1], nullptr, 10);
  const size_t guard = std::strtoull(argv[2], nullptr, 10);
  const std::string location = argv[3];
  const size_t total = region + 2 * guard;

  ferry::EngineOptions options;
  options.metadata_conn = "P2PHANDSHAKE";
  options.local_server_name = "127.0.0.1";
  options.transports = {"cuda-ipc"};
  if (const char* t = std::getenv("FERRY_PEER_TRANSPORTS")) {
    options.transports.clear();
    std::istringstream names(t);
    for (std::string name; std::getline(names, name, ',');) options.transports.push_back(name);
  }
  if (const char* provider = std::getenv("FERRY_PEER_RDMA_PROVIDER")) {
    options.rdma_provider = provider;
  }
  ferry::TransferEngine engine;
  if (ferry::Status s = engine.init(options); !s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 1;
  }
  unsigned char* base = nullptr;
  if (!Cuda(cudaMalloc(reinterpret_cast<void**>(&base), total), "cudaMalloc") ||
      !Cuda(cudaMemset(base, 0xEE, total), "cudaMemset") ||
      !Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
    return 1;
  }
  unsigned char* data = base + guard;
  if (ferry::Status s = engine.registerLocalMemory(data, region, location); !s.ok()) {
    std::fprintf(stderr, "register: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ready name=%s addr=%" PRIx64 " len=%zu private=0\n",
              engine.localSegmentName().c_str(), reinterpret_cast<uint64_t>(data), region);
  std::fflush(stdout);

  std::string line;
  std::vector<unsigned char> host;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "sum" || cmd == "fill") {
      size_t off = 0, len = 0;
      unsigned seed = 0;
      in >> off >> len >> seed;
      if (off > total || len > total - off) {
        std::printf("error range\n");
      } else if (cmd == "sum") {
        host.resize(len);
        if (Cuda(cudaMemcpy(host.data(), base + off, len, cudaMemcpyDeviceToHost), "sum")) {
          std::printf("sum %" PRIx64 "\n", Fnv(host.data(), len));
        } else {
          std::printf("error cuda\n");
        }
      } else {
        host.resize(len);
        for (size_t i = 0; i < len; ++i) host[i] = static_cast<unsigned char>(seed * 131 + i * 31);
        const bool ok =
            Cuda(cudaMemcpy(base + off, host.data(), len, cudaMemcpyHostToDevice), "fill");
        std::printf(ok ? "ok\n" : "error cuda\n");
      }
    } else if (cmd == "unregister_mark") {
      unsigned mark = 0;
      in >> mark;
      ferry::Status s = engine.unregisterLocalMemory(data);
      if (s.ok() && (!Cuda(cudaMemset(data, static_cast<int>(mark), region), "mark") ||
                     !Cuda(cudaDeviceSynchronize(), "mark sync"))) {
        s = ferry::InternalError("marking the region failed");
      }
      std::printf(s.ok() ? "ok\n" : "error %s\n", s.ToString().c_str());
    } else if (cmd == "register") {
      ferry::Status s = engine.registerLocalMemory(data, region, location);
      std::printf(s.ok() ? "ok\n" : "error %s\n", s.ToString().c_str());
    } else if (cmd == "exit") {
      return 0;
    } else {
      std::printf("error unknown command\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
