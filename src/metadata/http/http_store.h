// http://h:p/path: a MetadataStore on a Mooncake-compatible HTTP metadata server (Mooncake's own
// or ferry-metadata-server) through cpp-httplib.
//
//   Get     GET    <path>?key=K   200 -> value, 404 -> NotFound
//   Put     PUT    <path>?key=K   (leased: &ttl=<ceil(lease_ttl) seconds>, ferry-metadata-server)
//   Delete  DELETE <path>?key=K   200, or 404 from servers that answer it for absent keys -> OK
//   Put with replaces / DeleteIf  the same request with X-Ferry-If-Value (http_conditional.h;
//                                 412 -> AlreadyExists) on a server that announced
//                                 X-Ferry-Metadata-Conditional; elsewhere (Mooncake's) a GET
//                                 and a compare first, which a write in between can race
//   List    GET    <path>?prefix=P  ferry-metadata-server only; a server without prefix listing
//                                   (Mooncake's) gives InvalidArgument saying so
//
// Keys are percent-encoded in the query. Every request uses a fresh connection whose connect,
// write and read phases are each bounded by StoreOptions::request_timeout. Failures map as:
// no connection / timeout / 5xx -> Unavailable; other 4xx -> InvalidArgument with the server's
// text; a response body over HttpStoreOptions::max_body_bytes (announced by Content-Length, or
// counted as a chunked body streams in) -> InvalidArgument naming the key and the cap, and the
// connection is dropped without reading the rest.
// Leased keys are re-PUT with their TTL every lease_ttl/3 by a LeaseKeeper, which also
// restores them after a server restart that lost them; each re-PUT is conditional on the key
// still holding this client's value (a key another engine took over is given up), and the
// destructor deletes only keys that still hold it. HTTP cannot push, so watcher() is null.
// Mooncake's server ignores ttl=, so there a leased key outlives a crashed owner (only a clean
// shutdown deletes it).
// Writes of this client (Put, Delete, lease refresh) are serialized, so a refresh never revives
// a key just deleted or rewrites an older value; a refresh may therefore delay a Put by up to a
// request timeout while the server is unreachable.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/host_port.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

struct HttpStoreOptions {
  // The largest response body read (values, listings, error texts), so a misbehaving server
  // cannot make every engine allocate without bound. The default matches the largest segment
  // descriptor a peer decodes (DecodeLimits::max_input_bytes); a descriptor with 10,000 buffers
  // is a few MiB.
  size_t max_body_bytes = size_t{64} << 20;
};

// `path` is the resource path ("/metadata"). Sends one GET to check the server answers.
// Errors: InvalidArgument for a path not starting with '/', a non-positive timeout or TTL, or a
// zero max_body_bytes; Unavailable when the server cannot be reached within
// options.request_timeout.
Result<std::unique_ptr<MetadataStore>> CreateHttpStore(const HostPort& server,
                                                       const std::string& path,
                                                       const StoreOptions& options,
                                                       const HttpStoreOptions& http_options = {});

}  // namespace ferry
