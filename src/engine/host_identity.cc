#include "engine/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace ferry {

HostIdentity LocalHostIdentity() {
  HostIdentity id;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) id.hostname = name;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, id.boot_id);
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) == 0) id.pid_namespace = st.st_ino;
  return id;
}

bool IsSameHost(const HostIdentity& a, const HostIdentity& b) {
  return !a.boot_id.empty() && a.boot_id == b.boot_id && a.pid_namespace != 0 &&
         a.pid_namespace == b.pid_namespace;
}

}  // namespace ferry
