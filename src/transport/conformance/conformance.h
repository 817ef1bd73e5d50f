// The transport conformance suite (DESIGN.md, transport/conformance): one parametrized gtest
// suite that every transport passes. A transport joins it by registering a Target from a
// <x>_conformance.cc file that its CMakeLists.txt adds to the suite:
//
//   set_property(GLOBAL APPEND PROPERTY FERRY_CONFORMANCE_SOURCES
//                ${CMAKE_CURRENT_SOURCE_DIR}/tcp_conformance.cc)
//   set_property(GLOBAL APPEND PROPERTY FERRY_CONFORMANCE_LIBS ferry_transport_tcp)
//
//   // tcp_conformance.cc (the static is named after the transport: unity builds compile
//   // several <x>_conformance.cc files as one translation unit)
//   static const bool registered_tcp = ferry::conformance::Register({
//       .name = "tcp", .transport = "tcp",
//       .make = [] { return std::make_unique<TcpTransport>(TcpTransportOptions{}); }});
//
// A target that needs a device (cuda_ipc) registers through FERRY_GPU_CONFORMANCE_SOURCES /
// FERRY_GPU_CONFORMANCE_LIBS instead: the same cases, in gpu_conformance_test (label gpu).
//
// Each case makes fresh transports in this process: one or more targets and an initiator, each
// with a transport_testing::TestContext standing in for its engine (Exchange between them is
// routed to the peer's OnExchange). Memory on both sides is registered with the transport that
// owns it, as the engine does. A transport with file buffers runs the cases against file windows
// of its own engine (Target::file_directory); one with device memory runs them on that memory,
// never touched by the CPU (Target::location, Target::copy). A case that cannot apply to a
// target says why and skips.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry::conformance {

struct Target {
  std::string name;       // the gtest parameter name, e.g. "shm_managed"; [A-Za-z0-9_] only
  std::string transport;  // Transport::name() of what `make` returns
  // Makes a transport, not yet started. Called several times per case.
  std::function<std::unique_ptr<Transport>()> make;
  // Empty when the target can run on this machine; otherwise why its cases are skipped
  // (e.g. "no libfabric provider 'tcp;ofi_rxm'"). Unset: always runs.
  std::function<std::string()> unavailable;
  // Memory of `length` bytes on `owner`'s side (owner is started), freed by the deleter.
  // Unset: heap memory. Set it where the transport reaches only memory of its own kind
  // (shared allocations, a cxl window).
  std::function<Result<std::shared_ptr<uint8_t>>(Transport& owner, size_t length)> allocate;
  // Transports whose target buffers are file windows (capabilities().file_buffers): where the
  // cases make the files behind them (a disk directory, /dev/shm). Empty: the temp directory.
  // For such a transport a case's target is the initiator's own engine, as for an engine's own
  // file buffers: target sides share the initiator's context and transport under their own
  // segment names, and their buffers are windows of files (RegisterFile) at addresses no memory
  // occupies, whose bytes and guard bytes the cases set and check with pread/pwrite
  // (transport_testing::TargetBytes). Where such a transport answers RegisterMemory with
  // NotFound (it reaches memory through the engine's pin), memory is registered in the context
  // only, as the engine skips a transport that answers so.
  std::string file_directory;
  // The location every region (initiator's and target's) is registered with: that of the memory
  // `allocate` returns (e.g. Location::Cuda(0) for device memory).
  Location location = Location::Cpu();
  // Set for memory the CPU must not touch (a device's): the cases then set and check every byte
  // of a region, on both sides and guard bytes included, only by copying between host memory
  // and that memory with it (either of dst and src may be the region's); Ok once the bytes are
  // in place. Unset: memcpy.
  std::function<Status(void* dst, const void* src, size_t n)> copy;
};

// Adds `target` to the suite; returns true so it can initialize a static.
bool Register(Target target);
const std::vector<Target>& Targets();

}  // namespace ferry::conformance
