#include "core/segment_desc_codec.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <limits>
#include <utility>
#include <vector>

#include "core/base64.h"
#include "core/json_reader.h"

namespace ferry {
namespace {

constexpr size_t kMaxTextBytes = 255;
constexpr size_t kMaxTransportNameBytes = 32;
constexpr int32_t kMaxLocationIndex = 65535;  // include/ferry/types.h: 0..65535
constexpr size_t kMaxFilePaths = 64;          // FileWindow::paths entries
constexpr size_t kMaxPathBytes = 4096;        // PATH_MAX

// ---------------------------------------------------------------------------------------------
// Error paths

Status FieldError(const std::string& path, std::string_view what) {
  return InvalidArgumentError((path.empty() ? std::string("segment descriptor") : path) + ": " +
                              std::string(what));
}

// A field path ("buffers[3].keys.tcp"), linked through the stack and rendered only when an
// error is reported. A Path borrows its parent and name: keep both alive while it is used.
class Path {
 public:
  Path() = default;  // the document root
  Path Field(std::string_view name) const { return Path(this, name, kNoIndex); }
  Path Index(size_t index) const { return Path(this, {}, index); }

  std::string ToString() const {
    if (parent_ == nullptr) return "";
    std::string out = parent_->ToString();
    if (index_ != kNoIndex) return out + "[" + std::to_string(index_) + "]";
    if (!out.empty()) out += '.';
    return out.append(name_);
  }
  Status Error(std::string_view what) const { return FieldError(ToString(), what); }

 private:
  static constexpr size_t kNoIndex = std::numeric_limits<size_t>::max();
  Path(const Path* parent, std::string_view name, size_t index)
      : parent_(parent), name_(name), index_(index) {}

  const Path* parent_ = nullptr;
  std::string_view name_;
  size_t index_ = kNoIndex;
};

constexpr std::string_view kUnknownFieldV1 = "unknown field (schema v1)";

Status BadVersion(uint64_t version) {
  return InvalidArgumentError("unsupported schema_version " + std::to_string(version) +
                              " (this build reads " +
                              std::to_string(SegmentDesc::kOldestSchemaVersion) + " to " +
                              std::to_string(SegmentDesc::kSchemaVersion) + ")");
}

std::string Hex(uint64_t v) {
  char buf[2 + 16];
  buf[0] = '0';
  buf[1] = 'x';
  const auto res = std::to_chars(buf + 2, buf + sizeof(buf), v, 16);
  return std::string(buf, res.ptr);
}

std::string RangeText(const BufferDesc& b) { return "[" + Hex(b.addr) + ", " + Hex(b.end()) + ")"; }

// ---------------------------------------------------------------------------------------------
// Semantic checks on the struct (shared by Decode and Validate)

// Well-formed UTF-8 (no overlong forms, no surrogates) without ASCII control characters.
bool IsPrintableUtf8(std::string_view s) {
  static constexpr uint32_t kMinCodePoint[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      if (lead < 0x20 || lead == 0x7f) return false;
      ++i;
      continue;
    }
    size_t extra = 0;
    if ((lead & 0xe0) == 0xc0) {
      extra = 1;
    } else if ((lead & 0xf0) == 0xe0) {
      extra = 2;
    } else if ((lead & 0xf8) == 0xf0) {
      extra = 3;
    } else {
      return false;
    }
    uint32_t cp = lead & (0x3fu >> extra);  // the payload bits of the lead byte
    if (i + extra >= s.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cont & 0x3f);
    }
    if (cp < kMinCodePoint[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

Status CheckText(std::string_view s, const Path& path, size_t min_bytes,
                 size_t max_bytes = kMaxTextBytes) {
  if (s.size() < min_bytes) return path.Error("must not be empty");
  if (s.size() > max_bytes) {
    return path.Error("must be at most " + std::to_string(max_bytes) + " bytes (got " +
                      std::to_string(s.size()) + ")");
  }
  if (!IsPrintableUtf8(s)) return path.Error("must be UTF-8 without control characters");
  return Status::Ok();
}

Status CheckTransportName(std::string_view name, const Path& path) {
  const bool ok = !name.empty() && name.size() <= kMaxTransportNameBytes &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                  });
  if (ok) return Status::Ok();
  return path.Error("transport name must be 1..32 characters of [a-z0-9_-]");
}

Status CheckLocation(const Location& loc, const Path& path) {
  using Kind = Location::Kind;
  if (loc.kind == Kind::kDetect) {
    return path.Error("'*' (detect) is not allowed in a published descriptor");
  }
  const bool known_kind = loc.kind == Kind::kCpu || loc.is_device();
  const bool any_cpu = loc.kind == Kind::kCpu && loc.index == Location::kAnyIndex;
  if (!known_kind || (!any_cpu && (loc.index < 0 || loc.index > kMaxLocationIndex))) {
    return path.Error("not a valid location (" + loc.ToString() + ", index " +
                      std::to_string(loc.index) + ")");
  }
  return Status::Ok();
}

// The error of an opaque map holding more than limits.max_transports entries (decoding stops
// at the first entry past the limit, so the message names no count).
Status MapTooLarge(const Path& path, const DecodeLimits& limits) {
  return path.Error("more than " + std::to_string(limits.max_transports) +
                    " entries, over the limit of " + std::to_string(limits.max_transports) +
                    " (one per transport)");
}

Status CheckOpaqueMap(const std::map<std::string, std::string>& map, const Path& path,
                      const DecodeLimits& limits) {
  if (map.size() > limits.max_transports) return MapTooLarge(path, limits);
  for (const auto& [name, bytes] : map) {
    const Path entry = path.Field(name);
    RETURN_IF_ERROR(CheckTransportName(name, entry));
    if (bytes.size() > limits.max_key_bytes) {
      return entry.Error("opaque value is " + std::to_string(bytes.size()) +
                         " bytes, over the limit of " + std::to_string(limits.max_key_bytes));
    }
  }
  return Status::Ok();
}

Status CheckDevice(const DeviceDesc& device, const Path& path) {
  RETURN_IF_ERROR(CheckText(device.name, path.Field("name"), 1));
  RETURN_IF_ERROR(CheckTransportName(device.transport, path.Field("transport")));
  return CheckLocation(device.location, path.Field("location"));
}

// A file buffer's window: inside the file as it was at registration, with 1..64 host paths.
Status CheckFile(const FileWindow& f, uint64_t length, const Path& path) {
  if (f.offset > std::numeric_limits<uint64_t>::max() - length || f.offset + length > f.size) {
    return path.Field("offset").Error("window [" + Hex(f.offset) + ", +" + Hex(length) +
                                      ") does not lie inside the file's " + Hex(f.size) + " bytes");
  }
  const Path paths = path.Field("paths");
  if (f.paths.empty()) return paths.Error("must name at least the owner's host");
  if (f.paths.size() > kMaxFilePaths) {
    return paths.Error("more than " + std::to_string(kMaxFilePaths) +
                       " entries, over the limit of " + std::to_string(kMaxFilePaths));
  }
  for (const auto& [host, local_path] : f.paths) {
    const Path entry = paths.Field(host);
    RETURN_IF_ERROR(CheckText(host, entry, 1));
    RETURN_IF_ERROR(CheckText(local_path, entry, 1, kMaxPathBytes));
  }
  return Status::Ok();
}

Status CheckBuffer(const BufferDesc& b, const Path& path, const DecodeLimits& limits) {
  if (b.length == 0) return path.Field("length").Error("must be > 0");
  if (b.addr > std::numeric_limits<uint64_t>::max() - b.length) {
    return path.Field("length").Error("addr+length overflows uint64 (addr " + Hex(b.addr) +
                                      ", length " + Hex(b.length) + ")");
  }
  if (b.generation == 0) return path.Field("generation").Error("must be > 0");
  RETURN_IF_ERROR(CheckLocation(b.location, path.Field("location")));
  RETURN_IF_ERROR(CheckOpaqueMap(b.keys, path.Field("keys"), limits));
  return b.file.has_value() ? CheckFile(*b.file, b.length, path.Field("file")) : Status::Ok();
}

// `setting`: where the limit comes from, named in the error when not empty.
Status CheckCount(size_t count, size_t limit, const Path& path, std::string_view setting = {}) {
  if (count <= limit) return Status::Ok();
  return path.Error(std::to_string(count) + " entries, over the limit of " + std::to_string(limit) +
                    (setting.empty() ? "" : " (" + std::string(setting) + ")"));
}

// Every per-field rule; buffer order and overlaps are checked separately.
Status CheckFields(const SegmentDesc& d, const DecodeLimits& limits) {
  const Path root;
  if (d.schema_version < SegmentDesc::kOldestSchemaVersion ||
      d.schema_version > SegmentDesc::kSchemaVersion) {
    return BadVersion(d.schema_version);
  }
  RETURN_IF_ERROR(CheckText(d.name, root.Field("name"), 1));
  if (d.incarnation == 0) return root.Field("incarnation").Error("must be > 0");
  const Path rpc = root.Field("rpc");
  RETURN_IF_ERROR(CheckText(d.rpc.host, rpc.Field("host"), 1));
  if (d.rpc.port == 0) return rpc.Field("port").Error("must be 1..65535 (got 0)");
  const Path host = root.Field("host");
  RETURN_IF_ERROR(CheckText(d.host.hostname, host.Field("hostname"), 0));
  RETURN_IF_ERROR(CheckText(d.host.boot_id, host.Field("boot_id"), 0));

  const Path devices = root.Field("devices");
  RETURN_IF_ERROR(CheckCount(d.devices.size(), limits.max_devices, devices));
  for (size_t i = 0; i < d.devices.size(); ++i) {
    RETURN_IF_ERROR(CheckDevice(d.devices[i], devices.Index(i)));
  }
  RETURN_IF_ERROR(CheckOpaqueMap(d.transports, root.Field("transports"), limits));
  const Path buffers = root.Field("buffers");
  RETURN_IF_ERROR(
      CheckCount(d.buffers.size(), limits.max_buffers, buffers, limits.max_buffers_setting));
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    RETURN_IF_ERROR(CheckBuffer(d.buffers[i], buffers.Index(i), limits));
    if (d.schema_version < 2 && d.buffers[i].file.has_value()) {
      return buffers.Index(i).Field("file").Error(kUnknownFieldV1);
    }
  }
  return Status::Ok();
}

// `sorted` is ordered by addr and every buffer passed CheckBuffer (no wrap). With sorted starts,
// the first overlap is always between neighbours.
Status CheckDisjoint(const std::vector<BufferDesc>& sorted) {
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].addr < sorted[i - 1].end()) {
      return InvalidArgumentError("buffers: " + RangeText(sorted[i - 1]) + " overlaps " +
                                  RangeText(sorted[i]));
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Encoding

void AppendUint(std::string* out, uint64_t v) {
  char buf[20];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, res.ptr);
}

// A JSON string literal: '"' and '\' escaped, control characters as \u00XX, other bytes as is.
void AppendString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 0xf]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

void AppendOpaqueMap(std::string* out, const std::map<std::string, std::string>& map) {
  out->push_back('{');
  bool first = true;
  for (const auto& [name, bytes] : map) {
    if (!first) out->push_back(',');
    first = false;
    AppendString(out, name);
    out->push_back(':');
    AppendString(out, Base64Encode(bytes));
  }
  out->push_back('}');
}

void AppendDevice(std::string* out, const DeviceDesc& d) {
  out->append("{\"name\":");
  AppendString(out, d.name);
  out->append(",\"transport\":");
  AppendString(out, d.transport);
  out->append(",\"location\":");
  AppendString(out, d.location.ToString());
  out->push_back('}');
}

void AppendBuffer(std::string* out, const BufferDesc& b) {
  out->append("{\"addr\":");
  AppendUint(out, b.addr);
  out->append(",\"length\":");
  AppendUint(out, b.length);
  out->append(",\"location\":");
  AppendString(out, b.location.ToString());
  out->append(",\"generation\":");
  AppendUint(out, b.generation);
  out->append(b.remote_accessible ? ",\"remote_accessible\":true" : ",\"remote_accessible\":false");
  out->append(",\"keys\":");
  AppendOpaqueMap(out, b.keys);
  if (b.file.has_value()) {
    const FileWindow& f = *b.file;
    out->append(",\"file\":{\"device\":");
    AppendUint(out, f.device);
    out->append(",\"inode\":");
    AppendUint(out, f.inode);
    out->append(",\"size\":");
    AppendUint(out, f.size);
    out->append(",\"offset\":");
    AppendUint(out, f.offset);
    out->append(",\"paths\":{");
    bool first = true;
    for (const auto& [host, local_path] : f.paths) {
      if (!first) out->push_back(',');
      first = false;
      AppendString(out, host);
      out->push_back(':');
      AppendString(out, local_path);
    }
    out->append("}}");
  }
  out->push_back('}');
}

// ---------------------------------------------------------------------------------------------
// Decoding: the text is read once, straight into the structs (no document is built)

using JsonType = JsonReader::Type;

constexpr std::string_view kRootName = "segment descriptor";  // how errors name the root
static_assert(SegmentDesc::kSchemaVersion == 2, "update kUnknownField");
constexpr std::string_view kUnknownField = "unknown field (schema v2)";

std::string_view TypeWord(JsonType type) {
  switch (type) {
    case JsonType::kNull:
      return "null";
    case JsonType::kBoolean:
      return "a boolean";
    case JsonType::kString:
      return "a string";
    case JsonType::kArray:
      return "an array";
    case JsonType::kObject:
      return "an object";
    case JsonType::kSigned:
      return "a signed integer";
    case JsonType::kUnsigned:
      return "an unsigned integer";
    case JsonType::kFloat:
      return "a non-integer number";
    case JsonType::kError:
      break;
  }
  return "an unsupported value";
}

std::string NestingTooDeep(const std::string& parent_path, int max_depth) {
  return FieldError(parent_path, "JSON nesting is deeper than the limit of " +
                                     std::to_string(max_depth) + " levels")
      .message();
}

// a == b, inlined: the names compared here are a few bytes long, too short for a memcmp call.
bool SameText(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// The index of `name` in `fields`, or N.
template <size_t N>
size_t FieldIndex(const std::string_view (&fields)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (SameText(name, fields[i])) return i;
  }
  return N;
}

constexpr std::string_view kRootFields[] = {"schema_version", "name",    "incarnation", "rpc",
                                            "host",           "devices", "transports",  "buffers"};
constexpr std::string_view kRpcFields[] = {"host", "port"};
constexpr std::string_view kHostFields[] = {"hostname", "boot_id", "pid_namespace"};
constexpr std::string_view kDeviceFields[] = {"name", "transport", "location"};
constexpr std::string_view kBufferFields[] = {
    "addr", "length", "location", "generation", "remote_accessible", "keys", "file"};
constexpr uint32_t kBufferOptional = uint32_t{1} << 6;  // "file": file buffers only
constexpr std::string_view kFileFields[] = {"device", "inode", "size", "offset", "paths"};

// Reads one schema-v2 document into a SegmentDesc in a single pass, checking each value's type
// and each object's shape (unknown, duplicate and missing fields, array lengths, nesting) as it
// arrives. Values are checked afterwards (CheckFields). The first error stops the read: a
// syntax or nesting error stays in the JsonReader; any other is shape_error().
// Thread contract: one read per object, on one thread.
class DescReader {
 public:
  DescReader(std::string_view text, const DecodeLimits& limits)
      : json_(text), limits_(limits), max_depth_(std::max(limits.max_depth, 0)) {}

  bool Read(SegmentDesc* out) {
    const Path root;
    if (!OpenObject(root, root, 1)) return false;
    uint64_t version = 0;
    const bool read = ReadFields(root, kRootFields, [&](size_t field, const Path& path) {
      switch (field) {
        case 0:
          if (!ReadUint(path, &version)) return false;
          // The version before anything after it: a newer document's fields read as an
          // unsupported version (the same rule applies to what came before; see TakeError).
          if (!Readable(version)) return Shape(BadVersion(version));
          version_ = version;
          out->schema_version = SegmentDesc::kSchemaVersion;
          return true;
        case 1:
          return ReadText(path, &out->name);
        case 2:
          return ReadUint(path, &out->incarnation);
        case 3:
          return ReadRpc(path, root, &out->rpc);
        case 4:
          return ReadHost(path, root, &out->host);
        case 5:
          return ReadList(path, root, 2, limits_.max_devices, {}, &out->devices,
                          [this](const Path& p, const Path& parent, DeviceDesc* d) {
                            return ReadDevice(p, parent, d);
                          });
        case 6:
          return ReadOpaqueMap(path, root, 2, &out->transports);
        default:
          return ReadList(path, root, 2, limits_.max_buffers, limits_.max_buffers_setting,
                          &out->buffers, [this](const Path& p, const Path& parent, BufferDesc* b) {
                            return ReadBuffer(p, parent, b);
                          });
      }
    });
    if (!read || !json_.ExpectEnd()) return false;
    // A v1 document has no buffer "file" (its version may come after its buffers).
    for (size_t i = 0; version_ < 2 && i < out->buffers.size(); ++i) {
      if (out->buffers[i].file.has_value()) {
        return Shape(root.Field("buffers").Index(i).Field("file").Error(kUnknownFieldV1));
      }
    }
    return true;
  }

  // The error of a failed Read, by the order of the checks: invalid JSON or nesting anywhere in
  // the text first, then the root's schema_version, then the shape error Read stopped at.
  Status TakeError(std::string_view text) {
    if (json_.failed()) return InvalidArgumentError(json_.error());
    Status earlier = SyntaxOrVersionError(text);
    return earlier.ok() ? std::move(shape_error_) : earlier;
  }

 private:
  bool Shape(Status s) {
    shape_error_ = std::move(s);
    return false;
  }

  // The next value is of type `want`; a shape error at `path` otherwise.
  bool Expect(JsonType want, const Path& path) {
    const JsonType got = json_.Peek();
    if (got == want) return true;
    if (got == JsonType::kError) return false;
    return Shape(path.Error("must be " + std::string(TypeWord(want)) + " (got " +
                            std::string(TypeWord(got)) + ")"));
  }

  // Opens the object at `path`, at `depth` under `parent`.
  bool OpenObject(const Path& path, const Path& parent, int depth) {
    if (!Expect(JsonType::kObject, path)) return false;
    if (depth > max_depth_) return json_.FailWith(NestingTooDeep(parent.ToString(), max_depth_));
    return json_.BeginObject();
  }

  bool ReadUint(const Path& path, uint64_t* out) {
    return Expect(JsonType::kUnsigned, path) && json_.ReadUnsigned(out);
  }

  bool ReadText(const Path& path, std::string* out) {
    std::string_view text;
    if (!Expect(JsonType::kString, path) || !json_.ReadString(&text)) return false;
    out->assign(text);
    return true;
  }

  bool ReadLocation(const Path& path, Location* out) {
    std::string_view text;
    if (!Expect(JsonType::kString, path) || !json_.ReadString(&text)) return false;
    // Buffers share a few locations: the last ones parsed are kept, text -> Location.
    for (const auto& [seen_text, seen] : recent_locations_) {
      if (!seen_text.empty() && SameText(text, seen_text)) {
        *out = seen;
        return true;
      }
    }
    Result<Location> loc = Location::Parse(text);
    if (!loc.ok()) return Shape(path.Error(loc.status().message()));
    auto& [kept_text, kept] = recent_locations_[next_recent_location_++ % kRecentLocations];
    kept_text.assign(text);
    kept = *loc;
    *out = *loc;
    return true;
  }

  // The members of the object just opened at `path`: each must be one of `fields`, once, and
  // all must be there; `read_field(index in fields, path of the member)` reads each value.
  // Fields whose bit is set in `optional` may be absent.
  template <size_t N, typename ReadField>
  bool ReadFields(const Path& path, const std::string_view (&fields)[N], ReadField read_field,
                  uint32_t optional = 0) {
    static_assert(N <= 32);
    uint32_t seen = 0;
    size_t field = N;
    bool more = false;
    std::string_view key;
    while (json_.NextMember(&more, &key) && more) {
      // EncodeSegmentDesc writes the fields in schema order: try the one after the last first.
      field =
          field + 1 < N && SameText(key, fields[field + 1]) ? field + 1 : FieldIndex(fields, key);
      if (field == N) return Shape(path.Field(key).Error(kUnknownField));
      if ((seen >> field & 1) != 0) return Shape(path.Field(key).Error("duplicate field"));
      seen |= uint32_t{1} << field;
      if (!read_field(field, path.Field(fields[field]))) return false;
    }
    if (json_.failed()) return false;
    for (size_t i = 0; i < N; ++i) {
      if ((seen >> i & 1) == 0 && (optional >> i & 1) == 0) {
        return Shape(path.Field(fields[i]).Error("missing"));
      }
    }
    return true;
  }

  // The array at `path` (at `depth` under `parent`), at most `limit` long, each element read
  // by `read_one(its path, the array's path, the element to fill)`. Past the limit the rest is
  // only skipped and counted, so memory stays within the limit.
  template <typename T, typename ReadOne>
  bool ReadList(const Path& path, const Path& parent, int depth, size_t limit,
                std::string_view setting, std::vector<T>* out, ReadOne read_one) {
    if (!Expect(JsonType::kArray, path)) return false;
    if (depth > max_depth_) return json_.FailWith(NestingTooDeep(parent.ToString(), max_depth_));
    if (!json_.BeginArray()) return false;
    bool more = false;
    size_t count = 0;
    while (json_.NextElement(&more) && more) {
      if (count == limit) {
        const std::string array_path = path.ToString();
        do {
          const std::string element = path.Index(count).ToString();
          if (!json_.SkipValue(depth + 1, max_depth_, array_path, element, kRootName)) {
            return false;
          }
          ++count;
        } while (json_.NextElement(&more) && more);
        if (json_.failed()) return false;
        return Shape(CheckCount(count, limit, path, setting));
      }
      out->emplace_back();
      if (!read_one(path.Index(count), path, &out->back())) return false;
      ++count;
    }
    return !json_.failed();
  }

  // An object of transport name -> base64 opaque bytes at `path`, of at most
  // limits.max_transports entries: the first one past it fails before it is stored.
  bool ReadOpaqueMap(const Path& path, const Path& parent, int depth,
                     std::map<std::string, std::string>* out) {
    if (!OpenObject(path, parent, depth)) return false;
    bool more = false;
    std::string_view key;
    while (json_.NextMember(&more, &key) && more) {
      if (out->size() == limits_.max_transports) return Shape(MapTooLarge(path, limits_));
      // Names arrive sorted from EncodeSegmentDesc, so the hint makes each insert O(1).
      const size_t before = out->size();
      const auto it = out->try_emplace(out->end(), std::string(key));
      const Path entry = path.Field(it->first);
      if (out->size() == before) return Shape(entry.Error("duplicate field"));
      std::string_view text;
      if (!Expect(JsonType::kString, entry) || !json_.ReadString(&text)) return false;
      Result<std::string> bytes = Base64Decode(text);
      if (!bytes.ok()) return Shape(entry.Error(bytes.status().message()));
      it->second = std::move(bytes).value();
    }
    return !json_.failed();
  }

  bool ReadRpc(const Path& path, const Path& parent, RpcEndpoint* out) {
    if (!OpenObject(path, parent, 2)) return false;
    return ReadFields(path, kRpcFields, [&](size_t field, const Path& p) {
      if (field == 0) return ReadText(p, &out->host);
      uint64_t port = 0;
      if (!ReadUint(p, &port)) return false;
      if (port == 0 || port > 65535) {
        return Shape(p.Error("must be 1..65535 (got " + std::to_string(port) + ")"));
      }
      out->port = static_cast<uint16_t>(port);
      return true;
    });
  }

  bool ReadHost(const Path& path, const Path& parent, HostIdentity* out) {
    if (!OpenObject(path, parent, 2)) return false;
    return ReadFields(path, kHostFields, [&](size_t field, const Path& p) {
      if (field == 0) return ReadText(p, &out->hostname);
      if (field == 1) return ReadText(p, &out->boot_id);
      return ReadUint(p, &out->pid_namespace);
    });
  }

  bool ReadDevice(const Path& path, const Path& parent, DeviceDesc* out) {
    if (!OpenObject(path, parent, 3)) return false;
    return ReadFields(path, kDeviceFields, [&](size_t field, const Path& p) {
      if (field == 0) return ReadText(p, &out->name);
      if (field == 1) return ReadText(p, &out->transport);
      return ReadLocation(p, &out->location);
    });
  }

  bool ReadBuffer(const Path& path, const Path& parent, BufferDesc* out) {
    if (!OpenObject(path, parent, 3)) return false;
    return ReadFields(
        path, kBufferFields,
        [&](size_t field, const Path& p) {
          switch (field) {
            case 0:
              return ReadUint(p, &out->addr);
            case 1:
              return ReadUint(p, &out->length);
            case 2:
              return ReadLocation(p, &out->location);
            case 3:
              return ReadUint(p, &out->generation);
            case 4:
              return Expect(JsonType::kBoolean, p) && json_.ReadBool(&out->remote_accessible);
            case 5:
              return ReadOpaqueMap(p, path, 4, &out->keys);
            default:
              return ReadFile(p, path, &out->file.emplace());
          }
        },
        kBufferOptional);
  }

  bool ReadFile(const Path& path, const Path& parent, FileWindow* out) {
    if (!OpenObject(path, parent, 4)) return false;
    return ReadFields(path, kFileFields, [&](size_t field, const Path& p) {
      switch (field) {
        case 0:
          return ReadUint(p, &out->device);
        case 1:
          return ReadUint(p, &out->inode);
        case 2:
          return ReadUint(p, &out->size);
        case 3:
          return ReadUint(p, &out->offset);
        default:
          return ReadPaths(p, path, &out->paths);
      }
    });
  }

  // host -> path; stops at the first entry past kMaxFilePaths.
  bool ReadPaths(const Path& path, const Path& parent, std::map<std::string, std::string>* out) {
    if (!OpenObject(path, parent, 5)) return false;
    bool more = false;
    std::string_view key;
    while (json_.NextMember(&more, &key) && more) {
      if (out->size() == kMaxFilePaths) {
        return Shape(path.Error("more than " + std::to_string(kMaxFilePaths) +
                                " entries, over the limit of " + std::to_string(kMaxFilePaths)));
      }
      const auto [it, inserted] = out->try_emplace(std::string(key));
      const Path entry = path.Field(it->first);
      if (!inserted) return Shape(entry.Error("duplicate field"));
      if (!ReadText(entry, &it->second)) return false;
    }
    return !json_.failed();
  }

  // Run only after a shape error, over the whole text again: the error a check made before any
  // shape check reports instead (the order DecodeSegmentDesc documents). OK when there is none.
  Status SyntaxOrVersionError(std::string_view text) const {
    JsonReader json(text);
    const Path root;
    const JsonType type = json.Peek();
    if (type != JsonType::kObject) {
      // The shape error ("must be an object") stands unless the text is not JSON at all.
      if (json.SkipValue(1, max_depth_, "", "", kRootName)) json.ExpectEnd();
      return json.failed() ? InvalidArgumentError(json.error()) : Status::Ok();
    }
    if (max_depth_ < 1) return InvalidArgumentError(NestingTooDeep("", max_depth_));
    Status version = root.Field("schema_version").Error("missing");
    bool seen_version = false;
    bool more = false;
    std::string_view key;
    json.BeginObject();
    while (json.NextMember(&more, &key) && more) {
      if (key == "schema_version" && !seen_version) {
        seen_version = true;
        const JsonType got = json.Peek();
        uint64_t value = 0;
        if (got == JsonType::kUnsigned && json.ReadUnsigned(&value)) {
          version = Readable(value) ? Status::Ok() : BadVersion(value);
          continue;
        }
        if (got != JsonType::kError) {
          version =
              root.Field("schema_version")
                  .Error("must be an unsigned integer (got " + std::string(TypeWord(got)) + ")");
        }
      }
      const std::string name(key);
      if (!json.SkipValue(2, max_depth_, "", name, kRootName)) break;
    }
    json.ExpectEnd();
    return json.failed() ? InvalidArgumentError(json.error()) : version;
  }

  static bool Readable(uint64_t version) {
    return version >= SegmentDesc::kOldestSchemaVersion && version <= SegmentDesc::kSchemaVersion;
  }

  JsonReader json_;
  uint64_t version_ = SegmentDesc::kSchemaVersion;  // the document's, once read
  const DecodeLimits& limits_;
  const int max_depth_;
  Status shape_error_;
  static constexpr size_t kRecentLocations = 4;
  std::pair<std::string, Location> recent_locations_[kRecentLocations];  // see ReadLocation
  size_t next_recent_location_ = 0;
};

}  // namespace

std::string EncodeSegmentDesc(const SegmentDesc& desc) {
  std::string out;
  out.reserve(256 + desc.devices.size() * 64 + desc.buffers.size() * 160);
  out.append("{\"schema_version\":");
  // The oldest version that can say it: peers of the release before read a descriptor
  // without file buffers.
  const bool files = std::any_of(desc.buffers.begin(), desc.buffers.end(),
                                 [](const BufferDesc& b) { return b.file.has_value(); });
  AppendUint(&out, desc.schema_version == SegmentDesc::kSchemaVersion && !files
                       ? SegmentDesc::kOldestSchemaVersion
                       : desc.schema_version);
  out.append(",\"name\":");
  AppendString(&out, desc.name);
  out.append(",\"incarnation\":");
  AppendUint(&out, desc.incarnation);
  out.append(",\"rpc\":{\"host\":");
  AppendString(&out, desc.rpc.host);
  out.append(",\"port\":");
  AppendUint(&out, desc.rpc.port);
  out.append("},\"host\":{\"hostname\":");
  AppendString(&out, desc.host.hostname);
  out.append(",\"boot_id\":");
  AppendString(&out, desc.host.boot_id);
  out.append(",\"pid_namespace\":");
  AppendUint(&out, desc.host.pid_namespace);
  out.append("},\"devices\":[");
  for (size_t i = 0; i < desc.devices.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendDevice(&out, desc.devices[i]);
  }
  out.append("],\"transports\":");
  AppendOpaqueMap(&out, desc.transports);
  out.append(",\"buffers\":[");
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendBuffer(&out, desc.buffers[i]);
  }
  out.append("]}");
  return out;
}

Result<SegmentDesc> DecodeSegmentDesc(std::string_view json, const DecodeLimits& limits) {
  if (json.size() > limits.max_input_bytes) {
    return InvalidArgumentError("segment descriptor: input is " + std::to_string(json.size()) +
                                " bytes, over the limit of " +
                                std::to_string(limits.max_input_bytes));
  }
  // Everything below builds locals; `desc` is returned only when every check passed.
  try {
    SegmentDesc desc;
    DescReader reader(json, limits);
    if (!reader.Read(&desc)) return reader.TakeError(json);
    RETURN_IF_ERROR(CheckFields(desc, limits));
    const auto by_addr = [](const BufferDesc& a, const BufferDesc& b) { return a.addr < b.addr; };
    // Published descriptors come sorted; sorting costs (and allocates) only for others.
    if (!std::is_sorted(desc.buffers.begin(), desc.buffers.end(), by_addr)) {
      std::stable_sort(desc.buffers.begin(), desc.buffers.end(), by_addr);
    }
    RETURN_IF_ERROR(CheckDisjoint(desc.buffers));
    return desc;
  } catch (const std::exception& e) {  // std::bad_alloc: nothing else throws here
    return InternalError(std::string("decoding segment descriptor: ") + e.what());
  }
}

Status ValidateSegmentDesc(const SegmentDesc& desc, const DecodeLimits& limits) {
  RETURN_IF_ERROR(CheckFields(desc, limits));
  const Path root;
  const Path buffers = root.Field("buffers");
  for (size_t i = 1; i < desc.buffers.size(); ++i) {
    if (desc.buffers[i].addr < desc.buffers[i - 1].addr) {
      return buffers.Index(i).Field("addr").Error("buffers must be sorted by addr");
    }
  }
  return CheckDisjoint(desc.buffers);
}

}  // namespace ferry
