// Attention forward on Hopper, the next step after flash_attention.cu (FlashAttention-2 on mma.sync), in the way
// FlashAttention-3 (Shah et al. 2024, "FlashAttention-3: Fast and Accurate Attention with Asynchrony and
// Low-precision", §3.1) builds it:
//   O = softmax(Q Kᵀ / sqrt(d) [+ causal mask]) V per (batch, head), and LSE = log Σ_j exp(q·k_j / sqrt(d)) per
//   query row (natural log; what the backward pass recomputes P from). Q, K, V, O: (batch·heads·seq, HEAD_DIM)
//   row-major bf16 bits, seq % 128 == 0.
// What it adds to FlashAttention-2:
//   * TMA: one producer thread copies Q once and K_j, V_j tiles into an H_STAGES-deep ring of shared memory
//     (128-byte swizzle, rows of 64 bf16: a head of 128 is two boxes), with mbarriers for full and empty stages.
//   * Warp specialization: warp group 2 produces; warp groups 0 and 1 consume, 64 query rows each (block: 128 rows).
//   * wgmma: S = Q K_jᵀ as m64n128k16 with both operands in shared memory (K is K-major: the head dimension is
//     contiguous in a row of K); O += P V_j as m64n{HEAD_DIM}k16 with P from registers (S's accumulator layout is
//     the A-register layout, as in FA-2) and V from shared memory MN-major (transposed: tnspB), 128 keys per tile.
//   * Asynchrony: P V_j is issued and not waited for; the next tile's Q K_{j+1}ᵀ is issued behind it, and one
//     wait covers both. Two consumer warp groups per SM overlap one's softmax with the other's matrix products.
// The online softmax is FA-2's in base 2 (c = log2(e) / sqrt(d)); O is divided by l once at the end.
// Compile-time settings: HEAD_DIM (64 or 128) and CAUSAL (0 or 1).
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#define H_BR 128                              // query rows per block: 2 consumer warp groups x 64
#define H_BC 128                              // keys per tile (FA-3's 176 needs registers this kernel lacks)
#ifndef H_STAGES
#define H_STAGES (HEAD_DIM == 128 ? 3 : 4)  // 3 x 64 KiB + Q's 32 KiB: 225 KiB of the 227 a block may have
#endif
#define H_BOX_COLS 64                         // bf16 per 128-byte swizzled row
#define H_BOXES (HEAD_DIM / H_BOX_COLS)
#define H_Q_BYTES (H_BR * HEAD_DIM * 2)
#define H_TILE_BYTES (H_BC * HEAD_DIM * 2)    // one of K_j, V_j
#define H_STAGE_BYTES (2 * H_TILE_BYTES)
#define H_THREADS 384
// V's descriptor offsets: the next 64 columns of the head are the next box (H_BC rows of 128 bytes) on, the
// next 8 keys 1024 bytes on. (Settable to try the other reading of the two fields.)
#ifndef FA_V_LEADING
#define FA_V_LEADING (H_BC * 128)
#endif
#ifndef FA_V_STRIDE
#define FA_V_STRIDE 1024
#endif
// FlashAttention-3's ping-pong between the consumer warp groups (§3.1), switchable for the lesson's table.
#ifndef FA_PINGPONG  // measured on the H200: +10% at d = 128, -15% at d = 64 (the lesson's table)
#define FA_PINGPONG (HEAD_DIM == 128)
#endif
#define NEG_INF __int_as_float(0xff800000)

#include "hopper_ptx.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if HEAD_DIM == 128
#define PV_WGMMA wgmma_m64n128k16_bf16_rs_tb
#else
#define PV_WGMMA wgmma_m64n64k16_bf16_rs_tb
#endif
#define S_WGMMA wgmma_m64n128k16_bf16
#define S_WGMMA_ZERO wgmma_m64n128k16_bf16_zero
// Named barriers 1 and 2 (0 is __syncthreads) between the two consumer warp groups, 256 threads each: one warp
// group waits (bar.sync) for the other's 128 threads to arrive (bar.arrive). Turns, each a warp group's burst of
// tensor-core work: WG0 [S_0], WG1 [S_0], WG0 [P_0 V_0, S_1], WG1 [P_0 V_0, S_1], ..., WG0 [P V], WG1 [P V].
// Warp group w waits on barrier 1 + w and hands over on 2 - w; each wait has exactly one matching arrival.

// The softmax state of a warp group's 64 query rows (this thread's rows g and g + 8), and its registers.
struct FaState {
    float s[H_BC / 2];           // S = Q K_jᵀ: 64 x H_BC over the warp group
    float o[HEAD_DIM / 2];       // O: 64 x HEAD_DIM
    unsigned p[H_BC / 16][4];    // P as bf16 A fragments, one set per 16 keys
    float m_lo, m_hi, l_lo, l_hi;
};

// P V_j into O: P from registers, V_j from shared memory (16 keys = 16 rows of 128 bytes further each step).
__device__ __forceinline__ void issue_pv(FaState& st, unsigned v_tile) {
#pragma unroll
    for (int kk = 0; kk < H_BC / 16; ++kk)
        PV_WGMMA(st.o, st.p[kk], wgmma_desc_mn(v_tile + kk * 16 * 128, FA_V_LEADING, FA_V_STRIDE));
}

// One key tile j of one consumer warp group: S_j = Q K_jᵀ, the online softmax of it, then P_j V_j issued and
// left running (its O is waited for with the next tile's S_{j+1}, in one wait). The tensor-core work a warp group
// issues back to back is [P_{j-1} V_{j-1}, S_j]; with FA_PINGPONG the two warp groups take turns issuing it
// (FlashAttention-3's ping-pong, §3.1: named barriers hand the turn over), so that one's softmax runs while the
// other's matrix products do. MASK: the causal diagonal tile (H_BR == H_BC), where key > query -> -inf.
template <bool MASK>
__device__ __forceinline__ void fa_tile(FaState& st, int j, int n_tiles, unsigned bars, unsigned ring, unsigned q_rows,
                                        int wg, int lane, int row_lo, float scale_log2) {
    const int s = j % H_STAGES;
    const unsigned k_tile = ring + s * H_STAGE_BYTES;
    mbar_wait(bars + 8 * (1 + s), (j / H_STAGES) & 1);
    if (FA_PINGPONG && j == 0 && wg == 1) named_sync(2);  // warp group 0 issues first
    wgmma_fence();
    // 16 of the head dimension a step: box kk / 4, 32 bytes on. The first step starts S at zero and reads none of
    // its old values, so S's registers are free for P between one tile's softmax and the next tile's wgmma.
    S_WGMMA_ZERO(st.s, wgmma_desc(q_rows), wgmma_desc(k_tile));
#pragma unroll
    for (int kk = 1; kk < HEAD_DIM / 16; ++kk)
        S_WGMMA(st.s, wgmma_desc(q_rows + (kk / 4) * H_BR * 128 + (kk % 4) * 32),
                wgmma_desc(k_tile + (kk / 4) * H_BC * 128 + (kk % 4) * 32), 1);
    wgmma_commit();
    if (FA_PINGPONG) named_arrive(2 - wg);  // end of my turn: the other warp group's
    wgmma_wait<0>();  // S_j, and P_{j-1} V_{j-1}, are done
    if (j > 0) mbar_arrive(bars + 8 * (1 + H_STAGES + (j - 1) % H_STAGES));  // V_{j-1}'s stage is free
    const int key0 = j * H_BC + 2 * (lane & 3);
    float mx_lo = NEG_INF, mx_hi = NEG_INF;
#pragma unroll
    for (int n = 0; n < H_BC / 8; ++n) {
        const int key = key0 + n * 8;
        if (MASK) {
            if (key > row_lo) st.s[4 * n] = NEG_INF;
            if (key + 1 > row_lo) st.s[4 * n + 1] = NEG_INF;
            if (key > row_lo + 8) st.s[4 * n + 2] = NEG_INF;
            if (key + 1 > row_lo + 8) st.s[4 * n + 3] = NEG_INF;
        }
        mx_lo = fmaxf(mx_lo, fmaxf(st.s[4 * n], st.s[4 * n + 1]));
        mx_hi = fmaxf(mx_hi, fmaxf(st.s[4 * n + 2], st.s[4 * n + 3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {  // a row's scores are spread over the 4 lanes of a quad
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float new_lo = fmaxf(st.m_lo, mx_lo * scale_log2), new_hi = fmaxf(st.m_hi, mx_hi * scale_log2);
    const float alpha_lo = ex2(st.m_lo - new_lo), alpha_hi = ex2(st.m_hi - new_hi);
    st.m_lo = new_lo, st.m_hi = new_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int kk = 0; kk < H_BC / 16; ++kk) {  // keys 16 kk .. 16 kk + 15: n8 blocks 2 kk and 2 kk + 1
        float e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) e[i] = ex2(st.s[8 * kk + i] * scale_log2 - ((i & 2) ? new_hi : new_lo));
        sum_lo += e[0] + e[1] + e[4] + e[5];
        sum_hi += e[2] + e[3] + e[6] + e[7];
        st.p[kk][0] = pack_bf16(e[0], e[1]);
        st.p[kk][1] = pack_bf16(e[2], e[3]);
        st.p[kk][2] = pack_bf16(e[4], e[5]);
        st.p[kk][3] = pack_bf16(e[6], e[7]);
    }
    st.l_lo = st.l_lo * alpha_lo + sum_lo;
    st.l_hi = st.l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) {
        st.o[4 * n] *= alpha_lo, st.o[4 * n + 1] *= alpha_lo;
        st.o[4 * n + 2] *= alpha_hi, st.o[4 * n + 3] *= alpha_hi;
    }
    if (FA_PINGPONG) named_sync(1 + wg);  // wait for my next turn: P_j V_j, then S_{j+1}
    wgmma_fence();
    issue_pv(st, k_tile + H_TILE_BYTES);
    wgmma_commit();
}
#endif

extern "C" __global__ void __launch_bounds__(H_THREADS, 1)
flash_attention_hopper(const void* __restrict__ tmap_q, const void* __restrict__ tmap_k,
                       const void* __restrict__ tmap_v, bf16_t* __restrict__ O, float* __restrict__ lse, int seq,
                       float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const unsigned qs = (smem_u32(smem_raw) + 1023) & ~1023u;
    const unsigned ring = qs + H_Q_BYTES;                       // stage s: K_j at ring + s·STAGE, V_j after it
    const unsigned bars = ring + H_STAGES * H_STAGE_BYTES;      // q_full, full[s], empty[s]
    const unsigned q_full = bars;
    // Grid (query tiles, batch·heads): the blocks running together share one head's K and V in L2. (Launching
    // every head's longest causal tiles first instead, grid (batch·heads, query tiles), measured 6-25% slower.)
    const int q_block = blockIdx.x, q_blocks = gridDim.x, bh = blockIdx.y;
    const int q_tile = CAUSAL ? q_blocks - 1 - q_block : q_block;  // causal: longest rows first
    const int head_row = bh * seq;                               // first row of this (batch, head) in the 2-D view
    const int n_tiles = CAUSAL ? q_tile + 1 : seq / H_BC;
    init_ring_barriers(bars, H_STAGES, 256);  // kept tiles, full[s], empty[s]
    if (threadIdx.x >= 256) {  // producer warp group
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (threadIdx.x == 256) {
            tensormap_acquire(tmap_q);
            tensormap_acquire(tmap_k);
            tensormap_acquire(tmap_v);
            mbar_expect_tx(q_full, H_Q_BYTES);
            for (int box = 0; box < H_BOXES; ++box)
                tma_load_2d(qs + box * H_BR * 128, tmap_q, box * H_BOX_COLS, head_row + q_tile * H_BR, q_full);
            for (int j = 0; j < n_tiles; ++j) {
                const int s = j % H_STAGES;
                const unsigned full = bars + 8 * (1 + s), k_dst = ring + s * H_STAGE_BYTES;
                if (j >= H_STAGES) mbar_wait(bars + 8 * (1 + H_STAGES + s), ((j / H_STAGES) - 1) & 1);
                mbar_expect_tx(full, H_STAGE_BYTES);
                for (int box = 0; box < H_BOXES; ++box) {
                    tma_load_2d(k_dst + box * H_BC * 128, tmap_k, box * H_BOX_COLS, head_row + j * H_BC, full);
                    tma_load_2d(k_dst + H_TILE_BYTES + box * H_BC * 128, tmap_v, box * H_BOX_COLS, head_row + j * H_BC,
                                full);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int row_lo = q_tile * H_BR + wg * 64 + warp * 16 + (lane >> 2);  // query index of this thread's row g
    const unsigned q_rows = qs + wg * 64 * 128;                           // this warp group's 64 rows, box 0
    FaState st;
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 2; ++i) st.o[i] = 0.0f;
    st.m_lo = st.m_hi = NEG_INF;
    st.l_lo = st.l_hi = 0.0f;
    mbar_wait(q_full, 0);
    for (int j = 0; j < n_tiles - 1; ++j)
        fa_tile<false>(st, j, n_tiles, bars, ring, q_rows, wg, lane, row_lo, scale_log2);
    fa_tile<CAUSAL>(st, n_tiles - 1, n_tiles, bars, ring, q_rows, wg, lane, row_lo, scale_log2);
    if (FA_PINGPONG && wg == 0) named_arrive(2);  // warp group 1's last turn
    wgmma_wait<0>();
    mbar_arrive(bars + 8 * (1 + H_STAGES + (n_tiles - 1) % H_STAGES));
    float l_lo = st.l_lo, l_hi = st.l_hi;
    const float m_lo = st.m_lo, m_hi = st.m_hi;
    float* o = st.o;
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    bf16_t* out = O + ((size_t)head_row + row_lo) * HEAD_DIM + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) {
        *reinterpret_cast<unsigned*>(out + n * 8) = pack_bf16(o[4 * n] * inv_lo, o[4 * n + 1] * inv_lo);
        *reinterpret_cast<unsigned*>(out + 8 * HEAD_DIM + n * 8) = pack_bf16(o[4 * n + 2] * inv_hi, o[4 * n + 3] * inv_hi);
    }
    if ((lane & 3) == 0) {  // LSE = ln(l · 2^m) = (m + log2 l) · ln 2
        lse[head_row + row_lo] = (m_lo + __log2f(l_lo)) * 0.6931471805599453f;
        lse[head_row + row_lo + 8] = (m_hi + __log2f(l_hi)) * 0.6931471805599453f;
    }
#endif
}
