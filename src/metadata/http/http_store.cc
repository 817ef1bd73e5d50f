#include "metadata/http/http_store.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/log.h"
#include "common/mutex.h"
#include "core/base64.h"
#include "metadata/http/http_conditional.h"
#include "metadata/httplib_error_text.h"
#include "metadata/lease_keeper.h"

namespace ferry {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kMaxTtlSeconds = 86400;  // ferry-metadata-server's limit
constexpr std::string_view kProbeKey = "ferry/.probe";

// RFC 3986 percent-encoding of everything but the unreserved characters.
std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

// Keeps a write to a socket the server closed from raising SIGPIPE in this process: blocks it
// in the calling thread for the scope and consumes one it caused. A library installs no handler
// (STYLE.md 3), and cpp-httplib does not send with MSG_NOSIGNAL.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &previous_) == 0;
  }
  ~ScopedSigpipeBlock() {
    if (!blocked_) return;
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

// Leased keys are re-PUT three times per TTL, so one lost refresh does not lose the key.
milliseconds RefreshInterval(milliseconds lease_ttl) {
  const milliseconds ttl = std::min<milliseconds>(lease_ttl, std::chrono::seconds(kMaxTtlSeconds));
  return std::max(ttl / 3, milliseconds(10));
}

struct Reply {
  int status = 0;
  std::string body;
  bool server_has_ttls = false;         // it sent X-Ferry-Metadata-Ttl
  bool server_is_conditional = false;   // it sent X-Ferry-Metadata-Conditional
  bool success() const { return status >= 200 && status < 300; }
};

// Decodes ferry-metadata-server's listing {"keys":[{"key":K,"value_b64":B64},...]}, keeping the
// keys under `prefix`, sorted. Errors: InvalidArgument saying what is malformed.
Result<std::vector<KeyValue>> ParseListing(const std::string& body, std::string_view prefix) {
  try {
    const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("keys") ||
        !doc["keys"].is_array()) {
      return InvalidArgumentError("the reply is not a {\"keys\":[...]} listing");
    }
    std::vector<KeyValue> out;
    for (const nlohmann::json& item : doc["keys"]) {
      const auto key = item.is_object() ? item.find("key") : item.end();
      const auto value = item.is_object() ? item.find("value_b64") : item.end();
      if (!item.is_object() || key == item.end() || !key->is_string() || value == item.end() ||
          !value->is_string()) {
        return InvalidArgumentError("a listing entry lacks a string \"key\" or \"value_b64\"");
      }
      Result<std::string> bytes = Base64Decode(value->get<std::string>());
      if (!bytes.ok()) return InvalidArgumentError("value_b64: " + bytes.status().message());
      std::string name = key->get<std::string>();
      if (std::string_view(name).substr(0, prefix.size()) != prefix) continue;
      out.push_back({std::move(name), std::move(*bytes)});
    }
    std::sort(out.begin(), out.end(),
              [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
    return out;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("the listing is malformed: ") + e.what());
  }
}

// Thread contract: thread-safe (MetadataStore). Requests run on the caller's thread; the
// LeaseKeeper's thread re-PUTs leased keys. write_mu_ serializes writes with lease refreshes.
class HttpStore final : public MetadataStore {
 public:
  HttpStore(HostPort server, std::string path, const StoreOptions& options,
            const HttpStoreOptions& http_options, int64_t ttl_seconds)
      : server_(std::move(server)),
        path_(std::move(path)),
        where_("http metadata server " + server_.ToString() + path_),
        timeout_(options.request_timeout),
        max_body_bytes_(http_options.max_body_bytes),
        ttl_seconds_(ttl_seconds),
        keeper_(
            RefreshInterval(options.lease_ttl),
            [this](const std::vector<KeyValue>&) { return RefreshLeases(); }, where_) {}

  ~HttpStore() override;
  HttpStore(const HttpStore&) = delete;
  HttpStore& operator=(const HttpStore&) = delete;

  std::string_view scheme() const override { return "http"; }
  using MetadataStore::Put;
  Result<std::string> Get(std::string_view key) override;
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override;
  Status Delete(std::string_view key) override;
  Status DeleteIf(std::string_view key, std::string_view expected) override;
  Result<std::vector<KeyValue>> List(std::string_view prefix) override;
  Watcher* watcher() override { return nullptr; }
  bool TakenOver(std::string_view key) const override { return keeper_.WasTakenOver(key); }
  void Abandon() override;

  // One GET, to learn at creation whether the server answers. Starts the lease keeper.
  Status Start();

 private:
  enum class Method { kGet, kPut, kDelete };

  // One request on a fresh connection, each phase bounded by `timeout`; the reply's body is read
  // up to max_body_bytes_. `what` names the request in errors ("GET 'key'").
  // Errors: Unavailable when no HTTP answer came; InvalidArgument when the body exceeds
  // max_body_bytes_; Internal on an unexpected exception.
  // `if_value_tag`, when not empty, goes in kIfValueHeader (a conditional request).
  Result<Reply> Send(Method method, const std::string& target, std::string_view body,
                     milliseconds timeout, std::string_view what,
                     std::string_view if_value_tag = {}) const;
  std::string KeyTarget(std::string_view key) const { return path_ + "?key=" + PercentEncode(key); }
  // The error for a non-success `reply` to `what`: 5xx Unavailable, else InvalidArgument.
  Status ReplyError(const Reply& reply, std::string_view what) const;
  // `replaces` set: only while the key is absent or holds *replaces (kAlreadyExists otherwise):
  // a conditional PUT on a server that announced kConditionalHeader, else GET, compare, PUT.
  Status PutOnce(std::string_view key, std::string_view value, bool leased,
                 const std::optional<std::string>& replaces = std::nullopt) const;
  // DELETE only while the key holds `expected`, as for PutOnce; kNotFound when it is absent.
  Status DeleteIfOnce(std::string_view key, std::string_view expected,
                      milliseconds timeout) const;
  // LeaseKeeper's refresh: re-PUTs every owned key with its TTL, under write_mu_ key by key.
  Status RefreshLeases();

  const HostPort server_;
  const std::string path_;
  const std::string where_;  // for messages: "http metadata server h:p/path"
  const milliseconds timeout_;
  const size_t max_body_bytes_;
  const int64_t ttl_seconds_;                  // the ttl= of leased PUTs
  // Learned by Start (before the keeper runs): the server honours ttl= (ferry-metadata-server).
  bool server_has_ttls_ = false;
  // Learned by Start: the server honours kIfValueHeader (ferry-metadata-server).
  bool server_is_conditional_ = false;
  Mutex write_mu_;                             // serializes Put, Delete and each lease refresh PUT
  uint64_t writes_ GUARDED_BY(write_mu_) = 0;  // Puts and Deletes so far
  std::atomic<bool> abandoned_{false};
  LeaseKeeper keeper_;  // last: its thread uses the members above; stopped first
};

HttpStore::~HttpStore() {
  keeper_.Stop();
  if (abandoned_) return;
  const std::vector<KeyValue> owned = keeper_.TakeAll();
  const auto deadline = SteadyClock::now() + timeout_;
  size_t left = 0;
  for (const KeyValue& kv : owned) {
    const auto remaining = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
    if (remaining <= milliseconds(0)) {
      ++left;
      continue;
    }
    // Only keys still holding our values: a key another engine took over stays its.
    const Status s = DeleteIfOnce(kv.key, kv.value, remaining);
    if (!s.ok() && s.code() != StatusCode::kNotFound && s.code() != StatusCode::kAlreadyExists) {
      ++left;
    }
  }
  if (left > 0) {
    FERRY_LOG(kWarn) << where_ << ": " << left << " of " << owned.size()
                     << " leased keys could not be deleted at shutdown; they expire within "
                     << ttl_seconds_ << " s";
  }
}

Status HttpStore::Start() {
  ASSIGN_OR_RETURN(Reply reply, Send(Method::kGet, KeyTarget(kProbeKey), {}, timeout_,
                                     "GET '" + std::string(kProbeKey) + "' (connection check)"));
  if (reply.status >= 500) return ReplyError(reply, "GET (connection check)");
  server_has_ttls_ = reply.server_has_ttls;
  server_is_conditional_ = reply.server_is_conditional;
  if (!server_is_conditional_) {
    FERRY_LOG(kInfo) << where_ << " has no conditional requests (not ferry-metadata-server): "
                     << "keys are compared with a GET before they are replaced or deleted, which "
                     << "another writer may race";
  }
  if (!server_has_ttls_) {
    FERRY_LOG(kInfo) << where_ << " has no TTLs (not ferry-metadata-server): leased keys are "
                     << "written once, never refreshed, and deleted at clean shutdown only";
  }
  keeper_.Start();
  return Status::Ok();
}

Result<Reply> HttpStore::Send(Method method, const std::string& target, std::string_view body,
                              milliseconds timeout, std::string_view what,
                              std::string_view if_value_tag) const {
  static constexpr const char* kNames[] = {"GET", "PUT", "DELETE"};
  const char* name = kNames[static_cast<int>(method)];
  try {
    ScopedSigpipeBlock no_sigpipe;
    const auto started = SteadyClock::now();
    httplib::Client client(server_.host, server_.port);
    client.set_connection_timeout(timeout);
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
    client.set_keep_alive(false);
    // cpp-httplib sends a request's header and body with separate writes: with Nagle on, the
    // body's last partial segment waited for the server's (delayed) ACK, up to 40 ms a PUT.
    client.set_tcp_nodelay(true);
    client.set_url_encode(false);  // `target` is already encoded
    httplib::Request request;
    request.method = name;
    request.path = target;
    if (method == Method::kPut) {
      request.body.assign(body.data(), body.size());
      request.set_header("Content-Type", "application/json");
    }
    if (!if_value_tag.empty()) request.set_header(kIfValueHeader, std::string(if_value_tag));
    // The body streams into `received`, never past the cap: an announced length over it stops
    // the request at the headers, a chunked body at the first chunk that crosses it.
    std::string received;
    bool over_cap = false;
    bool has_ttls = false;
    bool conditional = false;
    request.response_handler = [&](const httplib::Response& response) {
      has_ttls = response.has_header("X-Ferry-Metadata-Ttl");
      conditional = response.has_header(kConditionalHeader);
      if (!response.has_header("Content-Length")) return true;
      const std::string announced = response.get_header_value("Content-Length");
      char* end = nullptr;
      errno = 0;
      const unsigned long long length = std::strtoull(announced.c_str(), &end, 10);
      if (errno == 0 && end != announced.c_str() && *end == '\0' && length <= max_body_bytes_) {
        return true;
      }
      over_cap = true;  // over the cap, or a length that is not a number
      return false;
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (size > max_body_bytes_ - received.size()) {
        over_cap = true;
        return false;
      }
      received.append(data, size);
      return true;
    };
    httplib::Result result = client.send(request);
    if (over_cap) {
      return InvalidArgumentError(where_ + ": the reply to " + std::string(what) +
                                  " has a body over max_body_bytes (" +
                                  std::to_string(max_body_bytes_) + " bytes); not read");
    }
    if (!result) {
      return UnavailableError(
          where_ + ": " + name + " failed: " +
          HttpRequestFailureText(result.error(), server_, SteadyClock::now() - started, timeout));
    }
    return Reply{result->status, std::move(received), has_ttls, conditional};
  } catch (const std::exception& e) {
    return InternalError(where_ + ": " + name + ": " + e.what());
  }
}

Status HttpStore::ReplyError(const Reply& reply, std::string_view what) const {
  std::string text =
      where_ + ": " + std::string(what) + " answered HTTP " + std::to_string(reply.status);
  if (!reply.body.empty()) text += ": " + reply.body.substr(0, 256);
  if (reply.status >= 500) return UnavailableError(std::move(text));
  return InvalidArgumentError(std::move(text));
}

Result<std::string> HttpStore::Get(std::string_view key) {
  ASSIGN_OR_RETURN(Reply reply, Send(Method::kGet, KeyTarget(key), {}, timeout_,
                                     "GET '" + std::string(key) + "'"));
  if (reply.status == 200) return std::move(reply.body);
  if (reply.status == 404) return NotFoundError("key '" + std::string(key) + "' not at " + where_);
  return ReplyError(reply, "GET '" + std::string(key) + "'");
}

Status HttpStore::PutOnce(std::string_view key, std::string_view value, bool leased,
                         const std::optional<std::string>& replaces) const {
  const std::string what = "PUT '" + std::string(key) + "'";
  auto held = [&] {
    return AlreadyExistsError(where_ + ": key '" + std::string(key) +
                              "' holds another writer's value; not replaced");
  };
  std::string tag;
  if (replaces.has_value() && server_is_conditional_) {
    tag = HttpValueTag(*replaces);
  } else if (replaces.has_value()) {
    // No conditional requests here (Mooncake's server): compare with a GET first. Another
    // writer's PUT between the GET and ours is not detected.
    ASSIGN_OR_RETURN(Reply current, Send(Method::kGet, KeyTarget(key), {}, timeout_,
                                         "GET '" + std::string(key) + "'"));
    if (current.status == 200 && current.body != *replaces) return held();
    if (current.status != 200 && current.status != 404) {
      return ReplyError(current, "GET '" + std::string(key) + "'");
    }
  }
  std::string target = KeyTarget(key);
  if (leased && server_has_ttls_) target += "&ttl=" + std::to_string(ttl_seconds_);
  ASSIGN_OR_RETURN(Reply reply, Send(Method::kPut, target, value, timeout_, what, tag));
  if (reply.success()) return Status::Ok();
  if (reply.status == 412 && !tag.empty()) return held();
  return ReplyError(reply, what);
}

Status HttpStore::DeleteIfOnce(std::string_view key, std::string_view expected,
                               milliseconds timeout) const {
  const std::string what = "DELETE '" + std::string(key) + "'";
  auto absent = [&] { return NotFoundError("key '" + std::string(key) + "' not at " + where_); };
  auto held = [&] {
    return AlreadyExistsError(where_ + ": key '" + std::string(key) +
                              "' holds another writer's value; not deleted");
  };
  std::string tag;
  if (server_is_conditional_) {
    tag = HttpValueTag(expected);
  } else {
    // As in PutOnce: GET, compare, DELETE; a PUT in between is not detected.
    ASSIGN_OR_RETURN(Reply current, Send(Method::kGet, KeyTarget(key), {}, timeout,
                                         "GET '" + std::string(key) + "'"));
    if (current.status == 404) return absent();
    if (current.status != 200) return ReplyError(current, "GET '" + std::string(key) + "'");
    if (current.body != expected) return held();
  }
  ASSIGN_OR_RETURN(Reply reply, Send(Method::kDelete, KeyTarget(key), {}, timeout, what, tag));
  if (reply.success()) return Status::Ok();
  if (reply.status == 404) return absent();
  if (reply.status == 412 && !tag.empty()) return held();
  return ReplyError(reply, what);
}

Status HttpStore::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  MutexLock lock(write_mu_);
  ++writes_;
  RETURN_IF_ERROR(PutOnce(key, value, options.leased, options.replaces));
  if (options.leased && !abandoned_) {
    keeper_.Track(key, value);
  } else {
    keeper_.Forget(key);
  }
  return Status::Ok();
}

Status HttpStore::Delete(std::string_view key) {
  MutexLock lock(write_mu_);
  ++writes_;
  keeper_.Forget(key);  // even if the DELETE fails: the key then expires with its TTL
  ASSIGN_OR_RETURN(Reply reply, Send(Method::kDelete, KeyTarget(key), {}, timeout_,
                                     "DELETE '" + std::string(key) + "'"));
  if (reply.success() || reply.status == 404) return Status::Ok();
  return ReplyError(reply, "DELETE '" + std::string(key) + "'");
}

Status HttpStore::DeleteIf(std::string_view key, std::string_view expected) {
  MutexLock lock(write_mu_);
  ++writes_;
  keeper_.Forget(key);
  return DeleteIfOnce(key, expected, timeout_);
}

Result<std::vector<KeyValue>> HttpStore::List(std::string_view prefix) {
  const std::string target = path_ + "?prefix=" + PercentEncode(prefix);
  ASSIGN_OR_RETURN(Reply reply, Send(Method::kGet, target, {}, timeout_,
                                     "GET ?prefix='" + std::string(prefix) + "'"));
  if (reply.status >= 500) return ReplyError(reply, "GET ?prefix=");
  const std::string unsupported = where_ +
                                  " does not support prefix listing (GET ?prefix=; "
                                  "ferry-metadata-server does, Mooncake's server does not): ";
  if (reply.status != 200) {
    return InvalidArgumentError(unsupported + "HTTP " + std::to_string(reply.status));
  }
  Result<std::vector<KeyValue>> listing = ParseListing(reply.body, prefix);
  if (!listing.ok()) return InvalidArgumentError(unsupported + listing.status().message());
  return listing;
}

void HttpStore::Abandon() {
  abandoned_ = true;
  keeper_.Stop();
  (void)keeper_.TakeAll();
}

Status HttpStore::RefreshLeases() {
  // A server without TTLs keeps keys until they are deleted, and Mooncake's refuses a second
  // PUT of an rpc_meta key: nothing to refresh there.
  if (!server_has_ttls_) return Status::Ok();
  const std::vector<KeyValue> round = keeper_.Owned();
  std::map<std::string, std::string, std::less<>> latest;  // owned keys as of `latest_at`
  std::optional<uint64_t> latest_at;
  for (const KeyValue& kv : round) {
    MutexLock lock(write_mu_);
    if (latest_at != writes_) {  // a Put or Delete ran: look at the current values
      latest.clear();
      for (KeyValue& owned : keeper_.Owned())
        latest.emplace(std::move(owned.key), std::move(owned.value));
      latest_at = writes_;
    }
    const auto it = latest.find(kv.key);
    if (it == latest.end()) continue;  // deleted or no longer leased since the round began
    // Only while the key still holds our value (or is gone: a restart lost it); a key another
    // engine took over is given up.
    Status s = PutOnce(it->first, it->second, /*leased=*/true, it->second);
    if (s.code() == StatusCode::kAlreadyExists) {
      keeper_.TakenOver(it->first, it->second, where_);
      latest.erase(it);
      continue;
    }
    // Stop at the first failure: the server is likely down, and the next round retries.
    RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MetadataStore>> CreateHttpStore(const HostPort& server,
                                                       const std::string& path,
                                                       const StoreOptions& options,
                                                       const HttpStoreOptions& http_options) {
  if (path.empty() || path.front() != '/' || path.find_first_of("?# ") != std::string::npos) {
    return InvalidArgumentError("http metadata path '" + path +
                                "' must start with '/' and hold no '?', '#' or space");
  }
  if (options.request_timeout <= milliseconds(0) || options.lease_ttl <= milliseconds(0)) {
    return InvalidArgumentError("http metadata store: request_timeout and lease_ttl must be > 0");
  }
  if (http_options.max_body_bytes == 0) {
    return InvalidArgumentError("http metadata store: max_body_bytes must be > 0");
  }
  const int64_t ttl_seconds =
      std::clamp<int64_t>((options.lease_ttl.count() + 999) / 1000, 1, kMaxTtlSeconds);
  auto store = std::make_unique<HttpStore>(server, path, options, http_options, ttl_seconds);
  RETURN_IF_ERROR(store->Start());
  return std::unique_ptr<MetadataStore>(std::move(store));
}

}  // namespace ferry
