// The shm transport's two small text encodings, both strict (anything else is InvalidArgument):
//   published bytes (SegmentDesc::transports["shm"]):  "v1:<pid>:<grant socket path>"
//   buffer keys (BufferDesc::keys["shm"]):             "cma"
//                                                      "mapped:<id>:<offset>:<length>:<addr>"
// Numbers are decimal without sign or leading zeros. A mapped key says: the registered region
// starting at <addr> lies <offset> bytes into shared buffer <id> of <length> bytes. The path is
// absolute, shorter than a Unix socket path's limit, and free of control characters.
//
// Thread contract: pure functions and value types.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::shm {

struct PeerAddress {
  pid_t pid = 0;
  std::string socket_path;
  friend bool operator==(const PeerAddress&, const PeerAddress&) = default;
};

std::string EncodePeerAddress(const PeerAddress& address);
Result<PeerAddress> DecodePeerAddress(std::string_view text);

struct BufferKey {
  bool mapped = false;  // false: "cma"
  uint64_t buffer_id = 0;
  uint64_t offset = 0;         // of the region's start within the buffer
  uint64_t buffer_length = 0;  // of the whole shared buffer
  uint64_t region_addr = 0;    // the region's start in the target's address space
  friend bool operator==(const BufferKey&, const BufferKey&) = default;

  // The offset of remote [addr, addr + length) within the buffer; InvalidArgument when the
  // range does not lie within it past the region's start.
  Result<uint64_t> OffsetOf(uint64_t addr, uint64_t length) const;
};

std::string EncodeBufferKey(const BufferKey& key);
Result<BufferKey> DecodeBufferKey(std::string_view text);

}  // namespace ferry::shm
