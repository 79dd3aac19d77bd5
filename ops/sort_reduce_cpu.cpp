#include "ops/sort_reduce_cpu.h"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

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

namespace {

int64_t list_nonzero_counts_scalar(const char* p, int64_t len, int32_t* listed) {
  int64_t m = 0;
  for (int64_t q = 0; q < len; ++q) {
    uint32_t count;
    std::memcpy(&count, p + 8 * q + 4, 4);
    listed[m] = static_cast<int32_t>(q);
    m += count != 0;
  }
  return m;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DETOPS_LIST_VECTORS 1

// 8 records per step: a record's upper 4 bytes tested as its 64-bit lane's high half, the indices of the
// nonzero ones compressed to the front of a vector and stored whole. NB: 256-bit vectors only (AVX-512VL), as
// the compiler's own AVX-512 code uses: on CPUs that lower their clock while 512-bit registers are in use,
// that would slow everything after the listing down.
__attribute__((target("avx512f,avx512vl,popcnt"))) int64_t list_nonzero_counts_avx512(const char* p, int64_t len,
                                                                                      int32_t* listed) {
  const __m256i high = _mm256_set1_epi64x(static_cast<int64_t>(0xFFFFFFFF00000000ull));
  const __m256i step = _mm256_set1_epi32(8);
  __m256i q_vec = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t m = 0, q = 0;
  for (; q + 8 <= len; q += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * q));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * q + 32));
    const unsigned mask = static_cast<unsigned>(_mm256_test_epi64_mask(a, high)) |
                          (static_cast<unsigned>(_mm256_test_epi64_mask(b, high)) << 4);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(listed + m),
                        _mm256_maskz_compress_epi32(static_cast<__mmask8>(mask), q_vec));
    m += __builtin_popcount(mask);
    q_vec = _mm256_add_epi32(q_vec, step);
  }
  const int64_t rest = list_nonzero_counts_scalar(p + 8 * q, len - q, listed + m);
  for (int64_t j = m; j < m + rest; ++j) listed[j] += static_cast<int32_t>(q);
  return m + rest;
}

// For each 8-bit set of lanes, the positions of its set bits, one per byte, lowest first.
struct CompressTable {
  uint64_t lanes[256];
};
constexpr CompressTable make_compress_table() {
  CompressTable t{};
  for (int mask = 0; mask < 256; ++mask) {
    uint64_t v = 0;
    int j = 0;
    for (int bit = 0; bit < 8; ++bit) {
      if ((mask >> bit) & 1) v |= static_cast<uint64_t>(bit) << (8 * j++);
    }
    t.lanes[mask] = v;
  }
  return t;
}
constexpr CompressTable kCompress = make_compress_table();

// 8 records per step, compressed through kCompress.
__attribute__((target("avx2,popcnt"))) int64_t list_nonzero_counts_avx2(const char* p, int64_t len,
                                                                       int32_t* listed) {
  const __m256i high = _mm256_set1_epi64x(static_cast<int64_t>(0xFFFFFFFF00000000ull));
  const __m256i zero = _mm256_setzero_si256();
  int64_t m = 0, q = 0;
  for (; q + 8 <= len; q += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * q));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * q + 32));
    const int empty_a = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(a, high), zero)));
    const int empty_b = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(b, high), zero)));
    const unsigned mask = ~static_cast<unsigned>(empty_a | (empty_b << 4)) & 0xFFu;
    const __m256i lanes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(kCompress.lanes[mask])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(listed + m),
                        _mm256_add_epi32(lanes, _mm256_set1_epi32(static_cast<int32_t>(q))));
    m += __builtin_popcount(mask);
  }
  const int64_t rest = list_nonzero_counts_scalar(p + 8 * q, len - q, listed + m);
  for (int64_t j = m; j < m + rest; ++j) listed[j] += static_cast<int32_t>(q);
  return m + rest;
}
#endif

using ListFn = int64_t (*)(const char*, int64_t, int32_t*);

ListFn pick_list_nonzero_counts() {
#ifdef DETOPS_LIST_VECTORS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vl")) return list_nonzero_counts_avx512;
  if (__builtin_cpu_supports("avx2")) return list_nonzero_counts_avx2;
#endif
  return list_nonzero_counts_scalar;
}

}  // namespace

int64_t list_nonzero_counts(const void* records, int64_t len, int32_t* listed) {
  static const ListFn impl = pick_list_nonzero_counts();
  return impl(static_cast<const char*>(records), len, listed);
}

int64_t list_nonzero_counts_variant(int variant, const void* records, int64_t len, int32_t* listed) {
  ListFn impl = nullptr;
  if (variant == 0) impl = list_nonzero_counts_scalar;
#ifdef DETOPS_LIST_VECTORS
  __builtin_cpu_init();
  if (variant == 1 && __builtin_cpu_supports("avx2")) impl = list_nonzero_counts_avx2;
  if (variant == 2 && __builtin_cpu_supports("avx512vl")) impl = list_nonzero_counts_avx512;
#endif
  return impl == nullptr ? -1 : impl(static_cast<const char*>(records), len, listed);
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


// Buffers of CleanRecords a thread has released: at most kKeepClean of them, each at most kKeepBytes, with
// how many of their bytes hold the empty records of their tag.
constexpr size_t kKeepClean = 4;

struct CleanEntry {
  char* data;
  size_t size;
  size_t clean_bytes;
  unsigned char tag[CleanRecords::kMaxTag];
  size_t tag_bytes;
};

struct CleanPool {
  std::vector<CleanEntry> free;
  ~CleanPool() {
    for (CleanEntry& e : free) delete[] e.data;
  }
};

CleanPool& clean_pool() {
  thread_local CleanPool p;
  return p;
}

}  // namespace

CleanRecords::CleanRecords(size_t bytes, const void* tag, size_t tag_bytes)
    : data_(nullptr), size_(0), bytes_(bytes), clean_bytes_(0), tag_bytes_(tag_bytes) {
  TORCH_INTERNAL_ASSERT(tag_bytes <= kMaxTag);
  std::memcpy(tag_, tag, tag_bytes);
  auto& free = clean_pool().free;
  // A buffer clean for this tag and size, else the smallest one large enough (to be filled), else a new one.
  size_t pick = free.size();
  for (size_t j = 0; j < free.size(); ++j) {
    const CleanEntry& e = free[j];
    if (e.tag_bytes == tag_bytes && std::memcmp(e.tag, tag, tag_bytes) == 0 && e.clean_bytes >= bytes) {
      pick = j;
      break;
    }
  }
  if (pick == free.size()) {
    for (size_t j = 0; j < free.size(); ++j) {
      if (free[j].size >= bytes && (pick == free.size() || free[j].size < free[pick].size)) pick = j;
    }
  }
  if (pick < free.size()) {
    const CleanEntry& e = free[pick];
    data_ = e.data;
    size_ = e.size;
    const bool same_tag = e.tag_bytes == tag_bytes && std::memcmp(e.tag, tag, tag_bytes) == 0;
    clean_bytes_ = same_tag ? e.clean_bytes : 0;
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(pick));
    return;
  }
  size_ = std::max<size_t>(bytes, 64);
  data_ = new char[size_];
}

CleanRecords::~CleanRecords() {
  // NB: clean for what it was clean for and for the records this user filled and put back; else for nothing.
  const size_t clean_bytes = marked_ ? std::max(clean_bytes_, bytes_) : 0;
  auto& free = clean_pool().free;
  if (size_ > kKeepBytes) {
    delete[] data_;
    return;
  }
  if (free.size() >= kKeepClean) {
    auto smallest = std::min_element(free.begin(), free.end(),
                                     [](const CleanEntry& a, const CleanEntry& b) { return a.size < b.size; });
    if (smallest->size >= size_) {
      delete[] data_;
      return;
    }
    delete[] smallest->data;
    free.erase(smallest);
  }
  CleanEntry e;
  e.data = data_;
  e.size = size_;
  e.clean_bytes = clean_bytes;
  std::memcpy(e.tag, tag_, tag_bytes_);
  e.tag_bytes = tag_bytes_;
  free.push_back(e);
}

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
