// Conditional requests: ferry-metadata-server's extension of Mooncake's HTTP metadata API, so
// that an engine deletes or refreshes its keys only while they are still its own (the name may
// have been taken over by another engine meanwhile). Shared by the http store (client) and
// tools/metadata_server (server), which must agree on these names and on the tag.
//
//   PUT    <path>?key=K   X-Ferry-If-Value: <tag>  written only while K is absent or its value's
//                                                  tag is <tag>; 412 (nothing written) otherwise
//   DELETE <path>?key=K   X-Ferry-If-Value: <tag>  deleted only while K's value's tag is <tag>;
//                                                  404 when K is absent, 412 when it holds
//                                                  another value (left in place)
//
// A server that honours the header says so on every reply with X-Ferry-Metadata-Conditional: 1.
// A server that does not (Mooncake's) would ignore the header and write unconditionally, so the
// client sends it only to a server that announced it, and otherwise compares with a GET first.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

inline constexpr char kIfValueHeader[] = "X-Ferry-If-Value";
inline constexpr char kConditionalHeader[] = "X-Ferry-Metadata-Conditional";

// The tag of a value: the lowercase hex SHA-256 of its bytes (64 characters).
std::string HttpValueTag(std::string_view value);

}  // namespace ferry
