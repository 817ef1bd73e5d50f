// The library's version, for programs that link an installed ferry.
#pragma once

#include <string_view>

namespace ferry {

// "MAJOR.MINOR.PATCH" of the linked library.
std::string_view VersionString();

}  // namespace ferry
