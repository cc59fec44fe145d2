// libFuzzer target for the store's request parser: any byte stream, cut into
// pieces of sizes the input chooses, must parse or fail cleanly, within the
// limits, and never read or allocate beyond them.
//
// Built and run for a bounded time by `make fuzz` (part of `make test`);
// seeds in fuzz/corpus/store_parser.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "store/parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  trun::store::Limits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 1024;
  limits.max_keys_per_request = 16;
  limits.max_buffered_bytes = 4096;
  trun::store::RequestParser parser(limits);
  // The first byte picks the piece size, so split messages are explored too.
  const size_t piece = 1 + data[0] % 64;
  ++data;
  --size;
  for (size_t i = 0; i < size; i += piece) {
    size_t n = size - i < piece ? size - i : piece;
    if (!parser.Append(reinterpret_cast<const char*>(data + i), n)) return 0;
    trun::store::Request r;
    while (true) {
      auto res = parser.Next(&r);
      if (res == trun::store::RequestParser::Result::kError) return 0;
      if (res == trun::store::RequestParser::Result::kNeedMore) break;
      for (const auto& a : r.args) {
        if (a.size() > limits.max_value_bytes) std::abort();
      }
      if (r.args.size() > 2 * limits.max_keys_per_request + 1) std::abort();
    }
    if (parser.buffered() > limits.max_buffered_bytes) std::abort();
  }
  return 0;
}
