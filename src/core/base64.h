// Base64 (RFC 4648 section 4: standard alphabet, '=' padding) for the opaque bytes a
// SegmentDesc carries in JSON (transport keys, endpoint blobs).
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

// Encodes `bytes` with the standard alphabet and '=' padding. The output has
// 4 * ceil(bytes.size() / 3) characters; the empty input gives the empty string.
std::string Base64Encode(std::string_view bytes);

// Decodes canonical base64, the exact inverse of Base64Encode: the length is a multiple of 4,
// every character is in the standard alphabet, '=' appears only as one or two final padding
// characters, and the unused low bits of the last data character are zero. Whitespace, the
// URL-safe alphabet and missing padding are rejected.
// Errors: InvalidArgument naming the offset of the first offending character.
Result<std::string> Base64Decode(std::string_view text);

}  // namespace ferry
