// What the raw baselines in bench/ share (they use no ferry code, so they measure only the
// system's own path): the size syntax of their flags, as ferry-bench reads it.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace raw_baseline {

// "4096", "64K", "1M", "4G" (binary multiples); nullopt for anything else, zero, or more than
// 2^max_shift bytes.
inline std::optional<uint64_t> ParseBytes(std::string_view text, int max_shift = 40) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || value == 0) return std::nullopt;
  const std::string_view suffix(ptr, static_cast<size_t>(text.data() + text.size() - ptr));
  int shift = -1;
  if (suffix.empty()) shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  if (shift < 0 || value > (uint64_t{1} << max_shift >> shift)) return std::nullopt;
  return value << shift;
}

}  // namespace raw_baseline
