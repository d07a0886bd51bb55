// The attention backward. With P = softmax rows, dP = dO·Vᵀ and
// Delta_i = dO_i·O_i = Σ_j P_ij dP_ij:
//   dS = scale·P∘(dP − Delta),  dV = Pᵀ·dO,  dK = dSᵀ·Q,  dQ = dS·K,
// dK and dV of a K/V head summed over the query heads of its group. Each head's operands are
// packed once per call, each in the roles it plays (Q, dO as the left side of the score
// products and as the right side of dK, dV; K as the right side of Q·Kᵀ and of dQ; V of
// dO·Vᵀ), K and V once per K/V head. Then two kinds of task: one owns a key tile of a K/V head
// (dK, dV) and walks, query head by query head of its group, the query tiles that see it; one
// owns a query tile of a query head (dQ) and walks its key tiles. The key-tile tasks run first
// and keep the dS tiles they compute, packed for dQ; the query-tile tasks then read them. Key
// tiles are taken in chunks whose dS fits a budget (set_attention_stored_gradient_budget), the
// query-tile tasks adding each chunk's part of dQ to the previous chunks' in dq: no T×T storage,
// no atomics. Where even one key tile's dS does not fit, the query-tile tasks recompute P and
// dS instead, in the same loop as the key-tile tasks, with the same bits. Each output is summed
// in one fixed order. Scores are queries by keys here: the key-tile task reads
// Pᵀ and dSᵀ in the packers' fast direction, the query-tile task reads dS in the other (for
// fp32 kernels a strided copy; computing its scores transposed instead would take four more
// packed operands). In bf16 the packers round q, k, v, dO, P and dS.

#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention_internal.hpp"
#include "kernels/attention_mask.hpp"
#include "kernels/attention_shape.hpp"
#include "kernels/attention_tile_math.hpp"
#include "kernels/attention_work.hpp"
#include "kernels/bf16.hpp"
#include "kernels/dot.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/tile_gemm.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// Each query tile's key range (AttentionMask::key_tiles) and, per key tile, how many of those
// ranges hold it: a key tile's task computes dS for at most that many query tiles per head.
struct KeyRanges {
  std::vector<int64_t> lo, hi;   // per query tile: first and last key tile
  std::vector<int64_t> seen_by;  // per key tile
  KeyRanges(const AttentionMask& mask, int64_t T) {
    const int64_t nt = ceil_div(T, kBq);
    seen_by.assign(static_cast<size_t>(nt), 0);
    for (int64_t qt = 0; qt < nt; ++qt) {
      const auto [kt_lo, kt_hi] = mask.key_tiles(qt * kBq, std::min(kBq, T - qt * kBq));
      lo.push_back(kt_lo);
      hi.push_back(kt_hi);
      for (int64_t kt = std::max<int64_t>(kt_lo, 0); kt <= kt_hi && kt < nt; ++kt) {
        ++seen_by[static_cast<size_t>(kt)];
      }
    }
  }
  // The first and last key tile of query tile qt's range within key tiles [ka, kb).
  int64_t first_in(int64_t qt, int64_t ka) const {
    return std::max(lo[static_cast<size_t>(qt)], ka);
  }
  int64_t last_in(int64_t qt, int64_t kb) const {
    return std::min(hi[static_cast<size_t>(qt)], kb - 1);
  }
};

// The most bytes of dS one key tile's task keeps for one query head (score_gradient_bytes_per_
// key_tile, and the backward's own test of its budget).
int64_t largest_key_tile_blocks(const KeyRanges& ranges, int64_t block_bytes) {
  int64_t most = 0;
  for (int64_t n : ranges.seen_by) most = std::max(most, n);
  return most * block_bytes;
}

}  // namespace

int64_t score_gradient_bytes_per_key_tile(const MicroKernel& kernel, const AttentionParams& p) {
  validate(p, "attention_backward_keeps_score_gradients");
  const Shape sh = shape_of(p);
  const TileGemm g(kernel, p.precision, kBk, sh.D);
  return sh.per_group *
         largest_key_tile_blocks(KeyRanges(AttentionMask(p), sh.T), g.bytes(Block::kRowsByTile));
}

void attention_backward_with(const MicroKernel& kernel, const AttentionParams& p, const float* out,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv,
                             const bf16* dout_bf16, const bf16* out_bf16) {
  validate_backward(p, "attention_backward");
  for (const auto& [name, fp32, rounded] :
       {std::tuple{"dout", dout != nullptr, dout_bf16 != nullptr},
        std::tuple{"out", out != nullptr, out_bf16 != nullptr}}) {
    const std::string n = name;
    if (fp32 && rounded) {
      throw InputError("attention_backward: give " + n + " or " + n + "_bf16, not both");
    }
    if (rounded && p.precision != Precision::kBf16) {
      throw InputError("attention_backward: " + n +
                       "_bf16 is for bf16 products (precision bf16); give fp32 " + n);
    }
    if (p.T > 0 && !fp32 && !rounded) {
      throw InputError("attention_backward: " + n + " is null (give " + n + ", or " + n +
                       "_bf16 in bf16)");
    }
  }
  const Shape sh = shape_of(p);
  const AttentionMask mask(p);
  if (sh.T == 0) return;
  const int64_t T = sh.T, H = sh.H, D = sh.D, hd = H * D, nt = ceil_div(T, kBk);
  const int64_t per_group = sh.per_group;
  const TileGemm g(kernel, p.precision, kBk, D);
  const OperandRows q_rows{p.q, p.q_bf16}, k_rows{p.k, p.k_bf16}, v_rows{p.v, p.v_bf16};
  const OperandRows dout_rows{dout, dout_bf16};
  const int64_t dn = g.dn(), rows = g.rows();
  const std::vector<int64_t> fv = mask.first_visible_of_queries();
  std::vector<int64_t> per_qt, per_kt;
  mask.visited_counts(per_qt, per_kt);

  std::vector<float> delta(static_cast<size_t>(H * T));
  const bool bf16_operands = p.precision == Precision::kBf16;
  ThreadPool& pool = ThreadPool::current();
  // Per worker: P or dS packed, the probabilities, their gradients, two accumulators.
  const int64_t tile_bytes = rows * kBk * int64_t{sizeof(float)};
  const int64_t acc_bytes = rows * dn * int64_t{sizeof(float)};
  const TileScratch scratch(
      {g.bytes(Block::kRowsByTile), tile_bytes, tile_bytes, acc_bytes, acc_bytes}, pool.size());
  // Per worker: a row of dO rounded to bf16 (or widened from dout_bf16) and, given out_bf16,
  // one of O widened from it, for Delta.
  const int64_t delta_row_floats = out_bf16 != nullptr ? 2 * D : D;
  std::vector<std::vector<float>> rounded_dout(
      static_cast<size_t>(pool.size()), std::vector<float>(static_cast<size_t>(delta_row_floats)));
  const int64_t q_head_bytes = nt * (2 * g.bytes(Block::kRowsByD) + 2 * g.bytes(Block::kDByTile));
  const int64_t kv_head_bytes =
      per_group * q_head_bytes + nt * (2 * g.bytes(Block::kTileByD) + g.bytes(Block::kDByTile));
  // The dS tiles the key-tile tasks compute, packed for dQ = dS·K, are kept for the query-tile
  // tasks where one key tile's blocks for a K/V head's query heads fit the stored-gradient
  // budget (else those tasks recompute P and dS: the same bits); a group then takes no more K/V
  // heads than the budget holds one key tile's blocks of, and its key tiles are taken in chunks
  // of consecutive tiles whose blocks fit it.
  const KeyRanges ranges(mask, T);
  const int64_t ds_block_bytes = g.bytes(Block::kRowsByTile);
  const int64_t ds_key_tile_bytes = per_group * largest_key_tile_blocks(ranges, ds_block_bytes);
  const int64_t ds_budget = stored_score_gradient_budget();
  const bool keep_ds = ds_key_tile_bytes <= ds_budget;
  int64_t group = heads_per_group(kv_head_bytes, sh.H_kv);
  if (keep_ds && ds_key_tile_bytes > 0) {
    group = std::clamp<int64_t>(ds_budget / ds_key_tile_bytes, 1, group);
  }
  // Chunks [ka, kb) of key tiles, each holding the dS of `group` K/V heads within the budget (one
  // chunk of all of them when the query-tile tasks recompute).
  std::vector<std::pair<int64_t, int64_t>> chunks;
  int64_t ds_store_bytes = 0;
  {
    const int64_t heads = group * per_group;
    int64_t ka = 0, bytes = 0;
    for (int64_t kt = 0; kt < nt; ++kt) {
      const int64_t more = heads * ranges.seen_by[static_cast<size_t>(kt)] * ds_block_bytes;
      if (keep_ds && kt > ka && bytes + more > ds_budget) {
        chunks.emplace_back(ka, kt);
        ka = kt;
        bytes = 0;
      }
      bytes += more;
      ds_store_bytes = std::max(ds_store_bytes, bytes);
    }
    chunks.emplace_back(ka, nt);
  }
  if (!keep_ds) ds_store_bytes = 0;
  std::byte* workspace = packing_workspace(group * kv_head_bytes + ds_store_bytes);
  std::byte* const ds_store = workspace + group * kv_head_bytes;
  // A chunk's blocks: per query head of the group, per query tile, its key tiles in the chunk;
  // ds_first[qt] counts the blocks of the query tiles before it.
  std::vector<int64_t> ds_first(static_cast<size_t>(nt));
  int64_t ds_per_head = 0, chunk_ka = 0, chunk_kb = nt;
  // dS of query head h (of the group starting at h0), query tile qt, key tile kt of the chunk.
  auto ds_at = [&](int64_t h0, int64_t h, int64_t qt, int64_t kt) {
    const int64_t block = ds_first[static_cast<size_t>(qt)] + kt - ranges.first_in(qt, chunk_ka);
    return ds_store + ((h - h0) * ds_per_head + block) * ds_block_bytes;
  };
  for (int64_t g0 = 0; g0 < sh.H_kv; g0 += group) {
    const int64_t kv_heads = std::min(group, sh.H_kv - g0);
    const int64_t h0 = g0 * per_group, heads = kv_heads * per_group;
    int64_t offset = 0;
    const Packed q_a(g, Block::kRowsByD, 0, nt, h0, heads, workspace, &offset);
    const Packed dout_a(g, Block::kRowsByD, 0, nt, h0, heads, workspace, &offset);
    const Packed q_b(g, Block::kDByTile, 0, nt, h0, heads, workspace, &offset);
    const Packed dout_b(g, Block::kDByTile, 0, nt, h0, heads, workspace, &offset);
    const Packed k_b(g, Block::kTileByD, 0, nt, g0, kv_heads, workspace, &offset);
    const Packed v_b(g, Block::kTileByD, 0, nt, g0, kv_heads, workspace, &offset);
    const Packed kt_b(g, Block::kDByTile, 0, nt, g0, kv_heads, workspace, &offset);
    // One task per (query head, tile); the first query head of a group packs its K/V head too.
    pool.parallel_for(static_cast<size_t>(heads * nt), [&](size_t task, int worker) {
      const int64_t h = h0 + static_cast<int64_t>(task) / nt;
      const int64_t t = static_cast<int64_t>(task) % nt;
      const int64_t t0 = t * kBk, n = std::min(kBk, T - t0);
      const int64_t q_at = t0 * sh.ld_q + h * D, dout_at = t0 * hd + h * D;
      q_rows.pack_a(g, q_at, sh.ld_q, Trans::kNo, n, D, Block::kRowsByD, q_a.at(h, t));
      dout_rows.pack_a(g, dout_at, hd, Trans::kNo, n, D, Block::kRowsByD, dout_a.at(h, t));
      q_rows.pack_b(g, q_at, sh.ld_q, Trans::kYes, D, n, Block::kDByTile, q_b.at(h, t));
      dout_rows.pack_b(g, dout_at, hd, Trans::kYes, D, n, Block::kDByTile, dout_b.at(h, t));
      if (h % per_group == 0) {
        const int64_t kv = sh.kv_head(h);
        const int64_t kv_at = t0 * sh.ld_kv + kv * D;
        k_rows.pack_b(g, kv_at, sh.ld_kv, Trans::kNo, n, D, Block::kTileByD, k_b.at(kv, t));
        v_rows.pack_b(g, kv_at, sh.ld_kv, Trans::kNo, n, D, Block::kTileByD, v_b.at(kv, t));
        k_rows.pack_b(g, kv_at, sh.ld_kv, Trans::kYes, D, n, Block::kDByTile, kt_b.at(kv, t));
      }
      float* rounded = rounded_dout[static_cast<size_t>(worker)].data();
      float* widened_out = rounded + D;
      for (int64_t i = t0; i < t0 + n; ++i) {
        const int64_t at = i * hd + h * D;
        const float* dout_row = rounded;
        if (dout_bf16 != nullptr) {
          widen_to_float(dout_bf16 + at, D, rounded);
        } else if (bf16_operands) {
          round_row_to_bf16(dout + at, D, rounded);
        } else {
          dout_row = dout + at;
        }
        if (out_bf16 != nullptr) widen_to_float(out_bf16 + at, D, widened_out);
        const float* out_row = out_bf16 != nullptr ? widened_out : out + at;
        // Σ in double, rounded once: Delta is subtracted from every dP of its row, so its error
        // would land on every dS.
        delta[static_cast<size_t>(h * T + i)] =
            static_cast<float>(dot_double(dout_row, out_row, D));
      }
    });

    // A key-tile task runs four products per visited tile and query head of its group, a
    // query-tile task three per visited tile, or one where the key-tile tasks kept dS for it:
    // then, chunk by chunk of key tiles, the key-tile tasks of the chunk run first and the
    // query-tile tasks whose key ranges meet it after them, each adding the chunk's part of dQ
    // (carried from one chunk to the next in dq itself, so every tile is summed in key order).
    auto key_tasks_of = [&](int64_t ka, int64_t kb) {
      std::vector<Task> tasks;
      for (int64_t kv = g0; kv < g0 + kv_heads; ++kv) {
        for (int64_t t = ka; t < kb; ++t) {
          tasks.push_back({4 * per_group * per_kt[static_cast<size_t>(t)], t, kv, kv, 0});
        }
      }
      return tasks;
    };
    auto query_tasks_of = [&](int64_t ka, int64_t kb) {
      std::vector<Task> tasks;
      for (int64_t kv = g0; kv < g0 + kv_heads; ++kv) {
        for (int64_t h = kv * per_group; h < (kv + 1) * per_group; ++h) {
          for (int64_t t = nt - 1; t >= 0; --t) {
            const int64_t tiles = ranges.last_in(t, kb) - ranges.first_in(t, ka) + 1;
            // A query tile that sees no key still writes its dq (zeros), in the first chunk.
            const bool sees_none =
                ranges.hi[static_cast<size_t>(t)] < ranges.lo[static_cast<size_t>(t)];
            if (tiles <= 0 && !(sees_none && ka == 0)) continue;
            const int64_t cost = keep_ds ? tiles : 3 * per_qt[static_cast<size_t>(t)];
            tasks.push_back({cost, t, h, kv, 1});
          }
        }
      }
      return tasks;
    };
    auto run_task = [&](const Task& task, int worker) {
      const int64_t kv = task.kv;
      std::byte* const a_packed = scratch.bytes(worker, 0);
      float *s = scratch.floats(worker, 1), *dp = scratch.floats(worker, 2),
            *acc0 = scratch.floats(worker, 3), *acc1 = scratch.floats(worker, 4);
      std::fill(acc0, acc0 + rows * dn, 0.0f);
      std::fill(acc1, acc1 + rows * dn, 0.0f);
      const TaskScope scope(g);
      // P into s and dS into dp for one tile of query head h.
      int32_t lo[kBq], hi[kBq];
      // Across the causal diagonal the score products leave out micro-tiles of hidden pairs
      // only (probs_and_grads_tile masks them), dQ stops at a row block's last key, and dV and
      // dK start at the first query a row block's keys are seen by.
      auto probs_and_grads = [&](int64_t h, const Tile& t, TileMask kind, int64_t qt, int64_t kt) {
        const CausalSkip skip{CausalAxes::kQueriesByKeys, mask.diagonal_offset(t)};
        const CausalSkip* scores = kind == TileMask::kPartial ? &skip : nullptr;
        g.product(t.nq, t.nk, g.dk(), q_a.at(h, qt), Block::kRowsByD, k_b.at(kv, kt),
                  Block::kTileByD, s, kBk, false, scores);
        g.product(t.nq, t.nk, g.dk(), dout_a.at(h, qt), Block::kRowsByD, v_b.at(kv, kt),
                  Block::kTileByD, dp, kBk, false, scores);
        mask.visible_ranges(t, kind, fv.data(), lo, hi);
        probs_and_grads_tile(s, dp, t.nq, lo, hi, p.scale, lse + h * T + t.q0,
                             delta.data() + h * T + t.q0);
      };
      // dq, dk and dv are written once here and read by the next pass: streamed (TileGemm::
      // store). Copied, their lines were read in first: 12% of this call's samples on the AMX
      // Xeon, the cpu preset's backward 592 → 517 ms per 4 steps.
      auto store = [&](const float* acc, int64_t t0, int64_t n, float* dst, int64_t ld) {
        g.store(acc, dn, n, D, 1.0f, dst + t0 * ld, ld);
      };
      if (task.kind == 0) {
        // dV (acc0) and dK (acc1): Pᵀ and dSᵀ are read from the tile transposed by the packer.
        const int64_t kt = task.tile, k0 = kt * kBk, nk = std::min(kBk, T - k0);
        const auto [qt_lo, qt_hi] = mask.query_tiles(k0, nk);
        for (int64_t h = kv * per_group; h < (kv + 1) * per_group; ++h) {
          for (int64_t qt = qt_lo; qt <= qt_hi; ++qt) {
            const Tile t{qt * kBq, std::min(kBq, T - qt * kBq), k0, nk};
            const TileMask kind = mask.classify(t);
            if (kind == TileMask::kSkip) continue;
            probs_and_grads(h, t, kind, qt, kt);
            if (keep_ds) {
              if (kt < ranges.first_in(qt, 0) || kt > ranges.last_in(qt, nt)) {
                throw std::logic_error(
                    "attention_backward: a visible tile outside its query "
                    "tile's key range");
              }
              g.pack_a(dp, kBk, Trans::kNo, t.nq, nk, Block::kRowsByTile, ds_at(h0, h, qt, kt));
            }
            const int64_t kc = g.k_steps(t.nq);
            const CausalSkip skip{CausalAxes::kKeysOverQueries, mask.diagonal_offset(t)};
            const CausalSkip* over_queries = kind == TileMask::kPartial ? &skip : nullptr;
            g.pack_a(s, kBk, Trans::kYes, nk, t.nq, Block::kRowsByTile, a_packed);
            g.product(nk, D, kc, a_packed, Block::kRowsByTile, dout_b.at(h, qt), Block::kDByTile,
                      acc0, dn, true, over_queries);
            g.pack_a(dp, kBk, Trans::kYes, nk, t.nq, Block::kRowsByTile, a_packed);
            g.product(nk, D, kc, a_packed, Block::kRowsByTile, q_b.at(h, qt), Block::kDByTile, acc1,
                      dn, true, over_queries);
          }
        }
        store(acc0, k0, nk, dv + kv * D, sh.ld_kv);
        store(acc1, k0, nk, dk + kv * D, sh.ld_kv);
      } else {
        // dQ (acc0), over the query tile's key tiles in the chunk [chunk_ka, chunk_kb), adding
        // to what the chunks before stored in dq (copied exactly: the same sum in the same order
        // as carried in acc0).
        const int64_t h = task.h, qt = task.tile, q0 = qt * kBq, nq = std::min(kBq, T - q0);
        const int64_t kt_lo = ranges.first_in(qt, chunk_ka), kt_hi = ranges.last_in(qt, chunk_kb);
        if (kt_lo > ranges.first_in(qt, 0)) {
          for (int64_t i = 0; i < nq; ++i) {
            std::copy_n(dq + (q0 + i) * sh.ld_q + h * D, D, acc0 + i * dn);
          }
        }
        for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
          const Tile t{q0, nq, kt * kBk, std::min(kBk, T - kt * kBk)};
          const TileMask kind = mask.classify(t);
          if (kind == TileMask::kSkip) continue;
          const std::byte* ds = a_packed;
          if (keep_ds) {
            ds = ds_at(h0, h, qt, kt);
          } else {
            probs_and_grads(h, t, kind, qt, kt);
            g.pack_a(dp, kBk, Trans::kNo, nq, t.nk, Block::kRowsByTile, a_packed);
          }
          const CausalSkip skip{CausalAxes::kQueriesOverKeys, mask.diagonal_offset(t)};
          g.product(nq, D, g.k_steps(t.nk), ds, Block::kRowsByTile, kt_b.at(kv, kt),
                    Block::kDByTile, acc0, dn, true, kind == TileMask::kPartial ? &skip : nullptr);
        }
        store(acc0, q0, nq, dq + h * D, sh.ld_q);
      }
    };
    for (const auto& [ka, kb] : chunks) {
      std::vector<Task> key_tasks = key_tasks_of(ka, kb), query_tasks = query_tasks_of(ka, kb);
      if (!keep_ds) {
        key_tasks.insert(key_tasks.end(), query_tasks.begin(), query_tasks.end());
        query_tasks.clear();
      }
      sort_tasks(key_tasks);
      sort_tasks(query_tasks);
      // The chunk's layout of blocks (ds_at).
      chunk_ka = ka;
      chunk_kb = kb;
      ds_per_head = 0;
      for (int64_t qt = 0; qt < nt; ++qt) {
        ds_first[static_cast<size_t>(qt)] = ds_per_head;
        ds_per_head += std::max<int64_t>(ranges.last_in(qt, kb) - ranges.first_in(qt, ka) + 1, 0);
      }
      pool.parallel_for(key_tasks.size(),
                        [&](size_t index, int worker) { run_task(key_tasks[index], worker); });
      pool.parallel_for(query_tasks.size(),
                        [&](size_t index, int worker) { run_task(query_tasks[index], worker); });
    }
  }
}

}  // namespace nanogpt
