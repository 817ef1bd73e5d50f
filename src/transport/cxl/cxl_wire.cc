#include "transport/cxl/cxl_wire.h"

#include <cstring>

namespace ferry::cxl {
namespace {

constexpr std::string_view kEndpointMagic = "FCXE";
constexpr std::string_view kKeyMagic = "FCXK";
constexpr uint8_t kVersion = 1;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutString(std::string* out, const std::string& s) {
  const auto n = static_cast<uint16_t>(s.size());
  out->push_back(static_cast<char>(n & 0xff));
  out->push_back(static_cast<char>(n >> 8));
  out->append(s.data(), n);
}

// Reads fields front to back; every read fails once the input runs short.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}

  bool Magic(std::string_view magic) {
    if (rest_.substr(0, magic.size()) != magic) return false;
    rest_.remove_prefix(magic.size());
    return true;
  }
  bool U8(uint8_t* v) {
    if (rest_.empty()) return false;
    *v = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return true;
  }
  bool U64(uint64_t* v) {
    if (rest_.size() < 8) return false;
    uint64_t out = 0;
    for (int i = 0; i < 8; ++i) out |= uint64_t{static_cast<uint8_t>(rest_[i])} << (8 * i);
    *v = out;
    rest_.remove_prefix(8);
    return true;
  }
  bool String(size_t max, std::string* s) {
    if (rest_.size() < 2) return false;
    const size_t n = static_cast<uint8_t>(rest_[0]) | (size_t{static_cast<uint8_t>(rest_[1])} << 8);
    if (n > max || rest_.size() - 2 < n) return false;
    s->assign(rest_.substr(2, n));
    rest_.remove_prefix(2 + n);
    return true;
  }
  bool done() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

Status Bad(std::string_view what, std::string_view field) {
  return InvalidArgumentError("bad cxl " + std::string(what) + ": " + std::string(field));
}

}  // namespace

std::string EncodeEndpoint(const Endpoint& e) {
  std::string out(kEndpointMagic);
  out.push_back(static_cast<char>(kVersion));
  PutU64(&out, e.window.size);
  PutU64(&out, e.window.device);
  PutU64(&out, e.window.inode);
  PutU64(&out, e.base);
  PutString(&out, e.window.path.substr(0, kMaxWindowPath));
  PutString(&out, e.grant_path.substr(0, kMaxGrantPath));
  return out;
}

Result<Endpoint> DecodeEndpoint(std::string_view bytes) {
  Reader r(bytes);
  uint8_t version = 0;
  if (!r.Magic(kEndpointMagic)) return Bad("endpoint", "not a cxl endpoint (magic)");
  if (!r.U8(&version)) return Bad("endpoint", "truncated version");
  if (version != kVersion) {
    return Bad("endpoint", "unsupported version " + std::to_string(version));
  }
  Endpoint e;
  if (!r.U64(&e.window.size) || !r.U64(&e.window.device) || !r.U64(&e.window.inode) ||
      !r.U64(&e.base)) {
    return Bad("endpoint", "truncated window identity");
  }
  if (!r.String(kMaxWindowPath, &e.window.path)) return Bad("endpoint", "window path");
  if (!r.String(kMaxGrantPath, &e.grant_path)) return Bad("endpoint", "grant socket path");
  if (!r.done()) return Bad("endpoint", "trailing bytes");
  if (e.window.size == 0) return Bad("endpoint", "window size 0");
  if (e.base == 0 || e.base + e.window.size < e.base) {
    return Bad("endpoint", "window base " + std::to_string(e.base) + " with size " +
                               std::to_string(e.window.size) + " wraps");
  }
  if (e.window.path.empty()) return Bad("endpoint", "empty window path");
  if (e.grant_path.empty()) return Bad("endpoint", "empty grant socket path");
  return e;
}

std::string EncodeKey(const RegionKey& key) {
  std::string out(kKeyMagic);
  out.push_back(static_cast<char>(kVersion));
  PutU64(&out, key.offset);
  PutU64(&out, key.length);
  return out;
}

Result<RegionKey> DecodeKey(std::string_view bytes) {
  Reader r(bytes);
  uint8_t version = 0;
  if (!r.Magic(kKeyMagic)) return Bad("key", "not a cxl key (magic)");
  if (!r.U8(&version)) return Bad("key", "truncated version");
  if (version != kVersion) return Bad("key", "unsupported version " + std::to_string(version));
  RegionKey key;
  if (!r.U64(&key.offset) || !r.U64(&key.length)) return Bad("key", "truncated range");
  if (!r.done()) return Bad("key", "trailing bytes");
  if (key.length == 0) return Bad("key", "length 0");
  if (key.offset + key.length < key.offset) return Bad("key", "range wraps");
  return key;
}

}  // namespace ferry::cxl
