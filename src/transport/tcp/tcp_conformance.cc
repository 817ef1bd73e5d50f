// The tcp transport in the conformance suite.
#include "transport/conformance/conformance.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry {
namespace {

const bool registered_tcp = conformance::Register({
    .name = "tcp",
    .transport = "tcp",
    .make = [] { return std::make_unique<TcpTransport>(TcpTransportOptions{}); },
});

}  // namespace
}  // namespace ferry
