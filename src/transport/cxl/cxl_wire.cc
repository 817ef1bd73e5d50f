#include "transport/cxl/cxl_wire.h"

#include "common/wire_codec.h"

namespace ferry::cxl {
namespace {

constexpr std::string_view kEndpointMagic = "FCXE";
constexpr std::string_view kKeyMagic = "FCXK";
constexpr uint8_t kVersion = 1;

// A u16 length, then the bytes (cut to what a u16 can count; the encoders cut to their limits).
void PutString(WireWriter* w, std::string_view s) {
  const std::string_view cut = s.substr(0, 0xffff);
  w->PutU16(static_cast<uint16_t>(cut.size()));
  w->PutBytes(cut);
}

// A u16 length of at most `max`, then the bytes; false when short or over the limit.
bool GetString(WireReader* r, size_t max, std::string* s) {
  WireReader copy = *r;
  uint16_t n = 0;
  std::string_view bytes;
  if (!copy.GetU16("length", &n).ok() || n > max || !copy.GetBytes("bytes", n, &bytes).ok()) {
    return false;
  }
  s->assign(bytes);
  *r = copy;
  return true;
}

// The magic and version every cxl encoding starts with.
Status GetPrefix(WireReader* r, std::string_view magic, std::string_view what) {
  std::string_view got;
  if (!r->GetBytes("magic", magic.size(), &got).ok() || got != magic) {
    return InvalidArgumentError("bad cxl " + std::string(what) + ": not a cxl " +
                                std::string(what) + " (magic)");
  }
  uint8_t version = 0;
  if (!r->GetU8("version", &version).ok()) {
    return InvalidArgumentError("bad cxl " + std::string(what) + ": truncated version");
  }
  if (version != kVersion) {
    return InvalidArgumentError("bad cxl " + std::string(what) + ": unsupported version " +
                                std::to_string(version));
  }
  return Status::Ok();
}

Status Bad(std::string_view what, std::string_view field) {
  return InvalidArgumentError("bad cxl " + std::string(what) + ": " + std::string(field));
}

}  // namespace

std::string EncodeEndpoint(const Endpoint& e) {
  std::string out;
  WireWriter w(&out);
  w.PutBytes(kEndpointMagic);
  w.PutU8(kVersion);
  w.PutU64(e.window.size);
  w.PutU64(e.window.device);
  w.PutU64(e.window.inode);
  w.PutU64(e.base);
  PutString(&w, std::string_view(e.window.path).substr(0, kMaxWindowPath));
  PutString(&w, std::string_view(e.grant_path).substr(0, kMaxGrantPath));
  return out;
}

Result<Endpoint> DecodeEndpoint(std::string_view bytes) {
  WireReader r(bytes, "cxl endpoint");
  RETURN_IF_ERROR(GetPrefix(&r, kEndpointMagic, "endpoint"));
  Endpoint e;
  if (!r.GetU64("window size", &e.window.size).ok() || !r.GetU64("device", &e.window.device).ok() ||
      !r.GetU64("inode", &e.window.inode).ok() || !r.GetU64("base", &e.base).ok()) {
    return Bad("endpoint", "truncated window identity");
  }
  if (!GetString(&r, kMaxWindowPath, &e.window.path)) return Bad("endpoint", "window path");
  if (!GetString(&r, kMaxGrantPath, &e.grant_path)) return Bad("endpoint", "grant socket path");
  if (r.remaining() != 0) return Bad("endpoint", "trailing bytes");
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
  std::string out;
  WireWriter w(&out);
  w.PutBytes(kKeyMagic);
  w.PutU8(kVersion);
  w.PutU64(key.offset);
  w.PutU64(key.length);
  return out;
}

Result<RegionKey> DecodeKey(std::string_view bytes) {
  WireReader r(bytes, "cxl key");
  RETURN_IF_ERROR(GetPrefix(&r, kKeyMagic, "key"));
  RegionKey key;
  if (!r.GetU64("offset", &key.offset).ok() || !r.GetU64("length", &key.length).ok()) {
    return Bad("key", "truncated range");
  }
  if (r.remaining() != 0) return Bad("key", "trailing bytes");
  if (key.length == 0) return Bad("key", "length 0");
  if (key.offset + key.length < key.offset) return Bad("key", "range wraps");
  return key;
}

}  // namespace ferry::cxl
