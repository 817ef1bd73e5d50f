// What the ferry command reads from a metadata store and how it prints it: the segments under
// "<prefix>/ram/" (metadata/segment_directory.h's key layout), decoded strictly with the
// SegmentDesc codec (core/segment_desc_codec.h), as tables or JSON.
//
// Thread contract: pure functions over a borrowed store (MetadataStore is thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/segment_desc.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry::cli {

// One "<prefix>/ram/<name>" entry: its descriptor, or why it does not decode.
struct ListedSegment {
  std::string name;                 // from the key
  std::optional<SegmentDesc> desc;  // set when the value decoded and names this segment
  Status malformed;                 // otherwise: InvalidArgument naming the field that failed
};

// Decodes `value`, the entry of segment `name`. A value that fails to decode, or names another
// segment than its key, comes back with `malformed` set ("buffers[0].length: must be > 0").
ListedSegment DecodeEntry(std::string name, std::string_view value);

// Every segment under "<prefix>/ram/", sorted by name. Errors: the store's (Unavailable when it
// cannot be asked); a malformed entry is listed, not an error.
Result<std::vector<ListedSegment>> ListSegments(MetadataStore& store, std::string_view prefix);

// One segment's entry. Errors: NotFound (no such segment), the store's otherwise.
Result<ListedSegment> FetchSegment(MetadataStore& store, std::string_view prefix,
                                   std::string_view name);

// The transports a segment can be reached by: its buffers' key names and its transport
// extras, sorted, without repeats.
std::vector<std::string> SegmentTransports(const SegmentDesc& desc);
uint64_t SegmentBytes(const SegmentDesc& desc);
// The highest generation among its buffers (0 without buffers).
uint64_t SegmentGeneration(const SegmentDesc& desc);
std::string Join(const std::vector<std::string>& parts, std::string_view separator);

// `ferry segments`: NAME HOST RPC TRANSPORTS BUFFERS BYTES INCARNATION, one row per segment;
// a malformed entry's row says so in its HOST column (the error goes to stderr too).
std::string SegmentsTable(const std::vector<ListedSegment>& segments);
// The same as a JSON array of objects (malformed entries carry "error").
std::string SegmentsJson(const std::vector<ListedSegment>& segments);

// `ferry show`: the segment's identity, then one row per buffer.
std::string ShowTable(const SegmentDesc& desc);
// The descriptor as published (schema v1, keys in base64), indented.
std::string ShowJson(const SegmentDesc& desc);

}  // namespace ferry::cli
