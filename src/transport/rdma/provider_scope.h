// ProviderScope: marks a call into libfabric on the current thread.
//
// One-sided RMA means memory changes with no synchronization ferry can see: the provider's
// progress (on this thread, inside fi_cq_read) receives a peer's write straight into registered
// memory, and the peer learns of it over a socket. ThreadSanitizer sees the socket reads of the
// uninstrumented provider as plain writes by this thread and, not seeing the socket as a
// synchronization, reports every later read of that memory as a race. Under ThreadSanitizer this
// scope makes it ignore the memory accesses of the provider call; elsewhere it is empty.
//
// Thread contract: a stack object of the calling thread; scopes nest.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define FERRY_RDMA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_RDMA_TSAN 1
#endif
#endif

#ifdef FERRY_RDMA_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace ferry::rdma {

class ProviderScope {
 public:
#ifdef FERRY_RDMA_TSAN
  ProviderScope() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~ProviderScope() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  ProviderScope() {}   // NOLINT(modernize-use-equals-default): not trivial, so not "unused"
  ~ProviderScope() {}  // NOLINT(modernize-use-equals-default)
#endif
  ProviderScope(const ProviderScope&) = delete;
  ProviderScope& operator=(const ProviderScope&) = delete;
};

}  // namespace ferry::rdma
