// JsonReader: a strict, pull-style JSON reader over one in-memory text, for decoders that fill
// their structs directly instead of building a document first (segment_desc_codec.cc).
//
// It accepts the texts nlohmann::json's parser accepts in its default strict mode
// (json_reader_test.cc checks the two agree), with one deliberate difference: nlohmann stops
// at a NUL byte after the value and ignores what follows ("[1]\0x"), the reader refuses it as
// trailing bytes. That is RFC 8259 JSON with one value and nothing but whitespace after it, an
// optional UTF-8 byte order mark first, strings of well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF) whose \u escapes pair their surrogates, no raw
// control characters in strings, no leading zeros, and numbers whose value is finite as a
// double. Numbers are typed as nlohmann types them: an integer without '-'
// that fits in uint64 is unsigned, one with '-' that fits in int64 is signed, anything else is
// a float.
//
// Errors: the first failing read returns false and the reader keeps the error:
// "invalid JSON: parse error at line L, column C: <what>", where C is the 1-based byte offset in
// the line of the offending byte (one past the end at end of input). Every later read fails.
// Strings the reader returns are views into the text, or, when they hold escapes, into a buffer
// of the reader's that the next read overwrites. No read recurses, so nesting costs no stack.
//
// Thread contract: not thread-safe; one reader per text, used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

class JsonReader {
 public:
  enum class Type : uint8_t {
    kNull,
    kBoolean,
    kString,
    kArray,
    kObject,
    kSigned,    // an integer with '-' that fits in int64
    kUnsigned,  // an integer without '-' that fits in uint64
    kFloat,     // any other number
    kError,     // no value starts here; the reader has failed
  };

  // `text` is borrowed and must outlive the reader. A UTF-8 byte order mark at its start is
  // skipped.
  explicit JsonReader(std::string_view text);

  bool failed() const { return !error_.empty(); }
  // The error's text; empty while no read failed.
  const std::string& error() const { return error_; }
  // Byte offset of the next unread byte.
  size_t offset() const { return static_cast<size_t>(pos_ - begin_); }

  // The type of the next value, after whitespace, without consuming it. A number is scanned
  // whole (its value is kept for ReadUnsigned); a malformed or overflowing one, end of input
  // or a byte no value starts with fails (kError).
  Type Peek();

  // Each Read consumes the next value, which must be of its type (check with Peek first:
  // a value of another type is a failure, reported as a syntax error).
  bool ReadNull();
  bool ReadBool(bool* out);
  bool ReadUnsigned(uint64_t* out);
  bool ReadString(std::string_view* out);

  // Containers. BeginObject/BeginArray consume the opening bracket. NextMember then reads the
  // ',' before each member after the first, the member's key and its ':' (or the closing '}',
  // setting *more to false); the caller reads or skips the member's value before the next call.
  // NextElement does the same for arrays. A trailing comma is a syntax error.
  bool BeginObject();
  bool NextMember(bool* more, std::string_view* key);
  bool BeginArray();
  bool NextElement(bool* more);

  // Skips the next value of any type, checking its syntax. The value sits at `depth` (1 for
  // the document), its path is `path` ("a.b[2]", "" for the document) and its parent's is
  // `parent_path`. A container in it (or the value itself) nested deeper than `max_depth`
  // fails with "<P>: JSON nesting is deeper than the limit of <max_depth> levels", where <P> is
  // the path of the innermost container open around it, or `root` when that is the document.
  // Only errors use the paths. Memory grows with the nesting, never with the length.
  bool SkipValue(int depth, int max_depth, std::string_view parent_path, std::string_view path,
                 std::string_view root);

  // Whitespace up to the end of the text, and nothing else.
  bool ExpectEnd();

  // Fails with "<what>", positioned at byte `at` (a syntax error) unless a read already failed.
  // Returns false.
  bool Fail(size_t at, std::string_view what);
  // Fails with `message` as is (not a syntax error: no position is added). Returns false.
  bool FailWith(std::string message);

 private:
  void SkipWhitespace();
  Type PeekAtValue();
  bool ScanNumber();
  bool ReadEscapedString(const char* start, std::string_view* out);
  bool Expect(char c, std::string_view what);
  bool Unexpected(std::string_view expected);
  bool ReadLiteral(std::string_view literal);

  const char* begin_;
  const char* pos_;
  const char* end_;
  bool first_ = false;  // a container was just opened: no ',' before its first entry
  // What the last Peek saw, once one was made: where the value starts, and its type. (The flag,
  // not a null peeked_at_, says whether there is one: an empty text may start at nullptr.)
  bool peeked_ = false;
  const char* peeked_at_ = nullptr;
  Type peeked_type_ = Type::kError;
  // The number Peek scanned last: where it ends, its type and unsigned value.
  const char* number_end_ = nullptr;
  Type number_type_ = Type::kError;
  uint64_t number_value_ = 0;
  std::string scratch_;  // unescaped strings
  std::string error_;
};

}  // namespace ferry
