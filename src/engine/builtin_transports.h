// The transports compiled into this build (DESIGN.md: one file holds every #if).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry {

// Names of the transports this build has, in priority order.
std::vector<std::string> BuiltinTransportNames();

// Creates the named transports; {"auto"} means every one this build has. An unknown name is
// InvalidArgument listing the available ones.
Result<std::vector<std::unique_ptr<Transport>>> CreateBuiltinTransports(
    const std::vector<std::string>& names);

}  // namespace ferry
