#include "metadata/etcd/json_object_stream.h"

namespace ferry {

namespace {
bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
}  // namespace

void JsonObjectStream::Reset() {
  buffer_.clear();
  start_ = scan_ = 0;
  depth_ = 0;
  in_string_ = escaped_ = false;
}

Status JsonObjectStream::Feed(std::string_view bytes, const ObjectFn& on_object) {
  buffer_.append(bytes);
  while (scan_ < buffer_.size()) {
    const char c = buffer_[scan_];
    if (depth_ == 0) {
      // Between objects: only whitespace, then the next object's '{'.
      if (IsJsonSpace(c)) {
        start_ = ++scan_;
        continue;
      }
      if (c != '{') {
        static constexpr char kHex[] = "0123456789abcdef";
        const auto byte = static_cast<unsigned char>(c);
        return InvalidArgumentError(std::string("unexpected byte 0x") + kHex[byte >> 4] +
                                    kHex[byte & 0xf] + " between JSON objects in the stream");
      }
      start_ = scan_;
      depth_ = 1;
      ++scan_;
      continue;
    }
    ++scan_;
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        const std::string_view object(buffer_.data() + start_, scan_ - start_);
        const bool more = on_object(object);
        start_ = scan_;
        if (!more) return CanceledError("the consumer stopped reading the stream");
      }
    }
    if (scan_ - start_ > max_object_bytes_) {
      return InvalidArgumentError("a streamed JSON object exceeds " +
                                  std::to_string(max_object_bytes_) + " bytes");
    }
  }
  // Drop consumed bytes so the buffer holds at most one partial object.
  buffer_.erase(0, start_);
  scan_ -= start_;
  start_ = 0;
  if (buffer_.size() > max_object_bytes_) {
    return InvalidArgumentError("a streamed JSON object exceeds " +
                                std::to_string(max_object_bytes_) + " bytes");
  }
  return Status::Ok();
}

}  // namespace ferry
