// cpp-httplib helpers shared by the etcd plug-in's unary calls and its watch stream. The vendor
// header stays inside this folder.
#pragma once

#include <httplib.h>

#include <string>

namespace ferry {

// A short phrase for a failed request ("could not connect", "connect timed out", ...).
std::string EtcdTransportErrorText(httplib::Error error);

}  // namespace ferry
