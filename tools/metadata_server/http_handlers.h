// The HTTP face of the metadata server: Mooncake's metadata API plus ferry's additions.
//
//   GET    <path>?key=K          200 stored bytes (Content-Type application/json) | 404
//   PUT    <path>?key=K[&ttl=S]  200 | 400 (no key, key not UTF-8, ttl not 1..86400, unreadable
//                                body) | 413 (body over --max-body) | 507 (--max-keys reached)
//                                | 500 (the data file could not be written; nothing changed)
//   DELETE <path>?key=K          200, also when absent | 500 as for PUT
//   GET    <path>?prefix=P       200 {"keys":[{"key":K,"value_b64":base64(V)},...]}, sorted by key.
//                                Values are arbitrary bytes, so they travel as base64 (RFC 4648,
//                                standard alphabet, padded) in "value_b64", never as "value".
//   GET    /health               200 {"status":"ok","keys":<live keys>}
//
// Thread contract: the handlers run on the server's worker threads concurrently; they share
// only the thread-safe KvStore.
#pragma once

#include <string>

namespace httplib {
class Server;
}

namespace ferry::metadata_server {

class KvStore;

// Registers the routes above and a debug-level request logger on `server`. `store` is borrowed
// and must outlive the server's listening. `path` is the resource path ("/metadata").
void InstallHandlers(httplib::Server& server, KvStore& store, const std::string& path);

}  // namespace ferry::metadata_server
