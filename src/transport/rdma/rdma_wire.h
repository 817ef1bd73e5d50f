// The rdma transport's own byte formats: what it publishes, its key bytes and its Exchange
// messages. All are line-oriented ASCII: tokens separated by one space, lines by '\n', numbers
// in lowercase hex without a prefix, binary strings (addresses, names) as lowercase hex bytes.
// Decoding is strict: a wrong tag, a token count, a character, a bound or a trailing byte is
// InvalidArgument naming what was wrong; nothing half-decoded is returned.
//
// Published endpoints (SegmentDesc::transports["rdma"]):
//   ferry-rdma/1 <provider-hex> <endpoint-count>
//   ep <fabric-hex> <domain-hex> <virt-addr 0|1> <address-hex>      (endpoint-count lines)
// Key (BufferDesc::keys["rdma"]); the i-th rkey belongs to the i-th published endpoint:
//   ferry-rdma-key/1 <registration-id> <base> <length> <rkey>[,<rkey>...]
// Access check request (initiator -> target, over TransportContext::Exchange):
//   ferry-rdma-check/1 <count>
//   <registration-id> <addr> <length> <incarnation> <generation>   (count lines)
// Access check reply, one line per request line, in order:
//   ferry-rdma-checked/1 <count>
//   <status-code> <message-hex>          (status-code: common/wire_status.h's number)
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::rdma {

inline constexpr size_t kMaxEndpoints = 64;
inline constexpr size_t kMaxAddressBytes = 256;
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxChecks = 4096;
inline constexpr size_t kMaxCheckMessageBytes = 512;

struct EndpointDesc {
  std::string fabric;      // fabric name; endpoints reach each other within one fabric
  std::string domain;      // domain (device) name, e.g. "mlx5_0"
  bool virt_addr = false;  // FI_MR_VIRT_ADDR: RMA addresses are virtual, else offsets from base
  std::string address;     // fi_getname bytes of the endpoint
  friend bool operator==(const EndpointDesc&, const EndpointDesc&) = default;
};

struct PublishedEndpoints {
  std::string provider;  // e.g. "tcp;ofi_rxm"
  std::vector<EndpointDesc> endpoints;
  friend bool operator==(const PublishedEndpoints&, const PublishedEndpoints&) = default;
};

struct RemoteKey {
  uint64_t id = 0;      // the registration's id at its owner (never reused by that transport)
  uint64_t base = 0;    // registered start address
  uint64_t length = 0;  // registered bytes, > 0
  std::vector<uint64_t> rkeys;  // one per published endpoint of the owner
  friend bool operator==(const RemoteKey&, const RemoteKey&) = default;
};

struct AccessCheck {
  uint64_t id = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  friend bool operator==(const AccessCheck&, const AccessCheck&) = default;
};

std::string EncodeEndpoints(const PublishedEndpoints& endpoints);
Result<PublishedEndpoints> DecodeEndpoints(std::string_view text);

std::string EncodeKey(const RemoteKey& key);
Result<RemoteKey> DecodeKey(std::string_view text);

std::string EncodeCheckRequest(std::span<const AccessCheck> checks);
Result<std::vector<AccessCheck>> DecodeCheckRequest(std::string_view text);

// Messages longer than kMaxCheckMessageBytes are cut.
std::string EncodeCheckReply(std::span<const Status> results);
// `expected`: the number of checks asked; another count is InvalidArgument.
Result<std::vector<Status>> DecodeCheckReply(std::string_view text, size_t expected);

}  // namespace ferry::rdma
