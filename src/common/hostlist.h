// SLURM's compressed host lists ("node[01-03,7],gpu-a[1-2]b") expanded to
// host names, as `scontrol show hostnames` prints them.
//
// Grammar (SLURM's hostlist.c, the parts job node lists use):
//
//   hostlist := expr ("," expr)*          commas inside [] do not split
//   expr     := text ("[" ranges "]" text)*
//   ranges   := range ("," range)*
//   range    := NUM | NUM "-" NUM          LO <= HI; the width of LO pads
//                                          every number ("01-10" -> 01..10)
//
// Several bracket groups in one expression multiply, the first varying
// slowest ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Anything else (an
// unclosed bracket, a reversed range, more than kMaxHosts names) is an
// InvalidArgument naming the list.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun {

inline constexpr size_t kMaxHosts = 1'000'000;

Result<std::vector<std::string>> ExpandHostlist(std::string_view list);

}  // namespace trun
