// `trun store`: a standalone TCPStore-compatible server.
// Thread-safety: runs once per process, on the calling thread.
#pragma once

#include <string>
#include <vector>

namespace trun::cli {

int RunStoreCommand(const std::vector<std::string>& args);

}  // namespace trun::cli
