// FERRY_TSAN_IGNORE_HTTPLIB(): for a program that runs a cpp-httplib server under
// ThreadSanitizer. cpp-httplib is an uninstrumented shared library: TSan cannot see the guard
// loads of its function-local statics (e.g. the method-name set of its request parser), so a
// worker thread reading one that another initialized is reported as a race. This ignores
// reports inside that library. Use it once per program, at namespace scope in the file with
// main(); it expands to nothing outside TSan builds.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define FERRY_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_TSAN_BUILD 1
#endif
#endif

#ifdef FERRY_TSAN_BUILD
#define FERRY_TSAN_IGNORE_HTTPLIB() \
  extern "C" const char* __tsan_default_suppressions() { return "race:libcpp-httplib.so\n"; }
#else
#define FERRY_TSAN_IGNORE_HTTPLIB()
#endif
