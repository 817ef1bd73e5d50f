#include "metadata_server/http_handlers.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <regex>
#include <string_view>

#include "common/log.h"
#include "core/base64.h"
#include "metadata/http/http_conditional.h"
#include "metadata_server/kv_store.h"

namespace ferry::metadata_server {
namespace {

constexpr int64_t kMaxTtlSeconds = 86400;

void Answer(httplib::Response& res, int status, std::string body,
            const char* content_type = "text/plain") {
  res.status = status;
  res.set_content(std::move(body), content_type);
}

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool IsUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

// The "key" parameter, or empty after answering 400.
bool RequireKey(const httplib::Request& req, httplib::Response& res, std::string* key) {
  *key = req.get_param_value("key");
  if (key->empty()) {
    Answer(res, 400, "missing query parameter 'key'");
    return false;
  }
  return true;
}

// The optional "ttl" parameter in seconds (0 when absent), or false after answering 400.
bool ParseTtl(const httplib::Request& req, httplib::Response& res, std::chrono::seconds* ttl) {
  *ttl = std::chrono::seconds(0);
  if (!req.has_param("ttl")) return true;
  const std::string text = req.get_param_value("ttl");
  int64_t seconds = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || seconds < 1 ||
      seconds > kMaxTtlSeconds) {
    Answer(res, 400, "ttl must be a whole number of seconds in 1..86400, not '" + text + "'");
    return false;
  }
  *ttl = std::chrono::seconds(seconds);
  return true;
}

void AnswerStoreError(httplib::Response& res, const Status& s) {
  if (s.code() == StatusCode::kAlreadyExists) {
    return Answer(res, 412, std::string(kIfValueHeader) + " does not match: " + s.message());
  }
  if (s.code() == StatusCode::kNotFound) return Answer(res, 404, "metadata not found");
  Answer(res, s.code() == StatusCode::kAgain ? 507 : 500, s.message());
}

// The condition of a request carrying kIfValueHeader (null without one): the current value's
// tag must be the header's. `absent_ok`: an absent key passes too (PUT).
KvStore::Condition IfValueCondition(const httplib::Request& req, bool absent_ok) {
  if (!req.has_header(kIfValueHeader)) return nullptr;
  return [tag = req.get_header_value(kIfValueHeader), absent_ok](const std::string* current) {
    return current == nullptr ? absent_ok : HttpValueTag(*current) == tag;
  };
}

void HandleGet(KvStore& store, const httplib::Request& req, httplib::Response& res) {
  if (req.has_param("key")) {
    std::optional<std::string> value = store.Get(req.get_param_value("key"));
    if (!value.has_value()) return Answer(res, 404, "metadata not found");
    return Answer(res, 200, std::move(*value), "application/json");
  }
  if (!req.has_param("prefix"))
    return Answer(res, 400, "missing query parameter 'key' or 'prefix'");
  nlohmann::json keys = nlohmann::json::array();
  for (auto& [key, value] : store.List(req.get_param_value("prefix"))) {
    keys.push_back({{"key", std::move(key)}, {"value_b64", Base64Encode(value)}});
  }
  const nlohmann::json doc = {{"keys", std::move(keys)}};
  Answer(res, 200, doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
         "application/json");
}

// PUT with its body already read (by HandleBoundedPut): `body`.
void HandlePutBody(KvStore& store, const httplib::Request& req, std::string body,
                   httplib::Response& res) {
  std::string key;
  std::chrono::seconds ttl;
  if (!RequireKey(req, res, &key) || !ParseTtl(req, res, &ttl)) return;
  if (!IsUtf8(key)) return Answer(res, 400, "the key is not valid UTF-8");
  const Status s = store.Put(key, std::move(body), ttl, IfValueCondition(req, /*absent_ok=*/true));
  if (!s.ok()) return AnswerStoreError(res, s);
  Answer(res, 200, "metadata updated");
}

// PUT as the server runs it: the body streams through `read` into a string that never grows
// past `max_body`, however it is framed. cpp-httplib 0.11 applies its payload limit to a
// Content-Length body only (answering 413 after skipping it); a chunked body it would buffer
// whole. A refused body is not read to its end, so the connection closes after the answer.
void HandleBoundedPut(KvStore& store, size_t max_body, const httplib::Request& req,
                      httplib::Response& res, const httplib::ContentReader& read) {
  std::string body;
  bool over_limit = false;
  const bool complete = read([&](const char* data, size_t size) {
    if (size > max_body - body.size()) {
      over_limit = true;
      return false;
    }
    body.append(data, size);
    return true;
  });
  if (over_limit || res.status == 413) {  // 413: an announced Content-Length over the limit
    res.set_header("Connection", "close");
    return Answer(res, 413,
                  "the body exceeds the server's limit of " + std::to_string(max_body) +
                      " bytes (--max-body)");
  }
  if (!complete) {
    res.set_header("Connection", "close");
    return Answer(res, 400,
                  "the request body could not be read (bad chunked encoding, or the "
                  "client stopped sending)");
  }
  HandlePutBody(store, req, std::move(body), res);
}

void HandleDelete(KvStore& store, const httplib::Request& req, httplib::Response& res) {
  std::string key;
  if (!RequireKey(req, res, &key)) return;
  const Status s = store.Delete(key, IfValueCondition(req, /*absent_ok=*/false));
  if (!s.ok()) return AnswerStoreError(res, s);
  Answer(res, 200, "metadata deleted");
}

void HandleHealth(KvStore& store, httplib::Response& res) {
  const nlohmann::json doc = {{"status", "ok"}, {"keys", store.Size()}};
  Answer(res, 200, doc.dump(), "application/json");
}

// Wraps a handler so that no exception leaves it: an unexpected one is answered 500.
template <typename Fn>
httplib::Server::Handler Guarded(Fn fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const std::exception& e) {
      FERRY_LOG(kError) << req.method << " " << req.path << ": " << e.what();
      Answer(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      Answer(res, 500, "internal error");
    }
  };
}

// `path` as a regular expression matching only itself (httplib routes by regex).
std::string LiteralPattern(const std::string& path) {
  static const std::regex kSpecial(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(path, kSpecial, R"(\$&)");
}

// The route of `method` on the metadata path; null for a method it does not serve (PUT reads its
// body through HandleBoundedPut instead). InstallHandlers and HandleRequest both run these.
httplib::Server::Handler MetadataRoute(KvStore& store, std::string_view method) {
  if (method == "GET") {
    return Guarded([&store](const auto& req, auto& res) { HandleGet(store, req, res); });
  }
  if (method == "DELETE") {
    return Guarded([&store](const auto& req, auto& res) { HandleDelete(store, req, res); });
  }
  return nullptr;
}

// GET /health.
httplib::Server::Handler HealthRoute(KvStore& store) {
  return Guarded([&store](const auto&, auto& res) { HandleHealth(store, res); });
}

}  // namespace

void InstallHandlers(httplib::Server& server, KvStore& store, const std::string& path,
                     size_t max_body) {
  // Tells clients that PUT ...&ttl= is honoured (Mooncake's server has no TTLs): ferry's http
  // store refreshes leased keys only against a server that sends this.
  // X-Ferry-Metadata-Conditional: PUT and DELETE honour X-Ferry-If-Value (http_conditional.h).
  server.set_default_headers({{"X-Ferry-Metadata-Ttl", "1"}, {kConditionalHeader, "1"}});
  // cpp-httplib writes a response's header and body with separate send()s. With Nagle on, the
  // body of a small answer waits for the ACK of the header, which a client on a kept-alive
  // connection delays by up to 40 ms (Linux delayed ACK): every request after the first on a
  // connection took ~40 ms instead of well under 1 ms.
  server.set_tcp_nodelay(true);
  const std::string pattern = LiteralPattern(path);
  server.Get(pattern, MetadataRoute(store, "GET"));
  // PUT reads its body itself, bounded by max_body; the server's own limit covers the other
  // methods (and answers an announced Content-Length over it).
  server.set_payload_max_length(max_body);
  server.Put(pattern, [&store, max_body](const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& read) {
    Guarded([&store, max_body, &read](const httplib::Request& r, httplib::Response& out) {
      HandleBoundedPut(store, max_body, r, out, read);
    })(req, res);
  });
  server.Delete(pattern, MetadataRoute(store, "DELETE"));
  server.Get("/health", HealthRoute(store));
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    FERRY_LOG(kDebug) << req.remote_addr << " " << req.method << " " << req.target << " -> "
                      << res.status << " (" << req.body.size() << " bytes in, " << res.body.size()
                      << " out)";
  });
}

bool HandleRequest(KvStore& store, const std::string& path, size_t max_body,
                   const httplib::Request& req, httplib::Response& res) {
  // InstallHandlers' order: the metadata path first (it may be "/health" itself).
  if (req.path == path && req.method == "PUT") {
    // The body arrives in pieces, as from a socket, through the server's bounded reader.
    const httplib::ContentReader read(
        [&req](const httplib::ContentReceiver& receive) {
          constexpr size_t kPiece = 4096;
          for (size_t at = 0; at < req.body.size(); at += kPiece) {
            if (!receive(req.body.data() + at, std::min(kPiece, req.body.size() - at))) {
              return false;
            }
          }
          return true;
        },
        [](const httplib::MultipartContentHeader&, const httplib::ContentReceiver&) {
          return false;
        });
    Guarded([&store, max_body, &read](const httplib::Request& r, httplib::Response& out) {
      HandleBoundedPut(store, max_body, r, out, read);
    })(req, res);
    return true;
  }
  httplib::Server::Handler route;
  if (req.path == path) route = MetadataRoute(store, req.method);
  if (!route && req.path == "/health" && req.method == "GET") route = HealthRoute(store);
  if (!route) return false;
  route(req, res);
  return true;
}

}  // namespace ferry::metadata_server
