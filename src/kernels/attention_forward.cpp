// The attention forward: pack every K/V head's K (as the left side of K·Qᵀ) and V (the right side
// of P·V) once, then one task per (query head, query tile), reading its group's K/V head. Scores
// are computed transposed, keys by queries, so the softmax runs with queries along the vector lanes
// and P is read by the packer with its queries contiguous (the packers' fast direction). The task's
// output rows live in `o` while the key tiles stream past, rescaled whenever a row's running max
// grows. In bf16 the packers round q, k, v and P as they copy; the scores, the softmax statistics
// and o stay fp32. Key tiles a query does not see contribute exact zeros, so a query's bits depend
// only on the key tiles, not on which other queries share its tile: decoding over a cache gives the
// rows a full forward gives.

#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/attention_internal.hpp"
#include "kernels/attention_mask.hpp"
#include "kernels/attention_shape.hpp"
#include "kernels/attention_tile_math.hpp"
#include "kernels/attention_work.hpp"
#include "kernels/bf16.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/tile_gemm.hpp"
#include "kernels/streamed_store.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

void attention_forward_with(const MicroKernel& kernel, const AttentionParams& p, float* out,
                            float* lse, bf16* out_rounded) {
  validate_tensors(p, "attention_forward");
  validate_forward_outputs(p, out, out_rounded, "attention_forward");
  const Shape sh = shape_of(p);
  const AttentionMask mask(p);
  if (sh.T == 0) return;
  const int64_t T = sh.T, H = sh.H, D = sh.D, hd = H * D, nqt = ceil_div(T, kBq);
  const int64_t nkt = ceil_div(sh.T_kv, kBk);
  const TileGemm g(kernel, p.precision, kBk, D);
  const OperandRows q_rows{p.q, p.q_bf16}, k_rows{p.k, p.k_bf16}, v_rows{p.v, p.v_bf16};
  const int64_t dn = g.dn(), rows = g.rows();
  const std::vector<int64_t> fv = mask.first_visible_of_queries();
  std::vector<int64_t> per_qt, per_kt;
  mask.visited_counts(per_qt, per_kt);

  ThreadPool& pool = ThreadPool::current();
  // Per worker: the query tile packed, P packed, the scores, the output rows.
  const TileScratch scratch(
      {g.bytes(Block::kTileByD), g.bytes(Block::kRowsByTile), rows * kBq * int64_t{sizeof(float)},
       rows * dn * int64_t{sizeof(float)}},
      pool.size());
  // No query sees a key before the first one query 0 sees (first_visible grows with the
  // position): when decoding with a window, most of the cache is never packed.
  const int64_t first_kt = fv[0] / kBk, used_kt = nkt - first_kt;
  const int64_t kv_head_bytes = used_kt * (g.bytes(Block::kRowsByD) + g.bytes(Block::kDByTile));
  const int64_t group = heads_per_group(kv_head_bytes, sh.H_kv);
  std::byte* workspace = packing_workspace(group * kv_head_bytes);
  for (int64_t g0 = 0; g0 < sh.H_kv; g0 += group) {
    const int64_t kv_heads = std::min(group, sh.H_kv - g0);
    int64_t offset = 0;
    const Packed k_pack(g, Block::kRowsByD, first_kt, used_kt, g0, kv_heads, workspace, &offset);
    const Packed v_pack(g, Block::kDByTile, first_kt, used_kt, g0, kv_heads, workspace, &offset);
    pool.parallel_for(static_cast<size_t>(kv_heads * used_kt), [&](size_t task, int) {
      const int64_t kv = g0 + static_cast<int64_t>(task) / used_kt;
      const int64_t kt = first_kt + static_cast<int64_t>(task) % used_kt;
      const int64_t k0 = kt * kBk, nk = std::min(kBk, sh.T_kv - k0);
      const int64_t at = k0 * sh.ld_kv + kv * D;
      k_rows.pack_a(g, at, sh.ld_kv, Trans::kNo, nk, D, Block::kRowsByD, k_pack.at(kv, kt));
      v_rows.pack_b(g, at, sh.ld_kv, Trans::kYes, D, nk, Block::kDByTile, v_pack.at(kv, kt));
    });

    std::vector<Task> tasks;
    for (int64_t h = g0 * sh.per_group; h < (g0 + kv_heads) * sh.per_group; ++h) {
      for (int64_t qt = nqt - 1; qt >= 0; --qt) {
        tasks.push_back({per_qt[static_cast<size_t>(qt)], qt, h, sh.kv_head(h), 0});
      }
    }
    sort_tasks(tasks);
    pool.parallel_for(tasks.size(), [&](size_t index, int worker) {
      const int64_t h = tasks[index].h, kv = tasks[index].kv, q0 = tasks[index].tile * kBq;
      const int64_t nq = std::min(kBq, T - q0);
      std::byte* const q_packed = scratch.bytes(worker, 0);
      std::byte* const p_packed = scratch.bytes(worker, 1);
      float* const s = scratch.floats(worker, 2);
      float* const o = scratch.floats(worker, 3);
      // The softmax's running max, sum and rescaling per query, and each query's visible keys.
      struct {
        float m[kBq], l[kBq], alpha[kBq];
        int32_t lo[kBq], hi[kBq];
      } w;
      std::fill(o, o + g.rows_written(nq) * dn, 0.0f);
      std::fill(w.m, w.m + kBq, kNegInf);
      std::fill(w.l, w.l + kBq, 0.0f);
      const TaskScope scope(g);
      q_rows.pack_b(g, q0 * sh.ld_q + h * D, sh.ld_q, Trans::kNo, nq, D, Block::kTileByD, q_packed);
      const auto [kt_lo, kt_hi] = mask.key_tiles(q0, nq);
      for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
        const Tile t{q0, nq, kt * kBk, std::min(kBk, sh.T_kv - kt * kBk)};
        const TileMask kind = mask.classify(t);
        if (kind == TileMask::kSkip) continue;
        // Across the causal diagonal: no scores of keys after every query of a micro-tile (the
        // softmax masks them), no P·V over keys after a row block's last query.
        const int64_t delta = mask.diagonal_offset(t);
        const CausalSkip scores{CausalAxes::kKeysByQueries, delta};
        const CausalSkip over_keys{CausalAxes::kQueriesOverKeys, delta};
        const bool partial = kind == TileMask::kPartial;
        g.product(t.nk, nq, g.dk(), k_pack.at(kv, kt), Block::kRowsByD, q_packed, Block::kTileByD,
                  s, kBq, false, partial ? &scores : nullptr);
        mask.visible_ranges(t, kind, fv.data(), w.lo, w.hi);
        online_softmax_tile(s, t.nk, nq, w.lo, w.hi, kind == TileMask::kFull, p.scale, w.m, w.l,
                            w.alpha);
        scale_rows(o, nq, dn, w.alpha);
        g.pack_a(s, kBq, Trans::kYes, nq, t.nk, Block::kRowsByTile, p_packed);
        g.product(nq, D, g.k_steps(t.nk), p_packed, Block::kRowsByTile, v_pack.at(kv, kt),
                  Block::kDByTile, o, dn, true, partial ? &over_keys : nullptr);
      }
      // out = o / l, each row scaled once; then streamed out (TileGemm::store).
      for (int64_t i = 0; i < nq; ++i) {
        w.alpha[i] = 1.0f / w.l[i];
        lse[h * T + q0 + i] = w.m[i] + std::log(w.l[i]);
      }
      scale_rows(o, nq, dn, w.alpha);
      if (out != nullptr) g.store(o, dn, nq, D, 1.0f, out + q0 * hd + h * D, hd);
      // Around the caches too: the output projection reads them after every head's tiles.
      if (out_rounded != nullptr) {
        for (int64_t i = 0; i < nq; ++i) {
          round_to_bf16_streamed(o + i * dn, D, out_rounded + (q0 + i) * hd + h * D);
        }
        streamed_stores_fence();
      }
    });
  }
}

}  // namespace nanogpt
