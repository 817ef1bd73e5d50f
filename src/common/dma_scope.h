// DmaScope: marks memory accesses of the current thread that stand for a NIC's DMA into or out
// of registered memory.
//
// A transfer changes or reads registered memory with no synchronization this process can see:
// the application orders its own accesses with its peers' through messages (a completion in the
// peer, a notification), as it must with one-sided RDMA. ThreadSanitizer cannot see that order
// and reports such accesses as races (and pays dearly for each: it tries to restore the stack of
// an access long gone, per 8-byte word). Under ThreadSanitizer this scope makes it ignore the
// thread's memory accesses (synchronization is still tracked); elsewhere it is empty. Used
// around the libfabric provider's calls (rdma/provider_scope.h) and the tcp target's copies
// between sockets and pinned memory; nothing else belongs inside one.
//
// Thread contract: a stack object of the calling thread; scopes nest.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define FERRY_DMA_SCOPE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_DMA_SCOPE_TSAN 1
#endif
#endif

#ifdef FERRY_DMA_SCOPE_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace ferry {

class DmaScope {
 public:
#ifdef FERRY_DMA_SCOPE_TSAN
  DmaScope() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~DmaScope() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  DmaScope() {}   // NOLINT(modernize-use-equals-default): not trivial, so not "unused"
  ~DmaScope() {}  // NOLINT(modernize-use-equals-default)
#endif
  DmaScope(const DmaScope&) = delete;
  DmaScope& operator=(const DmaScope&) = delete;
};

}  // namespace ferry
