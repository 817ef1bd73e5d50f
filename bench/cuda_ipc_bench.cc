// ferry-cuda-ipc-bench: ferry moving device memory between two processes against the raw CUDA
// paths, in the same run, on one machine with a CUDA device (issue 16). Two processes: the
// program starts a copy of itself as the target, which cudaMallocs the working set on device 0,
// registers it ("cuda:0", transports {--transport}, P2P metadata on 127.0.0.1) and exports its
// IPC handle. The initiator (this process) then measures, per block size and operation:
//   ferry  batches of --batch_size requests of one block each (device to device over
//          --transport: cuda-ipc, or tcp, which stages both sides through host memory),
//          submitTransfer + waitBatch, cycling through the working set;
//   raw    the same blocks as cudaMemcpyAsync device to device through the target's allocation
//          opened with cudaIpcOpenMemHandle, one stream, cudaStreamSynchronize per batch;
// and prints "ratio" = ferry / raw. Once: the host<->device staging ceilings (cudaMemcpy
// between pinned host memory and the device). Numbers are printed, never asserted.
//
//   ferry-cuda-ipc-bench [--working_set=256M] [--block_sizes=64K,1M,4M,16M] [--batch_size=16]
//                        [--seconds=1] [--transport=cuda-ipc|tcp]
// Over tcp the raw column stays the device-to-device copy: the ratio says how far the staged
// network path is from what the same host offers; the staging ceilings bound it too.
// Exits 1 (saying why) when there is no device or a transfer fails.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/transfer_engine.h"
#include "raw_baseline.h"

namespace {

using Clock = std::chrono::steady_clock;

bool Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "ferry-cuda-ipc-bench: %s: %s (%s)\n", what, cudaGetErrorName(e),
               cudaGetErrorString(e));
  return false;
}

std::string Hex(const void* p, size_t n) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<const unsigned char*>(p)[i]);
    out += b;
  }
  return out;
}

bool Unhex(const std::string& text, void* out, size_t n) {
  if (text.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &v) != 1) return false;
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(v);
  }
  return true;
}

ferry::EngineOptions Options(const std::string& transport) {
  ferry::EngineOptions o;
  o.metadata_conn = "P2PHANDSHAKE";
  o.local_server_name = "127.0.0.1";
  o.transports = {transport};
  return o;
}

// The target: registers its working set, prints "ready <segment> <addr> <handle>", waits for
// its stdin to close.
int RunTarget(uint64_t working_set, const std::string& transport) {
  ferry::TransferEngine engine;
  if (ferry::Status s = engine.init(Options(transport)); !s.ok()) {
    std::fprintf(stderr, "target init: %s\n", s.ToString().c_str());
    return 1;
  }
  void* base = nullptr;
  if (!Cuda(cudaMalloc(&base, working_set), "cudaMalloc") ||
      !Cuda(cudaMemset(base, 1, working_set), "cudaMemset") ||
      !Cuda(cudaDeviceSynchronize(), "sync")) {
    return 1;
  }
  if (ferry::Status s = engine.registerLocalMemory(base, working_set, "cuda:0"); !s.ok()) {
    std::fprintf(stderr, "target register: %s\n", s.ToString().c_str());
    return 1;
  }
  cudaIpcMemHandle_t handle;
  if (!Cuda(cudaIpcGetMemHandle(&handle, base), "cudaIpcGetMemHandle")) return 1;
  std::printf("ready %s %" PRIu64 " %s\n", engine.localSegmentName().c_str(),
              reinterpret_cast<uint64_t>(base), Hex(&handle, sizeof(handle)).c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

struct Flags {
  uint64_t working_set = uint64_t{256} << 20;
  std::vector<uint64_t> blocks = {64 << 10, 1 << 20, 4 << 20, 16 << 20};
  size_t batch = 16;
  double seconds = 1.0;
  bool target = false;
  std::string transport = "cuda-ipc";
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "--target") {
      f->target = true;
    } else if (key == "--working_set") {
      auto v = raw_baseline::ParseBytes(value);
      if (!v) return false;
      f->working_set = *v;
    } else if (key == "--block_sizes") {
      f->blocks.clear();
      std::istringstream in(value);
      for (std::string b; std::getline(in, b, ',');) {
        auto v = raw_baseline::ParseBytes(b);
        if (!v) return false;
        f->blocks.push_back(*v);
      }
    } else if (key == "--batch_size") {
      f->batch = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "--transport") {
      if (value != "cuda-ipc" && value != "tcp") return false;
      f->transport = value;
    } else if (key == "--seconds") {
      f->seconds = std::atof(value.c_str());
    } else {
      return false;
    }
  }
  return f->batch > 0 && f->seconds > 0 && !f->blocks.empty();
}

// Runs `batch_fn(first_offset)` (one batch) for `seconds`; GB/s of `batch_bytes` per batch.
template <typename F>
double Measure(double seconds, uint64_t batch_bytes, uint64_t working_set, F batch_fn) {
  const uint64_t batches_in_set = std::max<uint64_t>(1, working_set / batch_bytes);
  uint64_t n = 0;
  const auto began = Clock::now();
  const auto until = began + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if (!batch_fn((n % batches_in_set) * batch_bytes)) return -1;
    ++n;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - began).count();
  return static_cast<double>(n * batch_bytes) / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!Parse(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: ferry-cuda-ipc-bench [--working_set=256M] [--block_sizes=64K,1M,...] "
                 "[--batch_size=16] [--seconds=1] [--transport=cuda-ipc|tcp]\n");
    return 2;
  }
  if (f.target) return RunTarget(f.working_set, f.transport);
  int devices = 0;
  if (!Cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount") || devices == 0) return 1;

  // The target process, its stdin and stdout piped to us.
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    const std::string ws = "--working_set=" + std::to_string(f.working_set);
    const std::string transport = "--transport=" + f.transport;
    execl("/proc/self/exe", "ferry-cuda-ipc-bench", "--target", ws.c_str(), transport.c_str(),
          nullptr);
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  FILE* child_out = fdopen(from_child[0], "r");
  char line[512] = {};
  if (child_out == nullptr || std::fgets(line, sizeof(line), child_out) == nullptr) {
    std::fprintf(stderr, "ferry-cuda-ipc-bench: the target did not start\n");
    return 1;
  }
  char name[256] = {}, handle_hex[256] = {};
  uint64_t remote = 0;
  if (std::sscanf(line, "ready %255s %" SCNu64 " %255s", name, &remote, handle_hex) != 3) {
    std::fprintf(stderr, "ferry-cuda-ipc-bench: bad ready line: %s", line);
    return 1;
  }
  int status = 0;
  {
    ferry::TransferEngine engine;
    void* local = nullptr;
    void* raw_remote = nullptr;
    cudaIpcMemHandle_t handle;
    cudaStream_t stream = nullptr;
    ferry::Result<ferry::SegmentId> target = ferry::NotFoundError("not opened");
    if (ferry::Status s = engine.init(Options(f.transport)); !s.ok()) {
      std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
      return 1;
    }
    if (!Cuda(cudaMalloc(&local, f.working_set), "cudaMalloc") ||
        !Cuda(cudaMemset(local, 2, f.working_set), "cudaMemset") ||
        !Unhex(handle_hex, &handle, sizeof(handle)) ||
        !Cuda(cudaIpcOpenMemHandle(&raw_remote, handle, cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle") ||
        !Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream")) {
      return 1;
    }
    if (ferry::Status s = engine.registerLocalMemory(local, f.working_set, "cuda:0"); !s.ok()) {
      std::fprintf(stderr, "register: %s\n", s.ToString().c_str());
      return 1;
    }
    target = engine.openSegment(name);
    if (!target.ok()) {
      std::fprintf(stderr, "openSegment: %s\n", target.status().ToString().c_str());
      return 1;
    }
    // Staging ceilings (what device memory over the network would pay per byte, twice).
    void* pinned = nullptr;
    const uint64_t stage = std::min<uint64_t>(f.working_set, uint64_t{64} << 20);
    if (Cuda(cudaMallocHost(&pinned, stage), "cudaMallocHost")) {
      for (const bool h2d : {true, false}) {
        const double gbps = Measure(f.seconds, stage, stage, [&](uint64_t) {
          return Cuda(h2d ? cudaMemcpy(local, pinned, stage, cudaMemcpyHostToDevice)
                          : cudaMemcpy(pinned, local, stage, cudaMemcpyDeviceToHost),
                      "staging copy");
        });
        std::printf("raw staging %s pinned, %" PRIu64 " MiB copies: %.2f GB/s\n",
                    h2d ? "host->device" : "device->host", stage >> 20, gbps);
      }
      cudaFreeHost(pinned);
    }
    std::printf("transport,op,block_bytes,batch,ferry_gbps,raw_gbps,ratio\n");
    for (const uint64_t block : f.blocks) {
      if (block * f.batch > f.working_set) continue;
      for (const ferry::OpCode op : {ferry::OpCode::kWrite, ferry::OpCode::kRead}) {
        const bool write = op == ferry::OpCode::kWrite;
        const uint64_t batch_bytes = block * f.batch;
        const double ferry_gbps = Measure(f.seconds, batch_bytes, f.working_set, [&](uint64_t at) {
          std::vector<ferry::TransferRequest> requests;
          for (size_t i = 0; i < f.batch; ++i) {
            requests.push_back({op, static_cast<char*>(local) + at + i * block, *target,
                                remote + at + i * block, block});
          }
          ferry::Result<ferry::BatchId> batch = engine.allocateBatchID(requests.size());
          if (!batch.ok() || !engine.submitTransfer(*batch, requests).ok()) return false;
          ferry::Result<ferry::BatchStatus> done =
              engine.waitBatch(*batch, std::chrono::seconds(30));
          const bool ok = done.ok() && done->failed == 0 && done->completed == requests.size();
          if (!ok) {
            std::fprintf(stderr, "ferry batch failed: %s\n",
                         done.ok() ? done->first_error.ToString().c_str()
                                   : done.status().ToString().c_str());
          }
          (void)engine.freeBatchID(*batch);
          return ok;
        });
        const double raw_gbps = Measure(f.seconds, batch_bytes, f.working_set, [&](uint64_t at) {
          for (size_t i = 0; i < f.batch; ++i) {
            char* l = static_cast<char*>(local) + at + i * block;
            char* r = static_cast<char*>(raw_remote) + at + i * block;
            if (!Cuda(cudaMemcpyAsync(write ? r : l, write ? l : r, block, cudaMemcpyDeviceToDevice,
                                      stream),
                      "raw copy")) {
              return false;
            }
          }
          return Cuda(cudaStreamSynchronize(stream), "raw sync");
        });
        if (ferry_gbps < 0 || raw_gbps < 0) {
          status = 1;
          break;
        }
        std::printf("%s,%s,%" PRIu64 ",%zu,%.2f,%.2f,%.3f\n", f.transport.c_str(),
                    write ? "write" : "read", block, f.batch, ferry_gbps, raw_gbps,
                    raw_gbps > 0 ? ferry_gbps / raw_gbps : 0.0);
        std::fflush(stdout);
      }
    }
    cudaIpcCloseMemHandle(raw_remote);
    cudaStreamDestroy(stream);
    (void)engine.unregisterLocalMemory(local);
    cudaFree(local);
  }
  close(to_child[1]);  // the target exits on EOF
  int child_status = 0;
  waitpid(child, &child_status, 0);
  return status;
}
