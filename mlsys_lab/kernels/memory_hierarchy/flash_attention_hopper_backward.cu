// Attention backward on Hopper: dQ, dK, dV from Q, K, V, O, dO and the forward's log-sum-exp L
// (flash_attention_hopper.cu), FlashAttention-2's Algorithm 2 (Dao 2023) on the forward's machinery (TMA ring,
// a producer warp group and two consumer warp groups, wgmma). Per (batch, head), with c = 1/sqrt(d):
//   P = exp(c·Q Kᵀ − L)   dV = Pᵀ dO   dP = dO Vᵀ   dS = P ∘ (dP − D), D = rowsum(dO ∘ O)   dK = c·dSᵀ Q   dQ = c·dS K
// P is recomputed tile by tile from L; no seq x seq matrix exists. Three kernels:
//   attention_backward_prep   D and L·log2(e) per query row (one warp a row).
//   attention_backward_dkdv   a block owns 128 keys (64 per consumer warp group), keeps dK and dV in registers, and
//                             walks the query tiles (64 rows): Sᵀ = K Q_iᵀ and dPᵀ = V dO_iᵀ (wgmma, both operands in
//                             shared memory, K-major), Pᵀ and dSᵀ in registers, then dV += Pᵀ dO_i and dK += dSᵀ Q_i
//                             with the A operand from registers and dO_i, Q_i MN-major (as the forward reads V).
//   attention_backward_dq     a block owns 128 query rows, keeps dQ in registers, walks the key tiles (64 keys):
//                             S = Q K_jᵀ, dP = dO V_jᵀ, dS, then dQ += dS K_j.
// Algorithm 2 instead adds every tile's dS K_j into dQ in global memory with atomics, from the dK/dV loop. Here dQ
// has a loop of its own, which computes S and dP a second time (7 matrix products of seq x seq x d instead of 5)
// and needs no atomics and no fp32 copy of dQ in memory; the FLOP count quoted is the papers' (5 products: 2.5x
// the forward), so the second S and dP are paid for, not counted.
// Q, K, V, O, dO, dQ, dK, dV: (batch·heads·seq, HEAD_DIM) row-major bf16 bits, seq % 128 == 0; L, D: fp32 per row.
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#define B_KEYS 128       // keys per dK/dV block (2 consumer warp groups x 64)
#define B_QTILE 64       // query rows per tile of the dK/dV loop
#define B_QROWS 128      // query rows per dQ block
#define B_KTILE 64       // keys per tile of the dQ loop
#define B_THREADS 384
#define B_BOXES (HEAD_DIM / 64)     // 128-byte swizzled boxes of 64 bf16 across the head
#ifndef B_STAGES
#define B_STAGES (HEAD_DIM == 128 ? 4 : 6)
#endif
#define KV_BYTES (B_KEYS * HEAD_DIM * 2)      // one of K, V in the dK/dV block
#define QT_BYTES (B_QTILE * HEAD_DIM * 2)     // one of Q_i, dO_i
#define QR_BYTES (B_QROWS * HEAD_DIM * 2)     // one of Q, dO in the dQ block
#define KT_BYTES (B_KTILE * HEAD_DIM * 2)     // one of K_j, V_j
#define LOG2E 1.4426950408889634f

#include "hopper_ptx.cuh"

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// D = rowsum(dO ∘ O) in fp32 and L2 = L·log2(e) (the kernels' exponentials are base 2), one warp per row.
extern "C" __global__ void attention_backward_prep(const bf16_t* __restrict__ O, const bf16_t* __restrict__ dO,
                                                   const float* __restrict__ lse, float* __restrict__ D,
                                                   float* __restrict__ lse2, int rows) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const unsigned* o = reinterpret_cast<const unsigned*>(O + (size_t)row * HEAD_DIM);
    const unsigned* d_o = reinterpret_cast<const unsigned*>(dO + (size_t)row * HEAD_DIM);
    float sum = 0.0f;
#pragma unroll
    for (int w = lane; w < HEAD_DIM / 2; w += 32) {
        const unsigned a = o[w], b = d_o[w];
        sum += bf16_lo(a) * bf16_lo(b) + bf16_hi(a) * bf16_hi(b);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
        D[row] = sum;
        lse2[row] = lse[row] * LOG2E;
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if HEAD_DIM == 128
#define ACC_WGMMA wgmma_m64n128k16_bf16_rs_tb
#else
#define ACC_WGMMA wgmma_m64n64k16_bf16_rs_tb
#endif

// X = A Bᵀ over the head dimension, 64 x 64, both in shared memory K-major (rows of the head dimension, in boxes of
// 64 columns): a_rows / b_rows are the first row's address, a_box / b_box the bytes between boxes.
__device__ __forceinline__ void issue_abt(float (&x)[32], unsigned a_rows, unsigned a_box, unsigned b_rows,
                                          unsigned b_box) {
    wgmma_m64n64k16_bf16_zero(x, wgmma_desc(a_rows), wgmma_desc(b_rows));
#pragma unroll
    for (int kk = 1; kk < HEAD_DIM / 16; ++kk)
        wgmma_m64n64k16_bf16(x, wgmma_desc(a_rows + (kk / 4) * a_box + (kk % 4) * 32),
                             wgmma_desc(b_rows + (kk / 4) * b_box + (kk % 4) * 32), 1);
}

// acc += A B with A (64 x 64) from registers, 4 fragments of 16 columns, and B (64 x HEAD_DIM) in shared memory
// MN-major: 64 rows of a tile stored as boxes of 64 columns, `box` bytes apart.
__device__ __forceinline__ void issue_acc(float (&acc)[HEAD_DIM / 2], const unsigned (&a)[4][4], unsigned b,
                                          unsigned box) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) ACC_WGMMA(acc, a[kk], wgmma_desc_mn(b + kk * 16 * 128, box, 1024));
}

// From the 64 x 64 accumulators x (scores, scaled by c·log2 e) and dx (dP): P = 2^(x − l2) and dS = P ∘ (dx − dd),
// each as the 4 A fragments of the next products. l2 and dd are per column (PER_COLUMN: the arrays l2_col, dd_col,
// indexed by column) or per row (this thread's two rows: l2_lo/hi, dd_lo/hi); masked (key > query) entries are 0.
// The dQ kernel uses only dS; the compiler drops P's packing there.
template <bool MASK, bool PER_COLUMN>
__device__ __forceinline__ void softmax_grad(const float (&x)[32], const float (&dx)[32], unsigned (&p)[4][4],
                                             unsigned (&ds)[4][4], const float* l2_col, const float* dd_col,
                                             float l2_lo, float l2_hi, float dd_lo, float dd_hi, float scale_log2,
                                             int row_lo, int col0) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        float pe[8], de[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int n = 2 * kk + (i >> 2);                      // n8 block of this value
            const int col = 8 * n + col0 + (i & 1);               // col0 = 2 (lane % 4)
            const int row = row_lo + ((i & 2) ? 8 : 0);
            const float l2 = PER_COLUMN ? l2_col[col] : ((i & 2) ? l2_hi : l2_lo);
            const float dd = PER_COLUMN ? dd_col[col] : ((i & 2) ? dd_hi : dd_lo);
            float e = ex2(x[8 * kk + i] * scale_log2 - l2);
            if (MASK) {  // PER_COLUMN: rows are keys, columns queries; else rows are queries, columns keys
                const bool masked = PER_COLUMN ? (row > col) : (col > row);
                if (masked) e = 0.0f;
            }
            pe[i] = e;
            de[i] = e * (dx[8 * kk + i] - dd);
        }
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            p[kk][h] = pack_bf16(pe[2 * h], pe[2 * h + 1]);
            ds[kk][h] = pack_bf16(de[2 * h], de[2 * h + 1]);
        }
    }
}

// acc (64 x HEAD_DIM, this thread's rows row and row + 8) times `scale`, to bf16 rows of `out`.
__device__ __forceinline__ void store_rows(const float (&acc)[HEAD_DIM / 2], bf16_t* out, float scale, int lane) {
    out += 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) {
        *reinterpret_cast<unsigned*>(out + n * 8) = pack_bf16(acc[4 * n] * scale, acc[4 * n + 1] * scale);
        *reinterpret_cast<unsigned*>(out + 8 * HEAD_DIM + n * 8) =
            pack_bf16(acc[4 * n + 2] * scale, acc[4 * n + 3] * scale);
    }
}
#endif

// dK and dV of 128 keys. Shared memory: K, V (each KV_BYTES), then B_STAGES stages of (Q_i, dO_i), then per stage
// 64 floats of L2 and of D, then the mbarriers (kv_full, full[s], empty[s]).
extern "C" __global__ void __launch_bounds__(B_THREADS, 1)
attention_backward_dkdv(const void* __restrict__ tmap_q, const void* __restrict__ tmap_k,
                        const void* __restrict__ tmap_v, const void* __restrict__ tmap_do,
                        const float* __restrict__ lse2, const float* __restrict__ D, bf16_t* __restrict__ dK,
                        bf16_t* __restrict__ dV, int seq, float scale_log2, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const unsigned ks = (smem_u32(smem_raw) + 1023) & ~1023u, vs = ks + KV_BYTES;
    const unsigned ring = vs + KV_BYTES;                        // stage s: Q_i at ring + 2s·QT, dO_i after it
    const unsigned vecs = ring + B_STAGES * 2 * QT_BYTES;       // stage s: L2 at vecs + 512 s, D 256 bytes on
    const unsigned bars = vecs + B_STAGES * 512;
    const int key_block = blockIdx.x, bh = blockIdx.y, head_row = bh * seq;
    const int first = CAUSAL ? key_block * (B_KEYS / B_QTILE) : 0;   // queries before the block's keys see none
    const int n_tiles = seq / B_QTILE - first;
    init_ring_barriers(bars, B_STAGES, 256);  // kept tiles, full[s], empty[s]
    if (threadIdx.x >= 256) {  // producer warp group: K and V once, then (Q_i, dO_i, L2_i, D_i) through the ring
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (threadIdx.x == 256) {
            tensormap_acquire(tmap_q);
            tensormap_acquire(tmap_k);
            tensormap_acquire(tmap_v);
            tensormap_acquire(tmap_do);
            mbar_expect_tx(bars, 2 * KV_BYTES);
            for (int box = 0; box < B_BOXES; ++box) {
                tma_load_2d(ks + box * B_KEYS * 128, tmap_k, box * 64, head_row + key_block * B_KEYS, bars);
                tma_load_2d(vs + box * B_KEYS * 128, tmap_v, box * 64, head_row + key_block * B_KEYS, bars);
            }
            for (int t = 0; t < n_tiles; ++t) {
                const int s = t % B_STAGES, row = head_row + (first + t) * B_QTILE;
                const unsigned full = bars + 8 * (1 + s), dst = ring + s * 2 * QT_BYTES;
                if (t >= B_STAGES) mbar_wait(bars + 8 * (1 + B_STAGES + s), ((t / B_STAGES) - 1) & 1);
                mbar_expect_tx(full, 2 * QT_BYTES + 512);
                for (int box = 0; box < B_BOXES; ++box) {
                    tma_load_2d(dst + box * B_QTILE * 128, tmap_q, box * 64, row, full);
                    tma_load_2d(dst + QT_BYTES + box * B_QTILE * 128, tmap_do, box * 64, row, full);
                }
                bulk_load_1d(vecs + 512 * s, lse2 + row, 256, full);
                bulk_load_1d(vecs + 512 * s + 256, D + row, 256, full);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int key_lo = key_block * B_KEYS + wg * 64 + warp * 16 + (lane >> 2);  // this thread's key rows: +0, +8
    const unsigned k_rows = ks + wg * 64 * 128, v_rows = vs + wg * 64 * 128;
    const float* vec_base = reinterpret_cast<const float*>(smem_raw + (vecs - smem_u32(smem_raw)));
    float dk[HEAD_DIM / 2], dv[HEAD_DIM / 2];
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 2; ++i) dk[i] = dv[i] = 0.0f;
    mbar_wait(bars, 0);
    for (int t = 0; t < n_tiles; ++t) {
        const int s = t % B_STAGES, q0 = (first + t) * B_QTILE;
        const unsigned q_tile = ring + s * 2 * QT_BYTES, do_tile = q_tile + QT_BYTES;
        mbar_wait(bars + 8 * (1 + s), (t / B_STAGES) & 1);
        float st[32], dpt[32];
        wgmma_fence();
        issue_abt(st, k_rows, B_KEYS * 128, q_tile, B_QTILE * 128);    // Sᵀ = K Q_iᵀ
        issue_abt(dpt, v_rows, B_KEYS * 128, do_tile, B_QTILE * 128);  // dPᵀ = V dO_iᵀ
        wgmma_commit();
        wgmma_wait<0>();
        unsigned p[4][4], ds[4][4];
        const float* l2 = vec_base + 128 * s;  // L2_i and D_i, indexed by query row within the tile
        if (CAUSAL && q0 < key_block * B_KEYS + B_KEYS)  // the two query tiles that cross the diagonal
            softmax_grad<true, true>(st, dpt, p, ds, l2, l2 + 64, 0, 0, 0, 0, scale_log2, key_lo - q0,
                                     2 * (lane & 3));
        else
            softmax_grad<false, true>(st, dpt, p, ds, l2, l2 + 64, 0, 0, 0, 0, scale_log2, key_lo - q0,
                                      2 * (lane & 3));
        wgmma_fence();
        issue_acc(dv, p, do_tile, B_QTILE * 128);  // dV += Pᵀ dO_i
        issue_acc(dk, ds, q_tile, B_QTILE * 128);  // dK += dSᵀ Q_i
        wgmma_commit();
        wgmma_wait<0>();
        mbar_arrive(bars + 8 * (1 + B_STAGES + s));  // Q_i, dO_i, L2_i, D_i read: the stage is free
    }
    store_rows(dv, dV + ((size_t)head_row + key_lo) * HEAD_DIM, 1.0f, lane);
    store_rows(dk, dK + ((size_t)head_row + key_lo) * HEAD_DIM, scale, lane);
#endif
}

// dQ of 128 query rows. Shared memory: Q, dO (each QR_BYTES), then B_STAGES stages of (K_j, V_j), then the
// mbarriers (q_full, full[s], empty[s]).
extern "C" __global__ void __launch_bounds__(B_THREADS, 1)
attention_backward_dq(const void* __restrict__ tmap_q, const void* __restrict__ tmap_k,
                      const void* __restrict__ tmap_v, const void* __restrict__ tmap_do,
                      const float* __restrict__ lse2, const float* __restrict__ D, bf16_t* __restrict__ dQ, int seq,
                      float scale_log2, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const unsigned qs = (smem_u32(smem_raw) + 1023) & ~1023u, dos = qs + QR_BYTES;
    const unsigned ring = dos + QR_BYTES;                       // stage s: K_j at ring + 2s·KT, V_j after it
    const unsigned bars = ring + B_STAGES * 2 * KT_BYTES;
    const int q_blocks = gridDim.x, bh = blockIdx.y, head_row = bh * seq;
    const int q_block = CAUSAL ? q_blocks - 1 - blockIdx.x : blockIdx.x;  // causal: longest rows first
    const int n_tiles = CAUSAL ? (q_block + 1) * (B_QROWS / B_KTILE) : seq / B_KTILE;
    init_ring_barriers(bars, B_STAGES, 256);  // kept tiles, full[s], empty[s]
    if (threadIdx.x >= 256) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (threadIdx.x == 256) {
            tensormap_acquire(tmap_q);
            tensormap_acquire(tmap_k);
            tensormap_acquire(tmap_v);
            tensormap_acquire(tmap_do);
            mbar_expect_tx(bars, 2 * QR_BYTES);
            for (int box = 0; box < B_BOXES; ++box) {
                tma_load_2d(qs + box * B_QROWS * 128, tmap_q, box * 64, head_row + q_block * B_QROWS, bars);
                tma_load_2d(dos + box * B_QROWS * 128, tmap_do, box * 64, head_row + q_block * B_QROWS, bars);
            }
            for (int j = 0; j < n_tiles; ++j) {
                const int s = j % B_STAGES;
                const unsigned full = bars + 8 * (1 + s), dst = ring + s * 2 * KT_BYTES;
                if (j >= B_STAGES) mbar_wait(bars + 8 * (1 + B_STAGES + s), ((j / B_STAGES) - 1) & 1);
                mbar_expect_tx(full, 2 * KT_BYTES);
                for (int box = 0; box < B_BOXES; ++box) {
                    tma_load_2d(dst + box * B_KTILE * 128, tmap_k, box * 64, head_row + j * B_KTILE, full);
                    tma_load_2d(dst + KT_BYTES + box * B_KTILE * 128, tmap_v, box * 64, head_row + j * B_KTILE,
                                full);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int row_lo = q_block * B_QROWS + wg * 64 + warp * 16 + (lane >> 2);  // this thread's query rows
    const unsigned q_rows = qs + wg * 64 * 128, do_rows = dos + wg * 64 * 128;
    const float l2_lo = lse2[head_row + row_lo], l2_hi = lse2[head_row + row_lo + 8];
    const float dd_lo = D[head_row + row_lo], dd_hi = D[head_row + row_lo + 8];
    float dq[HEAD_DIM / 2];
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 2; ++i) dq[i] = 0.0f;
    mbar_wait(bars, 0);
    for (int j = 0; j < n_tiles; ++j) {
        const int s = j % B_STAGES;
        const unsigned k_tile = ring + s * 2 * KT_BYTES, v_tile = k_tile + KT_BYTES;
        mbar_wait(bars + 8 * (1 + s), (j / B_STAGES) & 1);
        float sc[32], dp[32];
        wgmma_fence();
        issue_abt(sc, q_rows, B_QROWS * 128, k_tile, B_KTILE * 128);   // S = Q K_jᵀ
        issue_abt(dp, do_rows, B_QROWS * 128, v_tile, B_KTILE * 128);  // dP = dO V_jᵀ
        wgmma_commit();
        wgmma_wait<0>();
        unsigned p[4][4], ds[4][4];
        if (CAUSAL && j >= n_tiles - B_QROWS / B_KTILE)  // the key tiles that cross the diagonal
            softmax_grad<true, false>(sc, dp, p, ds, nullptr, nullptr, l2_lo, l2_hi, dd_lo, dd_hi, scale_log2,
                                      row_lo - j * B_KTILE, 2 * (lane & 3));
        else
            softmax_grad<false, false>(sc, dp, p, ds, nullptr, nullptr, l2_lo, l2_hi, dd_lo, dd_hi, scale_log2,
                                       row_lo - j * B_KTILE, 2 * (lane & 3));
        wgmma_fence();
        issue_acc(dq, ds, k_tile, B_KTILE * 128);  // dQ += dS K_j
        wgmma_commit();
        wgmma_wait<0>();
        mbar_arrive(bars + 8 * (1 + B_STAGES + s));
    }
    store_rows(dq, dQ + ((size_t)head_row + row_lo) * HEAD_DIM, scale, lane);
#endif
}
