// JsonObjectStream: splits a byte stream of concatenated JSON objects (etcd's JSON gateway sends
// one object per streamed message, usually newline-separated) into whole objects, however the
// bytes were cut into chunks. It only finds object boundaries (braces outside strings); parsing
// each object is the caller's job.
//
// Thread contract: thread-compatible (one owner at a time).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

class JsonObjectStream {
 public:
  // Receives one complete top-level object ("{...}"); returns false to stop feeding.
  using ObjectFn = std::function<bool(std::string_view object)>;

  // `max_object_bytes`: an object (or garbage run) longer than this is an error.
  explicit JsonObjectStream(size_t max_object_bytes) : max_object_bytes_(max_object_bytes) {}

  // Appends `bytes` and hands every object completed by them to `on_object`, in order.
  // Whitespace between objects is skipped. Errors: InvalidArgument when anything else appears
  // between objects or an object exceeds the limit (the stream is then unusable: Reset() it);
  // Canceled when `on_object` returned false (the remaining bytes stay buffered).
  Status Feed(std::string_view bytes, const ObjectFn& on_object);

  // Forgets buffered bytes and parser state (e.g. for a new connection).
  void Reset();

  // Bytes received but not yet part of a complete object.
  size_t buffered() const { return buffer_.size() - start_; }

 private:
  const size_t max_object_bytes_;
  std::string buffer_;
  size_t start_ = 0;  // first byte of the object being assembled
  size_t scan_ = 0;   // next byte to examine
  int depth_ = 0;     // brace/bracket nesting inside the current object
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace ferry
