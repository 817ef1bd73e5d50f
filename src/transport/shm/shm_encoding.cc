#include "transport/shm/shm_encoding.h"

#include <sys/un.h>

#include <climits>
#include <vector>

#include "transport/samehost/endpoint_text.h"

namespace ferry::shm {
namespace {

using samehost::ParseDecimal;
using samehost::SplitFields;

constexpr std::string_view kAddressPrefix = "v1:";
constexpr std::string_view kMappedPrefix = "mapped:";

}  // namespace

std::string EncodePeerAddress(const PeerAddress& address) {
  return std::string(kAddressPrefix) + std::to_string(address.pid) + ":" + address.socket_path;
}

Result<PeerAddress> DecodePeerAddress(std::string_view text) {
  const std::string accepted = " (expected \"v1:<pid>:<absolute socket path>\")";
  if (text.substr(0, kAddressPrefix.size()) != kAddressPrefix) {
    return InvalidArgumentError("shm address has no 'v1:' prefix" + accepted);
  }
  text.remove_prefix(kAddressPrefix.size());
  const size_t colon = text.find(':');
  uint64_t pid = 0;
  if (colon == std::string_view::npos || !ParseDecimal(text.substr(0, colon), &pid) || pid == 0 ||
      pid > INT_MAX) {
    return InvalidArgumentError("shm address has a bad pid" + accepted);
  }
  std::string_view path = text.substr(colon + 1);
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgumentError("shm address has a bad socket path" + accepted);
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgumentError("shm address path holds a control character" + accepted);
    }
  }
  return PeerAddress{static_cast<pid_t>(pid), std::string(path)};
}

Result<uint64_t> BufferKey::OffsetOf(uint64_t addr, uint64_t length) const {
  if (addr < region_addr) return InvalidArgumentError("shm range starts before its region");
  const uint64_t delta = addr - region_addr;
  if (delta > buffer_length - offset || length > buffer_length - offset - delta) {
    return InvalidArgumentError("shm range leaves its shared buffer " + std::to_string(buffer_id));
  }
  return offset + delta;
}

std::string EncodeBufferKey(const BufferKey& key) {
  if (!key.mapped) return "cma";
  return std::string(kMappedPrefix) + std::to_string(key.buffer_id) + ":" +
         std::to_string(key.offset) + ":" + std::to_string(key.buffer_length) + ":" +
         std::to_string(key.region_addr);
}

Result<BufferKey> DecodeBufferKey(std::string_view text) {
  if (text == "cma") return BufferKey{};
  const std::string accepted =
      " (expected \"cma\" or \"mapped:<id>:<offset>:<length>:<addr>\", decimal)";
  if (text.substr(0, kMappedPrefix.size()) != kMappedPrefix) {
    return InvalidArgumentError("bad shm key '" + std::string(text.substr(0, 64)) + "'" + accepted);
  }
  const std::vector<std::string_view> parts = SplitFields(text.substr(kMappedPrefix.size()), ':');
  BufferKey key;
  key.mapped = true;
  if (parts.size() != 4 || !ParseDecimal(parts[0], &key.buffer_id) ||
      !ParseDecimal(parts[1], &key.offset) || !ParseDecimal(parts[2], &key.buffer_length) ||
      !ParseDecimal(parts[3], &key.region_addr) || key.buffer_length == 0 ||
      key.offset >= key.buffer_length) {
    return InvalidArgumentError("bad shm key '" + std::string(text.substr(0, 64)) + "'" + accepted);
  }
  return key;
}

}  // namespace ferry::shm
