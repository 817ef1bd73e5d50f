// kSanitized: whether this build runs under ASan or TSan, for tests whose measurements
// (resident memory, throughput) the sanitizers' own bookkeeping distorts.
#pragma once

namespace ferry {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace ferry
