// Fuzzes the metadata server's HTTP handlers (tools/metadata_server/http_handlers.h) in-process:
// requests go through HandleRequest, the routes the server installs, with no socket, against a
// fresh in-memory KvStore per input (at most kMaxKeys keys and kMaxBody bytes of body, so the 507
// and 413 paths are reached).
//
// Input: up to kMaxRequests requests, separated by lines "%%". Each request is text shaped like
// HTTP: a line "<METHOD> <target>" (target: path, then optionally '?' and a query, decoded the
// way httplib decodes it), header lines "Name: value", an empty line, then the body. Seeds:
// fuzz/corpus/metadata_http/.
//
// Contracts checked, beyond "no crash, no UB, no leak": every answer is one of the documented
// statuses and never 500 (a memory store cannot fail to write); a body over the limit is never
// stored; a model map follows every PUT and
// DELETE the server accepted, and every GET (by key, by prefix, /health) must agree with it;
// 507 comes only when the store is full; the store's contents encode as a data file and decode
// back unchanged.
#include <httplib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "core/base64.h"
#include "fuzz_check.h"
#include "metadata_server/data_file.h"
#include "metadata_server/http_handlers.h"
#include "metadata_server/kv_store.h"

namespace ferry::metadata_server {
namespace {

constexpr size_t kMaxRequests = 16;
constexpr size_t kMaxKeys = 4;
constexpr size_t kMaxBody = 64;  // small, so that 413 is reached
const std::string kPath = "/metadata";

// What the server accepted: key -> value, and the keys stored with a TTL (at least 1 s, so they
// do not expire within one input, but a stalled run must not turn that into a false alarm).
struct Model {
  std::map<std::string, std::string> values;
  std::set<std::string> may_expire;
};

httplib::Request ParseRequest(std::string_view block) {
  httplib::Request req;
  const size_t line_end = std::min(block.find('\n'), block.size());
  const std::string_view line = block.substr(0, line_end);
  const size_t space = line.find(' ');
  req.method = std::string(line.substr(0, space));
  const std::string_view target =
      space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  req.target = std::string(target);
  const size_t question = target.find('?');
  req.path = httplib::detail::decode_url(std::string(target.substr(0, question)), false);
  if (question != std::string_view::npos) {
    httplib::detail::parse_query_text(std::string(target.substr(question + 1)), req.params);
  }
  std::string_view rest = line_end < block.size() ? block.substr(line_end + 1) : "";
  while (!rest.empty()) {
    const size_t end = std::min(rest.find('\n'), rest.size());
    const std::string_view header = rest.substr(0, end);
    rest = end < rest.size() ? rest.substr(end + 1) : "";
    if (header.empty()) break;
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = header.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    req.headers.emplace(std::string(header.substr(0, colon)), std::string(value));
  }
  req.body = std::string(rest);
  return req;
}

void CheckGetKey(const Model& model, const std::string& key, const httplib::Response& res) {
  const auto it = model.values.find(key);
  if (it == model.values.end()) {
    FUZZ_CHECK(res.status == 404, "GET of an absent key: " + std::to_string(res.status));
    return;
  }
  if (res.status == 404 && model.may_expire.count(key) != 0) return;
  FUZZ_CHECK(res.status == 200, "GET of a stored key: " + std::to_string(res.status));
  FUZZ_CHECK(res.body == it->second, "GET returned other bytes than the PUT stored");
}

void CheckList(const Model& model, const std::string& prefix, const httplib::Response& res) {
  FUZZ_CHECK(res.status == 200, "prefix listing: " + std::to_string(res.status));
  const nlohmann::json doc = nlohmann::json::parse(res.body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(doc.is_object() && doc.contains("keys") && doc["keys"].is_array(),
             "listing is not {\"keys\":[...]}: " + res.body);
  std::map<std::string, std::string> listed;
  std::string previous;
  for (const nlohmann::json& entry : doc["keys"]) {
    FUZZ_CHECK(entry.is_object() && entry.contains("key") && entry["key"].is_string() &&
                   entry.contains("value_b64") && entry["value_b64"].is_string(),
               "malformed listing entry: " + entry.dump());
    const std::string key = entry["key"].get<std::string>();
    FUZZ_CHECK(listed.empty() || previous < key, "listing not sorted by key");
    Result<std::string> value = Base64Decode(entry["value_b64"].get<std::string>());
    FUZZ_CHECK(value.ok(), value.status().ToString());
    listed.emplace(key, *value);
    previous = key;
  }
  for (const auto& [key, value] : model.values) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const auto it = listed.find(key);
    if (it == listed.end()) {
      FUZZ_CHECK(model.may_expire.count(key) != 0, "a stored key is missing from the listing");
      continue;
    }
    FUZZ_CHECK(it->second == value, "listing holds other bytes than the PUT stored");
    listed.erase(it);
  }
  FUZZ_CHECK(listed.empty(), "listing holds a key that was never stored or was deleted");
}

// Runs one request and checks the answer against (and updates) the model.
void RunRequest(KvStore& store, Model& model, const httplib::Request& req) {
  httplib::Response res;
  const bool routed = HandleRequest(store, kPath, kMaxBody, req, res);
  const bool on_path = req.path == kPath &&
                       (req.method == "GET" || req.method == "PUT" || req.method == "DELETE");
  const bool health = req.path == "/health" && req.method == "GET";
  FUZZ_CHECK(routed == (on_path || health), "routed " + req.method + " " + req.path);
  if (!routed) return;
  FUZZ_CHECK(res.status != 500, "500: " + res.body);
  if (!on_path) {
    const nlohmann::json doc = nlohmann::json::parse(res.body, nullptr, false);
    FUZZ_CHECK(res.status == 200 && doc.is_object() && doc.value("status", "") == "ok",
               "health: " + res.body);
    const size_t keys = doc.value("keys", size_t{0});
    FUZZ_CHECK(keys <= model.values.size() && keys + model.may_expire.size() >= model.values.size(),
               "health counts " + std::to_string(keys) + " keys");
    return;
  }
  const std::string key = req.get_param_value("key");
  if (req.method == "GET") {
    if (req.has_param("key")) return CheckGetKey(model, key, res);
    if (req.has_param("prefix")) return CheckList(model, req.get_param_value("prefix"), res);
    FUZZ_CHECK(res.status == 400, "GET without key or prefix: " + std::to_string(res.status));
    return;
  }
  if (key.empty()) {
    // A PUT reads its body first: one over the limit is refused for that.
    const bool too_big = req.method == "PUT" && req.body.size() > kMaxBody;
    FUZZ_CHECK(res.status == (too_big ? 413 : 400),
               req.method + " without a key: " + std::to_string(res.status));
    return;
  }
  if (req.method == "DELETE") {
    FUZZ_CHECK(res.status == 200, "DELETE: " + std::to_string(res.status));
    model.values.erase(key);
    model.may_expire.erase(key);
    return;
  }
  // PUT
  FUZZ_CHECK(req.body.size() <= kMaxBody || res.status == 413 || res.status == 400,
             "a body over the limit was answered " + std::to_string(res.status));
  switch (res.status) {
    case 200:
      model.values[key] = req.body;
      if (req.has_param("ttl")) {
        model.may_expire.insert(key);
      } else {
        model.may_expire.erase(key);
      }
      break;
    case 400:
      break;
    case 413:
      FUZZ_CHECK(req.body.size() > kMaxBody, "413 for a body within the limit");
      break;
    case 507:
      FUZZ_CHECK(model.values.count(key) == 0 && model.values.size() >= kMaxKeys,
                 "507 while the store has room for the key");
      break;
    default:
      FUZZ_CHECK(false, "PUT answered " + std::to_string(res.status) + ": " + res.body);
  }
  if (res.status == 200 && model.values.size() > kMaxKeys) {
    FUZZ_CHECK(!model.may_expire.empty(), "the store took more than --max-keys keys");
  }
}

// The store's contents survive the data file's encoding.
void CheckDataFile(const KvStore& store) {
  EntryMap entries;
  for (auto& [key, value] : store.List("")) entries.emplace(key, Entry{value, 0});
  Result<std::string> text = EncodeDataFile(entries);
  FUZZ_CHECK(text.ok(), "a stored key does not encode: " + text.status().ToString());
  Result<EntryMap> decoded = DecodeDataFile(*text);
  FUZZ_CHECK(decoded.ok(), decoded.status().ToString());
  FUZZ_CHECK(decoded->size() == entries.size(), "data file lost keys");
  for (const auto& [key, entry] : entries) {
    const auto it = decoded->find(key);
    FUZZ_CHECK(it != decoded->end() && it->second.value == entry.value &&
                   it->second.expires_unix_ms == entry.expires_unix_ms,
               "data file changed key " + key);
  }
}

}  // namespace
}  // namespace ferry::metadata_server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::metadata_server;
  ferry::Result<std::unique_ptr<KvStore>> store = KvStore::Open({.data_path = "", .max_keys = kMaxKeys});
  FUZZ_CHECK(store.ok(), store.status().ToString());
  Model model;
  std::string_view input = ferry::fuzz::AsText(data, size);
  for (size_t i = 0; i < kMaxRequests && !input.empty(); ++i) {
    const size_t end = input.find("\n%%\n");
    RunRequest(**store, model, ParseRequest(input.substr(0, end)));
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 4);
  }
  CheckDataFile(**store);
  return 0;
}
