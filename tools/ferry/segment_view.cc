#include "segment_view.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "core/segment_desc_codec.h"
#include "metadata/segment_directory.h"
#include "text_table.h"

namespace ferry::cli {
namespace {

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string Endpoint(const RpcEndpoint& rpc) {
  const bool v6 = rpc.host.find(':') != std::string::npos;
  return (v6 ? "[" + rpc.host + "]" : rpc.host) + ":" + std::to_string(rpc.port);
}

std::string BufferTransports(const BufferDesc& buffer) {
  std::vector<std::string> names;
  for (const auto& [name, key] : buffer.keys) names.push_back(name);
  return names.empty() ? "-" : Join(names, ",");
}

}  // namespace

ListedSegment DecodeEntry(std::string name, std::string_view value) {
  ListedSegment out{.name = std::move(name)};
  Result<SegmentDesc> desc = DecodeSegmentDesc(value);
  if (!desc.ok()) {
    out.malformed = desc.status();
  } else if (desc->name != out.name) {
    out.malformed =
        InvalidArgumentError("name: '" + desc->name + "' differs from the segment its key names");
  } else {
    out.desc = std::move(*desc);
  }
  return out;
}

Result<std::vector<ListedSegment>> ListSegments(MetadataStore& store, std::string_view prefix) {
  const std::string ram_prefix = SegmentDescKey(prefix, "");
  ASSIGN_OR_RETURN(std::vector<KeyValue> entries, store.List(ram_prefix));
  std::vector<ListedSegment> out;
  out.reserve(entries.size());
  for (const KeyValue& entry : entries) {
    if (entry.key.size() <= ram_prefix.size()) continue;
    out.push_back(DecodeEntry(entry.key.substr(ram_prefix.size()), entry.value));
  }
  std::sort(out.begin(), out.end(),
            [](const ListedSegment& a, const ListedSegment& b) { return a.name < b.name; });
  return out;
}

Result<ListedSegment> FetchSegment(MetadataStore& store, std::string_view prefix,
                                   std::string_view name) {
  ASSIGN_OR_RETURN(std::string value, store.Get(SegmentDescKey(prefix, name)));
  return DecodeEntry(std::string(name), value);
}

std::vector<std::string> SegmentTransports(const SegmentDesc& desc) {
  std::set<std::string> names;
  for (const auto& [name, extra] : desc.transports) names.insert(name);
  for (const BufferDesc& buffer : desc.buffers) {
    for (const auto& [name, key] : buffer.keys) names.insert(name);
  }
  return {names.begin(), names.end()};
}

uint64_t SegmentBytes(const SegmentDesc& desc) {
  uint64_t bytes = 0;
  for (const BufferDesc& buffer : desc.buffers) bytes += buffer.length;
  return bytes;
}

uint64_t SegmentGeneration(const SegmentDesc& desc) {
  uint64_t generation = 0;
  for (const BufferDesc& buffer : desc.buffers)
    generation = std::max(generation, buffer.generation);
  return generation;
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (const std::string& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

std::string SegmentsTable(const std::vector<ListedSegment>& segments) {
  TextTable table({"NAME", "HOST", "RPC", "TRANSPORTS", "BUFFERS", "BYTES", "INCARNATION"});
  for (const ListedSegment& s : segments) {
    if (!s.desc) {
      table.AddRow({s.name, "(malformed: " + s.malformed.message() + ")"});
      continue;
    }
    const SegmentDesc& d = *s.desc;
    const std::vector<std::string> transports = SegmentTransports(d);
    table.AddRow({d.name, d.host.hostname.empty() ? "-" : d.host.hostname, Endpoint(d.rpc),
                  transports.empty() ? "-" : Join(transports, ","),
                  std::to_string(d.buffers.size()), HumanBytes(SegmentBytes(d)),
                  std::to_string(d.incarnation)});
  }
  return table.Render();
}

std::string SegmentsJson(const std::vector<ListedSegment>& segments) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ListedSegment& s : segments) {
    if (!s.desc) {
      out.push_back({{"name", s.name}, {"error", s.malformed.message()}});
      continue;
    }
    const SegmentDesc& d = *s.desc;
    out.push_back({{"name", d.name},
                   {"host", d.host.hostname},
                   {"rpc", Endpoint(d.rpc)},
                   {"transports", SegmentTransports(d)},
                   {"buffers", d.buffers.size()},
                   {"bytes", SegmentBytes(d)},
                   {"generation", SegmentGeneration(d)},
                   {"incarnation", d.incarnation}});
  }
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string ShowTable(const SegmentDesc& d) {
  const std::vector<std::string> transports = SegmentTransports(d);
  std::vector<std::string> devices;
  for (const DeviceDesc& device : d.devices) {
    devices.push_back(device.name + " (" + device.transport + ", " + device.location.ToString() +
                      ")");
  }
  std::string out;
  TextTable identity({"segment", d.name});
  identity.AddRow({"incarnation", std::to_string(d.incarnation)});
  identity.AddRow({"rpc", Endpoint(d.rpc)});
  identity.AddRow({"host", (d.host.hostname.empty() ? "-" : d.host.hostname) + " (boot_id " +
                               (d.host.boot_id.empty() ? "-" : d.host.boot_id) + ", pid ns " +
                               std::to_string(d.host.pid_namespace) + ")"});
  identity.AddRow({"transports", transports.empty() ? "-" : Join(transports, ", ")});
  identity.AddRow({"devices", devices.empty() ? "-" : Join(devices, "; ")});
  identity.AddRow(
      {"generation", std::to_string(SegmentGeneration(d)) + " (highest of its buffers)"});
  identity.AddRow(
      {"buffers", std::to_string(d.buffers.size()) + ", " + HumanBytes(SegmentBytes(d))});
  out += identity.Render();
  if (d.buffers.empty()) return out;
  out += '\n';
  // File buffers (a window of a file or block device) add a FILE column: the file's path on
  // the owner's host (or the first host that names one) and the window's offset in it.
  const bool files = std::any_of(d.buffers.begin(), d.buffers.end(),
                                 [](const BufferDesc& b) { return b.file.has_value(); });
  std::vector<std::string> header = {"ADDR",       "LENGTH", "LOCATION",
                                     "GENERATION", "REMOTE", "TRANSPORTS"};
  if (files) header.push_back("FILE");
  TextTable buffers(header);
  for (const BufferDesc& b : d.buffers) {
    std::vector<std::string> row = {Hex(b.addr),
                                    std::to_string(b.length) + " (" + HumanBytes(b.length) + ")",
                                    b.location.ToString(),
                                    std::to_string(b.generation),
                                    b.remote_accessible ? "yes" : "no",
                                    BufferTransports(b)};
    if (b.file) {
      auto path = b.file->paths.find(d.host.hostname);
      if (path == b.file->paths.end()) path = b.file->paths.begin();
      row.push_back((path == b.file->paths.end() ? std::string("?") : path->second) + " @" +
                    std::to_string(b.file->offset) + " (" + std::to_string(b.file->paths.size()) +
                    " hosts)");
    }
    buffers.AddRow(std::move(row));
  }
  out += buffers.Render();
  return out;
}

std::string ShowJson(const SegmentDesc& desc) {
  // The codec's own encoding, so the output is exactly what a peer decodes, made readable.
  const std::string encoded = EncodeSegmentDesc(desc);
  const nlohmann::ordered_json json =
      nlohmann::ordered_json::parse(encoded, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return encoded + "\n";  // not expected for a decoded desc
  return json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ferry::cli
