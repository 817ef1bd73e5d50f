#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace ferry {
namespace {

using crc32c_internal::ExtendHardware;
using crc32c_internal::ExtendPortable;
using crc32c_internal::HardwareAvailable;

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(ExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros, of ones, ascending, descending.
  std::string bytes(32, '\0');
  EXPECT_EQ(Crc32c(bytes), 0x8A9136AAu);
  bytes.assign(32, '\xff');
  EXPECT_EQ(Crc32c(bytes), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(bytes), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<char>(31 - i);
  EXPECT_EQ(Crc32c(bytes), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendingPieceByPieceEqualsOneShot) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> data(100'000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{768}, size_t{24'577}, data.size()}) {
    uint32_t crc = Crc32cExtend(0, data.data(), cut);
    crc = Crc32cExtend(crc, data.data() + cut, data.size() - cut);
    EXPECT_EQ(crc, whole) << cut;
  }
  uint32_t crc = 0;
  for (size_t at = 0; at < data.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 5000, data.size() - at);
    crc = ExtendPortable(crc, data.data() + at, n);
    at += n;
  }
  EXPECT_EQ(crc, whole);
}

TEST(Crc32cTest, OneFlippedBitChangesTheChecksum) {
  std::string data(4096, 'x');
  const uint32_t good = Crc32c(data);
  for (size_t at : {size_t{0}, size_t{1000}, size_t{4095}}) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = data;
      bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
      EXPECT_NE(Crc32c(bad), good) << at << ":" << bit;
    }
  }
}

TEST(Crc32cTest, HardwareMatchesPortableOnEveryLengthAndAlignment) {
  if (!HardwareAvailable()) GTEST_SKIP() << "no SSE4.2 crc32 on this CPU";
  std::mt19937_64 rng(11);
  // Past three long blocks (3 x 8 KiB) so both interleaved paths and the tails run.
  std::vector<unsigned char> data(3 * 8192 * 2 + 3 * 256 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t n : {3 * 256 - 1, 3 * 256, 3 * 256 + 1, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1,
                   3 * 8192 + 3 * 256 + 9, 2 * 3 * 8192 + 3 * 256 + 55}) {
    lengths.push_back(n);
  }
  for (int i = 0; i < 200; ++i) lengths.push_back(rng() % (data.size() - 8));
  for (size_t n : lengths) {
    for (size_t offset = 0; offset < 8; ++offset) {
      if (offset + n > data.size()) continue;
      const uint32_t seed = static_cast<uint32_t>(rng());
      ASSERT_EQ(ExtendHardware(seed, data.data() + offset, n),
                ExtendPortable(seed, data.data() + offset, n))
          << "length " << n << " offset " << offset;
    }
  }
}

}  // namespace
}  // namespace ferry
