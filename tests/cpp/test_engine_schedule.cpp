// The CUDA engine's parallel schedule, run on the CPU: the same per-thread steps the kernels call
// (cuda/sort_reduce_steps.h), each level's threads in a shuffled order, must give the CPU twin's bits.
#include "cuda/sort_reduce_steps.h"
#include "ops/index_add_op.h"
#include "ops/index_add.h"
#include "ops/nll_loss2d_op.h"
#include "ops/scatter_add.h"
#include "ops/scatter_add_op.h"
#include "ops/scatter_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace {

// Sorted keys in runs of 1..max_run positions each, at least min_size of them, cut to a random length.
std::vector<uint32_t> sorted_runs(std::mt19937& rng, int max_run, size_t min_size) {
  std::vector<uint32_t> keys;
  for (uint32_t key = 0; keys.size() < min_size; ++key) {
    keys.insert(keys.end(), std::uniform_int_distribution<int>(1, max_run)(rng), key);
  }
  keys.resize(std::uniform_int_distribution<size_t>(1, keys.size())(rng));
  return keys;
}

// The first position and one past the last of each sorted position's run of equal keys, by a scan.
void run_bounds(const std::vector<uint32_t>& keys, std::vector<int32_t>& start, std::vector<int32_t>& end) {
  const auto n = static_cast<int32_t>(keys.size());
  start.resize(n);
  end.resize(n);
  for (int32_t p = 0; p < n; ++p) start[p] = p > 0 && keys[p - 1] == keys[p] ? start[p - 1] : p;
  for (int32_t p = n - 1; p >= 0; --p) end[p] = p + 1 < n && keys[p + 1] == keys[p] ? end[p + 1] : p + 1;
}

// long_segments_kernel (the multi-block path) on the CPU: the tiles in a shuffled order, each as its warp runs
// it (SerialLanes for the votes). Fills tile_start and returns the scratch slots each position takes; counts the
// writes of each tile's start (once each, by near_tile_start or by a head's tiles_inside).
template <typename KeyT>
std::vector<int32_t> warp_long_segments(const KeyT* keys, int32_t n, int64_t num_keys, std::mt19937& rng,
                                        std::vector<int32_t>& tile_start, std::vector<int>& writes) {
  constexpr int32_t kBlock = detops::kBlock;
  const detops::engine::SerialLanes lanes;
  std::vector<int32_t> slots(n, 0);
  std::vector<int32_t> tiles((n + kBlock - 1) / kBlock);
  std::iota(tiles.begin(), tiles.end(), 0);
  std::shuffle(tiles.begin(), tiles.end(), rng);
  writes.assign(tiles.size(), 0);
  for (const int32_t t : tiles) {
    const int32_t q = t * kBlock;
    const int32_t near = detops::engine::near_tile_start(keys, q, lanes);
    if (near >= 0) {
      tile_start[t] = near;
      ++writes[t];
    }
    for (int32_t head = q; head < std::min(n, q + kBlock); ++head) {
      if (!detops::engine::long_run_head(keys, n, head)) continue;
      const int32_t end = detops::engine::segment_end(keys, n, head, keys[head], lanes);
      if (static_cast<int64_t>(keys[head]) < num_keys) {
        slots[head] = detops::engine::segment_slots(int64_t{end} - head, true);
      }
      const detops::engine::TileRange inside = detops::engine::tiles_inside(head, end);
      for (int64_t u = inside.begin; u < inside.end; ++u) {
        tile_start[u] = head;
        ++writes[u];
      }
    }
  }
  return slots;
}

// level0_window_kernel on the CPU: the windows in a shuffled order; in each, its threads load their share of the
// window (engine::window_load) in a shuffled order, then, after the barrier, take their positions' level 0
// (engine::window_level0_step) in another. The window's arrays start filled with a marker that no key equals
// (and a NaN-free value that no sum would give), so a read of a word no thread loaded shows in the bits or the
// blocks; tile_start is null where the call has no tree levels, as on the device.
template <typename acc_t, typename KeyT, typename Op>
void window_level0(const Op& op, const KeyT* keys, const detops::engine::SortedValues<acc_t>& src,
                   const int32_t* seg_first, const int32_t* tile_start, int32_t n, int64_t num_keys, int64_t D,
                   acc_t* scratch, int32_t* slot_first, int32_t* slot_pos, std::mt19937& rng) {
  namespace engine = detops::engine;
  constexpr int32_t kBlock = detops::kBlock;
  ASSERT_LE(D * int64_t{sizeof(acc_t)}, engine::kWindowValueBytes);
  std::vector<int32_t> windows((n + engine::kWindow - 1) / engine::kWindow);
  std::iota(windows.begin(), windows.end(), 0);
  std::shuffle(windows.begin(), windows.end(), rng);
  std::vector<int> threads(engine::kWindow);
  std::iota(threads.begin(), threads.end(), 0);
  for (const int32_t w : windows) {
    const int32_t base = w * engine::kWindow;
    std::vector<KeyT> wkeys(engine::kWindowKeys, static_cast<KeyT>(num_keys + 12345));
    std::vector<acc_t> wvalues(static_cast<size_t>(engine::kWindowValues * D), acc_t(98765));
    std::vector<int32_t> wtiles(engine::kWindowTiles, -9);
    std::shuffle(threads.begin(), threads.end(), rng);
    for (const int t : threads) {
      engine::window_load<acc_t>(keys, src, tile_start, n, D, base, t, wkeys.data(), wvalues.data(), wtiles.data());
    }
    for (int32_t p = base; p < std::min(n, base + engine::kWindow); ++p) {
      const engine::Level0Block a = engine::level0_block(engine::WindowKeys<KeyT>{wkeys.data(), base}, seg_first,
                                                         engine::WindowTiles{wtiles.data(), base / kBlock}, n,
                                                         num_keys, p);
      const engine::Level0Block b = engine::level0_block(keys, seg_first, tile_start, n, num_keys, p);
      ASSERT_TRUE(a.key == b.key && a.count == b.count && a.slot == b.slot && a.first == b.first) << p;
    }
    std::shuffle(threads.begin(), threads.end(), rng);
    for (const int t : threads) {
      if (base + t >= n) continue;
      engine::window_level0_step<acc_t>(op, wkeys.data(), wvalues.data(), wtiles.data(), seg_first, n, num_keys, D,
                                        base, scratch, slot_first, slot_pos, base + t);
    }
  }
}

// counting_sort_kernel (cuda/sort_reduce.cu) on the CPU with a grid of `grid` blocks: per pass
// (plan::counting_passes for keys in [0, num_keys]), the count step, the table's scan in the grid's chunks (each
// chunk scanned alone, in a shuffled order, then the chunks' totals) and the scatter step, the tiles in a shuffled
// order and a tile's warps in another, each warp walking its chunks in turn as the kernel does (a lane's peers:
// the chunk's lanes that hold its digit, as __match_any_sync gives them; every lane reads its bin's next position
// before the first of its peers moves it). Each pass reads the buffers the one before wrote. Returns the sorted
// keys and positions.
void counting_sort_emulated(const std::vector<uint32_t>& keys, int64_t num_keys, int64_t grid, std::mt19937& rng,
                            std::vector<uint32_t>& sorted, std::vector<int32_t>& positions) {
  namespace engine = detops::engine;
  namespace plan = detops::plan;
  constexpr uint32_t kNoBin = 0xffffffffu;
  const auto n = static_cast<int64_t>(keys.size());
  const auto tiles = static_cast<int32_t>(plan::counting_tiles(n));
  std::vector<int32_t> order(tiles);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> warps(engine::kCountWarps);
  std::iota(warps.begin(), warps.end(), 0);
  std::vector<uint32_t> in_keys = keys;
  std::vector<int32_t> in_values(n);
  std::iota(in_values.begin(), in_values.end(), 0);
  const plan::CountingPasses passes = plan::counting_passes(num_keys);
  for (int pass = 0; pass < passes.passes; ++pass) {
    const int shift = pass * passes.width;
    const int32_t bins = plan::counting_bins(num_keys, shift, passes.width);
    // One chunk of warp w of a tile: each lane's key, digit and peers.
    const auto chunk = [&](int32_t tile, int w, int c, uint32_t (&k)[32], uint32_t (&d)[32], uint32_t (&peers)[32]) {
      for (int l = 0; l < 32; ++l) {
        const int64_t p = engine::count_position(tile, w, c, l);
        k[l] = p < n ? in_keys[p] : 0u;
        d[l] = p < n ? plan::counting_digit(k[l], shift, passes.width) : kNoBin;
        ASSERT_TRUE(d[l] == kNoBin || d[l] < static_cast<uint32_t>(bins)) << "a digit past the pass's bins";
      }
      for (int l = 0; l < 32; ++l) {
        peers[l] = 0;
        for (int m = 0; m < 32; ++m) peers[l] |= d[m] == d[l] ? uint32_t{1} << m : 0u;
      }
    };
    const auto count_part = [&](int32_t tile, int w, std::vector<uint32_t>& row) {
      row.assign(bins, 0);
      for (int c = 0; c < engine::kCountChunks; ++c) {
        uint32_t k[32], d[32], peers[32];
        chunk(tile, w, c, k, d, peers);
        for (int l = 0; l < 32; ++l) {
          if (d[l] != kNoBin && engine::peer_rank(peers[l], l) == 0) row[d[l]] += engine::popcount32(peers[l]);
        }
      }
    };
    const int64_t entries = int64_t{bins} * tiles;
    std::vector<uint32_t> table(entries, 0xdeadbeefu);
    std::vector<std::vector<uint32_t>> rows(engine::kCountWarps);
    std::shuffle(order.begin(), order.end(), rng);
    for (const int32_t tile : order) {
      std::shuffle(warps.begin(), warps.end(), rng);
      for (const int w : warps) count_part(tile, w, rows[w]);
      for (int32_t b = 0; b < bins; ++b) {
        uint32_t total = 0;
        for (int w = 0; w < engine::kCountWarps; ++w) total += rows[w][b];
        table[static_cast<size_t>(b) * tiles + tile] = total;
      }
    }
    // The scan step: chunk c of the grid's, alone; then the scatter's base of each chunk.
    const int64_t size = plan::counting_scan_chunk(entries, grid);
    std::vector<uint32_t> totals(grid, 0xdeadbeefu);
    std::vector<int64_t> chunks(grid);
    std::iota(chunks.begin(), chunks.end(), 0);
    std::shuffle(chunks.begin(), chunks.end(), rng);
    for (const int64_t c : chunks) {
      const int64_t begin = std::min(c * size, entries);
      const int64_t end = std::min(begin + size, entries);
      uint32_t running = 0;
      for (int64_t e = begin; e < end; ++e) {
        const uint32_t count = table[e];
        table[e] = running;
        running += count;
      }
      totals[c] = running;
    }
    std::vector<uint32_t> base(grid);
    uint32_t sum = 0;
    for (int64_t c = 0; c < grid; ++c) {
      base[c] = sum;
      sum += totals[c];
    }
    ASSERT_EQ(sum, static_cast<uint32_t>(n));
    std::vector<uint32_t> out_keys(n, kNoBin);
    std::vector<int32_t> out_values(n, -1);
    std::shuffle(order.begin(), order.end(), rng);
    for (const int32_t tile : order) {
      std::shuffle(warps.begin(), warps.end(), rng);
      for (const int w : warps) count_part(tile, w, rows[w]);
      for (int32_t b = 0; b < bins; ++b) {
        const int64_t entry = int64_t{b} * tiles + tile;
        ASSERT_LT(entry / size, grid);
        uint32_t at = table[entry] + base[entry / size];
        for (int w = 0; w < engine::kCountWarps; ++w) {
          const uint32_t count = rows[w][b];
          rows[w][b] = at;
          at += count;
        }
      }
      std::shuffle(warps.begin(), warps.end(), rng);
      for (const int w : warps) {
        std::vector<uint32_t>& next = rows[w];
        for (int c = 0; c < engine::kCountChunks; ++c) {
          uint32_t k[32], d[32], peers[32], at[32];
          chunk(tile, w, c, k, d, peers);
          for (int l = 0; l < 32; ++l) at[l] = d[l] != kNoBin ? next[d[l]] : 0;
          for (int l = 0; l < 32; ++l) {
            if (d[l] == kNoBin) continue;
            const int rank = engine::peer_rank(peers[l], l);
            if (rank == 0) next[d[l]] = at[l] + engine::popcount32(peers[l]);
            ASSERT_LT(at[l] + rank, static_cast<uint32_t>(n));
            ASSERT_EQ(out_values[at[l] + rank], -1) << "a sorted position written twice";
            out_keys[at[l] + rank] = k[l];
            out_values[at[l] + rank] = in_values[engine::count_position(tile, w, c, l)];
          }
        }
      }
    }
    in_keys.swap(out_keys);
    in_values.swap(out_values);
  }
  sorted = in_keys;
  positions = in_values;
}

// Emulates the key kernel and plan_segments (the stable sort, then the heads of long segments taking their slots
// from a counter, in a shuffled order as atomics may, and the tiles' segment starts) and reduce_plan (level 0
// with the slot tables, the levels) with shuffled threads; checks every position's slots, tile start and block
// against its segment, found by a direct scan. With carry, the sort carries the contributions
// (engine::store_contributions in source order, sorted with the keys) and level 0 reads them from
// engine::SortedValues instead of through the permutation: one thread per (position, column) as level0_kernel,
// or, with window, as level0_window_kernel runs it (window_level0).
template <typename acc_t, typename Op>
void run_gpu_schedule(const Op& op, int32_t n, int64_t num_keys, int64_t D, bool carry, std::mt19937& rng,
                      bool window = false) {
  constexpr int32_t kBlock = detops::kBlock;
  std::vector<uint32_t> unsorted(n);
  for (int32_t i = 0; i < n; ++i) unsorted[i] = static_cast<uint32_t>(op.key(i));
  std::vector<int32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return unsorted[a] < unsorted[b]; });
  std::vector<uint32_t> keys(n);
  for (int32_t p = 0; p < n; ++p) keys[p] = unsorted[perm[p]];
  // The carried contributions: stored in source order, then moved with their keys.
  std::vector<acc_t> stored(static_cast<size_t>(n * D), acc_t(-777));
  std::vector<acc_t> values(static_cast<size_t>(n * D), acc_t(-777));
  if (carry) {
    for (int32_t i = 0; i < n; ++i) {
      detops::engine::store_contributions(op, i, unsorted[i] < num_keys, D, stored.data());
    }
    for (int32_t p = 0; p < n; ++p) {
      std::copy_n(stored.begin() + int64_t{perm[p]} * D, D, values.begin() + int64_t{p} * D);
    }
  }
  const detops::engine::SortedValues<acc_t> sorted_values{values.data()};
  std::vector<int32_t> start, end;
  run_bounds(keys, start, end);
  const auto is_long = [&](int32_t p) { return keys[p] < num_keys && end[p] - start[p] > kBlock; };

  const int32_t max_slots = n / 16 + 1;
  std::vector<int32_t> seg_first(n, -7);
  std::vector<int32_t> tile_start(n / kBlock + 1, -7);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int32_t num_slots = 0;
  int32_t expected_slots = 0;
  for (int32_t p : order) {
    detops::engine::tile_step(keys.data(), p, tile_start.data());
    const int32_t slots = detops::engine::long_segment_slots(keys.data(), n, num_keys, p);
    const int32_t expected = start[p] == p && is_long(p) ? (end[p] - p + kBlock - 1) / kBlock : 0;
    ASSERT_EQ(slots, expected) << p;
    expected_slots += expected;
    if (slots > 0) {
      seg_first[p] = num_slots;
      num_slots += slots;
    }
  }
  ASSERT_EQ(num_slots, expected_slots);
  ASSERT_LE(num_slots, max_slots);
  for (int32_t t = 0; t * kBlock < n; ++t) ASSERT_EQ(tile_start[t], start[t * kBlock]) << t;
  // The multi-block kernel's warp form: the same tile starts, each written once, and the same slots.
  std::vector<int32_t> warp_tile_start(tile_start.size(), -7);
  std::vector<int> writes;
  const std::vector<int32_t> warp_slots = warp_long_segments(keys.data(), n, num_keys, rng, warp_tile_start, writes);
  for (int32_t t = 0; t * kBlock < n; ++t) {
    ASSERT_EQ(warp_tile_start[t], start[t * kBlock]) << t;
    ASSERT_EQ(writes[t], 1) << t;
  }
  for (int32_t p = 0; p < n; ++p) {
    ASSERT_EQ(warp_slots[p], start[p] == p && is_long(p) ? (end[p] - p + kBlock - 1) / kBlock : 0) << p;
  }
  for (int32_t p = 0; p < n; ++p) {
    const detops::engine::Level0Block b =
        detops::engine::level0_block(keys.data(), seg_first.data(), tile_start.data(), n, num_keys, p);
    const bool leads = keys[p] < num_keys && (p - start[p]) % kBlock == 0;
    ASSERT_EQ(b.count, leads ? std::min(kBlock, end[p] - p) : 0) << p;
    if (!leads) continue;
    ASSERT_EQ(b.key, keys[p]) << p;
    ASSERT_EQ(b.first, is_long(p) ? seg_first[start[p]] : -1) << p;
    ASSERT_EQ(b.slot, is_long(p) ? seg_first[start[p]] + (p - start[p]) / kBlock : -1) << p;
  }

  std::vector<int32_t> slot_first(max_slots, -7), slot_pos(max_slots, -7);
  std::vector<acc_t> scratch(static_cast<size_t>(max_slots * D), acc_t(12345));
  std::vector<std::pair<int32_t, int64_t>> threads;
  if (carry && window) {
    window_level0<acc_t>(op, keys.data(), sorted_values, seg_first.data(), n <= kBlock ? nullptr : tile_start.data(),
                         n, num_keys, D, scratch.data(), slot_first.data(), slot_pos.data(), rng);
  } else {
    for (int32_t p = 0; p < n; ++p)
      for (int64_t c = 0; c < D; ++c) threads.emplace_back(p, c);
  }
  std::shuffle(threads.begin(), threads.end(), rng);
  for (auto [p, c] : threads) {
    if (carry) {
      detops::engine::level0_step<acc_t>(op, keys.data(), sorted_values, seg_first.data(), tile_start.data(), n,
                                         num_keys, D, scratch.data(), slot_first.data(), slot_pos.data(), p, c);
    } else {
      detops::engine::level0_step<acc_t>(op, keys.data(), perm.data(), seg_first.data(), tile_start.data(), n,
                                         num_keys, D, scratch.data(), slot_first.data(), slot_pos.data(), p, c);
    }
  }
  // As levels_kernel: over the slots in use, and no level from the one whose stride reaches them.
  int32_t stride = 1;
  for (int level = 1; level <= detops::tree_levels(n) && stride < num_slots; ++level, stride *= kBlock) {
    threads.clear();
    for (int32_t q = 0; q < num_slots; ++q)
      for (int64_t c = 0; c < D; ++c) threads.emplace_back(q, c);
    std::shuffle(threads.begin(), threads.end(), rng);
    for (auto [q, c] : threads) {
      detops::engine::level_step<acc_t>(op, keys.data(), slot_first.data(), slot_pos.data(), num_slots, stride, D,
                                        scratch.data(), q, c);
    }
  }
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

at::Tensor index_with_segments(const std::vector<int64_t>& lengths, std::mt19937& rng) {
  std::vector<int64_t> values;
  for (size_t d = 0; d < lengths.size(); ++d) values.insert(values.end(), lengths[d], static_cast<int64_t>(d));
  std::shuffle(values.begin(), values.end(), rng);
  return at::tensor(values, at::kLong);
}

TEST(EngineSchedule, IndexAddGivesTheCpuBitsWhateverTheThreadOrder) {
  std::mt19937 rng(7);
  at::manual_seed(7);
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 2, 3},                       // short segments only
      {32, 33, 64, 65, 1, 0, 31},      // block boundaries
      {1024, 1025, 1056, 2, 40000},    // two and three levels
      {70000},                         // one hot destination
  };
  for (const auto& lengths : shapes) {
    for (int64_t width : {1, 2, 5}) {
      // 0: through the permutation; 1: carried, a thread per (position, column); 2: carried, the window kernel.
      for (const int mode : {0, 1, 2}) {
        if (mode == 2 && width * int64_t{sizeof(float)} > detops::engine::kWindowValueBytes) continue;
        const bool carry = mode > 0;
        const at::Tensor index = index_with_segments(lengths, rng);
        const int64_t n = index.numel();
        const at::Tensor self = at::randn({static_cast<int64_t>(lengths.size()), width});
        const at::Tensor source = at::randn({n, width});
        const at::Tensor expected = detops::index_add(self, 0, index, source, 0.5);
        at::Tensor result = self.clone();
        const auto op = detops::make_index_add_op<float, int64_t>(result, 0, index, source, 0.5);
        run_gpu_schedule<float>(op, static_cast<int32_t>(n), op.dim_size, width, carry, rng, mode == 2);
        EXPECT_TRUE(bitwise_equal(result, expected)) << "n " << n << " width " << width << " mode " << mode;
      }
    }
  }
}

TEST(EngineSchedule, ScatterAddGivesTheCpuBitsWhateverTheThreadOrder) {
  std::mt19937 rng(8);
  at::manual_seed(8);
  const at::Tensor self = at::randn({50, 6}, at::kDouble);
  const at::Tensor src = at::randn({3000, 9}, at::kDouble).narrow(1, 0, 6);
  at::Tensor index = at::randint(0, 50, {3000, 6});
  index.narrow(0, 0, 1500).fill_(3);
  const at::Tensor expected = detops::scatter_add(self, 0, index, src);
  for (const int mode : {0, 1, 2}) {
    at::Tensor result = self.clone();
    const auto op = detops::make_scatter_add_op<double, int64_t>(result, 0, index, src);
    run_gpu_schedule<double>(op, static_cast<int32_t>(index.numel()), result.numel(), 1, mode > 0, rng, mode == 2);
    EXPECT_TRUE(bitwise_equal(result, expected)) << "mode " << mode;
  }
}

// Invalid contributions between valid ones (nll_loss2d's ignored pixels: key 1 of 1 key, two columns): whether
// the sort carries the contributions or not, each schedule gives the CPU engine's sums.
TEST(EngineSchedule, IgnoredPixelsGiveTheCpuSumsWhetherOrNotTheSortCarriesTheContributions) {
  std::mt19937 rng(9);
  at::manual_seed(9);
  const at::Tensor input = at::randn({3, 4, 30, 40});
  at::Tensor target = at::randint(0, 4, {3, 30, 40});
  target.masked_fill_(at::rand({3, 30, 40}) < 0.3, 255);
  const at::Tensor weight = at::rand({4});
  const auto terms = detops::make_nll_loss2d_terms<float>(input, target, weight, 255);
  const int64_t n = target.numel();
  // mode -1: the CPU engine; 0: the GPU schedule through the permutation; 1: from the carried contributions;
  // 2: from them, as the window kernel.
  const auto run = [&](int mode) {
    std::vector<float> sums(2, 0.0f);
    const detops::NllLoss2dSumOp<float> op{terms, sums.data()};
    if (mode < 0) {
      detops::cpu::Engine::sort_reduce<float>("nll_loss2d_forward", op, n, 1, 2, input);
    } else {
      run_gpu_schedule<float>(op, static_cast<int32_t>(n), 1, 2, mode >= 1, rng, mode == 2);
    }
    return sums;
  };
  const std::vector<float> expected = run(-1);
  EXPECT_NE(expected[0], 0.0f);
  EXPECT_EQ(run(0), expected);
  EXPECT_EQ(run(1), expected);
  EXPECT_EQ(run(2), expected);
}

// The key kernel's store where the sort carries the contributions: a valid contribution's D columns, zeros for an
// invalid one, whose contribution is never asked for (it may read out of bounds).
TEST(EngineSchedule, OnlyValidContributionsAreStored) {
  struct ColumnsOp {
    double contribution(int64_t i, int64_t c) const {
      EXPECT_NE(i % 3, 0) << "an invalid contribution was computed";
      return 10.0 * i + c + 1;
    }
  };
  std::vector<double> stored(3 * 9, -1.0);
  for (int64_t i = 0; i < 9; ++i) detops::engine::store_contributions(ColumnsOp{}, i, i % 3 != 0, 3, stored.data());
  for (int64_t i = 0; i < 9; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(stored[3 * i + c], i % 3 == 0 ? 0.0 : 10.0 * i + c + 1) << i << " " << c;
    }
  }
}

// The buckets (plan::buckets; cuda/sort_reduce_steps.h, "The buckets") on the CPU, as buckets_kernel runs them: the
// counts, then the runs of chunks of keys taken from the counter in a shuffled order, the slots taken by the
// contributions in another (their columns stored with them where carried), the folds by the (key, lane) threads in a
// third. Returns false where a count above
// plan::kBucketMaxCount raised the flag (the multi-block path then runs instead).
template <typename acc_t, typename Op>
bool buckets_emulated(const Op& op, int64_t n, int64_t num_keys, int64_t D, std::mt19937& rng) {
  namespace engine = detops::engine;
  constexpr int64_t kChunkKeys = 64;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> counts(num_keys, 0);
  for (const int64_t i : order) {
    const int64_t k = engine::bucket_key(op.key(i), num_keys);
    if (k >= 0) ++counts[k];
  }
  std::vector<int64_t> chunks((num_keys + kChunkKeys - 1) / kChunkKeys);
  std::iota(chunks.begin(), chunks.end(), 0);
  std::shuffle(chunks.begin(), chunks.end(), rng);
  std::vector<int32_t> cursor(num_keys, -1);
  int32_t taken = 0;
  bool flag = false;
  for (const int64_t c : chunks) {
    for (int64_t k = c * kChunkKeys; k < std::min(num_keys, (c + 1) * kChunkKeys); ++k) {
      cursor[k] = taken;
      taken += counts[k];
      flag = flag || counts[k] > detops::plan::kBucketMaxCount;
    }
  }
  if (flag) return false;
  std::vector<int32_t> positions(n, -5);
  std::vector<acc_t> values(static_cast<size_t>(n * D), acc_t(-555));
  const bool carry = detops::plan::carries_values(detops::plan::sort_reduce_call(n, num_keys, D, sizeof(acc_t)));
  std::shuffle(order.begin(), order.end(), rng);
  for (const int64_t i : order) {
    const int64_t k = engine::bucket_key(op.key(i), num_keys);
    if (k >= 0) engine::bucket_store<acc_t>(op, i, cursor[k]++, D, positions.data(), carry ? values.data() : nullptr);
  }
  // The kernel's threads: bucket_lanes(D) per key, each taking columns lane, lane + lanes, ...
  const int64_t lanes = engine::bucket_lanes(D);
  std::vector<int64_t> threads(num_keys * lanes);
  std::iota(threads.begin(), threads.end(), 0);
  std::shuffle(threads.begin(), threads.end(), rng);
  for (const int64_t t : threads) {
    const int64_t k = t / lanes;
    if (counts[k] == 0) continue;
    for (int64_t c = t % lanes; c < D; c += lanes) {
      engine::bucket_fold<acc_t>(op, k, counts[k], cursor[k] - counts[k], positions.data(),
                                 carry ? values.data() : nullptr, D, c);
    }
  }
  return true;
}

// cpu::Engine with sort_reduce run by the buckets wherever the CUDA engine takes them (plan::buckets, flag down);
// `taken` counts those calls.
struct BucketsEngine : detops::cpu::Engine {
  static inline int taken = 0;
  static inline std::mt19937 rng{11};
  template <typename acc_t, typename Op>
  static void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    const auto call = detops::plan::sort_reduce_call(n, num_keys, D, sizeof(acc_t), detops::gate_of(op) != nullptr);
    if (detops::plan::buckets(call) && buckets_emulated<acc_t>(op, n, num_keys, D, rng)) {
      ++taken;
      return;
    }
    detops::cpu::Engine::sort_reduce<acc_t>(name, op, n, num_keys, D, like);
  }
};

TEST(EngineSchedule, BucketsGiveTheCpuBitsWhateverTheThreadOrder) {
  at::manual_seed(12);
  using detops::Reduction;
  const int64_t n = 6000;
  // About one contribution per key (random keys), with signed zeros, infinities and NaNs among the values.
  const auto values = [&](at::ScalarType dtype, int64_t rows, int64_t width) {
    at::Tensor v = at::randn({rows, width}, at::kDouble);
    if (dtype == at::kLong) return (v * 1000).to(at::kLong);
    v.view(-1).narrow(0, 0, 9).copy_(at::tensor({0.0, -0.0, INFINITY, -INFINITY, NAN, -0.0, 0.0, NAN, 1.0}));
    return v.to(dtype);
  };
  int expected_taken = 0;
  for (const auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong}) {
    for (const int64_t m : {n, n / 3, 4 * n}) {
      const at::Tensor index = at::randint(0, m, {n});
      for (const auto reduce : {Reduction::Sum, Reduction::Prod, Reduction::Mean, Reduction::Max, Reduction::Min}) {
        for (const bool include_self : {true, false}) {
          const at::Tensor self = values(dtype, m, 1).view(-1);
          const at::Tensor src = values(dtype, n, 1).view(-1);
          at::Tensor want = self.clone();
          detops::scatter_reduce_compute<detops::cpu::Engine>(want, 0, index, src, reduce, include_self, {});
          at::Tensor got = self.clone();
          detops::scatter_reduce_compute<BucketsEngine>(got, 0, index, src, reduce, include_self, {});
          ++expected_taken;
          EXPECT_TRUE(bitwise_equal(got, want)) << dtype << " m " << m << " reduce " << static_cast<int>(reduce)
                                                << " include_self " << include_self;
        }
      }
    }
    if (dtype == at::kLong) continue;
    // index_add_ of rows of 1 and 2 columns (carried where 8 bytes at most), 5 and 40 (positions; 40 columns on 32
    // threads per key), scatter_add_.
    for (const int64_t width : {1, 2, 5, 40}) {
      const int64_t m = n + 17;
      const at::Tensor index = at::randint(0, m, {n});
      const at::Tensor self = values(dtype, m, width);
      const at::Tensor source = values(dtype, n, width);
      at::Tensor want = self.clone();
      detops::index_add_compute<detops::cpu::Engine>(want, 0, index, source, 0.5);
      at::Tensor got = self.clone();
      detops::index_add_compute<BucketsEngine>(got, 0, index, source, 0.5);
      ++expected_taken;
      EXPECT_TRUE(bitwise_equal(got, want)) << dtype << " width " << width;
    }
    const at::Tensor index = at::randint(0, n, {n});
    const at::Tensor self = values(dtype, n, 1).view(-1);
    const at::Tensor src = values(dtype, n, 1).view(-1);
    at::Tensor want = self.clone();
    detops::scatter_add_compute<detops::cpu::Engine>(want, 0, index, src);
    at::Tensor got = self.clone();
    detops::scatter_add_compute<BucketsEngine>(got, 0, index, src);
    ++expected_taken;
    EXPECT_TRUE(bitwise_equal(got, want)) << dtype;
  }
  EXPECT_EQ(BucketsEngine::taken, expected_taken);
}

// A bucket holds one block of the tree: a key of kBucketMaxCount contributions takes the buckets, one more raises the
// flag.
TEST(EngineSchedule, BucketsTakeAtMostOneBlockPerKey) {
  std::mt19937 rng(13);
  for (const int64_t hot : {detops::plan::kBucketMaxCount, detops::plan::kBucketMaxCount + 1}) {
    const int64_t n = 5000;
    std::vector<int64_t> keys(n);
    for (int64_t i = 0; i < n; ++i) keys[i] = i < hot ? 7 : 100 + i;
    std::shuffle(keys.begin(), keys.end(), rng);
    const at::Tensor index = at::tensor(keys, at::kLong);
    const at::Tensor self = at::randn({n + 100});
    const at::Tensor src = at::randn({n});
    at::Tensor want = self.clone();
    detops::scatter_add_compute<detops::cpu::Engine>(want, 0, index, src);
    at::Tensor result = self.clone();
    const auto op = detops::make_scatter_add_op<float, int64_t>(result, 0, index, src);
    ASSERT_TRUE(detops::plan::buckets(detops::plan::sort_reduce_call(n, n + 100, 1, 4)));
    const bool taken = buckets_emulated<float>(op, n, n + 100, 1, rng);
    EXPECT_EQ(taken, hot <= detops::plan::kBucketMaxCount) << hot;
    if (taken) EXPECT_TRUE(bitwise_equal(result, want));
  }
}

}  // namespace

// An op whose contributions are all 1: finalize records (key, total), so a test sees how many
// contributions each destination got.
struct CountingOp {
  std::vector<std::pair<int64_t, double>>* finalized;
  int64_t key(int64_t) const { return 0; }
  double contribution(int64_t, int64_t) const { return 1.0; }
  void finalize(int64_t k, int64_t, double total) const { finalized->emplace_back(k, total); }
};

// The engine's steps at the top of its range (n = 2^31 - 1 contributions): sums such as s0 + kBlock and the
// searches' steps must not wrap past n. The arrays are windows around the last positions; positions past n
// hold the last segment's key, as memory past the end may, so a read past n would be counted.
TEST(EngineSchedule, PositionsNearTheLimitStayBelowN) {
  const int32_t n = static_cast<int32_t>(detops::kMaxContributions);
  constexpr int32_t kBefore = 200;
  constexpr int32_t kAfter = 40;
  const int64_t base = int64_t{n} - kBefore;
  for (const int32_t last_len : {10, 70}) {
    // Key 6 up to the last segment, key 7 from it on.
    std::vector<uint32_t> key_window(kBefore + kAfter, 7u);
    std::fill(key_window.begin(), key_window.begin() + (kBefore - last_len), 6u);
    std::vector<int32_t> seg_first_window(kBefore + kAfter, -1);
    std::vector<int32_t> perm_window(kBefore + kAfter, 0);
    const int64_t tile_base = base / detops::kBlock;
    std::vector<int32_t> tile_window((kBefore + kAfter) / detops::kBlock + 2, -1);
    // keys[p] is key_window[p - base]: only positions inside the window are ever read.
    const uint32_t* keys = key_window.data() - base;
    int32_t* seg_first = seg_first_window.data() - base;
    int32_t* tile_start = tile_window.data() - tile_base;
    const int32_t* perm = perm_window.data() - base;
    const int32_t last = n - last_len;
    std::vector<std::pair<int64_t, double>> finalized;
    const CountingOp op{&finalized};
    std::vector<double> scratch(8, -1.0);
    std::vector<int32_t> slot_first(8, -1), slot_pos(8, -1);
    if (last_len == 10) {
      EXPECT_EQ(detops::engine::long_segment_slots(keys, n, /*num_keys=*/8, last), 0);
      EXPECT_EQ(detops::engine::segment_slots(int64_t{n}, true), static_cast<int32_t>((int64_t{n} + 31) / 32));
      detops::engine::level0_step<double>(op, keys, perm, seg_first, tile_start, n, /*num_keys=*/8, /*D=*/1,
                                          scratch.data(), slot_first.data(), slot_pos.data(), last, 0);
      ASSERT_EQ(finalized.size(), 1u);
      EXPECT_EQ(finalized[0].first, 7);
      EXPECT_EQ(finalized[0].second, 10.0);
      EXPECT_EQ(scratch, std::vector<double>(8, -1.0));
      continue;
    }
    // A long last segment: 70 positions, 3 blocks; its head records slot 5 as its first, and the two tiles that
    // start inside it (at n - 63 and n - 31, as n % 32 == 31) its start.
    EXPECT_EQ(detops::engine::segment_end(keys, n, last, 7u), n);
    EXPECT_EQ(detops::engine::long_segment_slots(keys, n, /*num_keys=*/8, last), 3);
    EXPECT_EQ(detops::engine::long_segment_slots(keys, n, /*num_keys=*/8, last + 1), 0);
    seg_first[last] = 5;
    EXPECT_EQ(detops::engine::segment_start(keys, n - 1, 7u), last);
    for (const int32_t tile_first : {n - 63, n - 31}) {
      ASSERT_EQ(tile_first % detops::kBlock, 0);
      detops::engine::tile_step(keys, tile_first, tile_start);
      EXPECT_EQ(tile_start[tile_first / detops::kBlock], last);
    }
    const detops::engine::Level0Block b =
        detops::engine::level0_block(keys, seg_first, tile_start, n, /*num_keys=*/8, n - 6);
    EXPECT_EQ(b.count, 6);
    EXPECT_EQ(b.slot, 7);
    EXPECT_EQ(b.first, 5);
    EXPECT_EQ(detops::engine::level0_block(keys, seg_first, tile_start, n, /*num_keys=*/8, n - 7).count, 0);
    detops::engine::level0_step<double>(op, keys, perm, seg_first, tile_start, n, /*num_keys=*/8, /*D=*/1,
                                        scratch.data(), slot_first.data(), slot_pos.data(), n - 6, 0);
    EXPECT_TRUE(finalized.empty());
    EXPECT_EQ(scratch[7], 6.0);
    EXPECT_EQ(slot_first[7], 5);
    EXPECT_EQ(slot_pos[7], n - 6);
  }
}

// segment_start and segment_end against a scan, for runs of every length, around multiples of the block size
// and at both ends of the keys.
TEST(EngineSchedule, SegmentSearchesFindTheRun) {
  std::mt19937 rng(11);
  constexpr int32_t kBlock = detops::kBlock;
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<uint32_t> keys = sorted_runs(rng, trial % 3 == 0 ? 40 : (trial % 3 == 1 ? 300 : 3000), 6000);
    const int32_t n = static_cast<int32_t>(keys.size());
    std::vector<int32_t> start, end;
    run_bounds(keys, start, end);
    for (int32_t p = 0; p < n; ++p) {
      ASSERT_EQ(detops::engine::segment_start(keys.data(), p, keys[p]), start[p]) << trial << " " << p;
      if (start[p] == p && end[p] - p > kBlock) {
        ASSERT_EQ(detops::engine::segment_end(keys.data(), n, p, keys[p]), end[p]) << trial << " " << p;
      }
    }
  }
}

// The warp form's searches against a scan: segment_end from every position, near_tile_start at every tile,
// long_run_head everywhere, for runs of every length around the block size and up to 30,000, and first_true
// over every gap up to 1,100 and every answer in it.
TEST(EngineSchedule, WideSearchesFindTheRun) {
  constexpr int32_t kBlock = detops::kBlock;
  const detops::engine::SerialLanes lanes;
  std::mt19937 rng(13);
  for (int trial = 0; trial < 60; ++trial) {
    const int max_run = trial % 4 == 0 ? 3 : (trial % 4 == 1 ? 40 : (trial % 4 == 2 ? 300 : 30000));
    const std::vector<uint32_t> keys = sorted_runs(rng, max_run, 6000);
    const int32_t n = static_cast<int32_t>(keys.size());
    std::vector<int32_t> start, end;
    run_bounds(keys, start, end);
    for (int32_t p = 0; p < n; ++p) {
      ASSERT_EQ(detops::engine::segment_end(keys.data(), n, p, keys[p], lanes), end[p]) << trial << " " << p;
      ASSERT_EQ(detops::engine::long_run_head(keys.data(), n, p), start[p] == p && end[p] - p > kBlock)
          << trial << " " << p;
      if (p % kBlock == 0) {
        ASSERT_EQ(detops::engine::near_tile_start(keys.data(), p, lanes), p - start[p] < kBlock ? start[p] : -1)
            << trial << " " << p;
      }
    }
  }
  for (int64_t lo = -1; lo < 1100; lo += 37) {
    for (int64_t hi = lo + 1; hi <= lo + 1100; ++hi) {
      for (int64_t answer = lo + 1; answer <= hi; answer += 1 + (hi - lo) / 7) {
        ASSERT_EQ(detops::engine::first_true(lanes, lo, hi, [&](int64_t x) {
          EXPECT_TRUE(x > lo && x < hi) << lo << " " << hi << " " << x;
          return x >= answer;
        }), answer) << lo << " " << hi;
      }
    }
  }
}

// block_count's shortcut and binary search against a scan: the block starting at p holds the positions of
// [p, min(p + kBlock, n)) with p's key, for runs of every length around the block size, and at the end.
TEST(EngineSchedule, BlockCountIsTheRunWithinOneBlock) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<uint32_t> keys = sorted_runs(rng, trial % 4 == 0 ? 3 : (trial % 4 == 1 ? 40 : 100), 300);
    const int32_t n = static_cast<int32_t>(keys.size());
    for (int32_t p = 0; p < n; ++p) {
      int32_t expected = 0;
      while (expected < detops::kBlock && p + expected < n && keys[p + expected] == keys[p]) ++expected;
      ASSERT_EQ(detops::engine::block_count(keys.data(), n, p, keys[p]), expected)
          << "trial " << trial << ", p " << p;
    }
  }
}

// The counting sort, emulated as its kernel runs it, sorts as a stable sort does: random keys over 1 to 2^32 - 1
// values (1 to 4 passes), in runs or not, sizes around the tiles' and chunks' edges, grids of 1 block to more
// than the chunks; and it takes the calls the plan gives it, in the passes it gives them.
TEST(EngineSchedule, CountingSortIsAStableSort) {
  std::mt19937 rng(12);
  const std::vector<int64_t> sizes = {1, 31, 33, 4095, 4096, 4097, 9000, 20000};
  const std::vector<int64_t> ranges = {0, 1, 2, 99, 1000, 1023, 1024, 50000, int64_t{1} << 20,
                                       (int64_t{1} << 27) - 1, (int64_t{1} << 32) - 2};
  const std::vector<int64_t> grids = {1, 2, 3, 7, 1024};
  for (int trial = 0; trial < 88; ++trial) {
    const int64_t n = sizes[trial % sizes.size()];
    const int64_t num_keys = ranges[trial % ranges.size()];
    const int64_t grid = grids[trial % grids.size()];
    std::vector<uint32_t> keys(n);
    // Keys in [0, num_keys]: num_keys is the invalid contributions' key, sorted last.
    std::uniform_int_distribution<int64_t> draw(0, num_keys);
    for (auto& k : keys) k = static_cast<uint32_t>(trial % 3 == 2 ? draw(rng) % 37 * (num_keys / 37) : draw(rng));
    if (trial % 4 == 3) std::sort(keys.begin(), keys.end());
    std::vector<int32_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    std::stable_sort(expected.begin(), expected.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
    std::vector<uint32_t> sorted;
    std::vector<int32_t> positions;
    counting_sort_emulated(keys, num_keys, grid, rng, sorted, positions);
    ASSERT_EQ(positions, expected) << "trial " << trial << ", n " << n << ", num_keys " << num_keys << ", grid "
                                   << grid;
    for (int64_t p = 0; p < n; ++p) ASSERT_EQ(sorted[p], keys[expected[p]]) << p;
  }
  namespace plan = detops::plan;
  const auto call = [](int64_t n, int64_t num_keys, int64_t key_bytes) {
    return plan::EngineCall{plan::Kind::kSortReduce, n, num_keys, 1, 4, key_bytes};
  };
  EXPECT_TRUE(plan::counting_sort(call(1 << 20, 1023, 4)));
  EXPECT_TRUE(plan::counting_sort(call(1 << 20, 0, 4)));
  EXPECT_TRUE(plan::counting_sort(call(1 << 20, 1024, 4)));
  EXPECT_TRUE(plan::counting_sort(call(1 << 20, (int64_t{1} << 32) - 2, 4)));
  EXPECT_FALSE(plan::counting_sort(call(1 << 20, 1000, 8)));   // a key chunk's 64-bit keys
  EXPECT_FALSE(plan::counting_sort(call(1000, 1000, 4)));      // the single-block path
  // Passes of at most 10 bits, the bits split evenly: (passes, width) for 1, 10, 11, 16, 21, 27 and 32 bits.
  const auto passes = [](int64_t num_keys) {
    const plan::CountingPasses c = plan::counting_passes(num_keys);
    return std::make_pair(c.passes, c.width);
  };
  EXPECT_EQ(passes(0), std::make_pair(1, 1));
  EXPECT_EQ(passes(1023), std::make_pair(1, 10));
  EXPECT_EQ(passes(1024), std::make_pair(2, 6));
  EXPECT_EQ(passes(50000), std::make_pair(2, 8));
  EXPECT_EQ(passes(int64_t{1} << 20), std::make_pair(3, 7));
  EXPECT_EQ(passes((int64_t{1} << 27) - 1), std::make_pair(3, 9));
  EXPECT_EQ(passes((int64_t{1} << 32) - 2), std::make_pair(4, 8));
  // One pass sorts by the key itself, in num_keys + 1 bins; the top pass takes the digits num_keys reaches.
  EXPECT_EQ(plan::counting_bins(1000, 0, 10), 1001);
  EXPECT_EQ(plan::counting_bins(1024, 0, 6), 64);
  EXPECT_EQ(plan::counting_bins(1024, 6, 6), 17);
  EXPECT_EQ(plan::counting_table_entries(call(1 << 20, 1024, 4)), 64 * 256);
}

// A level's group facts against a walk over the slot tables: segments of 1 to 3,000 slots (their slots
// contiguous, as the heads take them), every slot at the strides of levels 1 to 3.
TEST(EngineSchedule, LevelGroupCountsTheSegmentsItems) {
  constexpr int32_t kBlock = detops::kBlock;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int32_t> slot_first, slot_pos;
    std::vector<uint32_t> keys;
    const int max_len = trial % 2 == 0 ? 40 : 3000;
    for (uint32_t segment = 0; slot_first.size() < 6000; ++segment) {
      const int len = std::uniform_int_distribution<int>(1, max_len)(rng);
      const auto f = static_cast<int32_t>(slot_first.size());
      for (int i = 0; i < len; ++i) {
        slot_first.push_back(f);
        slot_pos.push_back(static_cast<int32_t>(keys.size()));
        keys.push_back(segment);
      }
    }
    const auto total = static_cast<int32_t>(slot_first.size());
    for (int32_t stride = 1; stride <= kBlock * kBlock; stride *= kBlock) {
      for (int32_t q = 0; q < total; ++q) {
        const int32_t f = slot_first[q];
        const auto in_segment = [&](int64_t x) { return x < total && slot_first[x] == f; };
        int32_t count = 0;
        if ((q - f) % (stride * kBlock) == 0 && in_segment(f + stride)) {
          while (count < kBlock && in_segment(q + int64_t{count} * stride)) ++count;
        }
        const detops::engine::LevelGroup g =
            detops::engine::level_group(keys.data(), slot_first.data(), slot_pos.data(), total, stride, q);
        ASSERT_EQ(g.count, count) << "trial " << trial << ", stride " << stride << ", q " << q;
        ASSERT_EQ(g.finish, count > 0 && q == f && !in_segment(f + int64_t{stride} * kBlock)) << q;
        if (g.finish) ASSERT_EQ(g.key, keys[slot_pos[q]]) << q;
      }
    }
    // levels_kernel stops at the first level whose stride reaches the slots in use: no group there.
    int32_t past = 1;
    while (past < total) past *= kBlock;
    for (int32_t q = 0; q < total; ++q) {
      ASSERT_EQ(detops::engine::level_group(keys.data(), slot_first.data(), slot_pos.data(), total, past, q).count, 0)
          << "trial " << trial << ", q " << q;
    }
  }
}

// Invalid contributions (key num_keys, sorted last) get no scratch slots and lead no block, so no tree level
// can fold or finalize them, however many there are.
TEST(EngineSchedule, TheInvalidSegmentGetsNoSlots) {
  const int64_t num_keys = 5;
  std::vector<uint32_t> keys(40, 0u);
  keys.resize(80, static_cast<uint32_t>(num_keys));
  const int32_t n = static_cast<int32_t>(keys.size());
  EXPECT_EQ(detops::engine::long_segment_slots(keys.data(), n, num_keys, 0), 2);
  EXPECT_EQ(detops::engine::long_segment_slots(keys.data(), n, num_keys, 40), 0);
  std::vector<int32_t> seg_first(n, -1), tile_start(n / detops::kBlock + 1, -1);
  seg_first[0] = 0;
  for (int32_t p = 0; p < n; ++p) detops::engine::tile_step(keys.data(), p, tile_start.data());
  EXPECT_EQ(tile_start, (std::vector<int32_t>{0, 0, 40}));
  const auto block = [&](int32_t p) {
    return detops::engine::level0_block(keys.data(), seg_first.data(), tile_start.data(), n, num_keys, p);
  };
  EXPECT_EQ(block(0).count, 32);
  EXPECT_EQ(block(0).slot, 0);
  EXPECT_EQ(block(32).count, 8);
  EXPECT_EQ(block(32).slot, 1);
  EXPECT_EQ(block(40).count, 0);
  EXPECT_EQ(block(72).count, 0);
}

// scatter_add's map: forty dims whose strides compose merge to a few; more than kMaxDims dims that do
// not merge are a clear error, never a write past the map's arrays.
TEST(ScatterMap, MergesComposableDimsAndRejectsTooManyOthers) {
  std::vector<detops::ScatterDim> dims;
  int64_t stride = 1;
  for (int d = 39; d >= 0; --d) {
    const int64_t size = d % 3 == 0 ? 1 : 2;
    dims.insert(dims.begin(), detops::ScatterDim{size, stride, stride, stride, d == 20});
    stride *= size;
  }
  detops::ScatterMap m{};
  detops::build_scatter_map(m, dims, 2);
  EXPECT_EQ(m.ndim, 3);
  EXPECT_EQ(m.dim, 1);
  EXPECT_EQ(m.sizes[0] * m.sizes[1] * m.sizes[2], stride);

  std::vector<detops::ScatterDim> strided;
  for (int d = 0; d < 30; ++d) strided.push_back({2, int64_t{1} << (2 * (29 - d)), 1, 1, d == 0});
  try {
    detops::build_scatter_map(m, strided, 2);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 25 are supported"), std::string::npos) << e.what();
  }
}
