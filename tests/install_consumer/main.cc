// Uses only the installed public headers.
#include <ferry/status.h>
#include <ferry/types.h>
#include <ferry/version.h>

#include <cstdio>

int main() {
  ferry::Result<ferry::Location> loc = ferry::Location::Parse("cuda:3");
  if (!loc.ok() || loc->ToString() != "cuda:3") return 1;
  ferry::Result<ferry::Location> bad = ferry::Location::Parse("gpu:3");
  if (bad.ok() || bad.status().code() != ferry::StatusCode::kInvalidArgument) return 2;
  std::printf("ferry %s: %s / %s\n", std::string(ferry::VersionString()).c_str(),
              loc->ToString().c_str(), bad.status().ToString().c_str());
  return 0;
}
