#include "common/wire_codec.h"

namespace ferry {

Status WireReader::Truncated(std::string_view field, size_t need) const {
  return InvalidArgumentError(std::string(what_) + ": truncated at field '" + std::string(field) +
                              "' (needs " + std::to_string(need) + " bytes, " +
                              std::to_string(in_.size()) + " left)");
}

Status WireReader::GetU8(std::string_view field, uint8_t* v) {
  if (in_.empty()) return Truncated(field, 1);
  *v = static_cast<uint8_t>(in_[0]);
  in_.remove_prefix(1);
  return Status::Ok();
}

Status WireReader::GetU16(std::string_view field, uint16_t* v) {
  if (in_.size() < 2) return Truncated(field, 2);
  *v = LoadLe16(in_.data());
  in_.remove_prefix(2);
  return Status::Ok();
}

Status WireReader::GetU32(std::string_view field, uint32_t* v) {
  if (in_.size() < 4) return Truncated(field, 4);
  *v = LoadLe32(in_.data());
  in_.remove_prefix(4);
  return Status::Ok();
}

Status WireReader::GetU64(std::string_view field, uint64_t* v) {
  if (in_.size() < 8) return Truncated(field, 8);
  *v = LoadLe64(in_.data());
  in_.remove_prefix(8);
  return Status::Ok();
}

Status WireReader::GetBytes(std::string_view field, size_t n, std::string_view* v) {
  if (in_.size() < n) return Truncated(field, n);
  *v = in_.substr(0, n);
  in_.remove_prefix(n);
  return Status::Ok();
}

Status WireReader::GetString(std::string_view field, std::string* v, size_t max_length) {
  if (in_.size() < 4) return Truncated(field, 4);
  const uint32_t len = LoadLe32(in_.data());
  if (len > max_length) {
    return InvalidArgumentError(std::string(what_) + ": field '" + std::string(field) + "' of " +
                                std::to_string(len) + " bytes exceeds its limit of " +
                                std::to_string(max_length));
  }
  if (in_.size() - 4 < len) return Truncated(field, size_t{4} + len);
  v->assign(in_.data() + 4, len);
  in_.remove_prefix(size_t{4} + len);
  return Status::Ok();
}

std::string_view WireReader::TakeRest() {
  std::string_view rest = in_;
  in_ = {};
  return rest;
}

Status WireReader::Finish() const {
  if (in_.empty()) return Status::Ok();
  return InvalidArgumentError(std::string(what_) + ": " + std::to_string(in_.size()) +
                              " trailing bytes");
}

}  // namespace ferry
