// The transports compiled into this build (DESIGN.md: one file holds every #if).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ferry/options.h"
#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry {

// Names of the transports this build has, in priority order.
std::vector<std::string> BuiltinTransportNames();

// Creates the transports `options.transports` names, configured from `options`. {"auto"}: tcp,
// shm and file, cxl when options.cxl_window is set, rdma when options.rdma_provider is set or a
// hardware provider is found. An unknown name is InvalidArgument listing the available ones;
// options.allow_same_user_ptrace on without shm among them is InvalidArgument.
Result<std::vector<std::unique_ptr<Transport>>> CreateBuiltinTransports(
    const EngineOptions& options);

}  // namespace ferry
