// Clang thread-safety annotations (STYLE.md 6). They expand to nothing on other compilers.
#pragma once

#if defined(__clang__)
#define FERRY_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FERRY_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) FERRY_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY FERRY_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) FERRY_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) FERRY_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) FERRY_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) FERRY_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) FERRY_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) FERRY_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) FERRY_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) FERRY_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) FERRY_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define EXCLUDES(...) FERRY_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS FERRY_THREAD_ANNOTATION(no_thread_safety_analysis)
