#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

TEST(FileIo, AtomicWriteReplacesContentsAndLeavesNoTemporary) {
  TempDir dir;
  std::string path = dir.path() + "/a.txt";
  write_file_atomic(path, "first");
  write_file_atomic(path, "second version");
  EXPECT_EQ(read_file(path), "second version");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(FileIo, AbandonedWriterLeavesOldFileIntact) {
  TempDir dir;
  std::string path = dir.path() + "/a.txt";
  write_file_atomic(path, "complete");
  {
    AtomicFileWriter w(path);
    w.write("partial", 7);
    // destroyed without commit(), as when an exception unwinds mid-write
  }
  EXPECT_EQ(read_file(path), "complete");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(FileIo, WriteAtPatchesHeader) {
  TempDir dir;
  std::string path = dir.path() + "/h.bin";
  AtomicFileWriter w(path);
  w.write("xxxxbody", 8);
  w.write_at(0, "HEAD", 4);
  w.commit();
  EXPECT_EQ(read_file(path), "HEADbody");
}

TEST(FileIo, MappedFileSeesBytes) {
  TempDir dir;
  std::string path = dir.path() + "/m.bin";
  write_file_atomic(path, std::string("\x01\x02\x03", 3));
  MappedFile m(path);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.data()[2], 3);
}

TEST(FileIo, MissingFileErrorNamesPath) {
  try {
    read_file("/nonexistent/dir/file.txt");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/file.txt"), std::string::npos);
  }
}

TEST(FileIo, GlobIsSorted) {
  TempDir dir;
  for (const char* n : {"c.bin", "a.bin", "b.bin", "x.txt"})
    write_file_atomic(dir.path() + "/" + n, "");
  auto files = glob_sorted(dir.path() + "/*.bin");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], dir.path() + "/a.bin");
  EXPECT_EQ(files[2], dir.path() + "/c.bin");
}

}  // namespace
}  // namespace nanogpt
