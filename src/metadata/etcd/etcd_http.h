// cpp-httplib helpers shared by the etcd plug-in's unary calls and its watch stream. The vendor
// header stays inside this folder.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

#include "common/host_port.h"

namespace ferry {

// What became of a request to `endpoint` that got no HTTP answer, with the time it really took
// (`elapsed`, out of `timeout`): "could not connect: connection refused (after 1 ms)", "could
// not connect: timed out after 1000 ms", "could not connect: cannot resolve 'h': ...", "no reply
// within 1000 ms", ... cpp-httplib does not say why a connect failed; common/connect_error.h
// finds out, within what is left of `timeout`.
std::string EtcdTransportErrorText(httplib::Error error, const HostPort& endpoint,
                                   std::chrono::steady_clock::duration elapsed,
                                   std::chrono::milliseconds timeout);

}  // namespace ferry
