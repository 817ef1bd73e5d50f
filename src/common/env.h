// The one place ferry reads environment variables (STYLE.md 12). Every name is FERRY_<name>.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ferry {

// Value of FERRY_<name>, or nullopt when unset. `name` is given without the prefix.
std::optional<std::string> GetFerryEnv(std::string_view name);

}  // namespace ferry
