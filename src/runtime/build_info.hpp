// What a binary was built from, for run metadata, traces and --version.
#pragma once

namespace nanogpt {

// The source tree's commit at the last build, 12 hex digits, with "-dirty" if tracked files had
// changes ("unknown" outside a git checkout). Written by cmake/write_revision.cmake on every build
// rather than at configure time, so a rebuild after a commit never reports the previous one.
const char* build_revision();

}  // namespace nanogpt
