#include "common/env.h"

#include <cstdlib>

namespace ferry {

std::optional<std::string> GetFerryEnv(std::string_view name) {
  std::string full = "FERRY_";
  full.append(name);
  const char* value = std::getenv(full.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace ferry
