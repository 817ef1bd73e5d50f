// TextTable: the column-aligned tables the ferry command prints (segments, show, stats).
//
// Thread contract: value type; one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  // A row with fewer cells than the header is padded with empty ones; extra cells are kept.
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t rows() const { return rows_.size(); }
  // The header and the rows, each cell made Printable and left-aligned to its column's widest
  // cell, columns two spaces apart, trailing spaces trimmed, one '\n' after every line.
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// `text` safe to print on a terminal: control characters (below 0x20, and 0x7f) written as
// "\xNN", so a name or message taken from a store or a peer cannot move the cursor, clear the
// screen or forge a line. Bytes from 0x80 (UTF-8) are kept.
std::string Printable(std::string_view text);

// "4096 B", "64.0 KiB", "1.5 GiB": binary units, one decimal above bytes.
std::string HumanBytes(uint64_t bytes);

}  // namespace ferry::cli
