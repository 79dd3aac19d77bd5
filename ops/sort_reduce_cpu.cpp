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

// Buffers a thread has released, kept for its next calls: at most kKeep of them, each at most kKeepBytes,
// each with how many of its first bytes hold the empty records of its tag (CleanRecords; 0 for scratch).
constexpr size_t kKeep = 8;
constexpr size_t kKeepBytes = size_t{64} << 20;

struct Kept {
  char* data;
  size_t size;
  size_t clean_bytes;
  unsigned char tag[CleanRecords::kMaxTag];
  size_t tag_bytes;
};

struct Pool {
  std::vector<Kept> free;
  ~Pool() {
    for (Kept& e : free) delete[] e.data;
  }
};

Pool& pool() {
  thread_local Pool p;
  return p;
}

bool same_tag(const Kept& e, const void* tag, size_t tag_bytes) {
  return e.tag_bytes == tag_bytes && std::memcmp(e.tag, tag, tag_bytes) == 0;
}

// A buffer of at least `bytes` bytes: one clean for `tag` that far if kept (tag_bytes > 0), else the smallest
// kept one large enough, preferring one that is clean for no tag, else a new one. Sets *clean_bytes to how
// many bytes hold the tag's empty records.
char* take(size_t bytes, const void* tag, size_t tag_bytes, size_t* size, size_t* clean_bytes) {
  auto& free = pool().free;
  size_t pick = free.size();
  for (size_t j = 0; j < free.size() && tag_bytes > 0; ++j) {
    if (same_tag(free[j], tag, tag_bytes) && free[j].clean_bytes >= bytes) {
      pick = j;
      break;
    }
  }
  for (size_t j = 0; j < free.size() && pick == free.size(); ++j) {
    if (free[j].size < bytes) continue;
    if (pick == free.size()) {
      pick = j;
      continue;
    }
    const bool dirtier = free[j].clean_bytes == 0 && free[pick].clean_bytes > 0;
    const bool as_dirty = (free[j].clean_bytes == 0) == (free[pick].clean_bytes == 0);
    if (dirtier || (as_dirty && free[j].size < free[pick].size)) pick = j;
  }
  *clean_bytes = 0;
  if (pick == free.size()) {
    *size = std::max<size_t>(bytes, 64);
    return new char[*size];
  }
  const Kept e = free[pick];
  free.erase(free.begin() + static_cast<std::ptrdiff_t>(pick));
  if (tag_bytes > 0 && same_tag(e, tag, tag_bytes)) *clean_bytes = e.clean_bytes;
  *size = e.size;
  return e.data;
}

void give(char* data, size_t size, size_t clean_bytes, const void* tag, size_t tag_bytes) {
  auto& free = pool().free;
  if (size > kKeepBytes) {
    delete[] data;
    return;
  }
  if (free.size() >= kKeep) {
    // Drop the smallest kept buffer for this one if this one is larger.
    auto smallest =
        std::min_element(free.begin(), free.end(), [](const Kept& a, const Kept& b) { return a.size < b.size; });
    if (smallest->size >= size) {
      delete[] data;
      return;
    }
    delete[] smallest->data;
    free.erase(smallest);
  }
  Kept e;
  e.data = data;
  e.size = size;
  e.clean_bytes = clean_bytes;
  e.tag_bytes = tag_bytes;
  if (tag_bytes > 0) std::memcpy(e.tag, tag, tag_bytes);
  free.push_back(e);
}

}  // namespace

Scratch::Scratch(size_t bytes) {
  size_t clean_bytes;
  data_ = take(bytes, nullptr, 0, &size_, &clean_bytes);
}

Scratch::~Scratch() {
  give(data_, size_, 0, nullptr, 0);
}

CleanRecords::CleanRecords(size_t bytes, const void* tag, size_t tag_bytes) : bytes_(bytes), tag_bytes_(tag_bytes) {
  TORCH_INTERNAL_ASSERT(tag_bytes > 0 && tag_bytes <= kMaxTag);
  std::memcpy(tag_, tag, tag_bytes);
  data_ = take(bytes, tag, tag_bytes, &size_, &clean_bytes_);
}

CleanRecords::~CleanRecords() {
  // NB: clean for what it was clean for and for the records its user filled and put back; else for nothing.
  give(data_, size_, marked_ ? std::max(clean_bytes_, bytes_) : 0, tag_, tag_bytes_);
}

}  // namespace detops::cpu
