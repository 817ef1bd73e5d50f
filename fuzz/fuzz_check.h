// What the harnesses share: FUZZ_CHECK, which turns a broken decoder contract into a crash
// libFuzzer reports (with the input that broke it), and small byte helpers.
//
// Thread contract: the harnesses run single-threaded under libFuzzer; these are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

// Aborts with `what` and the place when `cond` is false. Harness code only: the library never
// aborts (STYLE.md 3); a harness must, so that libFuzzer keeps the input.
#define FUZZ_CHECK(cond, what)                                                           \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: contract broken: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                           \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace ferry::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace ferry::fuzz
