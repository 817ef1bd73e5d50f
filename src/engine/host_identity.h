// This machine's HostIdentity, for locality decisions (DESIGN.md, Contracts).
#pragma once

#include "core/segment_desc.h"

namespace ferry {

// hostname, the running kernel's boot id and this process's pid namespace. Fields that cannot
// be read stay empty / 0.
HostIdentity LocalHostIdentity();

// Same running kernel (boot id) and the same process view (pid namespace): each side can see
// the other's processes. Unknown identities are never the same host.
bool IsSameHost(const HostIdentity& a, const HostIdentity& b);

}  // namespace ferry
