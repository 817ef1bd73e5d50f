#include "core/segment_desc_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

// The tests edit documents by JSON pointer. nlohmann is a private dependency of ferry_core (never
// in its headers); the test uses it directly.
#include <nlohmann/json.hpp>

namespace ferry {
namespace {

using Json = nlohmann::json;
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

// A valid v2 document: two buffers (the second a file window), one device, one transport blob.
constexpr std::string_view kValidJson = R"({
  "schema_version": 2, "name": "decode-node-7", "incarnation": 1234567890123,
  "rpc": {"host": "10.0.0.7", "port": 12345},
  "host": {"hostname": "n7", "boot_id": "6f1c1b6e-0d6a-4c1e-9b8e-3f2a1d0c9b8a",
           "pid_namespace": 4026531836},
  "devices": [{"name": "mlx5_0", "transport": "rdma", "location": "cpu:0"}],
  "transports": {"rdma": "AAECAw=="},
  "buffers": [
    {"addr": 4096, "length": 8192, "location": "cpu:0", "generation": 3,
     "remote_accessible": true, "keys": {"tcp": "dGNwLWtleQ==", "rdma": "cmtleQ=="}},
    {"addr": 65536, "length": 4096, "location": "cuda:1", "generation": 1,
     "remote_accessible": false, "keys": {},
     "file": {"device": 2049, "inode": 131, "size": 1099511627776, "offset": 8192,
              "paths": {"n7": "/mnt/kv/spill0", "n8": "/vol/kv/spill0"}}}
  ]
})";

Json ValidDoc() { return Json::parse(kValidJson); }

// "/buffers/0/keys/tcp" -> "buffers[0].keys.tcp", the form error messages use.
std::string PathOf(std::string_view pointer) {
  std::string out;
  size_t pos = 1;
  while (pos <= pointer.size()) {
    size_t next = pointer.find('/', pos);
    if (next == std::string_view::npos) next = pointer.size();
    const std::string_view token = pointer.substr(pos, next - pos);
    if (!token.empty() && token.find_first_not_of("0123456789") == std::string_view::npos) {
      out += "[" + std::string(token) + "]";
    } else {
      if (!out.empty()) out += '.';
      out += token;
    }
    pos = next + 1;
  }
  return out;
}

// Decoding `text` fails with InvalidArgument whose message contains `part`.
void ExpectDescRejected(std::string_view text, std::string_view part,
                        const DecodeLimits& limits = {}) {
  Result<SegmentDesc> r = DecodeSegmentDesc(text, limits);
  ASSERT_FALSE(r.ok()) << "accepted: " << text.substr(0, 300);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(part), std::string::npos)
      << "expected '" << part << "' in: " << r.status();
}

SegmentDesc DecodeOrDie(std::string_view text) {
  Result<SegmentDesc> r = DecodeSegmentDesc(text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SegmentDesc();
}

std::string AllBytes() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  return bytes;
}

SegmentDesc MakeDesc(size_t buffers) {
  SegmentDesc d;
  d.name = "prefill-0";
  d.incarnation = 0x1234'5678'9abc'def0;
  d.rpc = {"10.1.2.3", 17777};
  d.host = {"node-a", "b7a3c1d2-0000-4000-8000-000000000001", 4026531836};
  d.devices = {{"mlx5_0", "rdma", Location::CpuNuma(0)}, {"cuda:0", "cuda-ipc", Location::Cuda(0)}};
  d.transports = {{"rdma", "gid-and-qpn"}, {"tcp", ""}};
  for (size_t i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 0x7f00'0000'0000 + i * 0x20000;
    b.length = 0x10000 + i;
    b.location = i % 2 == 0 ? Location::CpuNuma(static_cast<int32_t>(i % 4)) : Location::Cuda(1);
    b.generation = i + 1;
    b.remote_accessible = i % 3 != 0;
    b.keys = {{"tcp", std::string(16, static_cast<char>(i))}, {"rdma", "rkey" + std::to_string(i)}};
    if (i % 5 == 1) {  // a file window every fifth buffer
      b.keys = {{"file", ""}};
      b.file = FileWindow{.device = 2049 + i,
                          .inode = 131 + i,
                          .size = (uint64_t{1} << 40) + i,
                          .offset = i * 4096,
                          .paths = {{"node-a", "/mnt/kv/" + std::to_string(i)},
                                    {"node-b\"x\"", "/vol/kv/\xc3\xb8" + std::to_string(i)}}};
    }
    d.buffers.push_back(b);
  }
  return d;
}

void ExpectRoundTrip(const SegmentDesc& d) {
  ASSERT_TRUE(ValidateSegmentDesc(d).ok()) << ValidateSegmentDesc(d);
  const std::string text = EncodeSegmentDesc(d);
  Result<SegmentDesc> back = DecodeSegmentDesc(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text.substr(0, 500);
  EXPECT_EQ(*back, d);
  EXPECT_EQ(EncodeSegmentDesc(*back), text);
}

// ----- round trips ---------------------------------------------------------------------------

TEST(SegmentDescCodecTest, DecodesTheDocumentedShape) {
  const SegmentDesc d = DecodeOrDie(kValidJson);
  EXPECT_EQ(d.name, "decode-node-7");
  EXPECT_EQ(d.incarnation, 1234567890123u);
  EXPECT_EQ(d.rpc, (RpcEndpoint{"10.0.0.7", 12345}));
  EXPECT_EQ(d.host.pid_namespace, 4026531836u);
  ASSERT_EQ(d.devices.size(), 1u);
  EXPECT_EQ(d.devices[0].location, Location::CpuNuma(0));
  EXPECT_EQ(d.transports.at("rdma"), std::string("\0\1\2\3", 4));
  ASSERT_EQ(d.buffers.size(), 2u);
  EXPECT_EQ(d.buffers[0].keys.at("tcp"), "tcp-key");
  EXPECT_EQ(d.buffers[1].location, Location::Cuda(1));
  EXPECT_FALSE(d.buffers[1].remote_accessible);
  ExpectRoundTrip(d);
}

TEST(SegmentDescCodecTest, RoundTripsEmptyLists) {
  SegmentDesc d = MakeDesc(0);
  d.devices.clear();
  d.transports.clear();
  d.host = {"", "", 0};
  ExpectRoundTrip(d);
  EXPECT_NE(EncodeSegmentDesc(d).find(R"("devices":[],"transports":{},"buffers":[])"),
            std::string::npos);
}

TEST(SegmentDescCodecTest, RoundTripsManyBuffers) { ExpectRoundTrip(MakeDesc(5000)); }

TEST(SegmentDescCodecTest, RoundTripsBinaryKeysWithEveryByteValue) {
  SegmentDesc d = MakeDesc(3);
  d.transports["shm"] = AllBytes();
  d.buffers[1].keys["rdma"] = AllBytes();
  d.buffers[2].keys["tcp"] = std::string(1, '\0');
  ExpectRoundTrip(d);
}

TEST(SegmentDescCodecTest, RoundTripsMaximalIntegers) {
  SegmentDesc d = MakeDesc(0);
  d.incarnation = kMax64;
  d.host.pid_namespace = kMax64;
  d.rpc.port = 65535;
  BufferDesc whole;
  whole.addr = 0;
  whole.length = kMax64;  // [0, 2^64 - 1): the largest range that does not wrap
  whole.location = Location::CpuNuma(65535);
  whole.generation = kMax64;
  d.buffers = {whole};
  ExpectRoundTrip(d);

  BufferDesc last = whole;
  last.addr = kMax64 - 1;
  last.length = 1;
  d.buffers = {last};
  ExpectRoundTrip(d);
}

TEST(SegmentDescCodecTest, RoundTripsMultiProtocolKeysAndEveryLocationKind) {
  SegmentDesc d = MakeDesc(5);
  d.buffers[0].keys = {{"tcp", "t"},      {"rdma", "r"},  {"shm", "s"},
                       {"cuda-ipc", "c"}, {"efa_0", "e"}, {std::string(32, 'z'), "long name"}};
  d.buffers[1].location = Location::Cpu();
  d.buffers[2].location = Location::Rocm(3);
  d.buffers[3].location = Location::Ascend(7);
  d.buffers[4].location = Location::Cuda(65535);
  ExpectRoundTrip(d);
}

TEST(SegmentDescCodecTest, RoundTripsStringsThatNeedEscaping) {
  SegmentDesc d = MakeDesc(1);
  d.name = std::string(
      "n\xc3\xb8"
      "de \"7\" \\ \xe6\x9d\xb1\xe4\xba\xac / \xf0\x9f\x9a\xa2");
  d.name += std::string(255 - d.name.size(), 'x');  // exactly the limit
  d.rpc.host = "fe80::1%eth0";
  d.host.hostname = "h\"\\";
  ExpectRoundTrip(d);
}

TEST(SegmentDescCodecTest, EncodingIsDeterministicAndInSchemaOrder) {
  const SegmentDesc a = MakeDesc(2);
  const SegmentDesc b = MakeDesc(2);
  const std::string text = EncodeSegmentDesc(a);
  EXPECT_EQ(text, EncodeSegmentDesc(b));
  EXPECT_EQ(text.rfind(R"({"schema_version":2,"name":"prefill-0","incarnation":)", 0), 0u) << text;
  const std::vector<std::string_view> order = {R"("rpc":{"host":)",       R"("port":)",
                                               R"("host":{"hostname":)",  R"("boot_id":)",
                                               R"("pid_namespace":)",     R"("devices":[{"name":)",
                                               R"("transport":)",         R"("transports":{)",
                                               R"("buffers":[{"addr":)",  R"("length":)",
                                               R"("location":)",          R"("generation":)",
                                               R"("remote_accessible":)", R"("keys":{)"};
  size_t pos = 0;
  for (std::string_view field : order) {
    const size_t at = text.find(field, pos);
    ASSERT_NE(at, std::string::npos) << field << " missing or out of order in " << text;
    pos = at;
  }
  EXPECT_EQ(text.find_first_of(" \n\t"), std::string::npos) << "not compact: " << text;
}

TEST(SegmentDescCodecTest, DecodeSortsBuffersByAddr) {
  Json doc = ValidDoc();
  std::swap(doc["buffers"][0], doc["buffers"][1]);
  const SegmentDesc d = DecodeOrDie(doc.dump());
  ASSERT_EQ(d.buffers.size(), 2u);
  EXPECT_EQ(d.buffers[0].addr, 4096u);
  EXPECT_EQ(d.buffers[1].addr, 65536u);
  EXPECT_EQ(d, DecodeOrDie(kValidJson));
}

TEST(SegmentDescCodecTest, AcceptsAdjacentBuffersAndAnyJsonWhitespace) {
  Json doc = ValidDoc();
  doc["buffers"][1]["addr"] = 4096 + 8192;  // starts exactly where buffers[0] ends
  EXPECT_TRUE(DecodeSegmentDesc(doc.dump(2)).ok());
}

// ----- rejections: shape -----------------------------------------------------------------------

// JSON value types as the schema uses them; kNever marks values no field accepts.
enum class FieldType { kUnsigned, kString, kBool, kObject, kArray, kNever };

struct FieldCase {
  const char* pointer;
  FieldType type;
  bool required;  // false for entries of a map or array, whose absence is valid
};

constexpr FieldCase kFields[] = {
    {"/schema_version", FieldType::kUnsigned, true},
    {"/name", FieldType::kString, true},
    {"/incarnation", FieldType::kUnsigned, true},
    {"/rpc", FieldType::kObject, true},
    {"/rpc/host", FieldType::kString, true},
    {"/rpc/port", FieldType::kUnsigned, true},
    {"/host", FieldType::kObject, true},
    {"/host/hostname", FieldType::kString, true},
    {"/host/boot_id", FieldType::kString, true},
    {"/host/pid_namespace", FieldType::kUnsigned, true},
    {"/devices", FieldType::kArray, true},
    {"/devices/0", FieldType::kObject, false},
    {"/devices/0/name", FieldType::kString, true},
    {"/devices/0/transport", FieldType::kString, true},
    {"/devices/0/location", FieldType::kString, true},
    {"/transports", FieldType::kObject, true},
    {"/transports/rdma", FieldType::kString, false},
    {"/buffers", FieldType::kArray, true},
    {"/buffers/0", FieldType::kObject, false},
    {"/buffers/1", FieldType::kObject, false},
    {"/buffers/0/addr", FieldType::kUnsigned, true},
    {"/buffers/0/length", FieldType::kUnsigned, true},
    {"/buffers/0/location", FieldType::kString, true},
    {"/buffers/0/generation", FieldType::kUnsigned, true},
    {"/buffers/0/remote_accessible", FieldType::kBool, true},
    {"/buffers/0/keys", FieldType::kObject, true},
    {"/buffers/0/keys/tcp", FieldType::kString, false},
    {"/buffers/1/addr", FieldType::kUnsigned, true},
    {"/buffers/1/generation", FieldType::kUnsigned, true},
    {"/buffers/1/keys", FieldType::kObject, true},
    {"/buffers/1/file", FieldType::kObject, false},
    {"/buffers/1/file/device", FieldType::kUnsigned, true},
    {"/buffers/1/file/inode", FieldType::kUnsigned, true},
    {"/buffers/1/file/size", FieldType::kUnsigned, true},
    {"/buffers/1/file/offset", FieldType::kUnsigned, true},
    {"/buffers/1/file/paths", FieldType::kObject, true},
    {"/buffers/1/file/paths/n7", FieldType::kString, false},
};

TEST(SegmentDescCodecTest, RejectsEveryMissingField) {
  for (const FieldCase& field : kFields) {
    if (!field.required) continue;
    SCOPED_TRACE(field.pointer);
    const Json::json_pointer ptr(field.pointer);
    Json doc = ValidDoc();
    ASSERT_EQ(doc[ptr.parent_pointer()].erase(ptr.back()), 1u);
    ExpectDescRejected(doc.dump(), PathOf(field.pointer) + ": missing");
  }
}

TEST(SegmentDescCodecTest, RejectsEveryWrongType) {
  // One value of each JSON type, including the numbers an unsigned field must refuse: negative,
  // fractional, exponent form, and 2^64 (which no uint64 holds).
  const std::pair<std::string_view, FieldType> kCandidates[] = {
      {R"("1")", FieldType::kString},
      {"true", FieldType::kBool},
      {"false", FieldType::kBool},
      {"[]", FieldType::kArray},
      {"{}", FieldType::kObject},
      {"null", FieldType::kNever},
      {"-1", FieldType::kNever},
      {"1.5", FieldType::kNever},
      {"1e3", FieldType::kNever},
      {"1.0", FieldType::kNever},
      {"18446744073709551616", FieldType::kNever},
  };
  for (const FieldCase& field : kFields) {
    for (const auto& [value, type] : kCandidates) {
      if (type == field.type) continue;
      SCOPED_TRACE(std::string(field.pointer) + " = " + std::string(value));
      Json doc = ValidDoc();
      doc[Json::json_pointer(field.pointer)] = Json::parse(value);
      ExpectDescRejected(doc.dump(), PathOf(field.pointer) + ": must be ");
    }
  }
  // Number spellings that a round trip through a JSON library would normalise away.
  const std::string text = ValidDoc().dump();
  for (std::string_view spelling : {"-0", "1.0", "1e3", "1E+3", "0.0"}) {
    std::string edited = text;
    edited.replace(edited.find("1234567890123"), 13, spelling);
    ExpectDescRejected(edited, "incarnation: must be an unsigned integer (got a ");
  }
  ExpectDescRejected("[]", "segment descriptor: must be an object (got an array)");
  ExpectDescRejected("42", "segment descriptor: must be an object (got an unsigned integer)");
}

TEST(SegmentDescCodecTest, RejectsUnknownFieldsAtEveryLevel) {
  for (const char* pointer : {"/extra", "/rpc/extra", "/host/extra", "/devices/0/extra",
                              "/buffers/0/extra", "/buffers/1/Addr"}) {
    SCOPED_TRACE(pointer);
    Json doc = ValidDoc();
    doc[Json::json_pointer(pointer)] = 1;
    ExpectDescRejected(doc.dump(), PathOf(pointer) + ": unknown field");
  }
}

TEST(SegmentDescCodecTest, RejectsDuplicateFields) {
  const std::string text = ValidDoc().dump();  // keys sorted, no spaces
  std::string dup = text;
  dup.replace(dup.find(R"("incarnation":)"), 0, R"("name":"other",)");
  ExpectDescRejected(dup, "name: duplicate field");
  dup = text;
  dup.replace(dup.find(R"("generation":3)"), 0, R"("generation":3,)");
  ExpectDescRejected(dup, "buffers[0].generation: duplicate field");
  dup = text;
  dup.replace(dup.find(R"("tcp":)"), 0, R"("tcp":"",)");
  ExpectDescRejected(dup, "buffers[0].keys.tcp: duplicate field");
}

TEST(SegmentDescCodecTest, RejectsOtherSchemaVersionsBeforeAnythingElse) {
  for (uint64_t version : {0ull, 3ull, 1000ull, 18446744073709551615ull}) {
    Json doc = ValidDoc();
    doc["schema_version"] = version;
    doc["a_field_from_the_future"] = true;
    ExpectDescRejected(doc.dump(), "unsupported schema_version " + std::to_string(version) +
                                       " (this build reads 1 to 2)");
  }
}

// Peers of the release before read v1 only: a descriptor without file buffers is published as
// v1, one with a file window as v2; both decode, and a file window in a v1 document does not.
TEST(SegmentDescCodecTest, PublishesV1UntilAFileBufferNeedsV2AndReadsBoth) {
  SegmentDesc memory_only = MakeDesc(1);
  ASSERT_FALSE(memory_only.buffers[0].file.has_value());
  const std::string v1 = EncodeSegmentDesc(memory_only);
  EXPECT_EQ(v1.rfind(R"({"schema_version":1,)", 0), 0u) << v1.substr(0, 40);
  Result<SegmentDesc> back = DecodeSegmentDesc(v1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, memory_only);

  const SegmentDesc with_file = MakeDesc(2);
  ASSERT_TRUE(with_file.buffers[1].file.has_value());
  EXPECT_EQ(EncodeSegmentDesc(with_file).rfind(R"({"schema_version":2,)", 0), 0u);

  Json doc = ValidDoc();
  doc["schema_version"] = 1;
  ExpectDescRejected(doc.dump(), "buffers[1].file: unknown field (schema v1)");
  doc["buffers"].erase(1);
  EXPECT_TRUE(DecodeSegmentDesc(doc.dump()).ok()) << DecodeSegmentDesc(doc.dump()).status();
}

// ----- rejections: values
// -------------------------------------------------------------------------

struct ValueCase {
  const char* pointer;
  const char* value;  // JSON text
  const char* message;
};

const ValueCase kBadValues[] = {
    {"/name", R"("")", "name: must not be empty"},
    {"/name", nullptr, "name: must be at most 255 bytes (got 256)"},  // value filled in below
    {"/name", R"("a\u0001b")", "name: must be UTF-8 without control characters"},
    {"/name", R"("a\u007fb")", "name: must be UTF-8 without control characters"},
    {"/name", R"("tab\there")", "name: must be UTF-8 without control characters"},
    {"/incarnation", "0", "incarnation: must be > 0"},
    {"/rpc/host", R"("")", "rpc.host: must not be empty"},
    {"/rpc/port", "0", "rpc.port: must be 1..65535 (got 0)"},
    {"/rpc/port", "65536", "rpc.port: must be 1..65535 (got 65536)"},
    {"/host/boot_id", R"("x\ny")", "host.boot_id: must be UTF-8 without control characters"},
    {"/devices/0/name", R"("")", "devices[0].name: must not be empty"},
    {"/devices/0/transport", R"("RDMA")", "devices[0].transport: transport name must be 1..32"},
    {"/devices/0/transport", R"("")", "devices[0].transport: transport name must be 1..32"},
    {"/devices/0/location", R"("*")", "devices[0].location: '*' (detect) is not allowed"},
    {"/devices/0/location", R"("gpu:0")", "devices[0].location: bad location 'gpu:0'"},
    {"/transports/rdma", R"("AAECAw")", "transports.rdma: base64: length 6 is not a multiple"},
    {"/transports", R"({"Rdma": ""})", "transports.Rdma: transport name must be 1..32"},
    {"/buffers/0/length", "0", "buffers[0].length: must be > 0"},
    {"/buffers/0/addr", "18446744073709547520", "buffers[0].length: addr+length overflows"},
    {"/buffers/1/addr", "18446744073709551615", "buffers[1].length: addr+length overflows"},
    {"/buffers/1/generation", "0", "buffers[1].generation: must be > 0"},
    {"/buffers/0/location", R"("*")", "buffers[0].location: '*' (detect) is not allowed"},
    {"/buffers/0/location", R"("cpu:01")", "buffers[0].location: bad location 'cpu:01'"},
    {"/buffers/0/location", R"("cuda")", "buffers[0].location: bad location 'cuda'"},
    {"/buffers/0/keys/tcp", R"("Zg")", "buffers[0].keys.tcp: base64: length 2 is not a multiple"},
    {"/buffers/0/keys/tcp", R"("Zh==")", "buffers[0].keys.tcp: base64: non-canonical"},
    {"/buffers/0/keys/tcp", R"(" Zg=")", "buffers[0].keys.tcp: base64: invalid character"},
    {"/buffers/0/keys/tcp", R"("Zg==\n")", "buffers[0].keys.tcp: base64:"},
    {"/buffers/0/keys", R"({"t cp": ""})", "buffers[0].keys.t cp: transport name must be"},
    {"/buffers/0/keys", R"({"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": ""})",
     "buffers[0].keys.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: transport name must be"},
};

TEST(SegmentDescCodecTest, RejectsEveryOutOfRangeValue) {
  for (const ValueCase& c : kBadValues) {
    const std::string value = c.value ? c.value : "\"" + std::string(256, 'n') + "\"";
    SCOPED_TRACE(std::string(c.pointer) + " = " + value.substr(0, 40));
    Json doc = ValidDoc();
    doc[Json::json_pointer(c.pointer)] = Json::parse(value);
    ExpectDescRejected(doc.dump(), c.message);
  }
}

TEST(SegmentDescCodecTest, RejectsOverlappingBuffersNamingBothRanges) {
  Json doc = ValidDoc();
  doc["buffers"][1]["addr"] = 0x2000;  // inside [0x1000, 0x3000)
  ExpectDescRejected(doc.dump(), "buffers: [0x1000, 0x3000) overlaps [0x2000, 0x3000)");

  doc["buffers"][1] = doc["buffers"][0];  // identical ranges
  ExpectDescRejected(doc.dump(), "buffers: [0x1000, 0x3000) overlaps [0x1000, 0x3000)");

  doc = ValidDoc();  // one buffer swallowing a later one, listed out of order
  doc["buffers"][1]["addr"] = 0;
  doc["buffers"][1]["length"] = 0x100000;
  ExpectDescRejected(doc.dump(), "buffers: [0x0, 0x100000) overlaps [0x1000, 0x3000)");
}

TEST(SegmentDescCodecTest, RejectsInputOverTheLimits) {
  const std::string text = ValidDoc().dump();
  DecodeLimits limits;
  limits.max_input_bytes = text.size();
  EXPECT_TRUE(DecodeSegmentDesc(text, limits).ok());
  limits.max_input_bytes = text.size() - 1;
  ExpectDescRejected(text, "input is " + std::to_string(text.size()) + " bytes, over the limit of",
                     limits);
  // Rejected before parsing: garbage of the same size gives the same answer.
  ExpectDescRejected(std::string(text.size(), '['), "bytes, over the limit of", limits);

  limits = {};
  limits.max_buffers = 1;
  ExpectDescRejected(text, "buffers: 2 entries, over the limit of 1", limits);
  limits = {};
  limits.max_devices = 0;
  ExpectDescRejected(text, "devices: 1 entries, over the limit of 0", limits);
  limits = {};
  limits.max_key_bytes = 6;  // "tcp-key" is 7 bytes
  ExpectDescRejected(text, "buffers[0].keys.tcp: opaque value is 7 bytes, over the limit of 6",
                     limits);
  limits.max_key_bytes = 3;  // the transports blob is 4 bytes
  ExpectDescRejected(text, "transports.rdma: opaque value is 4 bytes", limits);

  // Opaque maps: at most max_transports entries each, refused at the first one past it.
  limits = {};
  limits.max_transports = 2;
  EXPECT_TRUE(DecodeSegmentDesc(text, limits).ok());
  limits.max_transports = 1;  // buffers[0].keys has two
  ExpectDescRejected(text, "buffers[0].keys: more than 1 entries, over the limit of 1", limits);
  limits.max_transports = 0;  // in kValidJson the transports object comes first
  ExpectDescRejected(kValidJson, "transports: more than 0 entries, over the limit of 0", limits);
  // The default: a buffer's keys object of 100000 entries is refused at the 17th.
  std::string keys_heavy = R"({"schema_version":2,"name":"n","incarnation":1,)"
                           R"("rpc":{"host":"h","port":1},)"
                           R"("host":{"hostname":"","boot_id":"","pid_namespace":0},)"
                           R"("devices":[],"transports":{},"buffers":[{"addr":4096,"length":1,)"
                           R"("location":"cpu:0","generation":1,"remote_accessible":true,"keys":{)";
  for (int i = 0; i < 100000; ++i) keys_heavy += "\"k" + std::to_string(i) + "\":\"\",";
  keys_heavy += R"("k":""}}]})";
  Result<SegmentDesc> one_buffer = DecodeSegmentDesc(keys_heavy, {.max_transports = 200000});
  EXPECT_EQ(one_buffer.ok() ? one_buffer->buffers.at(0).keys.size() : 0u, 100001u);
  ExpectDescRejected(keys_heavy, "buffers[0].keys: more than 16 entries, over the limit of 16");
}

TEST(SegmentDescCodecTest, RejectsDeepNestingWithoutRecursing) {
  ExpectDescRejected(std::string(100000, '['), "JSON nesting is deeper than the limit of 8 levels");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"a":)";
  ExpectDescRejected(objects, "a.a.a.a.a.a.a: JSON nesting is deeper than the limit of 8 levels");
  // With no effective limit, neither parsing nor freeing 200000 nested arrays recurses: the
  // input simply fails where it ends.
  DecodeLimits limits;
  limits.max_depth = 1 << 30;
  ExpectDescRejected(std::string(200000, '['), "invalid JSON: parse error at line 1, column 200001",
                     limits);

  // Depth 8 is allowed (the unknown field is what fails); depth 9 is not.
  Json doc = ValidDoc();
  doc["extra"] = Json::parse("[[[[[[[]]]]]]]");  // the root is depth 1, these 7 more
  ExpectDescRejected(doc.dump(), "extra: unknown field");
  doc["extra"] = Json::parse("[[[[[[[[]]]]]]]]");
  ExpectDescRejected(doc.dump(), "extra[0][0][0][0][0][0]: JSON nesting is deeper than the limit");

  limits = {};
  limits.max_depth = 3;  // v1 needs 4: root > buffers > buffer > keys
  ExpectDescRejected(kValidJson, "buffers[0]: JSON nesting is deeper than the limit of 3", limits);
}

TEST(SegmentDescCodecTest, RejectsInvalidJsonWithThePosition) {
  ExpectDescRejected("", "invalid JSON: parse error at line 1, column 1");
  ExpectDescRejected(std::string_view(),
                     "invalid JSON: parse error at line 1, column 1");  // no data
  ExpectDescRejected("{", "invalid JSON: parse error at line 1, column 2");
  ExpectDescRejected(std::string(kValidJson) + " x",
                     "invalid JSON: parse error at line 16, column 3");
  ExpectDescRejected(std::string(kValidJson) + "{}", "expected end of input");
  ExpectDescRejected(R"({"name": 'x'})", "line 1, column 10");
  ExpectDescRejected(R"({"name": "x",})", "invalid JSON: ");
  ExpectDescRejected("/* comment */ {}", "line 1, column 1");
  ExpectDescRejected("{\"name\": \"\xff\"}", "invalid JSON");     // invalid UTF-8
  ExpectDescRejected(R"({"name": "\ud800"})", "invalid JSON: ");  // lone surrogate
  ExpectDescRejected(R"({"schema_version": NaN})", "invalid JSON: ");
  ExpectDescRejected(R"({"schema_version": 01})", "invalid JSON: ");
  ExpectDescRejected(R"({"schema_version": 1e999})", "invalid JSON: ");
  ExpectDescRejected(std::string("{\"name\": \"a\0b\"}", 15), "invalid JSON: ");
  ExpectDescRejected("{}", "schema_version: missing");
}

// ----- ValidateSegmentDesc ---------------------------------------------------------------------

TEST(SegmentDescCodecTest, ValidateAgreesWithDecodeOnEveryRule) {
  struct Mutation {
    const char* message;
    void (*apply)(SegmentDesc*);
  };
  const Mutation kMutations[] = {
      {"unsupported schema_version 3", [](SegmentDesc* d) { d->schema_version = 3; }},
      {"name: must not be empty", [](SegmentDesc* d) { d->name.clear(); }},
      {"name: must be UTF-8", [](SegmentDesc* d) { d->name = "a\x01"; }},
      {"incarnation: must be > 0", [](SegmentDesc* d) { d->incarnation = 0; }},
      {"rpc.host: must not be empty", [](SegmentDesc* d) { d->rpc.host.clear(); }},
      {"rpc.port: must be 1..65535", [](SegmentDesc* d) { d->rpc.port = 0; }},
      {"host.hostname: must be at most 255",
       [](SegmentDesc* d) { d->host.hostname.assign(256, 'h'); }},
      {"devices[1].transport: transport name",
       [](SegmentDesc* d) { d->devices[1].transport = "CUDA"; }},
      {"devices[0].location: '*'",
       [](SegmentDesc* d) { d->devices[0].location = Location::Detect(); }},
      {"transports.TCP: transport name", [](SegmentDesc* d) { d->transports["TCP"] = ""; }},
      {"transports: more than 16 entries, over the limit of 16",
       [](SegmentDesc* d) {
         for (int i = 0; i < 17; ++i) d->transports["t" + std::to_string(i)] = "";
       }},
      {"buffers[2].keys: more than 16 entries, over the limit of 16",
       [](SegmentDesc* d) {
         for (int i = 0; i < 15; ++i) d->buffers[2].keys["t" + std::to_string(i)] = "";
       }},
      {"buffers[1].length: must be > 0", [](SegmentDesc* d) { d->buffers[1].length = 0; }},
      {"buffers[2].length: addr+length overflows",
       [](SegmentDesc* d) { d->buffers[2].length = kMax64; }},
      {"buffers[0].generation: must be > 0", [](SegmentDesc* d) { d->buffers[0].generation = 0; }},
      {"buffers[1].location: '*'",
       [](SegmentDesc* d) { d->buffers[1].location = Location::Detect(); }},
      {"buffers[1].keys.: transport name", [](SegmentDesc* d) { d->buffers[1].keys[""] = "x"; }},
      {"buffers[1].file.offset: window [0xfffffffff1, +0x10001) does not lie inside the file's",
       [](SegmentDesc* d) { d->buffers[1].file->offset = d->buffers[1].file->size - 16; }},
      {"buffers[1].file.paths: must name at least the owner's host",
       [](SegmentDesc* d) { d->buffers[1].file->paths.clear(); }},
      {"buffers[1].file.paths.node-a: must not be empty",
       [](SegmentDesc* d) { d->buffers[1].file->paths["node-a"].clear(); }},
      {"buffers[1].file.paths.node-a: must be at most 4096 bytes",
       [](SegmentDesc* d) { d->buffers[1].file->paths["node-a"].assign(4097, 'p'); }},
      {"buffers[1].file.paths: more than 64 entries, over the limit of 64",
       [](SegmentDesc* d) {
         for (int i = 0; i < 63; ++i) d->buffers[1].file->paths["h" + std::to_string(i)] = "/p";
       }},
      {"buffers: [0x7f0000000000, 0x7f0000010000) overlaps [0x7f0000000000, 0x7f0000010001)",
       [](SegmentDesc* d) { d->buffers[1].addr = d->buffers[0].addr; }},
  };
  for (const Mutation& m : kMutations) {
    SCOPED_TRACE(m.message);
    SegmentDesc d = MakeDesc(3);
    m.apply(&d);
    const Status validated = ValidateSegmentDesc(d);
    EXPECT_EQ(validated.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(validated.message().find(m.message), std::string::npos) << validated;
    ExpectDescRejected(EncodeSegmentDesc(d), m.message);
  }
}

TEST(SegmentDescCodecTest, ValidateAlsoRequiresSortedBuffersAndWellFormedStructs) {
  SegmentDesc d = MakeDesc(3);
  EXPECT_TRUE(ValidateSegmentDesc(d).ok());
  std::swap(d.buffers[0], d.buffers[2]);
  EXPECT_NE(ValidateSegmentDesc(d).message().find("buffers[1].addr: buffers must be sorted"),
            std::string::npos)
      << ValidateSegmentDesc(d);

  d = MakeDesc(1);
  d.buffers[0].location = Location::Cuda(-1);  // no text form parses back to this
  EXPECT_NE(ValidateSegmentDesc(d).message().find("buffers[0].location: not a valid location"),
            std::string::npos);
  d = MakeDesc(1);
  d.buffers[0].location = Location::CpuNuma(65536);
  EXPECT_FALSE(ValidateSegmentDesc(d).ok());
  d = MakeDesc(1);
  d.name = "bad \xff utf-8";
  EXPECT_NE(ValidateSegmentDesc(d).message().find("name: must be UTF-8"), std::string::npos);
  d.name = "overlong \xc0\xaf";
  EXPECT_FALSE(ValidateSegmentDesc(d).ok());
  d.name = "surrogate \xed\xa0\x80";
  EXPECT_FALSE(ValidateSegmentDesc(d).ok());
  d.name = "truncated \xe6\x9d";
  EXPECT_FALSE(ValidateSegmentDesc(d).ok());

  d = MakeDesc(1);
  DecodeLimits limits;
  limits.max_key_bytes = 15;  // the tcp key is 16 bytes
  EXPECT_NE(ValidateSegmentDesc(d, limits).message().find("buffers[0].keys.tcp: opaque value"),
            std::string::npos);
}

// ----- no partial results
// -------------------------------------------------------------------------

TEST(SegmentDescCodecTest, FailedDecodeLeavesThePreviousResultUntouched) {
  // By construction: DecodeSegmentDesc builds its result in a local and returns it only on
  // success, so a caller's variable is assigned only from an OK Result.
  SegmentDesc current = DecodeOrDie(kValidJson);
  const SegmentDesc before = current;
  Json doc = ValidDoc();
  doc["buffers"][1]["generation"] = 0;  // fails late, after everything else was read
  for (const std::string& bad : {doc.dump(), std::string("{"), std::string(100000, '[')}) {
    Result<SegmentDesc> r = DecodeSegmentDesc(bad);
    ASSERT_FALSE(r.ok());
    if (r.ok()) current = *r;
    EXPECT_EQ(current, before);
  }
}

}  // namespace
}  // namespace ferry
