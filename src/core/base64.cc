#include "core/base64.h"

#include <array>
#include <cstdint>

namespace ferry {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr uint8_t kNotBase64 = 0xff;

constexpr std::array<uint8_t, 256> MakeDecodeTable() {
  std::array<uint8_t, 256> table{};
  table.fill(kNotBase64);
  for (uint8_t i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = i;
  return table;
}
constexpr std::array<uint8_t, 256> kDecodeTable = MakeDecodeTable();

// "'A'" for printable ASCII, "0x0a" otherwise.
std::string ShowChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u < 0x7f) return std::string("'") + c + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[u >> 4] + kHex[u & 0xf];
}

Status BadCharacter(std::string_view text, size_t offset) {
  const char c = text[offset];
  const std::string why =
      c == '=' ? "padding '=' is only allowed at the end" : "invalid character " + ShowChar(c);
  return InvalidArgumentError("base64: " + why + " at offset " + std::to_string(offset));
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out((bytes.size() + 2) / 3 * 4, '=');
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t o = 0;
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = uint32_t{in[i]} << 16 | uint32_t{in[i + 1]} << 8 | in[i + 2];
    out[o++] = kAlphabet[v >> 18];
    out[o++] = kAlphabet[(v >> 12) & 63];
    out[o++] = kAlphabet[(v >> 6) & 63];
    out[o++] = kAlphabet[v & 63];
  }
  if (i < n) {  // one or two bytes left; the '=' the string was filled with stay as padding
    const uint32_t v = uint32_t{in[i]} << 16 | (i + 1 < n ? uint32_t{in[i + 1]} << 8 : 0);
    out[o++] = kAlphabet[v >> 18];
    out[o++] = kAlphabet[(v >> 12) & 63];
    if (i + 1 < n) out[o] = kAlphabet[(v >> 6) & 63];
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return InvalidArgumentError("base64: length " + std::to_string(text.size()) +
                                " is not a multiple of 4 (padding is required)");
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;

  std::string out(text.size() / 4 * 3 - padding, '\0');
  size_t o = 0;
  size_t i = 0;
  // Every group but the last has no padding: four table lookups, one check for all of them.
  for (; i + 4 < text.size(); i += 4, o += 3) {
    const uint8_t d0 = kDecodeTable[static_cast<unsigned char>(text[i])];
    const uint8_t d1 = kDecodeTable[static_cast<unsigned char>(text[i + 1])];
    const uint8_t d2 = kDecodeTable[static_cast<unsigned char>(text[i + 2])];
    const uint8_t d3 = kDecodeTable[static_cast<unsigned char>(text[i + 3])];
    if (((d0 | d1 | d2 | d3) & 0x80) != 0)
      break;  // an invalid character: the loop below says which
    const uint32_t v = uint32_t{d0} << 18 | uint32_t{d1} << 12 | uint32_t{d2} << 6 | d3;
    out[o] = static_cast<char>(v >> 16);
    out[o + 1] = static_cast<char>((v >> 8) & 0xff);
    out[o + 2] = static_cast<char>(v & 0xff);
  }
  for (; i < text.size(); i += 4) {
    const size_t pad = i + 4 == text.size() ? padding : 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4 - pad; ++j) {
      const uint8_t d = kDecodeTable[static_cast<unsigned char>(text[i + j])];
      if (d == kNotBase64) return BadCharacter(text, i + j);
      v = v << 6 | d;
    }
    v <<= 6 * pad;
    // With padding, the bits below the last whole byte must be zero (RFC 4648 3.5, canonical).
    const uint32_t unused = pad == 2 ? 0xffff : pad == 1 ? 0xff : 0;
    if ((v & unused) != 0) {
      return InvalidArgumentError(
          "base64: non-canonical encoding: unused bits of the character at offset " +
          std::to_string(i + 3 - pad) + " are not zero");
    }
    out[o++] = static_cast<char>(v >> 16);
    if (pad < 2) out[o++] = static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out[o++] = static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace ferry
