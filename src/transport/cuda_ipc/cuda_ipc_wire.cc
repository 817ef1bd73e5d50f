#include "transport/cuda_ipc/cuda_ipc_wire.h"

#include <sys/un.h>

#include <climits>
#include <vector>

#include "transport/samehost/endpoint_text.h"

namespace ferry::cuda_ipc {
namespace {

using samehost::ParseDecimal;
using samehost::SplitFields;

constexpr std::string_view kVersion = "v1:";

template <size_t N>
bool ParseHex(std::string_view text, std::array<uint8_t, N>* out) {
  if (text.size() != 2 * N) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < N; ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
std::string Hex(const std::array<uint8_t, N>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * N);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace

std::string EncodeEndpoint(const Endpoint& endpoint) {
  std::array<uint8_t, 8> token{};
  for (size_t i = 0; i < token.size(); ++i) {
    token[i] = static_cast<uint8_t>(endpoint.process_token >> (8 * (7 - i)));
  }
  return std::string(kVersion) + std::to_string(endpoint.pid) + ":" + Hex(token) + ":" +
         endpoint.grant_path;
}

Result<Endpoint> DecodeEndpoint(std::string_view text) {
  const std::string accepted =
      " (expected \"v1:<pid>:<process token, 16 hex>:<absolute socket path>\")";
  if (text.substr(0, kVersion.size()) != kVersion) {
    return InvalidArgumentError("cuda-ipc endpoint has no 'v1:' prefix" + accepted);
  }
  text.remove_prefix(kVersion.size());
  const size_t colon = text.find(':');
  uint64_t pid = 0;
  if (colon == std::string_view::npos || !ParseDecimal(text.substr(0, colon), &pid) || pid == 0 ||
      pid > INT_MAX) {
    return InvalidArgumentError("cuda-ipc endpoint has a bad pid" + accepted);
  }
  text.remove_prefix(colon + 1);
  std::array<uint8_t, 8> token{};
  if (text.size() < 2 * token.size() + 1 || text[2 * token.size()] != ':' ||
      !ParseHex(text.substr(0, 2 * token.size()), &token)) {
    return InvalidArgumentError("cuda-ipc endpoint has a bad process token" + accepted);
  }
  uint64_t process_token = 0;
  for (uint8_t b : token) process_token = process_token << 8 | b;
  const std::string_view path = text.substr(2 * token.size() + 1);
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgumentError("cuda-ipc endpoint has a bad socket path" + accepted);
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgumentError("cuda-ipc endpoint path holds a control character" + accepted);
    }
  }
  return Endpoint{static_cast<pid_t>(pid), process_token, std::string(path)};
}

Result<uint64_t> RegionKey::OffsetOf(uint64_t addr, uint64_t length) const {
  if (addr < region_addr || addr - region_addr > region_length ||
      length > region_length - (addr - region_addr)) {
    return InvalidArgumentError("cuda-ipc: remote range [" + std::to_string(addr) + ", +" +
                                std::to_string(length) + ") leaves its region [" +
                                std::to_string(region_addr) + ", +" +
                                std::to_string(region_length) + ")");
  }
  return addr - alloc_base;  // region inside the allocation: DecodeKey checked
}

std::string EncodeKey(const RegionKey& key) {
  return std::string(kVersion) + Hex(key.handle) + ":" + Hex(key.device_uuid) + ":" +
         std::to_string(key.alloc_base) + ":" + std::to_string(key.alloc_size) + ":" +
         std::to_string(key.region_addr) + ":" + std::to_string(key.region_length);
}

Result<RegionKey> DecodeKey(std::string_view text) {
  auto bad = [&] {
    return InvalidArgumentError(
        "bad cuda-ipc key '" + std::string(text.substr(0, 48)) + (text.size() > 48 ? "...'" : "'") +
        " (expected \"v1:<handle hex>:<uuid hex>:<alloc base>:<alloc size>:<region addr>:<region "
        "length>\", decimal, the region inside the allocation)");
  };
  if (text.substr(0, kVersion.size()) != kVersion) return bad();
  const std::vector<std::string_view> parts = SplitFields(text.substr(kVersion.size()), ':');
  RegionKey key;
  if (parts.size() != 6 || !ParseHex(parts[0], &key.handle) ||
      !ParseHex(parts[1], &key.device_uuid) || !ParseDecimal(parts[2], &key.alloc_base) ||
      !ParseDecimal(parts[3], &key.alloc_size) || !ParseDecimal(parts[4], &key.region_addr) ||
      !ParseDecimal(parts[5], &key.region_length)) {
    return bad();
  }
  if (key.alloc_size == 0 || key.alloc_base > UINT64_MAX - key.alloc_size ||
      key.region_addr < key.alloc_base || key.region_addr - key.alloc_base > key.alloc_size ||
      key.region_length > key.alloc_size - (key.region_addr - key.alloc_base)) {
    return bad();
  }
  return key;
}

}  // namespace ferry::cuda_ipc
