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

namespace detops::cpu {
namespace {

// Buffers a thread has released, kept for its next calls; at most kKeep of them, each at most kKeepBytes.
constexpr size_t kKeep = 8;
constexpr size_t kKeepBytes = size_t{64} << 20;

struct ScratchPool {
  std::vector<std::pair<size_t, char*>> free;
  ~ScratchPool() {
    for (auto& [size, data] : free) delete[] data;
  }
};

ScratchPool& pool() {
  thread_local ScratchPool p;
  return p;
}

}  // namespace

Scratch::Scratch(size_t bytes) : data_(nullptr), size_(0) {
  auto& free = pool().free;
  size_t best = free.size();
  for (size_t j = 0; j < free.size(); ++j) {
    if (free[j].first >= bytes && (best == free.size() || free[j].first < free[best].first)) best = j;
  }
  if (best < free.size()) {
    size_ = free[best].first;
    data_ = free[best].second;
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
    return;
  }
  size_ = std::max<size_t>(bytes, 64);
  data_ = new char[size_];
}

Scratch::~Scratch() {
  auto& free = pool().free;
  if (size_ > kKeepBytes) {
    delete[] data_;
    return;
  }
  if (free.size() >= kKeep) {
    // Drop the smallest kept buffer for this one if this one is larger.
    auto smallest = std::min_element(free.begin(), free.end());
    if (smallest->first >= size_) {
      delete[] data_;
      return;
    }
    delete[] smallest->second;
    free.erase(smallest);
  }
  free.emplace_back(size_, data_);
}

}  // namespace detops::cpu
