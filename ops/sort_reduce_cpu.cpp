#include "ops/sort_reduce_cpu.h"

namespace detops::cpu {

std::vector<int64_t> stable_sort_by_key(const std::vector<int64_t>& keys, int64_t num_keys) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int64_t> perm(n);
  if (num_keys <= 4 * n + 1024) {
    // Counting sort: stable by construction (positions are placed in increasing order).
    std::vector<int64_t> offset(num_keys + 1, 0);
    for (int64_t k : keys) ++offset[k + 1];
    std::partial_sum(offset.begin(), offset.end(), offset.begin());
    for (int64_t i = 0; i < n; ++i) perm[offset[keys[i]]++] = i;
  } else {
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  }
  return perm;
}

std::vector<int64_t> segment_starts(const std::vector<int64_t>& keys, const std::vector<int64_t>& perm) {
  std::vector<int64_t> starts;
  const int64_t n = static_cast<int64_t>(perm.size());
  for (int64_t p = 0; p < n; ++p) {
    if (p == 0 || keys[perm[p]] != keys[perm[p - 1]]) starts.push_back(p);
  }
  starts.push_back(n);
  return starts;
}

}  // namespace detops::cpu
