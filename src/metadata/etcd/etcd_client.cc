#include "metadata/etcd/etcd_client.h"

#include <poll.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <map>
#include <utility>

#include "common/mutex.h"
#include "common/process_shared.h"
#include "core/base64.h"
#include "metadata/httplib_error_text.h"

namespace ferry {

using nlohmann::json;

namespace {

constexpr int kGrpcInvalidArgument = 3;
constexpr int kGrpcDeadlineExceeded = 4;
constexpr int kGrpcNotFound = 5;
constexpr int kGrpcAlreadyExists = 6;
constexpr int kGrpcPermissionDenied = 7;
constexpr int kGrpcResourceExhausted = 8;
constexpr int kGrpcOutOfRange = 11;
constexpr int kGrpcUnavailable = 14;
constexpr int kGrpcUnauthenticated = 16;

// Up to 200 printable bytes of a reply, for error messages.
std::string Snippet(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 200)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

Result<const json*> ObjectField(const json& object, std::string_view field) {
  auto it = object.find(std::string(field));
  if (it == object.end()) return static_cast<const json*>(nullptr);
  if (!it->is_object())
    return InternalError("etcd reply: '" + std::string(field) + "' is not an object");
  return &*it;
}

Result<KeyValue> DecodeKv(const json& kv) {
  if (!kv.is_object()) return InternalError("etcd reply: a kv is not an object");
  KeyValue out;
  ASSIGN_OR_RETURN(out.key, EtcdBytesField(kv, "key"));
  ASSIGN_OR_RETURN(out.value, EtcdBytesField(kv, "value"));
  return out;
}

}  // namespace

std::string EtcdPrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Result<int64_t> EtcdInt64Field(const json& object, std::string_view field) {
  auto it = object.find(std::string(field));
  if (it == object.end() || it->is_null()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& text = it->get_ref<const std::string&>();
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!text.empty() && ec == std::errc() && ptr == text.data() + text.size()) return value;
  }
  return InternalError("etcd reply: '" + std::string(field) + "' is not an int64");
}

Result<std::string> EtcdBytesField(const json& object, std::string_view field) {
  auto it = object.find(std::string(field));
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return InternalError("etcd reply: '" + std::string(field) + "' is not a base64 string");
  }
  Result<std::string> bytes = Base64Decode(it->get_ref<const std::string&>());
  if (!bytes.ok()) {
    return InternalError("etcd reply: '" + std::string(field) + "': " + bytes.status().message());
  }
  return bytes;
}

Status EtcdErrorStatus(const json& reply, int http_status, const HostPort& endpoint) {
  int code = -1;
  std::string message;
  if (reply.is_object()) {
    const json* detail = &reply;
    if (auto e = reply.find("error"); e != reply.end()) {
      if (e->is_object()) detail = &*e;  // streamed form: {"error":{"grpc_code","message"}}
      if (e->is_string()) message = e->get<std::string>();
    }
    for (const char* key : {"code", "grpc_code"}) {
      if (auto c = detail->find(key); c != detail->end() && c->is_number_integer()) {
        code = c->get<int>();
      }
    }
    if (auto m = detail->find("message"); m != detail->end() && m->is_string()) {
      message = m->get<std::string>();
    }
  }
  if (message.empty()) message = "HTTP " + std::to_string(http_status);
  std::string text = "etcd " + endpoint.ToString() + ": " + message;
  switch (code) {
    case kGrpcInvalidArgument:
    case kGrpcOutOfRange:
      return InvalidArgumentError(std::move(text));
    case kGrpcNotFound:
      return NotFoundError(std::move(text));
    case kGrpcAlreadyExists:
      return AlreadyExistsError(std::move(text));
    case kGrpcPermissionDenied:
    case kGrpcUnauthenticated:
      return PermissionDeniedError(std::move(text));
    case kGrpcResourceExhausted:
      // A message over gRPC's size limit can never succeed; "too many requests" can later.
      if (message.find("larger than max") != std::string::npos) {
        return InvalidArgumentError(std::move(text));
      }
      return AgainError(std::move(text));
    case kGrpcDeadlineExceeded:
    case kGrpcUnavailable:
      return UnavailableError(std::move(text));
    default:
      break;
  }
  if (http_status == 503 || http_status == 504) return UnavailableError(std::move(text));
  return InternalError(std::move(text));
}

// ---- kept-alive connections (etcd_client.h, Connections) ----

class EtcdConnectionPool {
 public:
  EtcdConnectionPool(HostPort endpoint, std::chrono::milliseconds timeout)
      : endpoint_(std::move(endpoint)), timeout_(timeout) {}

  // The process's pool for `endpoint` and `timeout`, made when none is alive.
  static std::shared_ptr<EtcdConnectionPool> For(const HostPort& endpoint,
                                                 std::chrono::milliseconds timeout) {
    static auto* pools = new ProcessShared<EtcdConnectionPool>();  // never destroyed
    return pools->Get(endpoint.ToString() + '\n' + std::to_string(timeout.count()),
                      [&] { return std::make_shared<EtcdConnectionPool>(endpoint, timeout); });
  }

  // An idle connection that still looks open (`*reused`), else a new one.
  std::unique_ptr<httplib::Client> Take(bool* reused) {
    for (;;) {
      std::unique_ptr<httplib::Client> cli;
      {
        MutexLock lock(mu_);
        if (idle_.empty()) break;
        cli = std::move(idle_.back());
        idle_.pop_back();
      }
      if (LooksOpen(*cli)) {
        *reused = true;
        return cli;
      }
    }
    *reused = false;
    return Open();
  }

  // Keeps `cli` for another call when its connection is open and fewer than
  // kEtcdIdleConnections are idle; closes it otherwise.
  void Give(std::unique_ptr<httplib::Client> cli) {
    if (!cli->is_socket_open()) return;
    MutexLock lock(mu_);
    if (idle_.size() < kEtcdIdleConnections) idle_.push_back(std::move(cli));
  }

  std::unique_ptr<httplib::Client> Open() const {
    auto cli = std::make_unique<httplib::Client>(endpoint_.host, endpoint_.port);
    cli->set_connection_timeout(timeout_);
    cli->set_read_timeout(timeout_);
    cli->set_write_timeout(timeout_);
    cli->set_keep_alive(true);
    // A request goes out in two writes (head, body): on a reused connection Nagle would hold the
    // body back until the server's delayed ACK of the head (40 ms).
    cli->set_tcp_nodelay(true);
    return cli;
  }

 private:
  // An idle kept-alive connection has nothing to read: readable (the server closed it, or sent
  // something unasked) or hung up means it cannot carry another request.
  static bool LooksOpen(const httplib::Client& cli) {
    if (!cli.is_socket_open()) return false;
    pollfd p{.fd = cli.socket(), .events = POLLIN | POLLRDHUP, .revents = 0};
    return ::poll(&p, 1, 0) == 0;
  }

  const HostPort endpoint_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_ GUARDED_BY(mu_);
};

namespace {

std::vector<std::shared_ptr<EtcdConnectionPool>> PoolsFor(const std::vector<HostPort>& endpoints,
                                                          std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<EtcdConnectionPool>> pools;
  for (const HostPort& e : endpoints) pools.push_back(EtcdConnectionPool::For(e, timeout));
  return pools;
}

}  // namespace

EtcdClient::EtcdClient(std::vector<HostPort> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout), pools_(PoolsFor(endpoints_, timeout_)) {}

EtcdClient::~EtcdClient() = default;

Result<json> EtcdClient::CallOne(size_t index, std::string_view path, const std::string& body,
                                 bool* try_next) {
  *try_next = false;
  const HostPort& endpoint = endpoints_[index];
  EtcdConnectionPool& pool = *pools_[index];
  const auto started = std::chrono::steady_clock::now();
  bool reused = false;
  std::unique_ptr<httplib::Client> cli = pool.Take(&reused);
  std::string reply;
  bool too_big = false;
  int status = 0;  // set once the status line and headers are in
  httplib::Error error = httplib::Error::Success;
  bool sent = false;
  for (;;) {
    httplib::Request req;
    req.method = "POST";
    req.path = std::string(path);
    req.body = body;
    req.headers.emplace("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (reply.size() + n > kMaxEtcdReplyBytes) {
        too_big = true;
        return false;
      }
      reply.append(data, n);
      return true;
    };
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    httplib::Response res;
    sent = cli->send(req, res, error);
    // A reused connection that failed before any reply (etcd closed it as the request went out)
    // gets one more try on a new connection; a new connection's failure stands.
    if (sent || !reused || status != 0 || !reply.empty()) break;
    cli = pool.Open();
    reused = false;
  }
  if (sent) pool.Give(std::move(cli));
  if (too_big) {
    return InternalError("etcd " + endpoint.ToString() + ": reply to " + std::string(path) +
                         " exceeds " + std::to_string(kMaxEtcdReplyBytes) + " bytes");
  }
  json parsed = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  // The gateway ends error replies with chunked trailers ("Grpc-Trailer-Content-Type"), which
  // cpp-httplib 0.11 reports as a read error after handing over the whole body. A body that
  // parses as one complete JSON object is the reply; anything short of that is a lost reply.
  const bool complete = sent || (error == httplib::Error::Read && status > 0 &&
                                 !parsed.is_discarded() && parsed.is_object());
  if (!complete) {
    *try_next = true;
    return UnavailableError(endpoint.ToString() + " " +
                            HttpRequestFailureText(error, endpoint,
                                                   std::chrono::steady_clock::now() - started,
                                                   timeout_));
  }
  if (parsed.is_discarded() || !parsed.is_object()) {
    Status s =
        status == 503 || status == 504
            ? UnavailableError("etcd " + endpoint.ToString() + ": HTTP " + std::to_string(status))
            : InternalError("etcd " + endpoint.ToString() + ": HTTP " + std::to_string(status) +
                            " with a reply that is not a " + "JSON object: '" + Snippet(reply) +
                            "'");
    *try_next = s.code() == StatusCode::kUnavailable;
    return s;
  }
  if (status != 200 || parsed.contains("error")) {
    Status s = EtcdErrorStatus(parsed, status, endpoint);
    *try_next = s.code() == StatusCode::kUnavailable;
    return s;
  }
  return parsed;
}

Result<json> EtcdClient::Call(std::string_view path, const json& body) {
  std::string text;
  try {
    text = body.dump();
  } catch (const std::exception& e) {
    return InternalError(std::string("etcd request does not encode: ") + e.what());
  }
  const size_t n = endpoints_.size();
  const size_t first = preferred();
  std::string failures;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (first + i) % n;
    bool try_next = false;
    Result<json> reply = InternalError("no reply");
    try {
      reply = CallOne(index, path, text, &try_next);
    } catch (const std::exception& e) {
      reply = InternalError("etcd " + endpoints_[index].ToString() + ": " + e.what());
    }
    if (reply.ok() || !try_next) {
      set_preferred(index);
      return reply;
    }
    if (!failures.empty()) failures += "; ";
    failures += reply.status().message();
  }
  return UnavailableError("etcd unreachable (" + std::string(path) + "): " + failures);
}

Result<EtcdClient::RangeReply> EtcdClient::Range(std::string_view key, std::string_view range_end) {
  json body = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) body["range_end"] = Base64Encode(range_end);
  ASSIGN_OR_RETURN(json reply, Call("/v3/kv/range", body));
  RangeReply out;
  ASSIGN_OR_RETURN(const json* header, ObjectField(reply, "header"));
  if (header != nullptr) {
    ASSIGN_OR_RETURN(out.revision, EtcdInt64Field(*header, "revision"));
  }
  if (auto kvs = reply.find("kvs"); kvs != reply.end() && !kvs->is_null()) {
    if (!kvs->is_array()) return InternalError("etcd reply: 'kvs' is not an array");
    out.kvs.reserve(kvs->size());
    for (const json& kv : *kvs) {
      ASSIGN_OR_RETURN(KeyValue decoded, DecodeKv(kv));
      out.kvs.push_back(std::move(decoded));
    }
  }
  std::sort(out.kvs.begin(), out.kvs.end(),
            [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
  return out;
}

Result<int64_t> EtcdClient::CurrentRevision(std::string_view key) {
  ASSIGN_OR_RETURN(json reply,
                   Call("/v3/kv/range", json{{"key", Base64Encode(key)}, {"count_only", true}}));
  ASSIGN_OR_RETURN(const json* header, ObjectField(reply, "header"));
  if (header == nullptr) return InternalError("etcd range replied without a header");
  ASSIGN_OR_RETURN(int64_t revision, EtcdInt64Field(*header, "revision"));
  if (revision <= 0) return InternalError("etcd range replied without a revision");
  return revision;
}

Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  json body = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  return Call("/v3/kv/put", body).status();
}

Status EtcdClient::Delete(std::string_view key) {
  return Call("/v3/kv/deleterange", json{{"key", Base64Encode(key)}}).status();
}

Result<EtcdClient::Lease> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  ASSIGN_OR_RETURN(json reply, Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds)}}));
  Lease lease;
  ASSIGN_OR_RETURN(lease.id, EtcdInt64Field(reply, "ID"));
  ASSIGN_OR_RETURN(lease.ttl_seconds, EtcdInt64Field(reply, "TTL"));
  if (lease.id == 0 || lease.ttl_seconds <= 0) {
    return InternalError("etcd lease grant replied without a lease ID and TTL");
  }
  return lease;
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  Result<json> reply = Call("/v3/lease/keepalive", json{{"ID", std::to_string(id)}});
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kNotFound) return int64_t{0};
    return reply.status();
  }
  ASSIGN_OR_RETURN(const json* result, ObjectField(*reply, "result"));
  if (result == nullptr) return InternalError("etcd lease keep-alive replied without a result");
  return EtcdInt64Field(*result, "TTL");
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  Status s = Call("/v3/lease/revoke", json{{"ID", std::to_string(id)}}).status();
  return s.code() == StatusCode::kNotFound ? Status::Ok() : s;
}

}  // namespace ferry
