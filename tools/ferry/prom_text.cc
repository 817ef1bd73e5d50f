#include "prom_text.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

namespace ferry::cli {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Reads a metric or label name at `pos` (advancing it); empty when none starts there.
std::string_view ReadName(std::string_view line, size_t& pos) {
  const size_t start = pos;
  if (pos < line.size() && IsNameStart(line[pos])) {
    while (pos < line.size() && IsNameChar(line[pos])) ++pos;
  }
  return line.substr(start, pos - start);
}

void SkipBlanks(std::string_view line, size_t& pos) {
  while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
}

Status LineError(size_t line_no, const std::string& what) {
  return InvalidArgumentError("line " + std::to_string(line_no) + ": " + what);
}

// A sample value: a float as Prometheus reads one (Go's ParseFloat): decimal or hex, and NaN,
// Inf, +Inf, -Inf in any case ("Nan" is what prometheus-cpp writes). Overflow is an error; an
// underflow (1e-400) reads as the nearest value, 0 or a subnormal, as Go reads it.
bool ParseValue(std::string_view text, double* out) {
  if (text.empty()) return false;
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || (errno == ERANGE && std::isinf(value))) return false;
  *out = value;
  return true;
}

// Reads {a="x",b="y"} at `pos` (on the '{'), unescaping the values.
Status ReadLabels(std::string_view line, size_t line_no, size_t& pos,
                  std::vector<std::pair<std::string, std::string>>* labels) {
  ++pos;  // '{'
  while (true) {
    SkipBlanks(line, pos);
    if (pos < line.size() && line[pos] == '}') {
      ++pos;
      return Status::Ok();
    }
    const std::string_view name = ReadName(line, pos);
    if (name.empty())
      return LineError(line_no, "expected a label name at column " + std::to_string(pos + 1));
    SkipBlanks(line, pos);
    if (pos >= line.size() || line[pos] != '=') {
      return LineError(line_no, "expected '=' after label '" + std::string(name) + "'");
    }
    ++pos;
    SkipBlanks(line, pos);
    if (pos >= line.size() || line[pos] != '"') {
      return LineError(line_no, "label '" + std::string(name) + "' has no quoted value");
    }
    ++pos;
    std::string value;
    bool closed = false;
    while (pos < line.size()) {
      const char c = line[pos++];
      if (c == '"') {
        closed = true;
        break;
      }
      if (c == '\\') {
        if (pos >= line.size()) break;
        const char e = line[pos++];
        if (e == 'n') {
          value += '\n';
        } else if (e == '\\' || e == '"') {
          value += e;
        } else {
          return LineError(line_no, "label '" + std::string(name) + "': unknown escape '\\" +
                                        std::string(1, e) + "'");
        }
        continue;
      }
      value += c;
    }
    if (!closed) {
      return LineError(line_no, "label '" + std::string(name) + "': value not terminated");
    }
    labels->emplace_back(std::string(name), std::move(value));
    SkipBlanks(line, pos);
    if (pos < line.size() && line[pos] == ',') {
      ++pos;
      continue;
    }
    if (pos < line.size() && line[pos] == '}') continue;  // closed at the loop's top
    return LineError(line_no, "expected ',' or '}' after label '" + std::string(name) + "'");
  }
}

// The family of sample `name`: itself when TYPE'd, else its name less a known suffix when that
// is TYPE'd, else itself (untyped).
std::pair<std::string, std::string> FamilyOf(
    const std::string& name, const std::map<std::string, std::string, std::less<>>& types) {
  if (auto it = types.find(name); it != types.end()) return *it;
  for (std::string_view suffix : {"_bucket", "_sum", "_count", "_total", "_created"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      const std::string base = name.substr(0, name.size() - suffix.size());
      if (auto it = types.find(base); it != types.end()) return *it;
    }
  }
  return {name, "untyped"};
}

}  // namespace

Result<std::vector<PromSample>> ParsePrometheusText(std::string_view text) {
  if (text.size() > kMaxExpositionBytes) {
    return InvalidArgumentError("exposition of " + std::to_string(text.size()) +
                                " bytes is over the limit of " +
                                std::to_string(kMaxExpositionBytes));
  }
  std::map<std::string, std::string, std::less<>> types;  // family -> type
  std::vector<PromSample> samples;
  size_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t pos = 0;
    SkipBlanks(line, pos);
    if (pos == line.size()) continue;
    if (line[pos] == '#') {
      // "# TYPE name type" declares a family; every other comment (HELP included) is skipped.
      ++pos;
      SkipBlanks(line, pos);
      if (line.substr(pos, 5) != "TYPE " && line.substr(pos, 5) != "TYPE\t") continue;
      pos += 5;
      SkipBlanks(line, pos);
      const std::string_view name = ReadName(line, pos);
      SkipBlanks(line, pos);
      std::string_view type = line.substr(pos);
      while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
      if (name.empty()) return LineError(line_no, "TYPE line without a metric name");
      if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
          type != "untyped") {
        return LineError(
            line_no, "unknown type '" + std::string(type) + "' for '" + std::string(name) + "'");
      }
      types[std::string(name)] = std::string(type);
      continue;
    }
    PromSample sample;
    const std::string_view name = ReadName(line, pos);
    if (name.empty()) {
      return LineError(line_no, "expected a metric name at column " + std::to_string(pos + 1));
    }
    sample.name = std::string(name);
    if (pos < line.size() && line[pos] == '{') {
      RETURN_IF_ERROR(ReadLabels(line, line_no, pos, &sample.labels));
    }
    SkipBlanks(line, pos);
    const size_t value_start = pos;
    while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t') ++pos;
    const std::string_view value = line.substr(value_start, pos - value_start);
    if (!ParseValue(value, &sample.value)) {
      return LineError(line_no, "'" + sample.name + "': bad value '" + std::string(value) + "'");
    }
    SkipBlanks(line, pos);
    if (pos < line.size()) {  // an optional timestamp (ms), an integer
      const std::string_view stamp = line.substr(pos);
      double ignored = 0;
      if (!ParseValue(stamp, &ignored) || stamp.find_first_of(".eE") != std::string_view::npos) {
        return LineError(line_no,
                         "'" + sample.name + "': bad timestamp '" + std::string(stamp) + "'");
      }
    }
    auto [family, type] = FamilyOf(sample.name, types);
    sample.family = std::move(family);
    sample.type = std::move(type);
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::string FormatLabels(const std::vector<std::pair<std::string, std::string>>& labels) {
  std::string out;
  for (const auto& [name, value] : labels) {
    if (!out.empty()) out += ',';
    out += name;
    out += "=\"";
    for (char c : value) {
      if (c == '\\' || c == '"') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  return out;
}

}  // namespace ferry::cli
