#include "transport/rdma/rdma_wire.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "common/wire_status.h"

namespace ferry::rdma {
namespace {

constexpr std::string_view kEndpointsTag = "ferry-rdma/1";
constexpr std::string_view kKeyTag = "ferry-rdma-key/1";
constexpr std::string_view kCheckTag = "ferry-rdma-check/1";
constexpr std::string_view kReplyTag = "ferry-rdma-checked/1";
constexpr char kHex[] = "0123456789abcdef";

std::string HexNumber(uint64_t v) {
  char buf[17];
  const int n = std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return std::string(buf, static_cast<size_t>(n));
}

// "-" for the empty string, else two lowercase hex digits per byte.
std::string HexBytes(std::string_view bytes) {
  if (bytes.empty()) return "-";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// 1..16 lowercase hex digits, no leading zero unless the number is 0.
Result<uint64_t> ParseNumber(std::string_view token, std::string_view what) {
  if (token.empty() || token.size() > 16 || (token.size() > 1 && token[0] == '0')) {
    return InvalidArgumentError("rdma: bad " + std::string(what) + " '" + std::string(token) + "'");
  }
  uint64_t v = 0;
  for (char c : token) {
    const int d = HexDigit(c);
    if (d < 0) {
      return InvalidArgumentError("rdma: bad " + std::string(what) + " '" + std::string(token) +
                                  "'");
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

Result<std::string> ParseBytes(std::string_view token, size_t max, std::string_view what) {
  if (token == "-") return std::string();
  if (token.empty() || token.size() % 2 != 0 || token.size() / 2 > max) {
    return InvalidArgumentError("rdma: bad " + std::string(what) + " (length " +
                                std::to_string(token.size()) + ")");
  }
  std::string out(token.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexDigit(token[2 * i]);
    const int lo = HexDigit(token[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError("rdma: bad hex in " + std::string(what));
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

// Splits `text` into '\n'-terminated lines; an empty line or a missing final '\n' is an error.
Result<std::vector<std::string_view>> Lines(std::string_view text, std::string_view what) {
  std::vector<std::string_view> lines;
  if (text.empty() || text.back() != '\n') {
    return InvalidArgumentError("rdma: " + std::string(what) + " does not end with a newline");
  }
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    if (end == at) return InvalidArgumentError("rdma: empty line in " + std::string(what));
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// Splits on single spaces into exactly `count` non-empty tokens.
Result<std::vector<std::string_view>> Tokens(std::string_view line, size_t count,
                                             std::string_view what) {
  std::vector<std::string_view> tokens;
  size_t at = 0;
  while (true) {
    const size_t end = line.find(' ', at);
    const std::string_view token =
        line.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (token.empty() || tokens.size() == count) {
      return InvalidArgumentError("rdma: malformed " + std::string(what) + " line '" +
                                  std::string(line.substr(0, 80)) + "'");
    }
    tokens.push_back(token);
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  if (tokens.size() != count) {
    return InvalidArgumentError("rdma: malformed " + std::string(what) + " line '" +
                                std::string(line.substr(0, 80)) + "'");
  }
  return tokens;
}

// Reads a "<tag> <count>" header line and checks the number of lines that follow.
Result<size_t> Header(const std::vector<std::string_view>& lines, std::string_view tag, size_t max,
                      std::string_view what) {
  ASSIGN_OR_RETURN(std::vector<std::string_view> head, Tokens(lines[0], 2, what));
  if (head[0] != tag) return InvalidArgumentError("rdma: not a " + std::string(what));
  ASSIGN_OR_RETURN(uint64_t count, ParseNumber(head[1], "count"));
  if (count > max || count != lines.size() - 1) {
    return InvalidArgumentError("rdma: " + std::string(what) + " count does not match its lines");
  }
  return static_cast<size_t>(count);
}

}  // namespace

std::string EncodeEndpoints(const PublishedEndpoints& endpoints) {
  std::string out = std::string(kEndpointsTag) + " " + HexBytes(endpoints.provider) + " " +
                    HexNumber(endpoints.endpoints.size()) + "\n";
  for (const EndpointDesc& ep : endpoints.endpoints) {
    out += "ep " + HexBytes(ep.fabric) + " " + HexBytes(ep.domain) + " " +
           (ep.virt_addr ? "1" : "0") + " " + HexBytes(ep.address) + "\n";
  }
  return out;
}

Result<PublishedEndpoints> DecodeEndpoints(std::string_view text) {
  ASSIGN_OR_RETURN(std::vector<std::string_view> lines, Lines(text, "rdma endpoint list"));
  ASSIGN_OR_RETURN(std::vector<std::string_view> head, Tokens(lines[0], 3, "endpoint list"));
  if (head[0] != kEndpointsTag) return InvalidArgumentError("rdma: not an rdma endpoint list");
  PublishedEndpoints out;
  ASSIGN_OR_RETURN(out.provider, ParseBytes(head[1], kMaxNameBytes, "provider"));
  ASSIGN_OR_RETURN(uint64_t count, ParseNumber(head[2], "endpoint count"));
  if (out.provider.empty() || count == 0 || count > kMaxEndpoints || count != lines.size() - 1) {
    return InvalidArgumentError("rdma: endpoint list has a bad provider or count");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<std::string_view> t, Tokens(lines[i], 5, "endpoint"));
    if (t[0] != "ep" || (t[3] != "0" && t[3] != "1")) {
      return InvalidArgumentError("rdma: malformed endpoint line");
    }
    EndpointDesc ep;
    ASSIGN_OR_RETURN(ep.fabric, ParseBytes(t[1], kMaxNameBytes, "fabric name"));
    ASSIGN_OR_RETURN(ep.domain, ParseBytes(t[2], kMaxNameBytes, "domain name"));
    ep.virt_addr = t[3] == "1";
    ASSIGN_OR_RETURN(ep.address, ParseBytes(t[4], kMaxAddressBytes, "endpoint address"));
    if (ep.address.empty()) return InvalidArgumentError("rdma: empty endpoint address");
    out.endpoints.push_back(std::move(ep));
  }
  return out;
}

std::string EncodeKey(const RemoteKey& key) {
  std::string out = std::string(kKeyTag) + " " + HexNumber(key.id) + " " + HexNumber(key.base) +
                    " " + HexNumber(key.length) + " ";
  for (size_t i = 0; i < key.rkeys.size(); ++i) {
    if (i > 0) out += ",";
    out += HexNumber(key.rkeys[i]);
  }
  return out;
}

Result<RemoteKey> DecodeKey(std::string_view text) {
  if (text.empty()) return InvalidArgumentError("rdma: empty key (region not registered for rdma)");
  ASSIGN_OR_RETURN(std::vector<std::string_view> t, Tokens(text, 5, "rdma key"));
  if (t[0] != kKeyTag) return InvalidArgumentError("rdma: not an rdma key");
  RemoteKey key;
  ASSIGN_OR_RETURN(key.id, ParseNumber(t[1], "key id"));
  ASSIGN_OR_RETURN(key.base, ParseNumber(t[2], "key base"));
  ASSIGN_OR_RETURN(key.length, ParseNumber(t[3], "key length"));
  if (key.length == 0 || key.base + key.length < key.base) {
    return InvalidArgumentError("rdma: key range is empty or wraps");
  }
  std::string_view rest = t[4];
  while (true) {
    const size_t comma = rest.find(',');
    ASSIGN_OR_RETURN(uint64_t rkey, ParseNumber(rest.substr(0, comma), "rkey"));
    key.rkeys.push_back(rkey);
    if (key.rkeys.size() > kMaxEndpoints) return InvalidArgumentError("rdma: too many rkeys");
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return key;
}

std::string EncodeCheckRequest(std::span<const AccessCheck> checks) {
  std::string out = std::string(kCheckTag) + " " + HexNumber(checks.size()) + "\n";
  for (const AccessCheck& c : checks) {
    out += HexNumber(c.id) + " " + HexNumber(c.addr) + " " + HexNumber(c.length) + " " +
           HexNumber(c.incarnation) + " " + HexNumber(c.generation) + "\n";
  }
  return out;
}

Result<std::vector<AccessCheck>> DecodeCheckRequest(std::string_view text) {
  ASSIGN_OR_RETURN(std::vector<std::string_view> lines, Lines(text, "rdma check request"));
  ASSIGN_OR_RETURN(size_t count, Header(lines, kCheckTag, kMaxChecks, "rdma check request"));
  std::vector<AccessCheck> out(count);
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::vector<std::string_view> t, Tokens(lines[i + 1], 5, "check"));
    ASSIGN_OR_RETURN(out[i].id, ParseNumber(t[0], "check id"));
    ASSIGN_OR_RETURN(out[i].addr, ParseNumber(t[1], "check address"));
    ASSIGN_OR_RETURN(out[i].length, ParseNumber(t[2], "check length"));
    ASSIGN_OR_RETURN(out[i].incarnation, ParseNumber(t[3], "check incarnation"));
    ASSIGN_OR_RETURN(out[i].generation, ParseNumber(t[4], "check generation"));
  }
  return out;
}

std::string EncodeCheckReply(std::span<const Status> results) {
  std::string out = std::string(kReplyTag) + " " + HexNumber(results.size()) + "\n";
  for (const Status& s : results) {
    const std::string_view message = std::string_view(s.message()).substr(0, kMaxCheckMessageBytes);
    out += HexNumber(StatusCodeToWire(s.code())) + " " + HexBytes(message) + "\n";
  }
  return out;
}

Result<std::vector<Status>> DecodeCheckReply(std::string_view text, size_t expected) {
  ASSIGN_OR_RETURN(std::vector<std::string_view> lines, Lines(text, "rdma check reply"));
  ASSIGN_OR_RETURN(size_t count, Header(lines, kReplyTag, kMaxChecks, "rdma check reply"));
  if (count != expected) return InvalidArgumentError("rdma: check reply answers another count");
  std::vector<Status> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::vector<std::string_view> t, Tokens(lines[i + 1], 2, "check result"));
    ASSIGN_OR_RETURN(uint64_t wire, ParseNumber(t[0], "status code"));
    const std::optional<StatusCode> code =
        wire <= 0xff ? StatusCodeFromWire(static_cast<uint8_t>(wire)) : std::nullopt;
    if (!code.has_value()) {
      return InvalidArgumentError("rdma: unknown status code " + std::to_string(wire) +
                                  " in check reply");
    }
    ASSIGN_OR_RETURN(std::string message, ParseBytes(t[1], kMaxCheckMessageBytes, "message"));
    const bool ok = *code == StatusCode::kOk;
    if (ok && !message.empty()) return InvalidArgumentError("rdma: OK with a message");
    out.push_back(ok ? Status::Ok() : Status(*code, std::move(message)));
  }
  return out;
}

}  // namespace ferry::rdma
