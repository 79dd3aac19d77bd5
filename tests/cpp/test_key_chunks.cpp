// Engine calls in key chunks (ops/key_chunks.h): the host planner, and the CPU engine run through the
// decomposition the CUDA engine uses for calls of 2^31 or more contributions (cuda/chunked.cuh), with a tiny
// limit (a real call that size cannot run here), against the unchunked result bit for bit.
#include "ops/key_chunks.h"
#include "ops/scatter_add_op.h"
#include "ops/scatter_op.h"
#include "ops/scatter_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

using detops::KeyChunk;

TEST(KeyChunks, PlannerGroupsBucketsUnderTheLimit) {
  // Buckets of 10 keys over [0, 55): the last bucket is cut at 55.
  const std::vector<int64_t> counts = {30, 50, 0, 40, 0, 20};
  const auto chunks = detops::plan_key_chunks(counts, 0, 55, 10, 100);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].lo, 0);
  EXPECT_EQ(chunks[0].hi, 30);
  EXPECT_EQ(chunks[0].count, 80);
  EXPECT_EQ(chunks[1].lo, 30);
  EXPECT_EQ(chunks[1].hi, 55);
  EXPECT_EQ(chunks[1].count, 60);
}

TEST(KeyChunks, PlannerReturnsAnOverfullBucketAloneAndSkipsEmptyRanges) {
  const std::vector<int64_t> counts = {0, 0, 20, 150, 10, 0, 0};
  const auto chunks = detops::plan_key_chunks(counts, 100, 170, 10, 100);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].lo, 100);
  EXPECT_EQ(chunks[0].hi, 130);
  EXPECT_EQ(chunks[0].count, 20);
  EXPECT_EQ(chunks[1].lo, 130);
  EXPECT_EQ(chunks[1].hi, 140);
  EXPECT_EQ(chunks[1].count, 150);
  EXPECT_EQ(chunks[2].lo, 140);
  EXPECT_EQ(chunks[2].hi, 170);
  EXPECT_EQ(chunks[2].count, 10);
  EXPECT_TRUE(detops::plan_key_chunks({0, 0}, 0, 20, 10, 100).empty());
}

TEST(KeyChunks, ChunksCoverEveryContributionOnce) {
  // An exact limit is allowed; ranges tile [lo, hi) but for empty ones.
  const std::vector<int64_t> counts = {100, 100, 1, 99, 100};
  const auto chunks = detops::plan_key_chunks(counts, 0, 5, 1, 100);
  int64_t total = 0, next = 0;
  for (const KeyChunk& c : chunks) {
    EXPECT_LE(c.count, 100);
    EXPECT_EQ(c.lo, next);
    next = c.hi;
    total += c.count;
  }
  EXPECT_EQ(next, 5);
  EXPECT_EQ(total, 400);
  EXPECT_EQ(chunks.size(), 4u);  // {100}, {100}, {1, 99}, {100}
}

int64_t g_limit = 100;
int64_t g_buckets = 4;
int g_chunks = 0;

// The CPU engine through the chunk decomposition: a host histogram and a stable compaction of positions.
struct ChunkedEngine {
  template <typename acc_t, typename Op>
  static void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    const auto histogram = [&](int64_t lo, int64_t hi, int64_t width) {
      std::vector<int64_t> counts((hi - lo + width - 1) / width, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = op.key(i);
        if (k != detops::kSkipKey && k >= lo && k < hi) ++counts[(k - lo) / width];
      }
      return counts;
    };
    const auto run = [&](const KeyChunk& chunk) {
      std::vector<int64_t> pos;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = op.key(i);
        if (k != detops::kSkipKey && k >= chunk.lo && k < chunk.hi) pos.push_back(i);
      }
      ASSERT_EQ(static_cast<int64_t>(pos.size()), chunk.count);
      ASSERT_LE(chunk.count, g_limit);
      ++g_chunks;
      const detops::PositionsOp<Op> chunk_op{op, pos.data(), chunk.lo};
      detops::cpu::Engine::sort_reduce<acc_t>(name, chunk_op, chunk.count, chunk.hi - chunk.lo, D, like);
    };
    detops::for_each_key_chunk(name, 0, num_keys, g_limit, g_buckets, histogram, run);
  }
  // The last writer as the CUDA engine runs it past plan::last_writer_table: through the sort, in chunks.
  template <typename Op>
  static void last_writer(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    sort_reduce<int64_t>(name, op, n, num_keys, D, like);
  }
  // Counts need no chunks: the CUDA engine counts any number of contributions in one launch.
  template <typename Keys>
  static void count_keys(const Keys& keys, int64_t n, int64_t num_keys, int64_t* counts) {
    detops::cpu::Engine::count_keys(keys, n, num_keys, counts);
  }
};

void expect_bits_equal(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0) << what << ": not bitwise identical";
}

// Every compute function of the scatter family, chunked and not.
void check_family(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  const std::string& what) {
  const auto both = [&](const std::string& name, auto compute) {
    at::Tensor want = self.clone(), got = self.clone();
    compute(want, detops::cpu::Engine{});
    g_chunks = 0;
    compute(got, ChunkedEngine{});
    EXPECT_GT(g_chunks, 1) << what << " " << name << ": a single chunk";
    expect_bits_equal(got, want, what + " " + name);
  };
  both("scatter_add", [&](at::Tensor& w, auto e) { detops::scatter_add_compute<decltype(e)>(w, dim, index, src); });
  both("scatter", [&](at::Tensor& w, auto e) { detops::scatter_compute<decltype(e)>(w, dim, index, src); });
  for (auto r : {detops::Reduction::Sum, detops::Reduction::Prod, detops::Reduction::Mean, detops::Reduction::Max}) {
    both("scatter_reduce " + std::to_string(static_cast<int>(r)), [&](at::Tensor& w, auto e) {
      detops::scatter_reduce_compute<decltype(e)>(w, dim, index, src, r, false, {});
    });
  }
}

TEST(KeyChunks, CpuEngineInChunksGivesTheUnchunkedBits) {
  at::manual_seed(3);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    // General layout: 1200 contributions over 40 x 3 keys, some keys with 40+ (a tree level above level 0).
    const at::Tensor self = at::randn({40, 3}).to(dtype);
    const at::Tensor index = at::randint(0, 40, {400, 3});
    index.narrow(0, 0, 50).fill_(7);
    const at::Tensor src = at::randn({400, 3}).to(dtype).mul(0.01).add(1.0);
    check_family(self, 0, index, src, "general");
    // Row layout (broadcast index): 300 rows over 40 row keys, 5 columns.
    const at::Tensor rows = at::randint(0, 40, {300});
    rows.narrow(0, 100, 60).fill_(39);
    const at::Tensor src5 = at::randn({300, 5}).to(dtype).mul(0.01).add(1.0);
    check_family(at::randn({40, 5}).to(dtype), 0, rows.view({300, 1}).expand({300, 5}), src5, "rows");
  }
}

TEST(KeyChunks, ASingleDestinationOverTheLimitIsRejected) {
  at::Tensor self = at::zeros({4});
  const at::Tensor index = at::full({150}, 2, at::kLong);
  try {
    detops::scatter_add_compute<ChunkedEngine>(self, 0, index, at::ones({150}));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scatter_add_(): destination 2 receives 150 contributions"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
