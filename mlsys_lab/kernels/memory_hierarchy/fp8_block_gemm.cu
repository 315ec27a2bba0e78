// FP8 (E4M3) GEMM with fine-grained scales on Hopper's tensor cores, as DeepSeek-V3 §3.3 describes it:
//   C = A · Bᵀ      A (M, K) E4M3 codes with one fp32 scale per 1 x 128 block (a row's 128 channels),
//                   B (N, K) E4M3 codes with one fp32 scale per 128 x 128 block;  C (M, N) bf16.
// For every K interval of 128 (one scale of A's row, one of B's block):
//   T  = Σ_k a_k b_k                     four wgmma.m64n128k32.e4m3 into a temporary accumulator T (zeroed by
//                                        the first), whose precision on Hopper is limited ("around 14 bits")
//   C += (sa_row · sb_block) · T         promoted on the CUDA cores into the fp32 accumulator, one FMA each
// so the tensor core never sums more than 128 products and no scale ever multiplies inside it.
//
// Block tile 128 x FP8_BN x 128 (BK = 128 fp8 = one 128-byte swizzled row: K-major, the only layout wgmma takes
// for 8-bit inputs). 384 threads: warp groups 0 and 1 are consumers (64 rows of C each), warp group 2 the
// producer (one thread issues the TMA copies). setmaxnreg moves registers from the producer (40 a thread) to the
// consumers (232): the register file is split among the SM's four schedulers, 3 warps each, so without it every
// thread gets at most 168, and C's 64 (FP8_BN 128) or 128 (256) fp32 plus the temporaries would spill. Stages change
// hands through mbarriers as in bf16_gemm.cu's wgmma step.
// With FP8_BN = 256 a consumer keeps 128 fp32 of C and promotes each 128-column half through one 64-register T.
// While one consumer promotes (its tensor core work waited for), the other's wgmma keep the tensor cores busy.
#ifndef FP8_BN
#define FP8_BN 128
#endif
#define F_BM 128
#define F_BK 128
#define F_SUBS (FP8_BN / 128)                  // 128-column sub-tiles, one T each
#define F_STAGES (FP8_BN == 128 ? 6 : 4)
#define F_A_BYTES (F_BM * F_BK)                // 16 KiB
#define F_STAGE_BYTES ((F_BM + FP8_BN) * F_BK)  // 32 or 48 KiB
#define F_GROUP 8
#define F_THREADS 384
// FP8_PIPELINE (block width 128 only: 64 + 2 x 64 accumulator registers): promote interval kt while the tensor
// cores compute interval kt + 1, in two temporaries, so that a warp group's tensor-core work never waits for its
// own promotion. On the H200 at 8192³ it adds 16% (the lesson's table), once its loop is written so that ptxas
// does not serialize the wgmma (fp8_mainloop_pipelined); 256's accumulator leaves no registers for a second T.
#ifndef FP8_PIPELINE
#define FP8_PIPELINE (FP8_BN == 128)
#endif
#if FP8_PIPELINE && FP8_BN != 128
#error "FP8_PIPELINE needs FP8_BN 128: at 256 the accumulator leaves no registers for a second temporary"
#endif
#ifndef FP8_PINGPONG  // measured slower (the lesson's table): off
#define FP8_PINGPONG 0
#endif
// FP8_MULTICAST: clusters of two blocks on neighbouring row tiles share their B tile. Each block's producer loads
// its own A and half of B, and TMA multicast writes that half into both blocks' stages: every block still gets
// A (16 KiB) and B (FP8_BN x 128) a stage, but reads only A and half of B from L2. A stage is free for the next
// copy only when the consumers of *both* blocks have read it: each consumer warp arrives on its own block's empty
// barrier and on its neighbour's (16 arrivals a stage). Correct on the H200, and slower there (the lesson's table:
// 8192³ reads from L2 are not what limits this kernel, and every stage now waits for the slower of two blocks).
#ifndef FP8_MULTICAST
#define FP8_MULTICAST 0
#endif
#define F_EMPTY_COUNT (FP8_MULTICAST ? 16 : 256)

#include "hopper_ptx.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Where a consumer's operands are: the mbarriers, the ring of stages, the offset of its 64 rows of A in a stage, its
// row's scales of A (one per K interval, M apart), the block column's scales of B (one per K interval), M, the
// number of K intervals, and how many intervals the ring held before this tile's first (a block may run several
// tiles: the ring's stages and phases run on across them).
struct Fp8Operands {
    unsigned bars, ring, a_rows;
    const float* scale_a;
    const float* scale_b;
    int M, k_tiles, ring_base;
};
struct Fp8Scales {  // sa · sb of this thread's two rows for one K interval (and 128 columns)
    float lo, hi;
};

// Wait for interval kt's tiles, issue its four wgmma.m64n128k32 (sub-tile `sub` of B) into t, and read its scales.
__device__ __forceinline__ Fp8Scales fp8_issue(const Fp8Operands& in, int kt, int sub, float (&t)[64]) {
    const int slot = in.ring_base + kt, s = slot % F_STAGES;
    const float sa_lo = __ldg(in.scale_a + (size_t)kt * in.M), sa_hi = __ldg(in.scale_a + (size_t)kt * in.M + 8);
    const float sb = __ldg(in.scale_b + (size_t)sub * in.k_tiles + kt);
    if (sub == 0) mbar_wait(in.bars + 8 * s, (slot / F_STAGES) & 1);
    const unsigned a = in.ring + s * F_STAGE_BYTES + in.a_rows;
    const unsigned b_tile = in.ring + s * F_STAGE_BYTES + F_A_BYTES + sub * 128 * F_BK;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < F_BK / 32; ++kk)  // 32 fp8 = 32 bytes further along k, inside the swizzle atom
        wgmma_m64n128k32_e4m3(t, wgmma_desc(a + 32 * kk), wgmma_desc(b_tile + 32 * kk), kk > 0);
    wgmma_commit();
    return {sa_lo * sb, sa_hi * sb};  // one fp32 rounding of each scale product
}
__device__ __forceinline__ void fp8_release(const Fp8Operands& in, int kt) {  // interval kt's tiles are read
    const unsigned empty = in.bars + 8 * (F_STAGES + (in.ring_base + kt) % F_STAGES);
#if FP8_MULTICAST
    __syncwarp();
    if (threadIdx.x % 32 == 0) {  // one arrival a warp, here and in the neighbour whose B half is in this stage
        mbar_arrive(empty);
        mbar_arrive_cluster(empty, cluster_rank() ^ 1);
    }
#else
    mbar_arrive(empty);
#endif
}
// C += scale · T on the CUDA cores, one FMA per element (rows g: t[4j], t[4j+1]; rows g + 8: t[4j+2], t[4j+3]).
// (Called with a constant `sub`, inlined and unrolled: every index is a constant and d stays in registers.)
__device__ __forceinline__ void fp8_promote(float (&d)[64 * F_SUBS], const float (&t)[64], Fp8Scales sc, int sub) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        d[sub * 64 + 4 * j] = fmaf(sc.lo, t[4 * j], d[sub * 64 + 4 * j]);
        d[sub * 64 + 4 * j + 1] = fmaf(sc.lo, t[4 * j + 1], d[sub * 64 + 4 * j + 1]);
        d[sub * 64 + 4 * j + 2] = fmaf(sc.hi, t[4 * j + 2], d[sub * 64 + 4 * j + 2]);
        d[sub * 64 + 4 * j + 3] = fmaf(sc.hi, t[4 * j + 3], d[sub * 64 + 4 * j + 3]);
    }
}
// One tile's K loop, FP8_PIPELINE: two temporaries; the tensor cores fill one with interval kt + 1 while the CUDA
// cores promote the other. The steady state is straight-line (two intervals an iteration, the tail after the
// loop): with the waits inside branches ptxas cannot prove which temporary a wgmma still writes, and it serializes
// every wgmma (its warning C7514; the step measured 13% slower than without it until this was found).
__device__ __forceinline__ void fp8_mainloop_pipelined(const Fp8Operands& in, float (&d)[64 * F_SUBS]) {
    const int k_tiles = in.k_tiles;
    float t0[64], t1[64];
    Fp8Scales s0 = fp8_issue(in, 0, 0, t0), s1;
    int kt = 0;
    for (; kt + 2 < k_tiles; kt += 2) {
        s1 = fp8_issue(in, kt + 1, 0, t1);
        wgmma_wait<1>();  // interval kt is in t0
        keep_floats(t0);
        fp8_release(in, kt);
        fp8_promote(d, t0, s0, 0);
        s0 = fp8_issue(in, kt + 2, 0, t0);
        wgmma_wait<1>();  // interval kt + 1 is in t1
        keep_floats(t1);
        fp8_release(in, kt + 1);
        fp8_promote(d, t1, s1, 0);
    }
    if (kt + 1 < k_tiles) {  // two intervals left: kt (in t0, issued) and kt + 1
        s1 = fp8_issue(in, kt + 1, 0, t1);
        wgmma_wait<1>();
        keep_floats(t0);
        fp8_release(in, kt);
        fp8_promote(d, t0, s0, 0);
        wgmma_wait<0>();
        keep_floats(t1);
        fp8_release(in, kt + 1);
        fp8_promote(d, t1, s1, 0);
    } else {  // one: kt
        wgmma_wait<0>();
        keep_floats(t0);
        fp8_release(in, kt);
        fp8_promote(d, t0, s0, 0);
    }
}
// One tile's K loop with one temporary: issue an interval's four wgmma, wait for them, promote, then the next.
// With FP8_PINGPONG the two consumer warp groups take turns issuing (named barriers 1 and 2, as the attention
// kernel's ping-pong), so the tensor cores always hold one warp group's products while the other promotes; the
// turns run on across a block's tiles (`first`, `last`: this is the block's first or last tile).
__device__ __forceinline__ void fp8_mainloop(const Fp8Operands& in, float (&d)[64 * F_SUBS], int wg, bool first,
                                             bool last) {
    float t[64];
    const int bursts = in.k_tiles * F_SUBS;
    for (int kt = 0; kt < in.k_tiles; ++kt) {
#pragma unroll
        for (int sub = 0; sub < F_SUBS; ++sub) {
            const int burst = kt * F_SUBS + sub;
            if (FP8_PINGPONG && (wg == 1 || !first || burst > 0)) named_sync(1 + wg);  // my turn
            const Fp8Scales sc = fp8_issue(in, kt, sub, t);
            if (FP8_PINGPONG && (wg == 0 || !last || burst < bursts - 1)) named_arrive(2 - wg);  // the other's
            wgmma_wait<0>();
            if (sub == F_SUBS - 1) fp8_release(in, kt);
            fp8_promote(d, t, sc, sub);
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(F_THREADS, 1)
#if FP8_MULTICAST
__cluster_dims__(2, 1, 1)
#endif
fp8_block_gemm(const void* __restrict__ tmap_a, const void* __restrict__ tmap_b, const float* __restrict__ scale_a,
               const float* __restrict__ scale_b, bf16_t* __restrict__ C, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // scale_a: (K / 128, M), a K interval's scales contiguous over rows; scale_b: (N / 128, K / 128).
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
    const unsigned bars = base + F_STAGES * F_STAGE_BYTES;        // full[s] at bars + 8 s, empty[s] after them
    const int k_tiles = K / F_BK, tiles = (M / F_BM) * (N / FP8_BN);
    // The grid may be smaller than the number of tiles (a persistent grid, one block an SM): block b runs tiles b,
    // b + grid, ... Its producer then loads the next tile's first stages while the consumers store this tile's C.
    if (threadIdx.x == 0) {
        for (int s = 0; s < F_STAGES; ++s) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (F_STAGES + s), F_EMPTY_COUNT);
        }
        mbar_fence_init();
    }
#if FP8_MULTICAST
    cluster_sync();  // both blocks' barriers exist before either copies into or arrives on the other's
    // The grouped order puts a cluster's two blocks on one tn, and the grid is even: both run as many tiles.
    const unsigned half = cluster_rank();
#else
    __syncthreads();
#endif
    if (threadIdx.x >= 256) {  // producer warp group: gives registers back to the consumers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 256) {
            tensormap_acquire(tmap_a);
            tensormap_acquire(tmap_b);
            int slot = 0;  // intervals loaded so far, over all of this block's tiles
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                grouped_tile(tile, M / F_BM, N / FP8_BN, F_GROUP, tm, tn);
                for (int kt = 0; kt < k_tiles; ++kt, ++slot) {
                    const int s = slot % F_STAGES;
                    if (slot >= F_STAGES) mbar_wait(bars + 8 * (F_STAGES + s), ((slot / F_STAGES) - 1) & 1);
                    const unsigned full = bars + 8 * s, dst = base + s * F_STAGE_BYTES;
                    mbar_expect_tx(full, F_STAGE_BYTES);
                    tma_load_2d(dst, tmap_a, kt * F_BK, tm * F_BM, full);
#if FP8_MULTICAST
                    tma_load_2d_multicast(dst + F_A_BYTES + half * (FP8_BN / 2) * F_BK, tmap_b, kt * F_BK,
                                          tn * FP8_BN + half * (FP8_BN / 2), full, 0x3);
#else
                    tma_load_2d(dst + F_A_BYTES, tmap_b, kt * F_BK, tn * FP8_BN, full);
#endif
                }
            }
        }
#if FP8_MULTICAST
        __syncwarp();
        cluster_sync();  // stay until the neighbour no longer arrives on this block's barriers
#endif
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    int ring_base = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ring_base += k_tiles) {
        int tm, tn;
        grouped_tile(tile, M / F_BM, N / FP8_BN, F_GROUP, tm, tn);
        const int row = tm * F_BM + wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows: row and row + 8
        const Fp8Operands in{bars, base, (unsigned)(wg * 64 * F_BK), scale_a + row,
                             scale_b + (size_t)tn * F_SUBS * k_tiles, M, k_tiles, ring_base};
        float d[64 * F_SUBS];
#pragma unroll
        for (int i = 0; i < 64 * F_SUBS; ++i) d[i] = 0.0f;
#if FP8_PIPELINE
        fp8_mainloop_pipelined(in, d);
#else
        fp8_mainloop(in, d, wg, tile == (int)blockIdx.x, tile + (int)gridDim.x >= tiles);
#endif
        bf16_t* c0 = C + (size_t)row * N + tn * FP8_BN + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < 16 * F_SUBS; ++j) {
            *reinterpret_cast<unsigned*>(c0 + 8 * j) = pack_bf16(d[4 * j], d[4 * j + 1]);
            *reinterpret_cast<unsigned*>(c0 + (size_t)8 * N + 8 * j) = pack_bf16(d[4 * j + 2], d[4 * j + 3]);
        }
    }
#if FP8_MULTICAST
    cluster_sync();
#endif
#endif
}
