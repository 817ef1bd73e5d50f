#include "ferry/version.h"

namespace ferry {

std::string_view VersionString() { return FERRY_VERSION_STRING; }

}  // namespace ferry
