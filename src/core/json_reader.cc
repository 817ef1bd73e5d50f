#include "core/json_reader.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace ferry {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The length of the well-formed UTF-8 sequence of two or more bytes starting at `p` (its lead
// byte is >= 0x80), or 0 when it is ill-formed or cut off by `end` (RFC 3629, table 3-7).
size_t Utf8SequenceLength(const unsigned char* p, const unsigned char* end) {
  const auto in = [](unsigned char c, unsigned char lo, unsigned char hi) {
    return c >= lo && c <= hi;
  };
  const size_t left = static_cast<size_t>(end - p);
  const unsigned char lead = p[0];
  if (in(lead, 0xc2, 0xdf)) return left >= 2 && in(p[1], 0x80, 0xbf) ? 2 : 0;
  if (in(lead, 0xe0, 0xef)) {
    if (left < 3) return 0;
    const unsigned char lo = lead == 0xe0 ? 0xa0 : 0x80;  // no overlong forms
    const unsigned char hi = lead == 0xed ? 0x9f : 0xbf;  // no surrogates
    return in(p[1], lo, hi) && in(p[2], 0x80, 0xbf) ? 3 : 0;
  }
  if (in(lead, 0xf0, 0xf4)) {
    if (left < 4) return 0;
    const unsigned char lo = lead == 0xf0 ? 0x90 : 0x80;  // no overlong forms
    const unsigned char hi = lead == 0xf4 ? 0x8f : 0xbf;  // nothing past U+10FFFF
    return in(p[1], lo, hi) && in(p[2], 0x80, 0xbf) && in(p[3], 0x80, 0xbf) ? 4 : 0;
  }
  return 0;
}

// The first byte at or after `p` that may end a plain run of a string ('"', '\\', a control
// character or a byte >= 0x80), or `end`; eight bytes at a time. It may stop early at a plain
// byte, never past a special one.
const unsigned char* SkipPlainBytes(const unsigned char* p, const unsigned char* end) {
  constexpr uint64_t kOnes = 0x0101010101010101;
  constexpr uint64_t kHighs = 0x8080808080808080;
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, sizeof(w));
    const uint64_t quote = w ^ (kOnes * '"');
    const uint64_t backslash = w ^ (kOnes * '\\');
    // A byte's high bit is set where it is zero (quote, backslash), below 0x20, or >= 0x80;
    // borrows make only bytes above the first such one unreliable.
    const uint64_t special =
        ((quote - kOnes) & ~quote) | ((backslash - kOnes) & ~backslash) | (w - kOnes * 0x20) | w;
    const uint64_t hits = special & kHighs;
    if (hits != 0) return p + __builtin_ctzll(hits) / 8;  // little-endian: the first byte
    p += 8;
  }
  return p;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of the four hex digits at `p` (at least 4 bytes readable), or -1.
int32_t Hex4(const char* p) {
  int32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int h = HexValue(p[i]);
    if (h < 0) return -1;
    v = v << 4 | h;
  }
  return v;
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | cp >> 6));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | cp >> 12));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | cp >> 18));
    out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// How an error names the byte it stopped at.
std::string Describe(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u > 0x20 && u < 0x7f) return std::string("'") + c + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 0xf];
}

}  // namespace

JsonReader::JsonReader(std::string_view text)
    : begin_(text.data()), pos_(text.data()), end_(text.data() + text.size()) {
  if (!text.empty() && static_cast<unsigned char>(text[0]) == 0xef) {
    if (text.substr(0, 3) != "\xef\xbb\xbf") {
      Fail(0, "invalid BOM; must be 0xEF 0xBB 0xBF if given");
    } else {
      pos_ += 3;
    }
  }
}

bool JsonReader::Fail(size_t at, std::string_view what) {
  if (failed()) return false;
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (begin_[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  error_ = "invalid JSON: parse error at line " + std::to_string(line) + ", column " +
           std::to_string(at - line_start + 1) + ": " + std::string(what);
  return false;
}

bool JsonReader::FailWith(std::string message) {
  if (failed()) return false;
  error_ = std::move(message);
  if (error_.empty()) error_ = "invalid JSON";
  return false;
}

bool JsonReader::Unexpected(std::string_view expected) {
  if (pos_ == end_)
    return Fail(offset(), "unexpected end of input; expected " + std::string(expected));
  return Fail(offset(), "unexpected " + Describe(*pos_) + "; expected " + std::string(expected));
}

void JsonReader::SkipWhitespace() {
  while (pos_ != end_ && (*pos_ == ' ' || *pos_ == '\n' || *pos_ == '\r' || *pos_ == '\t')) ++pos_;
}

JsonReader::Type JsonReader::Peek() {
  if (failed()) return Type::kError;
  if (peeked_ && pos_ == peeked_at_) return peeked_type_;  // a Read after a Peek asks again
  SkipWhitespace();
  peeked_ = true;
  peeked_at_ = pos_;
  peeked_type_ = PeekAtValue();
  return peeked_type_;
}

JsonReader::Type JsonReader::PeekAtValue() {
  if (pos_ == end_) {
    Unexpected("a value");
    return Type::kError;
  }
  switch (*pos_) {
    case '{':
      return Type::kObject;
    case '[':
      return Type::kArray;
    case '"':
      return Type::kString;
    case 't':
    case 'f':
      return Type::kBoolean;
    case 'n':
      return Type::kNull;
    default:
      break;
  }
  if (*pos_ != '-' && !IsDigit(*pos_)) {
    Unexpected("a value");
    return Type::kError;
  }
  return ScanNumber() ? number_type_ : Type::kError;
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, typed as JsonReader::Type says.
bool JsonReader::ScanNumber() {
  const char* p = pos_;
  const bool negative = *p == '-';
  if (negative) ++p;
  const char* digits = p;
  uint64_t value = 0;  // of the first 19 digits, which cannot overflow
  if (p != end_ && *p == '0') {
    ++p;
  } else if (p != end_ && IsDigit(*p)) {
    while (p != end_ && IsDigit(*p)) {
      if (p - digits < 19) value = value * 10 + static_cast<uint64_t>(*p - '0');
      ++p;
    }
  } else {
    return Fail(static_cast<size_t>(p - begin_), "invalid number; expected a digit");
  }
  const char* digits_end = p;
  bool integral = true;
  if (p != end_ && *p == '.') {
    ++p;
    if (p == end_ || !IsDigit(*p)) {
      return Fail(static_cast<size_t>(p - begin_), "invalid number; expected a digit after '.'");
    }
    while (p != end_ && IsDigit(*p)) ++p;
    integral = false;
  }
  if (p != end_ && (*p == 'e' || *p == 'E')) {
    ++p;
    if (p != end_ && (*p == '+' || *p == '-')) ++p;
    if (p == end_ || !IsDigit(*p)) {
      return Fail(static_cast<size_t>(p - begin_),
                  "invalid number; expected a digit in the exponent");
    }
    while (p != end_ && IsDigit(*p)) ++p;
    integral = false;
  }
  number_end_ = p;
  if (integral) {
    bool fits = digits_end - digits <= 20;
    if (fits && digits_end - digits == 20) {  // the 20th digit may overflow
      fits = !__builtin_mul_overflow(value, uint64_t{10}, &value) &&
             !__builtin_add_overflow(value, static_cast<uint64_t>(digits[19] - '0'), &value);
    }
    if (fits && !negative) {
      number_type_ = Type::kUnsigned;
      number_value_ = value;
      return true;
    }
    if (fits && value <= uint64_t{1} << 63) {
      number_type_ = Type::kSigned;
      number_value_ = 0;
      return true;
    }
  }
  // A float (or an integer no 64-bit type holds, which nlohmann reads as one): it must be finite.
  number_type_ = Type::kFloat;
  number_value_ = 0;
  const std::string token(pos_, p);
  if (!std::isfinite(std::strtod(token.c_str(), nullptr))) {
    return Fail(offset(), "number overflow parsing '" + token.substr(0, 64) + "'");
  }
  return true;
}

bool JsonReader::ReadLiteral(std::string_view literal) {
  if (static_cast<size_t>(end_ - pos_) < literal.size() ||
      std::memcmp(pos_, literal.data(), literal.size()) != 0) {
    return Fail(offset(), "invalid literal; expected '" + std::string(literal) + "'");
  }
  pos_ += literal.size();
  first_ = false;
  return true;
}

bool JsonReader::ReadNull() {
  if (Peek() != Type::kNull) return failed() ? false : Unexpected("null");
  return ReadLiteral("null");
}

bool JsonReader::ReadBool(bool* out) {
  if (Peek() != Type::kBoolean) return failed() ? false : Unexpected("a boolean");
  *out = *pos_ == 't';
  return ReadLiteral(*out ? "true" : "false");
}

bool JsonReader::ReadUnsigned(uint64_t* out) {
  if (Peek() != Type::kUnsigned) return failed() ? false : Unexpected("an unsigned integer");
  *out = number_value_;
  pos_ = number_end_;
  first_ = false;
  return true;
}

bool JsonReader::ReadString(std::string_view* out) {
  if (Peek() != Type::kString) return failed() ? false : Unexpected("a string");
  // The common case: no escapes, so the string is a view of the text.
  const auto* p = reinterpret_cast<const unsigned char*>(pos_ + 1);
  const auto* end = reinterpret_cast<const unsigned char*>(end_);
  const auto* start = p;
  while (p != end) {
    p = SkipPlainBytes(p, end);
    if (p == end) break;
    const unsigned char c = *p;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++p;
      continue;
    }
    if (c == '"') {
      *out = std::string_view(reinterpret_cast<const char*>(start), static_cast<size_t>(p - start));
      pos_ = reinterpret_cast<const char*>(p + 1);
      first_ = false;
      return true;
    }
    if (c == '\\') break;
    const size_t at = static_cast<size_t>(reinterpret_cast<const char*>(p) - begin_);
    if (c < 0x20) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      return Fail(at, std::string("invalid string: control character U+00") + kHex[c >> 4] +
                          kHex[c & 0xf] + " must be escaped");
    }
    const size_t n = Utf8SequenceLength(p, end);
    if (n == 0) return Fail(at, "invalid string: ill-formed UTF-8 byte");
    p += n;
  }
  if (p == end)
    return Fail(static_cast<size_t>(end_ - begin_), "invalid string: missing closing quote");
  return ReadEscapedString(reinterpret_cast<const char*>(start), out);
}

// The slow path of ReadString, from `start` (just past the opening quote) once a backslash was
// seen: the string is unescaped into scratch_.
bool JsonReader::ReadEscapedString(const char* start, std::string_view* out) {
  scratch_.clear();
  const char* p = start;
  while (true) {
    if (p == end_)
      return Fail(static_cast<size_t>(end_ - begin_), "invalid string: missing closing quote");
    const auto c = static_cast<unsigned char>(*p);
    const size_t at = static_cast<size_t>(p - begin_);
    if (c == '"') break;
    if (c < 0x20) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      return Fail(at, std::string("invalid string: control character U+00") + kHex[c >> 4] +
                          kHex[c & 0xf] + " must be escaped");
    }
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(reinterpret_cast<const unsigned char*>(p),
                                          reinterpret_cast<const unsigned char*>(end_));
      if (n == 0) return Fail(at, "invalid string: ill-formed UTF-8 byte");
      scratch_.append(p, n);
      p += n;
      continue;
    }
    if (c != '\\') {
      scratch_.push_back(static_cast<char>(c));
      ++p;
      continue;
    }
    if (end_ - p < 2)
      return Fail(static_cast<size_t>(end_ - begin_), "invalid string: missing closing quote");
    const char e = p[1];
    p += 2;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        scratch_.push_back(e);
        continue;
      case 'b':
        scratch_.push_back('\b');
        continue;
      case 'f':
        scratch_.push_back('\f');
        continue;
      case 'n':
        scratch_.push_back('\n');
        continue;
      case 'r':
        scratch_.push_back('\r');
        continue;
      case 't':
        scratch_.push_back('\t');
        continue;
      case 'u':
        break;
      default:
        return Fail(at, "invalid string: forbidden character after backslash");
    }
    const int32_t unit = end_ - p >= 4 ? Hex4(p) : -1;
    if (unit < 0) return Fail(at, "invalid string: '\\u' must be followed by 4 hex digits");
    p += 4;
    uint32_t cp = static_cast<uint32_t>(unit);
    if (cp >= 0xdc00 && cp <= 0xdfff) {
      return Fail(at, "invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF");
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
      const int32_t low = end_ - p >= 6 && p[0] == '\\' && p[1] == 'u' ? Hex4(p + 2) : -1;
      if (low < 0xdc00 || low > 0xdfff) {
        return Fail(at,
                    "invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
      }
      p += 6;
      cp = 0x10000 + ((cp - 0xd800) << 10) + (static_cast<uint32_t>(low) - 0xdc00);
    }
    AppendUtf8(&scratch_, cp);
  }
  *out = scratch_;
  pos_ = p + 1;
  first_ = false;
  return true;
}

bool JsonReader::BeginObject() {
  if (Peek() != Type::kObject) return failed() ? false : Unexpected("'{'");
  ++pos_;
  first_ = true;
  return true;
}

bool JsonReader::BeginArray() {
  if (Peek() != Type::kArray) return failed() ? false : Unexpected("'['");
  ++pos_;
  first_ = true;
  return true;
}

bool JsonReader::NextMember(bool* more, std::string_view* key) {
  if (failed()) return false;
  SkipWhitespace();
  const bool first = std::exchange(first_, false);
  if (pos_ != end_ && *pos_ == '}') {
    ++pos_;
    *more = false;
    return true;
  }
  if (!first) {
    if (pos_ == end_ || *pos_ != ',') return Unexpected("',' or '}'");
    ++pos_;
    SkipWhitespace();
    if (pos_ == end_ || *pos_ != '"') return Unexpected("a string (a member's name)");
  } else if (pos_ == end_ || *pos_ != '"') {
    return Unexpected("a string (a member's name) or '}'");
  }
  if (!ReadString(key)) return false;
  SkipWhitespace();
  if (pos_ == end_ || *pos_ != ':') return Unexpected("':'");
  ++pos_;
  *more = true;
  return true;
}

bool JsonReader::NextElement(bool* more) {
  if (failed()) return false;
  SkipWhitespace();
  const bool first = std::exchange(first_, false);
  if (pos_ != end_ && *pos_ == ']') {
    ++pos_;
    *more = false;
    return true;
  }
  if (!first) {
    if (pos_ == end_ || *pos_ != ',') return Unexpected("',' or ']'");
    ++pos_;
  }
  *more = true;
  return true;
}

bool JsonReader::ExpectEnd() {
  if (failed()) return false;
  SkipWhitespace();
  if (pos_ != end_) return Unexpected("end of input");
  return true;
}

bool JsonReader::SkipValue(int depth, int max_depth, std::string_view parent_path,
                           std::string_view path, std::string_view root) {
  // The containers open inside the skipped value, outermost first, with the member (key) or
  // element (index) now being read in each: what an error's path is made of.
  struct Open {
    bool object;
    size_t next_index = 0;
    std::string key;
  };
  std::vector<Open> open;
  // The path of the innermost open container.
  const auto innermost_path = [&]() {
    if (open.empty()) return std::string(parent_path);
    std::string out(path);
    for (size_t k = 0; k + 1 < open.size(); ++k) {
      if (!open[k].object) {
        out += "[" + std::to_string(open[k].next_index - 1) + "]";
        continue;
      }
      if (!out.empty()) out += '.';
      out += open[k].key;
    }
    return out;
  };
  while (true) {
    const Type type = Peek();
    if (type == Type::kError) return false;
    if (type == Type::kObject || type == Type::kArray) {
      if (depth + static_cast<int>(open.size()) > max_depth) {
        const std::string where = innermost_path();
        return FailWith((where.empty() ? std::string(root) : where) +
                        ": JSON nesting is deeper than the limit of " + std::to_string(max_depth) +
                        " levels");
      }
      if (!(type == Type::kObject ? BeginObject() : BeginArray())) return false;
      open.push_back({type == Type::kObject, 0, {}});
    } else if (type == Type::kString) {
      std::string_view ignored;
      if (!ReadString(&ignored)) return false;
    } else if (type == Type::kBoolean) {
      bool ignored;
      if (!ReadBool(&ignored)) return false;
    } else if (type == Type::kNull) {
      if (!ReadNull()) return false;
    } else {  // a number, scanned by Peek
      pos_ = number_end_;
      first_ = false;
    }
    // Close what ends here, up to the next value to read.
    while (true) {
      if (open.empty()) return true;
      Open& top = open.back();
      bool more = false;
      if (top.object) {
        std::string_view key;
        if (!NextMember(&more, &key)) return false;
        if (more) top.key.assign(key);
      } else {
        if (!NextElement(&more)) return false;
        if (more) ++top.next_index;
      }
      if (more) break;
      open.pop_back();
    }
  }
}

}  // namespace ferry
