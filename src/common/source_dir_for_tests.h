// Where the unit tests find files of the source tree (tools/, testdata/).
// TRUN_SOURCE_DIR names the tree (ctest sets it, CMakeLists.txt); else the
// test binary is taken to be in a build folder of the tree
// (build/trun_tests). Not a compile-time definition: an absolute path on the
// compiler's command line would make every clone miss the compiler cache.
//
// Thread-safety: reads the environment; call it from tests only.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace trun {

inline std::filesystem::path SourceDirForTests() {
  if (const char* dir = std::getenv("TRUN_SOURCE_DIR")) return dir;
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path();
}

}  // namespace trun
