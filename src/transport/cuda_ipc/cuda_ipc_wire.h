// The cuda-ipc transport's two strict text encodings (anything else is InvalidArgument):
//   published bytes (SegmentDesc::transports["cuda-ipc"]):
//     "v1:<pid>:<process token, 16 hex>:<grant socket path>"
//   buffer keys (BufferDesc::keys["cuda-ipc"]):
//     "v1:<ipc handle, 128 hex>:<device uuid, 32 hex>:<alloc base>:<alloc size>:<region
//     addr>:<region length>"
// Numbers are decimal without sign or leading zeros. A key says: the registered region
// [region addr, + region length) lies inside the CUDA allocation [alloc base, + alloc size) of
// the target's device <uuid>, which cudaIpcGetMemHandle exported as <ipc handle>.
//
// Thread contract: pure functions and value types.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::cuda_ipc {

constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t), checked in the copier
constexpr size_t kUuidBytes = 16;       // sizeof(cudaUUID_t)

struct Endpoint {
  pid_t pid = 0;
  // Random, drawn once per process (cuda_ipc_copier.h, ThisProcessToken): with the pid it tells
  // an engine of this very process (whose memory is used at its own address: CUDA cannot open
  // a handle in the process that exported it) from one in another pid namespace that happens
  // to have the same pid (two containers' pid 1).
  uint64_t process_token = 0;
  std::string grant_path;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

std::string EncodeEndpoint(const Endpoint& endpoint);
Result<Endpoint> DecodeEndpoint(std::string_view text);

struct RegionKey {
  std::array<uint8_t, kIpcHandleBytes> handle{};
  std::array<uint8_t, kUuidBytes> device_uuid{};
  uint64_t alloc_base = 0;
  uint64_t alloc_size = 0;
  uint64_t region_addr = 0;
  uint64_t region_length = 0;
  friend bool operator==(const RegionKey&, const RegionKey&) = default;

  // The offset within the allocation of remote [addr, addr + length); InvalidArgument when the
  // range leaves the region.
  Result<uint64_t> OffsetOf(uint64_t addr, uint64_t length) const;
};

std::string EncodeKey(const RegionKey& key);
// Also checks that the region lies inside the allocation and neither wraps.
Result<RegionKey> DecodeKey(std::string_view text);

}  // namespace ferry::cuda_ipc
