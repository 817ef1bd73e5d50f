#include "metadata_server/http_handlers.h"

#include <httplib.h>

#include <charconv>
#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <regex>
#include <string_view>

#include "common/log.h"
#include "core/base64.h"
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
  Answer(res, s.code() == StatusCode::kAgain ? 507 : 500, s.message());
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

void HandlePut(KvStore& store, const httplib::Request& req, httplib::Response& res) {
  std::string key;
  std::chrono::seconds ttl;
  if (!RequireKey(req, res, &key) || !ParseTtl(req, res, &ttl)) return;
  if (!IsUtf8(key)) return Answer(res, 400, "the key is not valid UTF-8");
  const Status s = store.Put(key, req.body, ttl);
  if (!s.ok()) return AnswerStoreError(res, s);
  Answer(res, 200, "metadata updated");
}

void HandleDelete(KvStore& store, const httplib::Request& req, httplib::Response& res) {
  std::string key;
  if (!RequireKey(req, res, &key)) return;
  const Status s = store.Delete(key);
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

}  // namespace

void InstallHandlers(httplib::Server& server, KvStore& store, const std::string& path) {
  // Tells clients that PUT ...&ttl= is honoured (Mooncake's server has no TTLs): ferry's http
  // store refreshes leased keys only against a server that sends this.
  server.set_default_headers({{"X-Ferry-Metadata-Ttl", "1"}});
  const std::string pattern = LiteralPattern(path);
  server.Get(pattern,
             Guarded([&store](const auto& req, auto& res) { HandleGet(store, req, res); }));
  server.Put(pattern,
             Guarded([&store](const auto& req, auto& res) { HandlePut(store, req, res); }));
  server.Delete(pattern,
                Guarded([&store](const auto& req, auto& res) { HandleDelete(store, req, res); }));
  server.Get("/health", Guarded([&store](const auto&, auto& res) { HandleHealth(store, res); }));
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    FERRY_LOG(kDebug) << req.remote_addr << " " << req.method << " " << req.target << " -> "
                      << res.status << " (" << req.body.size() << " bytes in, " << res.body.size()
                      << " out)";
  });
}

}  // namespace ferry::metadata_server
