// SegmentDesc <-> JSON, schema v2: the strict, versioned form an engine publishes in the
// metadata store and peers decode (DESIGN.md, "Contracts across process boundaries").
//
//   {"schema_version":1,"name":"decode-node-7","incarnation":1234567890123,
//    "rpc":{"host":"10.0.0.7","port":12345},
//    "host":{"hostname":"n7","boot_id":"...","pid_namespace":4026531836},
//    "devices":[{"name":"mlx5_0","transport":"rdma","location":"cpu:0"}],
//    "transports":{"rdma":"<base64>"},
//    "buffers":[{"addr":4096,"length":8192,"location":"cpu:0","generation":3,
//                "remote_accessible":true,"keys":{"tcp":"<base64>","rdma":"<base64>"}},
//               {"addr":17293822569102704640,"length":1048576,"location":"cpu","generation":4,
//                "remote_accessible":true,"keys":{"file":""},
//                "file":{"device":2049,"inode":131,"size":4194304,"offset":0,
//                        "paths":{"n7":"/mnt/kv/spill0","n8":"/mnt/kv/spill0"}}}]}
//
// Every field is required, has exactly one JSON type, and unknown fields are rejected at every
// level; the one exception is a buffer's "file", present exactly for file buffers (v2). The
// encoder writes "schema_version":1 while no buffer has a file window, so peers of the release
// before read it; the decoder reads v1 and v2 (a "file" in a v1 document is an unknown field)
// and a newer version is refused as unsupported (SegmentDesc::kSchemaVersion). Opaque bytes (keys,
// transports) travel as base64 (core/base64.h).
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/segment_desc.h"
#include "ferry/status.h"

namespace ferry {

// Bounds for decoding untrusted input; every limit is inclusive. Exceeding one is
// InvalidArgument.
struct DecodeLimits {
  size_t max_input_bytes = 64u << 20;  // checked before parsing
  size_t max_buffers = 1u << 20;       // no more than this many are decoded
  size_t max_devices = 4096;
  // Entries in one opaque map: the root's `transports` or one buffer's `keys`, each keyed by a
  // transport name, so a handful in practice (a build has at most five transports). The limit
  // keeps a small text from costing a map node (~100 bytes) per 8 bytes of input.
  size_t max_transports = 16;
  size_t max_key_bytes = 64u << 10;  // decoded size of one opaque value (a key or a transport blob)
  int max_depth = 8;                 // JSON nesting (the root object is depth 1; v2 needs 5)
  // Where max_buffers comes from, named in its error when set ("... over the limit of 100
  // (EngineOptions::max_segment_buffers)"). Must outlive the limits (a literal).
  std::string_view max_buffers_setting;
};

// Compact JSON with the fields in the fixed order shown above, so equal descs give identical
// bytes. For every desc that passes ValidateSegmentDesc, DecodeSegmentDesc(EncodeSegmentDesc(d))
// == d. A desc that fails validation is still encoded (strings escaped, JSON well-formed where
// the strings are UTF-8), but its JSON will not decode. Never fails.
std::string EncodeSegmentDesc(const SegmentDesc& desc);

// Parses and validates `json`. The result has its buffers sorted by addr and pairwise disjoint.
// Errors: InvalidArgument, with the offending field's path in the message
// ("buffers[3].length: must be > 0"), for: input over the limits, invalid JSON or trailing
// bytes (with the parser's position), nesting deeper than max_depth, a duplicate, missing,
// unknown or wrongly typed field, schema_version other than SegmentDesc::kSchemaVersion, and
// every rule ValidateSegmentDesc checks; Internal if memory runs out. No exception escapes and
// there is no partial result.
// When a text breaks several rules, the one reported is, in this order: the input size; invalid
// JSON or nesting anywhere; the root's schema_version (so a newer document reads as an
// unsupported version, whatever else it holds); the first type or shape error in document
// order; then the value rules in ValidateSegmentDesc's order.
// The text is read once, straight into the result (json_reader.h; no document is built):
// time and memory grow with the result (about 1 us and 440 bytes per buffer with two keys, up
// to ~10 us and ~2.1 KiB with 16), an array over its limit is counted, never stored, and an
// opaque map stops at its first entry past max_transports.
Result<SegmentDesc> DecodeSegmentDesc(std::string_view json, const DecodeLimits& limits = {});

// The semantic checks DecodeSegmentDesc applies, on a struct (e.g. before publishing):
//  - kOldestSchemaVersion <= schema_version <= kSchemaVersion; incarnation > 0; rpc.port > 0;
//  - name and rpc.host 1..255 bytes, host.hostname and host.boot_id 0..255 bytes, device names
//    1..255 bytes; all of them UTF-8 without control characters (< 0x20, 0x7f);
//  - transport names (device transports, transports and keys entries) 1..32 chars of
//    [a-z0-9_-]; at most limits.max_transports entries in `transports` and in each buffer's
//    `keys`; every opaque value at most limits.max_key_bytes;
//  - locations well-formed and never Kind::kDetect;
//  - at most limits.max_devices devices and limits.max_buffers buffers; each buffer has
//    length > 0, addr + length within uint64, generation > 0;
//  - a file buffer's window [file.offset, file.offset + length) lies within file.size, and
//    file.paths has 1..64 entries of host name (1..255 bytes) -> path (1..4096 bytes), UTF-8
//    without control characters;
//  - buffers sorted by addr and pairwise disjoint (an overlap names both ranges in hex).
// Errors: InvalidArgument naming the field path of the first violation.
Status ValidateSegmentDesc(const SegmentDesc& desc, const DecodeLimits& limits = {});

}  // namespace ferry
