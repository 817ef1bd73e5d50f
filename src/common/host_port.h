// host:port parsing for connection strings and endpoints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

struct HostPort {
  std::string host;  // hostname or IP literal, without brackets
  uint16_t port = 0;
  // "host:port", with brackets around an IPv6 literal.
  std::string ToString() const;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// Parses "host:port" or "[v6]:port". The port is required and 1..65535; the host is non-empty,
// without spaces, control characters, '/', '@', ',' or brackets (other than those around an
// IPv6 host), so ToString gives text that parses back to the same HostPort. `what` names the
// thing being parsed in the error ("etcd endpoint").
Result<HostPort> ParseHostPort(std::string_view text, std::string_view what);

}  // namespace ferry
