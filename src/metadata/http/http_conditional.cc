#include "metadata/http/http_conditional.h"

#include <openssl/evp.h>

namespace ferry {

std::string HttpValueTag(std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  std::string out;
  // SHA-256 of an in-memory buffer cannot fail short of memory exhaustion; an empty tag then
  // matches nothing, so a conditional request is refused rather than applied.
  if (EVP_Digest(value.data(), value.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    return out;
  }
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xF]);
  }
  return out;
}

}  // namespace ferry
