// Signal names both ways, as torchrun prints them ("SIGKILL").
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trun::proc {

// "SIGKILL" for 9; "SIG<n>" for a number with no name.
std::string SignalName(int sig);
// Accepts "SIGTERM", "TERM" and "15".
std::optional<int> ParseSignal(std::string_view name);

}  // namespace trun::proc
