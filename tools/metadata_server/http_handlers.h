// The HTTP face of the metadata server: Mooncake's metadata API plus ferry's additions.
//
//   GET    <path>?key=K          200 stored bytes (Content-Type application/json) | 404
//   PUT    <path>?key=K[&ttl=S]  200 | 400 (no key, key not UTF-8, ttl not 1..86400, unreadable
//                                body) | 413 (body over --max-body, however framed; the
//                                connection then closes) | 507 (--max-keys reached)
//                                | 500 (the data file could not be written; nothing changed)
//   DELETE <path>?key=K          200, also when absent | 500 as for PUT
//   PUT / DELETE with X-Ferry-If-Value: <tag>   conditional (metadata/http/http_conditional.h):
//                                412 when the key holds a value of another tag (nothing changes);
//                                a conditional DELETE of an absent key is 404
//   GET    <path>?prefix=P       200 {"keys":[{"key":K,"value_b64":base64(V)},...]}, sorted by key.
//                                Values are arbitrary bytes, so they travel as base64 (RFC 4648,
//                                standard alphabet, padded) in "value_b64", never as "value".
//   GET    /health               200 {"status":"ok","keys":<live keys>}
//
// Thread contract: the handlers run on the server's worker threads concurrently; they share
// only the thread-safe KvStore.
#pragma once

#include <cstddef>
#include <string>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace ferry::metadata_server {

class KvStore;

// Registers the routes above and a debug-level request logger on `server`. `store` is borrowed
// and must outlive the server's listening. `path` is the resource path ("/metadata").
// `max_body` bounds every request body however it is framed (Content-Length or chunked): a PUT
// body over it is answered 413 and the connection closed, with nothing stored and no more than
// max_body bytes of it buffered. Sets the server's payload limit to it, and TCP_NODELAY on
// accepted connections (so a kept-alive connection answers as fast as a fresh one).
void InstallHandlers(httplib::Server& server, KvStore& store, const std::string& path,
                     size_t max_body);

// Runs the route InstallHandlers registers for `req`'s method and path, in-process and without a
// socket, and returns true; returns false, answering nothing, when no route matches (httplib
// answers those itself). `req` is what httplib hands a route: the method, the decoded path, the
// parsed query parameters, the headers and, here, the whole body, which a PUT reads through the
// same bounded reader as on the server (`max_body` as in InstallHandlers). What the server adds
// around the routes (default headers, logging) is not applied. No exception leaves it. The fuzz
// harness fuzz/metadata_http_fuzzer.cc drives the handlers through it.
bool HandleRequest(KvStore& store, const std::string& path, size_t max_body,
                   const httplib::Request& req, httplib::Response& res);

}  // namespace ferry::metadata_server
