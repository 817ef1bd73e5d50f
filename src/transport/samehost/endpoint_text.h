// Text helpers of the same-host transports' published endpoints and keys ("v1:<pid>:...",
// shm and cuda-ipc): strict, so that a malformed endpoint from a descriptor is refused rather
// than read loosely.
//
// Thread contract: pure functions.
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry::samehost {

// A strict decimal: digits only, no sign, no leading zero unless "0", fits in uint64_t.
inline bool ParseDecimal(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// `text` cut at every `sep`: n separators give n + 1 fields, empty ones included.
inline std::vector<std::string_view> SplitFields(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

}  // namespace ferry::samehost
