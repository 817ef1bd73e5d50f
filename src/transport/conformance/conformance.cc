#include "transport/conformance/conformance.h"

#include <utility>

namespace ferry::conformance {

namespace {
std::vector<Target>& Mutable() {
  static std::vector<Target> targets;  // filled by static initializers before main
  return targets;
}
}  // namespace

bool Register(Target target) {
  Mutable().push_back(std::move(target));
  return true;
}

const std::vector<Target>& Targets() { return Mutable(); }

}  // namespace ferry::conformance
