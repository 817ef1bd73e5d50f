// Writes the seed corpora of the fuzz harnesses: fuzz/corpus/<target>/seed-*, a handful of valid
// and near-valid inputs per target, made with the codecs' own encoders so that they follow the
// current wire formats. Run it (scripts/fuzz.sh --seeds) after a format changes. Files whose
// names do not start with "seed-" (inputs that once crashed a harness, kept as regressions) are
// left alone.
//
// Usage: ferry_fuzz_seeds <corpus dir>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/segment_desc_codec.h"
#include "rpc/frame.h"
#include "rpc/messages.h"
#include "transport/rdma/rdma_wire.h"
#include "transport/samehost/grant_wire.h"
#include "transport/tcp/tcp_protocol.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

class CorpusWriter {
 public:
  explicit CorpusWriter(fs::path root) : root_(std::move(root)) {}

  // Starts `target`'s folder: creates it and removes its old seed-* files.
  void Target(const std::string& target) {
    dir_ = root_ / target;
    fs::create_directories(dir_);
    for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind("seed-", 0) == 0) fs::remove(e.path());
    }
  }

  // Writes `bytes`, prefixed by the harness's selector byte when `selector` >= 0.
  void Seed(const std::string& name, const std::string& bytes, int selector = -1) {
    std::string content;
    if (selector >= 0) content.push_back(static_cast<char>(selector));
    content += bytes;
    std::ofstream out(dir_ / ("seed-" + name), std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) {
      std::fprintf(stderr, "ferry_fuzz_seeds: cannot write %s\n", (dir_ / name).c_str());
      ok_ = false;
    }
    ++written_;
  }

  bool ok() const { return ok_; }
  int written() const { return written_; }

 private:
  fs::path root_;
  fs::path dir_;
  bool ok_ = true;
  int written_ = 0;
};

SegmentDesc SampleDesc(size_t buffers) {
  SegmentDesc d;
  d.name = "node-7";
  d.incarnation = 0x1234567890ab;
  d.rpc = {.host = "10.0.0.7", .port = 12345};
  d.host = {.hostname = "n7", .boot_id = "6f1c1b6e-0d6a-4c1e", .pid_namespace = 4026531836};
  d.devices.push_back({.name = "mlx5_0", .transport = "rdma", .location = *Location::Parse("cpu:0")});
  d.transports["rdma"] = std::string("\x00\x01\x02\x03", 4);
  for (size_t i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 4096 + i * 65536;
    b.length = 8192;
    b.location = *Location::Parse(i % 2 == 0 ? "cpu:0" : "cuda:1");
    b.generation = i + 1;
    b.remote_accessible = i % 2 == 0;
    b.keys["tcp"] = "tcp-key";
    d.buffers.push_back(b);
  }
  return d;
}

void SegmentDescSeeds(CorpusWriter& w) {
  w.Target("segment_desc");
  const std::string valid = EncodeSegmentDesc(SampleDesc(2));
  w.Seed("valid", valid);
  w.Seed("valid-empty", EncodeSegmentDesc(SampleDesc(0)));
  std::string wrong_version = valid;
  wrong_version.replace(wrong_version.find(":1,"), 3, ":2,");
  w.Seed("bad-schema-version", wrong_version);
  SegmentDesc overlap = SampleDesc(2);
  overlap.buffers[1].addr = overlap.buffers[0].addr + 1;
  w.Seed("bad-overlap", EncodeSegmentDesc(overlap));
  w.Seed("bad-truncated", valid.substr(0, valid.size() / 2));
  w.Seed("base64", "AAECAw==");
}

void RpcFrameSeeds(CorpusWriter& w) {
  w.Target("rpc_frame");
  auto header = [](rpc::FrameHeader h) {
    std::string bytes(rpc::kFrameHeaderSize, '\0');
    rpc::EncodeFrameHeader(h, bytes.data());
    return bytes;
  };
  // Selectors: rpc_frame_fuzzer.cc.
  w.Seed("header-request", header({.type = 1, .request_id = 7, .flags = 0, .payload_len = 16}), 0);
  w.Seed("header-error",
         header({.type = 3, .request_id = 9, .flags = rpc::kFlagResponse | rpc::kFlagError,
                 .payload_len = 12}),
         0);
  std::string bad_flags = header({.type = 1, .request_id = 1, .flags = 4, .payload_len = 0});
  w.Seed("header-bad-flags", bad_flags, 0);
  w.Seed("error-payload", rpc::EncodeErrorPayload(NotFoundError("no such key")), 1);
  w.Seed("error-payload-unknown-code", std::string("\x7f", 1) + "what", 1);
  w.Seed("get-segment-desc", PackGetSegmentDescRequest("ferry/ram/node-7"), 2);
  const std::string notify = Pack(NotifyRequest{.segment_name = "node-7", .notify = "done"});
  w.Seed("notify", notify, 3);
  w.Seed("notify-truncated", notify.substr(0, notify.size() - 2), 3);
  w.Seed("probe", Pack(ProbeResponse{.incarnation = 42, .name = "node-7"}), 4);
  w.Seed("exchange", Pack(ExchangeRequest{.transport = "rdma", .bytes = "ferry-rdma-check/1 0\n"}),
         5);
  w.Seed("empty", "", 6);
  // Whole frames (selector 7; 0x80: the harness makes the checksums right first).
  auto frame = [](rpc::FrameHeader h, std::string_view payload) {
    Result<std::string> f = rpc::EncodeFrame(h, payload);
    return f.ok() ? *f : std::string();
  };
  w.Seed("frame-notify", frame({.type = ToWire(RpcType::kNotify), .request_id = 5}, notify), 7);
  w.Seed("frame-probe-response",
         frame({.type = ToWire(RpcType::kProbe), .request_id = 6, .flags = rpc::kFlagResponse},
               Pack(ProbeResponse{.incarnation = 42, .name = "node-7"})),
         7);
  w.Seed("frame-closing-notice", rpc::EncodeClosingNotice(UnavailableError("bad frame")), 7);
  std::string corrupted =
      frame({.type = ToWire(RpcType::kGetSegmentDesc), .request_id = 8},
            PackGetSegmentDescRequest("ferry/ram/node-7"));
  corrupted.back() ^= 0x20;  // a payload byte flipped in transit
  w.Seed("frame-corrupted-payload", corrupted, 7);
  w.Seed("frame-sealed", corrupted, 7 | 0x80);
  w.Seed("crc", "123456789", 8);
}

void TcpHeaderSeeds(CorpusWriter& w) {
  w.Target("tcp_header");
  auto request = [](const tcp::RequestHeader& h) {
    std::array<uint8_t, tcp::kRequestHeaderSize> b{};
    tcp::EncodeRequestHeader(h, b);
    return std::string(b.begin(), b.end());
  };
  auto response = [](const tcp::ResponseHeader& h) {
    std::array<uint8_t, tcp::kResponseHeaderSize> b{};
    tcp::EncodeResponseHeader(h, b);
    return std::string(b.begin(), b.end());
  };
  auto hello = [](uint32_t magic, uint64_t clock) {
    std::array<uint8_t, tcp::kHelloSize> b{};
    tcp::EncodeHello(magic, clock, b);
    return std::string(b.begin(), b.end());
  };
  // Selectors: tcp_header_fuzzer.cc.
  w.Seed("request-write",
         request({.op = tcp::WireOp::kWrite, .request_id = 1, .remote_addr = 0x10000,
                  .length = 4096, .incarnation = 5, .generation = 2, .deadline = 123456789}),
         0);
  w.Seed("request-read",
         request({.op = tcp::WireOp::kRead, .request_id = 2, .remote_addr = 0x20000,
                  .length = 1, .incarnation = 5, .generation = 2}),
         0);
  w.Seed("response-ok",
         response({.request_id = 2, .code = StatusCode::kOk, .message_length = 0,
                   .payload_length = 1}),
         1);
  w.Seed("response-stale",
         response({.request_id = 3, .code = StatusCode::kStale, .message_length = 12,
                   .payload_length = 0}),
         1);
  // 0x80: the harness makes header_crc right first, so the version check is what refuses it.
  std::string other_version =
      request({.op = tcp::WireOp::kWrite, .request_id = 3, .remote_addr = 0x10000, .length = 8});
  other_version[4] = 9;
  w.Seed("request-other-version-sealed", other_version, 0 | 0x80);
  w.Seed("hello", hello(tcp::kHelloMagic, 1'000'000'000), 2);
  w.Seed("hello-reply", hello(tcp::kHelloReplyMagic, 2'000'000'000), 3);
  std::string clock;
  for (const uint64_t v : {uint64_t{4'000'000'000}, uint64_t{4'000'050'000},
                           uint64_t{9'000'000'000}, uint64_t{5'000'000'000},
                           uint64_t{6'000'000'000}}) {
    for (int i = 0; i < 8; ++i) clock.push_back(static_cast<char>(v >> (8 * i)));
  }
  w.Seed("clock-mapping", clock, 4);
}

void GrantFrameSeeds(CorpusWriter& w) {
  namespace wire = samehost::wire;
  w.Target("grant_frame");
  std::string acquire_payload;
  wire::PutU32(&acquire_payload, 2);
  for (uint64_t i = 0; i < 2; ++i) {
    wire::PutU64(&acquire_payload, 0x10000 + i * 4096);  // addr
    wire::PutU64(&acquire_payload, 4096);                // length
    wire::PutU64(&acquire_payload, 5);                   // incarnation
    wire::PutU64(&acquire_payload, 2);                   // generation
    wire::PutU64(&acquire_payload, i == 0 ? wire::kNoDeadline : 123456789);
  }
  std::string acquire;
  wire::PutHeader(&acquire, wire::FrameType::kAcquire,
                  static_cast<uint32_t>(acquire_payload.size()));
  acquire += acquire_payload;
  std::string reply_payload;
  wire::PutStatus(&reply_payload, Status::Ok());
  wire::PutU32(&reply_payload, 2);
  wire::PutStatus(&reply_payload, Status::Ok());
  wire::PutStatus(&reply_payload, StaleError("generation 2 is gone"));
  std::string reply;
  wire::PutHeader(&reply, wire::FrameType::kAcquireReply,
                  static_cast<uint32_t>(reply_payload.size()));
  reply += reply_payload;
  std::string fetch;
  wire::PutHeader(&fetch, wire::FrameType::kFetchFd, 8);
  wire::PutU64(&fetch, 3);
  std::string release;
  wire::PutHeader(&release, wire::FrameType::kRelease, 0);
  // Selectors: grant_frame_fuzzer.cc (0: frame fields, 1: a stream read by RecvFrame).
  w.Seed("acquire", acquire, 0);
  w.Seed("acquire-reply", reply, 0);
  w.Seed("fetch-fd", fetch, 0);
  w.Seed("stream-acquire", acquire, 1);
  w.Seed("stream-release", release, 1);
  w.Seed("stream-trailing", fetch + "x", 1);
  w.Seed("stream-truncated", reply.substr(0, reply.size() - 3), 1);
}

void RdmaWireSeeds(CorpusWriter& w) {
  w.Target("rdma_wire");
  rdma::PublishedEndpoints endpoints{
      .provider = "tcp;ofi_rxm",
      .endpoints = {{.fabric = "127.0.0.0/8", .domain = "lo", .virt_addr = true,
                     .address = std::string("\x02\x00\x1f\x90\x7f\x00\x00\x01", 8)},
                    {.fabric = "", .domain = "mlx5_0", .virt_addr = false, .address = "ep"}}};
  // Selectors: rdma_wire_fuzzer.cc.
  w.Seed("endpoints", rdma::EncodeEndpoints(endpoints), 0);
  w.Seed("key", rdma::EncodeKey({.id = 3, .base = 0x7f0000001000, .length = 0x10000,
                                 .rkeys = {0x1234, 0xabcd}}),
         1);
  w.Seed("key-uppercase", "ferry-rdma-key/1 3 7F0000001000 10000 1234", 1);
  const std::vector<rdma::AccessCheck> checks = {
      {.id = 3, .addr = 0x7f0000001000, .length = 4096, .incarnation = 5, .generation = 2},
      {.id = 4, .addr = 0x7f0000009000, .length = 1, .incarnation = 5, .generation = 1}};
  w.Seed("check-request", rdma::EncodeCheckRequest(checks), 2);
  const std::vector<Status> results = {Status::Ok(), StaleError("generation 1 is gone")};
  w.Seed("check-reply", rdma::EncodeCheckReply(results), 3);
  w.Seed("check-reply-ok-with-message", "ferry-rdma-checked/1 1\n0 6869\n", 3);
}

void StoreAddressSeeds(CorpusWriter& w) {
  w.Target("store_address");
  w.Seed("p2p", "P2PHANDSHAKE");
  w.Seed("etcd", "etcd://127.0.0.1:2379,[::1]:2380");
  w.Seed("bare-etcd", "10.0.0.1:2379");
  w.Seed("redis", "redis://user:secret@127.0.0.1:6379/3");
  w.Seed("redis-bad-db", "redis://127.0.0.1:6379/16");
  w.Seed("http", "http://127.0.0.1:8080/metadata");
  w.Seed("http-no-path", "http://127.0.0.1:8080");
  w.Seed("memory", "memory://tests");
}

void MetadataHttpSeeds(CorpusWriter& w) {
  w.Target("metadata_http");
  // Format: metadata_http_fuzzer.cc (requests separated by "\n%%\n").
  w.Seed("put-get-list-delete",
         "PUT /metadata?key=ferry/ram/a\nContent-Type: application/json\n\n{\"v\":1}\n%%\n"
         "GET /metadata?key=ferry/ram/a\n\n\n%%\n"
         "GET /metadata?prefix=ferry/\n\n\n%%\n"
         "DELETE /metadata?key=ferry/ram/a\n\n\n%%\n"
         "GET /metadata?key=ferry/ram/a\n\n");
  w.Seed("full-store",
         "PUT /metadata?key=k1\n\n1\n%%\nPUT /metadata?key=k2\n\n2\n%%\n"
         "PUT /metadata?key=k3\n\n3\n%%\nPUT /metadata?key=k4\n\n4\n%%\n"
         "PUT /metadata?key=k5\n\n5\n%%\nGET /health\n\n");
  w.Seed("ttl-and-encoding",
         "PUT /metadata?key=%C3%A9t%C3%A9&ttl=60\n\nsummer\n%%\n"
         "PUT /metadata?key=x&ttl=0\n\nnope\n%%\n"
         "PUT /metadata?key=%FF\n\nnot utf-8\n%%\n"
         "GET /metadata?prefix=\n\n");
  w.Seed("no-key", "PUT /metadata\n\nbody\n%%\nDELETE /metadata?key=\n\n\n%%\nGET /metadata\n\n");
  w.Seed("other-routes", "POST /metadata?key=a\n\nb\n%%\nGET /elsewhere\n\n\n%%\nGET /health\n\n");
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  ferry::CorpusWriter w{std::filesystem::path(argv[1])};
  try {
    ferry::SegmentDescSeeds(w);
    ferry::RpcFrameSeeds(w);
    ferry::TcpHeaderSeeds(w);
    ferry::GrantFrameSeeds(w);
    ferry::RdmaWireSeeds(w);
    ferry::StoreAddressSeeds(w);
    ferry::MetadataHttpSeeds(w);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %d seeds under %s\n", w.written(), argv[1]);
  return w.ok() ? 0 : 1;
}
