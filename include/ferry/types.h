// Value types that cross the public API.
//
// Thread contract: value types; distinct objects may be used from distinct threads freely.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

// Where a region of memory lives.
//
// Text forms (Parse / ToString):
//   "cpu"          host DRAM, NUMA node unknown or irrelevant
//   "cpu:<numa>"   host DRAM on NUMA node <numa>
//   "cuda:<n>"     NVIDIA GPU <n>
//   "rocm:<n>"     AMD GPU <n>
//   "ascend:<n>"   Ascend NPU <n>
//   "*"            not known yet: detect from the address at registration
// <numa> and <n> are decimal, 0..65535, without sign or leading zeros.
struct Location {
  enum class Kind : uint8_t { kDetect = 0, kCpu, kCuda, kRocm, kAscend };
  static constexpr int32_t kAnyIndex = -1;  // "cpu" without a NUMA node

  Kind kind = Kind::kDetect;
  int32_t index = kAnyIndex;  // NUMA node for kCpu, device ordinal otherwise; -1 only for cpu/*

  static Location Detect() { return {Kind::kDetect, kAnyIndex}; }
  static Location Cpu() { return {Kind::kCpu, kAnyIndex}; }
  static Location CpuNuma(int32_t node) { return {Kind::kCpu, node}; }
  static Location Cuda(int32_t device) { return {Kind::kCuda, device}; }
  static Location Rocm(int32_t device) { return {Kind::kRocm, device}; }
  static Location Ascend(int32_t device) { return {Kind::kAscend, device}; }

  // Strict parse of the forms above. Anything else is InvalidArgument naming the accepted forms.
  static Result<Location> Parse(std::string_view text);
  std::string ToString() const;

  bool is_host() const { return kind == Kind::kCpu; }
  bool is_device() const {
    return kind == Kind::kCuda || kind == Kind::kRocm || kind == Kind::kAscend;
  }

  friend bool operator==(const Location&, const Location&) = default;
};

// A remote segment, as returned by openSegment. Stable for a name for the engine's life.
using SegmentId = uint64_t;
using BatchId = uint64_t;

enum class OpCode : uint8_t { kRead = 0, kWrite = 1 };

}  // namespace ferry
