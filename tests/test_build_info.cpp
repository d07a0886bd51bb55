#include "runtime/build_info.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// Whether a shell command succeeded; its stdout, without the trailing newline, goes to `out`.
bool shell_output(const std::string& cmd, std::string& out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char buf[256];
  out.clear();
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return pclose(p) == 0;
}

// The revision is read at build time, so it names the commit the tests were built from: a value
// taken when CMake configured would name an older commit after any later commit and rebuild.
TEST(BuildInfo, RevisionIsTheCheckedOutCommit) {
  std::string head;
  if (!shell_output("git -C '" + source_path("") + "' rev-parse --short=12 HEAD 2>/dev/null",
                    head) ||
      head.empty()) {
    GTEST_SKIP() << "the source tree is not a git checkout";
  }
  const std::string revision = build_revision();
  EXPECT_EQ(revision.substr(0, head.size()), head) << "built from " << revision;
  const std::string suffix = revision.substr(std::min(revision.size(), head.size()));
  EXPECT_TRUE(suffix.empty() || suffix == "-dirty") << revision;
}

TEST(BuildInfo, VersionFlagNamesTheRevision) {
  CommandResult r = run_nanogpt("--version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::string("(") + build_revision() + ")"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nanogpt
