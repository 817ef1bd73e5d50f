// `ferry segments` and `ferry show` (commands.h).
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "segment_view.h"
#include "store_access.h"

namespace ferry::cli {

const char* ExitCodesHelp() {
  return R"(exit codes:
  0  ok
  1  usage: bad flags or arguments, or a connection string naming no store to read
     (P2PHANDSHAKE: each engine serves only its own descriptor; memory://: in-process only);
     also when the output could not be written (a full disk, a closed pipe)
  2  the metadata store could not be reached, did not answer in time, or could not answer (a
     Mooncake HTTP server cannot list keys: `show` and `probe` work there, `segments` and
     `watch` need etcd, redis or ferry-metadata-server)
  3  not found: no such segment in the store
  4  malformed: a stored descriptor failed to decode (the message names the field; `segments`
     still lists the others), or the metrics endpoint served something else than Prometheus text
  5  no answer: the segment's engine (probe) or the metrics endpoint (stats) did not answer, or
     an engine answered as another incarnation or segment than the store describes
)";
}

int RunSegments(const StoreFlags& flags, bool json) {
  int exit_code = kExitOk;
  std::unique_ptr<MetadataStore> store = OpenStore(flags, &exit_code);
  if (store == nullptr) return exit_code;
  Result<std::vector<ListedSegment>> segments = ListSegments(*store, flags.prefix);
  if (!segments.ok()) {
    return Fail(kExitStoreUnreachable, "listing segments in " + flags.connection,
                segments.status());
  }
  const std::string text = json ? SegmentsJson(*segments) : SegmentsTable(*segments);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  for (const ListedSegment& s : *segments) {
    if (!s.desc) {
      exit_code =
          Fail(kExitMalformed, "segment '" + s.name + "': malformed descriptor", s.malformed);
    }
  }
  return exit_code;
}

int RunShow(const StoreFlags& flags, const std::string& segment, bool json) {
  SegmentDesc desc;
  if (const int code = LoadSegment(flags, segment, &desc); code != kExitOk) return code;
  const std::string text = json ? ShowJson(desc) : ShowTable(desc);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

}  // namespace ferry::cli
