// Fused attention forward on tensor cores, FlashAttention-2's algorithm (Dao 2023, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", Algorithm 1):
//   O = softmax(Q Kᵀ / sqrt(d) [+ causal mask]) V, per (batch, head), never writing the S x S scores.
//   Q, K, V, O: (batch * heads, seq, HEAD_DIM) row-major bf16 bits; seq % FA_BR == 0.
// Block (q tile, head) keeps FA_BR = 128 query rows resident (16 per warp, as mma A fragments in
// registers) and streams K and V through shared memory in tiles of FA_BC = 64 keys, double-buffered
// with cp.async so tile j + 1 loads while tile j is used. For each tile a warp computes
//   S = Q_w K_jᵀ (16 x 64, mma.sync bf16, fp32 accumulators),
//   m_new = max(m, rowmax S · c),  P = exp2(S · c - m_new),  l = l · exp2(m - m_new) + rowsum P,
//   O = O · exp2(m - m_new) + P V_j (P rounded to bf16 and fed to the next mma from registers),
// with c = log2(e) / sqrt(d): the online softmax (Milakov & Gimelshein 2018) in base 2. O is divided by l
// once at the end (FA-2's first change to FA-1: no rescaling of O by l inside the loop). The accumulator
// layout of S (rows g, g + 8; columns 2t, 2t + 1 of each n8 tile) is the A-fragment layout of the
// next mma, so P never leaves registers. Causal blocks run heaviest-first and stop at the diagonal.
// Shared tiles have HEAD_DIM-long rows with 16-byte chunks XOR-swizzled by row % 8 (no bank conflicts).
// Compile-time settings: HEAD_DIM (64 or 128) and CAUSAL (0 or 1).
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#define FA_BR 128  // query rows per block: 8 warps x 16
#define FA_BC 64   // keys per streamed tile
#define FA_THREADS 256
#define FA_DK (HEAD_DIM / 16)  // k steps of Q Kᵀ
#define FA_DN (HEAD_DIM / 8)   // n8 tiles of O
#define NEG_INF __int_as_float(0xff800000)  // -infinity without math.h (NVRTC)

#include "tensor_core_ptx.cuh"  // bf16_t, smem_u32, pack_bf16, ldmatrix_x4(_trans), mma_bf16, cp_async_*

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile with HEAD_DIM-long rows.
__device__ __forceinline__ int fa_offset(int row, int chunk) { return row * HEAD_DIM + ((chunk ^ (row & 7)) << 3); }


// Copy `rows` rows of HEAD_DIM bf16 from global (row stride HEAD_DIM) into a swizzled shared tile.
template <int ROWS>
__device__ __forceinline__ void load_tile(bf16_t* dst, const bf16_t* src) {
#pragma unroll
    for (int i = 0; i < ROWS * FA_DN / FA_THREADS; ++i) {
        const int t = threadIdx.x + i * FA_THREADS, r = t / FA_DN, c = t % FA_DN;
        cp_async_16(smem_u32(dst + fa_offset(r, c)), src + (size_t)r * HEAD_DIM + c * 8);
    }
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
flash_attention_fwd(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
                    bf16_t* __restrict__ O, int seq, float scale_log2) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    bf16_t* qs = reinterpret_cast<bf16_t*>(smem_raw);  // FA_BR x HEAD_DIM
    bf16_t* ks = qs + FA_BR * HEAD_DIM;                 // 2 x FA_BC x HEAD_DIM
    bf16_t* vs = ks + 2 * FA_BC * HEAD_DIM;             // 2 x FA_BC x HEAD_DIM
    const int q_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest rows first
    const size_t head = (size_t)blockIdx.y * seq * HEAD_DIM;
    const bf16_t* k_head = K + head;
    const bf16_t* v_head = V + head;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_tiles = CAUSAL ? (q_tile + 1) * (FA_BR / FA_BC) : seq / FA_BC;

    load_tile<FA_BR>(qs, Q + head + (size_t)q_tile * FA_BR * HEAD_DIM);
    load_tile<FA_BC>(ks, k_head);
    load_tile<FA_BC>(vs, v_head);
    cp_async_commit();

    unsigned qf[FA_DK][4];  // this warp's 16 query rows as A fragments, loaded once
    float o[FA_DN][4];
#pragma unroll
    for (int n = 0; n < FA_DN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_lo = NEG_INF, m_hi = NEG_INF, l_lo = 0.0f, l_hi = 0.0f;  // rows g and g + 8 (partial l)
    const int row_lo = q_tile * FA_BR + warp * 16 + (lane >> 2);          // global query index of row g

    for (int j = 0; j < n_tiles; ++j) {
        if (j + 1 < n_tiles) {  // prefetch tile j + 1 into the other buffer
            load_tile<FA_BC>(ks + ((j + 1) & 1) * FA_BC * HEAD_DIM, k_head + (size_t)(j + 1) * FA_BC * HEAD_DIM);
            load_tile<FA_BC>(vs + ((j + 1) & 1) * FA_BC * HEAD_DIM, v_head + (size_t)(j + 1) * FA_BC * HEAD_DIM);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the prefetch has landed
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < FA_DK; ++kk)
                ldmatrix_x4(qf[kk], smem_u32(qs + fa_offset(warp * 16 + (lane & 15), 2 * kk + (lane >> 4))));
        }
        const bf16_t* kb = ks + (j & 1) * FA_BC * HEAD_DIM;
        const bf16_t* vb = vs + (j & 1) * FA_BC * HEAD_DIM;

        float s[FA_BC / 8][4];  // S = Q_w K_jᵀ: 16 x 64
#pragma unroll
        for (int n = 0; n < FA_BC / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < FA_DK; ++kk)
#pragma unroll
            for (int n = 0; n < FA_BC / 8; n += 2) {  // keys of n8 tiles n, n + 1; d chunks 2 kk, 2 kk + 1
                unsigned b[4];
                ldmatrix_x4(b, smem_u32(kb + fa_offset(n * 8 + (lane >> 4) * 8 + (lane & 7), 2 * kk + ((lane >> 3) & 1))));
                mma_bf16(s[n], qf[kk], b[0], b[1]);
                mma_bf16(s[n + 1], qf[kk], b[2], b[3]);
            }
        if (CAUSAL && (j + 1) * FA_BC > q_tile * FA_BR) {  // the tile crosses the diagonal: key > query -> -inf
#pragma unroll
            for (int n = 0; n < FA_BC / 8; ++n) {
                const int key = j * FA_BC + n * 8 + 2 * (lane & 3);
                if (key > row_lo) s[n][0] = NEG_INF;
                if (key + 1 > row_lo) s[n][1] = NEG_INF;
                if (key > row_lo + 8) s[n][2] = NEG_INF;
                if (key + 1 > row_lo + 8) s[n][3] = NEG_INF;
            }
        }
        // Online softmax. A row's 64 scores are spread over the 4 lanes of a quad: reduce with shuffles.
        float mx_lo = NEG_INF, mx_hi = NEG_INF;
#pragma unroll
        for (int n = 0; n < FA_BC / 8; ++n) {
            mx_lo = fmaxf(mx_lo, fmaxf(s[n][0], s[n][1]));
            mx_hi = fmaxf(mx_hi, fmaxf(s[n][2], s[n][3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off *= 2) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
        }
        const float new_lo = fmaxf(m_lo, mx_lo * scale_log2), new_hi = fmaxf(m_hi, mx_hi * scale_log2);
        const float alpha_lo = ex2(m_lo - new_lo), alpha_hi = ex2(m_hi - new_hi);
        m_lo = new_lo, m_hi = new_hi;
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int n = 0; n < FA_BC / 8; ++n) {
            s[n][0] = ex2(s[n][0] * scale_log2 - new_lo);
            s[n][1] = ex2(s[n][1] * scale_log2 - new_lo);
            s[n][2] = ex2(s[n][2] * scale_log2 - new_hi);
            s[n][3] = ex2(s[n][3] * scale_log2 - new_hi);
            sum_lo += s[n][0] + s[n][1];
            sum_hi += s[n][2] + s[n][3];
        }
        l_lo = l_lo * alpha_lo + sum_lo;
        l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
        for (int n = 0; n < FA_DN; ++n) o[n][0] *= alpha_lo, o[n][1] *= alpha_lo, o[n][2] *= alpha_hi, o[n][3] *= alpha_hi;
        // O += P V_j: P (16 x 64) as A fragments straight from the S accumulators, V_j via ldmatrix.trans.
#pragma unroll
        for (int kk = 0; kk < FA_BC / 16; ++kk) {
            const unsigned p[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                   pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < FA_DN; n += 2) {  // keys 16 kk .. +15 x d chunks n, n + 1
                unsigned b[4];
                ldmatrix_x4_trans(b, smem_u32(vb + fa_offset(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, n + (lane >> 4))));
                mma_bf16(o[n], p, b[0], b[1]);
                mma_bf16(o[n + 1], p, b[2], b[3]);
            }
        }
        __syncthreads();  // every warp is done with buffer j & 1 before tile j + 2 is loaded into it
    }
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    bf16_t* out = O + head + (size_t)row_lo * HEAD_DIM + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < FA_DN; ++n) {
        *reinterpret_cast<unsigned*>(out + n * 8) = pack_bf16(o[n][0] * inv_lo, o[n][1] * inv_lo);
        *reinterpret_cast<unsigned*>(out + 8 * HEAD_DIM + n * 8) = pack_bf16(o[n][2] * inv_hi, o[n][3] * inv_hi);
    }
}
