#include "common/gpus.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "common/strings.h"

namespace trun {

int CountGpus() {
  int count = 0;
  if (DIR* d = opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++count;
    }
    closedir(d);
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string_view v = Trim(visible);
    int listed = v.empty() ? 0 : static_cast<int>(Split(v, ',').size());
    count = std::min(count, listed);
  }
  return count;
}

}  // namespace trun
