// Fuzzes SegmentDesc JSON decoding (core/segment_desc_codec.h), what every engine reads from the
// metadata store or a peer, and the base64 codec that carries its opaque keys.
//
// Contracts checked, beyond "no crash, no UB, no leak":
//  - a decoded desc passes ValidateSegmentDesc, and Encode -> Decode gives it back unchanged
//    (and the same bytes when encoded again);
//  - decoding under tight limits never accepts what the default limits refuse, and agrees;
//  - FindCovering finds a buffer exactly when one covers the range;
//  - Base64Decode accepts only canonical text: Encode(Decode(x)) == x.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base64.h"
#include "core/segment_desc_codec.h"
#include "fuzz_check.h"

namespace ferry {
namespace {

void CheckCovering(const SegmentDesc& desc) {
  if (desc.buffers.size() > 64) return;  // quadratic below; fuzz inputs rarely hold more
  // Probe the edges of every buffer (and just past them) against a linear search.
  for (const BufferDesc& b : desc.buffers) {
    for (const uint64_t addr : {b.addr, b.addr + 1, b.end() - 1, b.end()}) {
      for (const uint64_t length : {uint64_t{0}, uint64_t{1}, b.length}) {
        const BufferDesc* found = desc.FindCovering(addr, length);
        const BufferDesc* linear = nullptr;
        for (const BufferDesc& c : desc.buffers) {
          if (c.Covers(addr, length)) {
            linear = &c;
            break;
          }
        }
        FUZZ_CHECK((found == nullptr) == (linear == nullptr), "FindCovering disagrees");
        if (found != nullptr) FUZZ_CHECK(found->Covers(addr, length), "FindCovering: wrong buffer");
      }
    }
  }
}

void FuzzSegmentDesc(std::string_view json) {
  Result<SegmentDesc> desc = DecodeSegmentDesc(json);
  constexpr DecodeLimits kTight{.max_input_bytes = 4096,
                                .max_buffers = 2,
                                .max_devices = 2,
                                .max_key_bytes = 16,
                                .max_depth = 4};
  Result<SegmentDesc> tight = DecodeSegmentDesc(json, kTight);
  if (tight.ok()) {
    FUZZ_CHECK(desc.ok(), "accepted under tight limits, refused under the defaults");
    FUZZ_CHECK(*tight == *desc, "tight and default limits decode differently");
  }
  if (!desc.ok()) {
    FUZZ_CHECK(desc.status().code() == StatusCode::kInvalidArgument, desc.status().ToString());
    return;
  }
  FUZZ_CHECK(ValidateSegmentDesc(*desc).ok(), "a decoded desc fails validation");
  const std::string encoded = EncodeSegmentDesc(*desc);
  Result<SegmentDesc> again = DecodeSegmentDesc(encoded);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(*again == *desc, "decode(encode(desc)) != desc");
  FUZZ_CHECK(EncodeSegmentDesc(*again) == encoded, "encoding is not canonical");
  CheckCovering(*desc);
}

void FuzzBase64(std::string_view text) {
  Result<std::string> bytes = Base64Decode(text);
  if (!bytes.ok()) return;
  FUZZ_CHECK(Base64Encode(*bytes) == text, "Base64Decode accepted non-canonical text");
}

}  // namespace
}  // namespace ferry

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ferry::fuzz::AsText(data, size);
  ferry::FuzzSegmentDesc(text);
  ferry::FuzzBase64(text);
  return 0;
}
