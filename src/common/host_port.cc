#include "common/host_port.h"

#include <charconv>

namespace ferry {

std::string HostPort::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(std::string(what) + " '" + std::string(text) +
                                "': " + std::string(why) + " (expected host:port)");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("unterminated [IPv6] host");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("missing port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad("an IPv6 host needs [brackets]");
  }
  if (host.empty()) return bad("empty host");
  for (char c : host) {
    // Brackets only delimit an IPv6 host; inside one they would not survive ToString.
    if (c <= ' ' || c == '/' || c == '@' || c == ',' || c == '[' || c == ']' || c == 0x7f)
      return bad("bad character in host");
  }
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return bad("port must be 1..65535");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(value)};
}

}  // namespace ferry
