// Words for what became of a cpp-httplib request that got no HTTP answer, shared by the plug-ins
// that speak HTTP (http/ and etcd/). The vendor header stays inside src/metadata.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

#include "common/host_port.h"

namespace ferry {

// What became of a request to `server` that got no HTTP answer, in words an operator acts on,
// with the time it really took (`elapsed`, out of `timeout`): "could not connect: connection
// refused (after 1 ms)", "could not connect: timed out after 1000 ms", "could not connect:
// cannot resolve 'h': ...", "no reply within 1000 ms", ... cpp-httplib does not say why a
// connect failed; common/connect_error.h finds out, within what is left of `timeout`.
std::string HttpRequestFailureText(httplib::Error error, const HostPort& server,
                                   std::chrono::steady_clock::duration elapsed,
                                   std::chrono::milliseconds timeout);

}  // namespace ferry
