// Raw TCPStore wire bytes, built by hand from the grammar in
// docs/store-protocol.md, for the store's tests: golden requests for the
// parser, hostile ones for the server. Integers are little-endian, as torch
// sends them (every machine trun runs on is).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace trun::store::golden {

inline std::string U64(uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }
inline std::string U32(uint32_t v) { return std::string(reinterpret_cast<char*>(&v), 4); }
// A length-prefixed string, as keys and values travel.
inline std::string Str(const std::string& s) { return U64(s.size()) + s; }
inline std::string Op1(uint8_t op) { return std::string(1, static_cast<char>(op)); }

}  // namespace trun::store::golden
