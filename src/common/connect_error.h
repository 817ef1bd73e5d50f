// Honest connect errors: what happened to a TCP connection attempt, in words an operator acts
// on ("connection refused", "no route to host", "timed out after 1002 ms", "cannot resolve
// 'h': Name or service not known"), with the time it really took. Client libraries that report
// only "connection failed" (cpp-httplib) ask DiagnoseConnect for the reason.
#pragma once

#include <chrono>
#include <string>

#include "common/host_port.h"

namespace ferry {

// A short phrase for a connect's errno: "connection refused", "no route to host", "network
// unreachable", "timed out", else the strerror text with the errno.
std::string ConnectErrnoText(int err);

// Milliseconds in `d`, rounded to the nearest, as text: "1002 ms".
std::string MillisText(std::chrono::steady_clock::duration d);

// Why connecting to `server` fails: resolves it and connects once, bounded by `timeout`, and
// says what happened: "cannot resolve 'h': ...", "connection refused", "no route to host",
// "timed out after N ms". An attempt that connects says so ("connects now"): the failure it
// diagnoses was transient. Thread-safe; blocks for at most `timeout` (plus name resolution).
std::string DiagnoseConnect(const HostPort& server, std::chrono::milliseconds timeout);

// The text of a connect that failed after `elapsed` out of `timeout`: "timed out after N ms"
// when the time ran out, else DiagnoseConnect's reason, with the time the attempt took.
std::string DescribeConnectFailure(const HostPort& server, std::chrono::steady_clock::duration elapsed,
                                   std::chrono::milliseconds timeout);

}  // namespace ferry
