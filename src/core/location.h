// Location detection for host pointers. Parsing and formatting live on ferry::Location
// (include/ferry/types.h); this file adds what needs the OS.
#pragma once

#include <cstddef>

#include "ferry/types.h"

namespace ferry {

// The NUMA node that backs `addr`, as "cpu:<node>".
//  - A single-node machine, or a kernel without NUMA support, gives cpu:0.
//  - A page not yet faulted in is faulted in by a read (get_mempolicy), then reported.
//  - An address that is not mapped in this process is InvalidArgument.
// Device pointers (cuda/rocm/ascend) are not recognised here: the transport that owns the
// device resolves those before falling back to this.
Result<Location> DetectHostLocation(const void* addr);

// Number of NUMA nodes the kernel reports online (>= 1).
int OnlineNumaNodeCount();

}  // namespace ferry
