// ProviderScope: marks a call into libfabric on the current thread.
//
// One-sided RMA means memory changes with no synchronization ferry can see: the provider's
// progress (on this thread, inside fi_cq_read) receives a peer's write straight into registered
// memory, and the peer learns of it over a socket. ThreadSanitizer sees the socket reads of the
// uninstrumented provider as plain writes by this thread and, not seeing the socket as a
// synchronization, would report every later read of that memory as a race: the provider's
// accesses are a NIC's DMA (common/dma_scope.h).
//
// Thread contract: a stack object of the calling thread; scopes nest.
#pragma once

#include "common/dma_scope.h"

namespace ferry::rdma {

using ProviderScope = DmaScope;

}  // namespace ferry::rdma
