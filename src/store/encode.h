// Appending wire values to an outgoing buffer, as docs/store-protocol.md
// lays them out; shared by the server's replies and the client's requests.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trun::store {

inline void PutU8(std::string& o, uint8_t v) { o.push_back(static_cast<char>(v)); }
inline void PutU32(std::string& o, uint32_t v) { o.append(reinterpret_cast<char*>(&v), 4); }
inline void PutI64(std::string& o, int64_t v) { o.append(reinterpret_cast<char*>(&v), 8); }
inline void PutBytes(std::string& o, std::string_view b) {
  PutI64(o, static_cast<int64_t>(b.size()));
  o.append(b);
}

}  // namespace trun::store
