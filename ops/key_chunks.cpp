// The host planner of chunked engine calls (ops/key_chunks.h).
#include "ops/key_chunks.h"

#include <algorithm>

namespace detops {

std::vector<KeyChunk> plan_key_chunks(const std::vector<int64_t>& counts, int64_t lo, int64_t hi, int64_t width,
                                      int64_t limit) {
  TORCH_CHECK(width >= 1 && limit >= 1 && lo <= hi, "detops: bad key chunk plan arguments");
  std::vector<KeyChunk> chunks;
  KeyChunk open{lo, lo, 0};
  const auto close = [&] {
    if (open.count > 0) chunks.push_back(open);
  };
  for (size_t b = 0; b < counts.size(); ++b) {
    const int64_t first = lo + static_cast<int64_t>(b) * width;
    if (first >= hi) break;
    const int64_t last = std::min(hi, first + width);
    const int64_t c = counts[b];
    if (c > limit) {  // alone, to be split further or rejected
      close();
      chunks.push_back({first, last, c});
      open = {last, last, 0};
    } else if (open.count + c > limit) {
      close();
      open = {first, last, c};
    } else {
      open.hi = last;
      open.count += c;
    }
  }
  close();
  return chunks;
}

}  // namespace detops
