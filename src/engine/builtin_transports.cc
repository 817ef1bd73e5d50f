#include "engine/builtin_transports.h"

#include "transport/tcp/tcp_transport.h"

namespace ferry {

std::vector<std::string> BuiltinTransportNames() { return {"tcp"}; }

Result<std::vector<std::unique_ptr<Transport>>> CreateBuiltinTransports(
    const std::vector<std::string>& names) {
  std::vector<std::string> wanted = names;
  if (wanted.empty() || (wanted.size() == 1 && wanted[0] == "auto"))
    wanted = BuiltinTransportNames();
  std::vector<std::unique_ptr<Transport>> out;
  for (const std::string& name : wanted) {
    if (name == "tcp") {
      out.push_back(CreateTcpTransport(TcpTransportOptions{}));
      continue;
    }
    std::string available;
    for (const std::string& n : BuiltinTransportNames())
      available += (available.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown transport '" + name + "' (this build has: " + available +
                                ", or auto)");
  }
  return out;
}

}  // namespace ferry
