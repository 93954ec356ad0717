#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "dataplane/pcapng_writer.h"

namespace uroce::dataplane {
namespace {

uint32_t u32(const std::vector<uint8_t>& b, std::size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

// Every block's two length fields agree and the blocks tile the buffer exactly.
std::vector<uint32_t> block_types(const std::vector<uint8_t>& b) {
  std::vector<uint32_t> types;
  std::size_t at = 0;
  while (at < b.size()) {
    const uint32_t length = u32(b, at + 4);
    EXPECT_EQ(length % 4, 0u);
    EXPECT_LE(at + length, b.size());
    EXPECT_EQ(u32(b, at + length - 4), length);
    types.push_back(u32(b, at));
    at += length;
  }
  EXPECT_EQ(at, b.size());
  return types;
}

TEST(PcapngFormat, BlocksAreWellFormed) {
  std::vector<uint8_t> b;
  pcapng::append_section_header(b, "uroce");
  EXPECT_EQ(u32(b, 8), 0x1A2B3C4Du);
  pcapng::append_interface_description(b, "a", 65535);
  pcapng::append_interface_description(b, "port-b", 128);
  const std::vector<uint8_t> frame(61, 0xAB);  // odd length: padded
  const std::size_t epb = b.size();
  pcapng::append_enhanced_packet(b, 1, 0x0123456789ABCDEFull, frame, 100, CaptureDirection::kOutbound);
  EXPECT_EQ(block_types(b), (std::vector<uint32_t>{0x0A0D0D0A, 1, 1, 6}));
  EXPECT_EQ(u32(b, epb + 8), 1u);               // interface
  EXPECT_EQ(u32(b, epb + 12), 0x01234567u);     // timestamp high
  EXPECT_EQ(u32(b, epb + 16), 0x89ABCDEFu);     // timestamp low
  EXPECT_EQ(u32(b, epb + 20), 61u);             // captured
  EXPECT_EQ(u32(b, epb + 24), 100u);            // original
  const std::size_t options = epb + 28 + 64;    // 61 bytes padded to 64
  EXPECT_EQ(u32(b, options), 2u | (4u << 16));  // epb_flags, length 4
  EXPECT_EQ(u32(b, options + 4), 2u);           // outbound
}

// The capture holds payload bytes: a new file is its owner's only (0600), and a symbolic link in its place (another
// user's, in a shared directory such as /tmp) is refused rather than followed to truncate whatever it points at.
TEST(PcapngWriterOpen, MakesAPrivateFileAndRefusesASymbolicLink) {
  std::string dir = ::testing::TempDir() + "pcapng_open.XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string capture = dir + "/capture.pcapng";
  const mode_t old_umask = ::umask(0);
  auto opened = PcapngWriter::open(capture, {"a"}, 256, 1);
  ::umask(old_umask);
  ASSERT_TRUE(opened.ok()) << opened.error();
  opened.value()->close();
  struct stat st {};
  ASSERT_EQ(::stat(capture.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "keep me";
  const std::string link = dir + "/link.pcapng";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  auto refused = PcapngWriter::open(link, {"a"}, 256, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error(), "capture.pcapng_path '" + link + "': is a symbolic link");
  std::string kept;
  std::getline(std::ifstream(victim), kept);
  EXPECT_EQ(kept, "keep me");
  for (const std::string& f : {capture, victim, link}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace uroce::dataplane
