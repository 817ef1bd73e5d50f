// The rdma transport in the conformance suite, over libfabric's software "tcp;ofi_rxm" provider
// on 127.0.0.1 (skipped where that provider is missing).
#include "transport/conformance/conformance.h"
#include "transport/rdma/rdma_transport.h"

namespace ferry {
namespace {

RdmaTransportOptions TcpOptions() {
  RdmaTransportOptions options;
  options.provider = "tcp;ofi_rxm";
  options.op_timeout = std::chrono::milliseconds(3000);
  return options;
}

const bool registered_rdma = conformance::Register({
    .name = "rdma_tcp",
    .transport = "rdma",
    .make = [] { return CreateRdmaTransport(TcpOptions()); },
    .unavailable =
        [] {
          Result<std::string> probe = ProbeRdmaProvider(TcpOptions());
          return probe.ok() ? std::string() : probe.status().ToString();
        },
});

}  // namespace
}  // namespace ferry
