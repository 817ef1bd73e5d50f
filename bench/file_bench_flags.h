// The flags ferry-file-bench and ferry-raw-file-baseline share (bench/file.sh gives both the
// same ones), parsed the same way:
//   --file=PATH [--operation=read|write] [--block_size=64K] [--qd=8] [--duration=2] [--direct=1]
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace ferry::file_bench {

struct Flags {
  std::string path;
  std::string operation = "read";
  uint64_t block = 64 << 10;
  unsigned qd = 8;
  double duration = 2;
  bool direct = true;
};

// "64K", "1M", "2G" or plain bytes; 0 when malformed.
inline uint64_t ParseSize(const std::string& text) {
  char* end = nullptr;
  uint64_t v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return 0;
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

// Parses argv into *out. False, with `program`'s usage on stderr, on an unknown flag or a bad
// or missing value.
inline bool ParseFlags(int argc, char** argv, const char* program, Flags* out) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    try {
      if (key == "--file") {
        out->path = value;
      } else if (key == "--operation") {
        out->operation = value;
      } else if (key == "--block_size") {
        out->block = ParseSize(value);
      } else if (key == "--qd") {
        out->qd = static_cast<unsigned>(std::stoul(value));
      } else if (key == "--duration") {
        out->duration = std::stod(value);
      } else if (key == "--direct") {
        out->direct = value != "0" && value != "false";
      } else {
        std::fprintf(stderr, "%s: unknown flag %s\n", program, arg.c_str());
        return false;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s: bad value in %s\n", program, arg.c_str());
      return false;
    }
  }
  if (out->path.empty() || out->block == 0 || out->qd == 0 || !(out->duration > 0) ||
      (out->operation != "read" && out->operation != "write")) {
    std::fprintf(stderr,
                 "usage: %s --file=PATH [--operation=read|write] [--block_size=64K] [--qd=8] "
                 "[--duration=2] [--direct=1]\n",
                 program);
    return false;
  }
  return true;
}

}  // namespace ferry::file_bench
