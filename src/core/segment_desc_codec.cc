#include "core/segment_desc_codec.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/base64.h"

namespace ferry {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxTextBytes = 255;
constexpr size_t kMaxTransportNameBytes = 32;
constexpr int32_t kMaxLocationIndex = 65535;  // include/ferry/types.h: 0..65535

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

Status BadVersion(uint64_t version) {
  return InvalidArgumentError("unsupported schema_version " + std::to_string(version) +
                              " (this build reads " + std::to_string(SegmentDesc::kSchemaVersion) +
                              ")");
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

Status CheckText(std::string_view s, const Path& path, size_t min_bytes) {
  if (s.size() < min_bytes) return path.Error("must not be empty");
  if (s.size() > kMaxTextBytes) {
    return path.Error("must be at most 255 bytes (got " + std::to_string(s.size()) + ")");
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

Status CheckOpaqueMap(const std::map<std::string, std::string>& map, const Path& path,
                      const DecodeLimits& limits) {
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

Status CheckBuffer(const BufferDesc& b, const Path& path, const DecodeLimits& limits) {
  if (b.length == 0) return path.Field("length").Error("must be > 0");
  if (b.addr > std::numeric_limits<uint64_t>::max() - b.length) {
    return path.Field("length").Error("addr+length overflows uint64 (addr " + Hex(b.addr) +
                                      ", length " + Hex(b.length) + ")");
  }
  if (b.generation == 0) return path.Field("generation").Error("must be > 0");
  RETURN_IF_ERROR(CheckLocation(b.location, path.Field("location")));
  return CheckOpaqueMap(b.keys, path.Field("keys"), limits);
}

Status CheckCount(size_t count, size_t limit, const Path& path) {
  if (count <= limit) return Status::Ok();
  return path.Error(std::to_string(count) + " entries, over the limit of " + std::to_string(limit));
}

// Every per-field rule; buffer order and overlaps are checked separately.
Status CheckFields(const SegmentDesc& d, const DecodeLimits& limits) {
  const Path root;
  if (d.schema_version != SegmentDesc::kSchemaVersion) return BadVersion(d.schema_version);
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
  RETURN_IF_ERROR(CheckCount(d.buffers.size(), limits.max_buffers, buffers));
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    RETURN_IF_ERROR(CheckBuffer(d.buffers[i], buffers.Index(i), limits));
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
  out->push_back('}');
}

// ---------------------------------------------------------------------------------------------
// Parsing: a DOM builder that refuses what nlohmann's own parser would let through

// Builds the document like nlohmann's DOM parser, but stops at the first duplicate key or at a
// container nested deeper than `max_depth` (before allocating it), and turns parser errors
// into a Status. nlohmann's parser is iterative, so depth costs no stack either way.
class StrictDomBuilder final : public nlohmann::json_sax<Json> {
 public:
  explicit StrictDomBuilder(int max_depth) : max_depth_(std::max(max_depth, 0)) {}

  Json& root() { return root_; }
  const Status& error() const { return error_; }

  bool null() override { return Add(Json(nullptr)); }
  bool boolean(bool v) override { return Add(Json(v)); }
  bool number_integer(number_integer_t v) override { return Add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Add(Json(v)); }
  bool string(string_t& v) override { return Add(Json(std::move(v))); }
  bool binary(binary_t&) override { return Fail(InternalError("binary value in JSON text")); }
  bool start_object(std::size_t) override { return Open(Json::value_t::object); }
  bool start_array(std::size_t) override { return Open(Json::value_t::array); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& name) override {
    if (stack_.back()->contains(name)) {
      std::string path = PathOfTop();
      return Fail(FieldError(path.empty() ? name : path + "." + name, "duplicate field"));
    }
    pending_key_ = std::move(name);
    return true;
  }

  // what() reads "[json.exception.parse_error.101] parse error at line 1, column 7: ...": the
  // position (1-based, at the offending byte) is kept, the tag dropped.
  bool parse_error(std::size_t, const std::string&, const Json::exception& ex) override {
    std::string_view what = ex.what();
    const size_t tag_end = what.find("] ");
    if (tag_end != std::string_view::npos) what.remove_prefix(tag_end + 2);
    return Fail(InvalidArgumentError("invalid JSON: " + std::string(what)));
  }

 private:
  bool Fail(Status s) {
    error_ = std::move(s);
    return false;
  }

  bool Add(Json v) {
    Insert(std::move(v));
    return true;
  }

  // Places `v` in the open container (or as the root); returns where it now lives.
  Json* Insert(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json* top = stack_.back();
    if (top->is_array()) {
      top->get_ref<Json::array_t&>().push_back(std::move(v));
      return &top->get_ref<Json::array_t&>().back();
    }
    auto& object = top->get_ref<Json::object_t&>();
    return &object.emplace(std::move(pending_key_), std::move(v)).first->second;
  }

  bool Open(Json::value_t type) {
    if (stack_.size() >= static_cast<size_t>(max_depth_)) {
      return Fail(FieldError(PathOfTop(), "JSON nesting is deeper than the limit of " +
                                              std::to_string(max_depth_) + " levels"));
    }
    stack_.push_back(Insert(Json(type)));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  // The path of the innermost open container; computed only for error messages.
  std::string PathOfTop() const {
    std::string out;
    for (size_t k = 1; k < stack_.size(); ++k) {
      const Json& parent = *stack_[k - 1];
      if (parent.is_array()) {
        out += "[" + std::to_string(parent.size() - 1) + "]";
        continue;
      }
      for (auto it = parent.begin(); it != parent.end(); ++it) {
        if (&*it != stack_[k]) continue;
        if (!out.empty()) out += '.';
        out += it.key();
      }
    }
    return out;
  }

  int max_depth_;
  Json root_;
  std::vector<Json*> stack_;  // open containers, outermost first; each lives inside root_
  std::string pending_key_;
  Status error_;
};

Status ParseStrict(std::string_view text, int max_depth, Json* out) {
  StrictDomBuilder builder(max_depth);
  if (!Json::sax_parse(text.data(), text.data() + text.size(), &builder)) {
    return builder.error().ok() ? InternalError("JSON parser stopped without an error")
                                : builder.error();
  }
  *out = std::move(builder.root());
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Reading the document into a SegmentDesc (types and shape; values are checked afterwards)

std::string_view TypeWord(Json::value_t type) {
  static constexpr std::pair<Json::value_t, std::string_view> kWords[] = {
      {Json::value_t::null, "null"},
      {Json::value_t::boolean, "a boolean"},
      {Json::value_t::string, "a string"},
      {Json::value_t::array, "an array"},
      {Json::value_t::object, "an object"},
      {Json::value_t::number_integer, "a signed integer"},
      {Json::value_t::number_unsigned, "an unsigned integer"},
      {Json::value_t::number_float, "a non-integer number"}};
  for (const auto& [t, word] : kWords) {
    if (t == type) return word;
  }
  return "an unsupported value";
}

Status ExpectType(const Json& j, Json::value_t want, const Path& path) {
  if (j.type() == want) return Status::Ok();
  return path.Error("must be " + std::string(TypeWord(want)) + " (got " +
                    std::string(TypeWord(j.type())) + ")");
}

// `j` is an object whose fields are all in `known`.
Status ExpectObject(const Json& j, const Path& path, std::span<const std::string_view> known) {
  RETURN_IF_ERROR(ExpectType(j, Json::value_t::object, path));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      return path.Field(it.key()).Error("unknown field (schema v1)");
    }
  }
  return Status::Ok();
}

// The field `name` of `object` (at `path`), present and of type `want`.
Result<const Json*> Member(const Json& object, const Path& path, std::string_view name,
                           Json::value_t want) {
  const auto it = object.find(name);
  if (it == object.end()) return path.Field(name).Error("missing");
  RETURN_IF_ERROR(ExpectType(*it, want, path.Field(name)));
  return &*it;
}

// Reads the field `name` of `object` into `out`: a uint64_t, std::string or bool field.
template <typename T>
Status ReadScalar(const Json& object, const Path& path, std::string_view name, T* out) {
  constexpr Json::value_t kType = std::is_same_v<T, bool>          ? Json::value_t::boolean
                                  : std::is_same_v<T, std::string> ? Json::value_t::string
                                                                   : Json::value_t::number_unsigned;
  static_assert(kType != Json::value_t::number_unsigned || std::is_same_v<T, uint64_t>);
  ASSIGN_OR_RETURN(const Json* j, Member(object, path, name, kType));
  *out = j->get<T>();
  return Status::Ok();
}

Status ReadLocation(const Json& object, const Path& path, std::string_view name, Location* out) {
  std::string text;
  RETURN_IF_ERROR(ReadScalar(object, path, name, &text));
  Result<Location> loc = Location::Parse(text);
  if (!loc.ok()) return path.Field(name).Error(loc.status().message());
  *out = *loc;
  return Status::Ok();
}

// An object of transport name -> base64 opaque bytes.
Status ReadOpaqueMap(const Json& object, const Path& path, std::string_view name,
                     std::map<std::string, std::string>* out) {
  ASSIGN_OR_RETURN(const Json* map, Member(object, path, name, Json::value_t::object));
  const Path map_path = path.Field(name);
  for (auto it = map->begin(); it != map->end(); ++it) {
    const Path entry = map_path.Field(it.key());
    RETURN_IF_ERROR(ExpectType(*it, Json::value_t::string, entry));
    Result<std::string> bytes = Base64Decode(it->get_ref<const std::string&>());
    if (!bytes.ok()) return entry.Error(bytes.status().message());
    out->emplace(it.key(), std::move(bytes).value());
  }
  return Status::Ok();
}

constexpr std::string_view kRootFields[] = {"schema_version", "name",    "incarnation", "rpc",
                                            "host",           "devices", "transports",  "buffers"};
constexpr std::string_view kRpcFields[] = {"host", "port"};
constexpr std::string_view kHostFields[] = {"hostname", "boot_id", "pid_namespace"};
constexpr std::string_view kDeviceFields[] = {"name", "transport", "location"};
constexpr std::string_view kBufferFields[] = {
    "addr", "length", "location", "generation", "remote_accessible", "keys"};

Status ReadRpc(const Json& j, const Path& path, RpcEndpoint* out) {
  RETURN_IF_ERROR(ExpectObject(j, path, kRpcFields));
  RETURN_IF_ERROR(ReadScalar(j, path, "host", &out->host));
  uint64_t port = 0;
  RETURN_IF_ERROR(ReadScalar(j, path, "port", &port));
  if (port == 0 || port > 65535) {
    return path.Field("port").Error("must be 1..65535 (got " + std::to_string(port) + ")");
  }
  out->port = static_cast<uint16_t>(port);
  return Status::Ok();
}

Status ReadHost(const Json& j, const Path& path, HostIdentity* out) {
  RETURN_IF_ERROR(ExpectObject(j, path, kHostFields));
  RETURN_IF_ERROR(ReadScalar(j, path, "hostname", &out->hostname));
  RETURN_IF_ERROR(ReadScalar(j, path, "boot_id", &out->boot_id));
  return ReadScalar(j, path, "pid_namespace", &out->pid_namespace);
}

Status ReadDevice(const Json& j, const Path& path, DeviceDesc* out) {
  RETURN_IF_ERROR(ExpectObject(j, path, kDeviceFields));
  RETURN_IF_ERROR(ReadScalar(j, path, "name", &out->name));
  RETURN_IF_ERROR(ReadScalar(j, path, "transport", &out->transport));
  return ReadLocation(j, path, "location", &out->location);
}

Status ReadBuffer(const Json& j, const Path& path, BufferDesc* out) {
  RETURN_IF_ERROR(ExpectObject(j, path, kBufferFields));
  RETURN_IF_ERROR(ReadScalar(j, path, "addr", &out->addr));
  RETURN_IF_ERROR(ReadScalar(j, path, "length", &out->length));
  RETURN_IF_ERROR(ReadLocation(j, path, "location", &out->location));
  RETURN_IF_ERROR(ReadScalar(j, path, "generation", &out->generation));
  RETURN_IF_ERROR(ReadScalar(j, path, "remote_accessible", &out->remote_accessible));
  return ReadOpaqueMap(j, path, "keys", &out->keys);
}

// The array field `name`, at most `limit` long, each element read by `read_one`.
template <typename T, typename ReadOne>
Status ReadArray(const Json& object, const Path& path, std::string_view name, size_t limit,
                 ReadOne read_one, std::vector<T>* out) {
  ASSIGN_OR_RETURN(const Json* array, Member(object, path, name, Json::value_t::array));
  const Path array_path = path.Field(name);
  RETURN_IF_ERROR(CheckCount(array->size(), limit, array_path));
  out->resize(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    RETURN_IF_ERROR(read_one((*array)[i], array_path.Index(i), &(*out)[i]));
  }
  return Status::Ok();
}

Status ReadSegmentDesc(const Json& doc, const DecodeLimits& limits, SegmentDesc* out) {
  const Path root;
  RETURN_IF_ERROR(ExpectType(doc, Json::value_t::object, root));
  // The version first: a newer document's new fields should read as "unsupported version".
  uint64_t version = 0;
  RETURN_IF_ERROR(ReadScalar(doc, root, "schema_version", &version));
  if (version != SegmentDesc::kSchemaVersion) return BadVersion(version);
  out->schema_version = SegmentDesc::kSchemaVersion;
  RETURN_IF_ERROR(ExpectObject(doc, root, kRootFields));
  RETURN_IF_ERROR(ReadScalar(doc, root, "name", &out->name));
  RETURN_IF_ERROR(ReadScalar(doc, root, "incarnation", &out->incarnation));
  ASSIGN_OR_RETURN(const Json* rpc, Member(doc, root, "rpc", Json::value_t::object));
  RETURN_IF_ERROR(ReadRpc(*rpc, root.Field("rpc"), &out->rpc));
  ASSIGN_OR_RETURN(const Json* host, Member(doc, root, "host", Json::value_t::object));
  RETURN_IF_ERROR(ReadHost(*host, root.Field("host"), &out->host));
  RETURN_IF_ERROR(ReadArray(doc, root, "devices", limits.max_devices, ReadDevice, &out->devices));
  RETURN_IF_ERROR(ReadOpaqueMap(doc, root, "transports", &out->transports));
  return ReadArray(doc, root, "buffers", limits.max_buffers, ReadBuffer, &out->buffers);
}

}  // namespace

std::string EncodeSegmentDesc(const SegmentDesc& desc) {
  std::string out;
  out.reserve(256 + desc.devices.size() * 64 + desc.buffers.size() * 160);
  out.append("{\"schema_version\":");
  AppendUint(&out, desc.schema_version);
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
    Json doc;
    RETURN_IF_ERROR(ParseStrict(json, limits.max_depth, &doc));
    SegmentDesc desc;
    RETURN_IF_ERROR(ReadSegmentDesc(doc, limits, &desc));
    RETURN_IF_ERROR(CheckFields(desc, limits));
    std::stable_sort(desc.buffers.begin(), desc.buffers.end(),
                     [](const BufferDesc& a, const BufferDesc& b) { return a.addr < b.addr; });
    RETURN_IF_ERROR(CheckDisjoint(desc.buffers));
    return desc;
  } catch (const Json::exception& e) {
    // Not expected: every access above is type-checked first.
    return InvalidArgumentError(std::string("segment descriptor: ") + e.what());
  } catch (const std::exception& e) {
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
