// A BF16 GEMM ladder on tensor cores: C = A · Bᵀ with A (M, K), B (N, K) and C (M, N), all row-major
// BF16 (stored as raw 16-bit patterns: NumPy has no bfloat16), FP32 accumulation, C rounded to BF16.
// Both operands are "K-major" (the k index is contiguous), the layout tensor cores read without a
// transpose and the one cuBLAS runs fastest ("TN"); nn.Linear keeps its weights the same way.
//
// The four steps continue lesson 04's SGEMM ladder (sgemm.cu), in the spirit of CUTLASS's tiling and
// of "How to Optimize a CUDA Matmul Kernel" (Boehm 2022):
//   1. bf16_wmma         the warp-wide WMMA interface: 16 x 16 x 16 fragments, padded shared tiles.
//   2. bf16_mma_ldmatrix PTX mma.sync.m16n8k16 fed by ldmatrix.x4, unpadded tiles: 4-way bank conflicts.
//   3. bf16_pipeline     cp.async into a 3-stage ring of XOR-swizzled tiles: no bank conflicts, and the
//                        loads of tile k + 2 fly while tile k is multiplied; 128 x 256 block tile.
//   4. bf16_wgmma        Hopper (sm_90a only): TMA copies 128-byte-swizzled tiles, one producer warp
//                        group and two consumer warp groups that issue wgmma.m64n256k16 from shared
//                        memory, handing the 4 stages over with mbarriers.
// No CUDA header is included (NVRTC with CuPy's headers cannot include mma.h): every tensor-core and
// copy instruction is inline PTX, the ones shared with attention in tensor_core_ptx.cuh.
// Shapes: M, N, K multiples of the step's block tile.

#include "tensor_core_ptx.cuh"  // bf16_t, smem_u32, pack_bf16, ldmatrix_x4, mma_bf16, cp_async_*

// Element offset of (row, col) in a tile whose rows are LD elements long. With SWZ the 16-byte chunk
// index is XOR-ed with row % 8: the 8 rows one ldmatrix phase reads land in 8 different bank groups.
template <int LD, bool SWZ>
__device__ __forceinline__ int tile_offset(int row, int col) {
    if (SWZ) return row * LD + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
    return row * LD + col;
}

// One warp's share of a block tile: MI x NI mma tiles (16 x 8 each) over the BK columns of a stage.
// A rows come from `as`, B rows (one per output column) from `bs`; both K-major with LD per row.
template <int MI, int NI, int BK, int LD, bool SWZ>
__device__ __forceinline__ void warp_mma(const bf16_t* as, const bf16_t* bs, int warp_row, int warp_col,
                                         float (&acc)[MI][NI][4], int lane) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        unsigned a[MI][4], b[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i)  // lanes 0-15: rows 0-15 at k..k+7; lanes 16-31: the same rows at k+8
            ldmatrix_x4(a[i], smem_u32(as + tile_offset<LD, SWZ>(warp_row + i * 16 + (lane & 15),
                                                                 kk + (lane >> 4) * 8)));
#pragma unroll
        for (int j = 0; j < NI; j += 2) {  // two n8 tiles per ldmatrix.x4: (n 0-7 | 8-15) x (k | k+8)
            unsigned r[4];
            ldmatrix_x4(r, smem_u32(bs + tile_offset<LD, SWZ>(warp_col + j * 8 + (lane >> 4) * 8 + (lane & 7),
                                                              kk + ((lane >> 3) & 1) * 8)));
            b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
    }
}

// The accumulator fragment of mma tile (i, j): lane holds rows g and g + 8, columns 2t and 2t + 1
// (g = lane / 4, t = lane % 4); two bf16 per 4-byte store.
template <int MI, int NI>
__device__ __forceinline__ void store_acc(bf16_t* C, int N, int row0, int col0, const float (&acc)[MI][NI][4],
                                          int lane) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int r = row0 + i * 16 + (lane >> 2), c = col0 + j * 8 + 2 * (lane & 3);
            *reinterpret_cast<unsigned*>(C + (size_t)r * N + c) = pack_bf16(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<unsigned*>(C + (size_t)(r + 8) * N + c) = pack_bf16(acc[i][j][2], acc[i][j][3]);
        }
}

// ------------------------------------------------------------------ step 1: WMMA
// 128 x 128 block tile, BK = 32, 8 warps as 4 x 2, each a 32 x 64 warp tile = 2 x 4 fragments of
// 16 x 16. Rows padded by 8 bf16 (80 bytes): the fragment loads of 8 rows hit 8 different bank groups.
// The fragments' register layout is opaque (implementation-defined), so C goes out through shared memory.
#define W_BM 128
#define W_BN 128
#define W_BK 32
#define W_LD (W_BK + 8)

extern "C" __global__ void __launch_bounds__(256)
bf16_wmma(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(128) bf16_t as[W_BM * W_LD];
    __shared__ __align__(128) bf16_t bs[W_BN * W_LD];
    __shared__ __align__(128) float cs[8][16 * 16];
    const int bm = blockIdx.y * W_BM, bn = blockIdx.x * W_BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = (warp / 2) * 32, warp_col = (warp % 2) * 64;
    float acc[2][4][8];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[i][j][e] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += W_BK) {
        for (int t = threadIdx.x; t < W_BM * W_BK / 8; t += blockDim.x) {  // 16-byte chunks, 4 per row
            const int r = t / (W_BK / 8), c = (t % (W_BK / 8)) * 8;
            *reinterpret_cast<int4*>(as + r * W_LD + c) =
                *reinterpret_cast<const int4*>(A + (size_t)(bm + r) * K + k0 + c);
            *reinterpret_cast<int4*>(bs + r * W_LD + c) =
                *reinterpret_cast<const int4*>(B + (size_t)(bn + r) * K + k0 + c);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < W_BK; kk += 16) {
            unsigned a[2][4], b[4][4];
#pragma unroll
            for (int i = 0; i < 2; ++i)
                asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem_u32(as + (warp_row + i * 16) * W_LD + kk)), "r"(W_LD));
#pragma unroll
            for (int j = 0; j < 4; ++j)  // B's rows are output columns: a column-major 16 x 16 k-by-n fragment
                asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j][2]), "=r"(b[j][3])
                             : "r"(smem_u32(bs + (warp_col + j * 16) * W_LD + kk)), "r"(W_LD));
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float* d = acc[i][j];
                    asm volatile(
                        "wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32 "
                        "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, {%12,%13,%14,%15}, "
                        "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                          "+f"(d[7])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]),
                          "r"(b[j][2]), "r"(b[j][3]));
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float* d = acc[i][j];
            asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8}, 16;\n"
                         ::"r"(smem_u32(cs[warp])), "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]), "f"(d[4]), "f"(d[5]),
                         "f"(d[6]), "f"(d[7]) : "memory");
            __syncwarp();
            const int r = lane / 2, c = (lane % 2) * 8;  // each lane: 8 consecutive outputs, one 16-byte store
            const float* src = cs[warp] + r * 16 + c;
            uint4 v = make_uint4(pack_bf16(src[0], src[1]), pack_bf16(src[2], src[3]), pack_bf16(src[4], src[5]),
                                 pack_bf16(src[6], src[7]));
            *reinterpret_cast<uint4*>(C + (size_t)(bm + warp_row + i * 16 + r) * N + bn + warp_col + j * 16 + c) = v;
            __syncwarp();
        }
}

// ------------------------------------------------------------------ step 2: mma.sync + ldmatrix
// Same 128 x 128 x 32 block tile, 8 warps as 2 x 4, each a 64 x 32 warp tile = 4 x 4 mma tiles of
// 16 x 8. The fragment layout is now explicit (PTX ISA, "Matrix fragments for mma.m16n8k16"), so the
// accumulators are stored straight from registers. Rows are 64 bytes and unpadded: the 8 row addresses
// of an ldmatrix phase fall on only 2 bank groups, a 4-way conflict (the course's bank model counts it).
#define M_BM 128
#define M_BN 128
#define M_BK 32

extern "C" __global__ void __launch_bounds__(256)
bf16_mma_ldmatrix(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
                  int K) {
    __shared__ __align__(128) bf16_t as[M_BM * M_BK];
    __shared__ __align__(128) bf16_t bs[M_BN * M_BK];
    const int bm = blockIdx.y * M_BM, bn = blockIdx.x * M_BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = (warp / 4) * 64, warp_col = (warp % 4) * 32;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += M_BK) {
        for (int t = threadIdx.x; t < M_BM * M_BK / 8; t += blockDim.x) {
            const int r = t / (M_BK / 8), c = (t % (M_BK / 8)) * 8;
            *reinterpret_cast<int4*>(as + r * M_BK + c) =
                *reinterpret_cast<const int4*>(A + (size_t)(bm + r) * K + k0 + c);
            *reinterpret_cast<int4*>(bs + r * M_BK + c) =
                *reinterpret_cast<const int4*>(B + (size_t)(bn + r) * K + k0 + c);
        }
        __syncthreads();
        warp_mma<4, 4, M_BK, M_BK, false>(as, bs, warp_row, warp_col, acc, lane);
        __syncthreads();
    }
    store_acc<4, 4>(C, N, bm + warp_row, bn + warp_col, acc, lane);
}

// ------------------------------------------------------------------ step 3: cp.async pipeline, swizzled
// 128 x 256 block tile, BK = 64 (128-byte rows), 8 warps as 2 x 4, each a 64 x 64 warp tile (128 fp32
// accumulators per thread). cp.async copies global -> shared without passing through registers, so a
// ring of P_STAGES stages keeps P_STAGES - 1 tiles in flight while the tensor cores work on one. The
// XOR swizzle (chunk ^ row % 8) replaces padding: conflict-free ldmatrix and cp.async stores, no wasted
// bytes. Blocks are numbered in groups of P_GROUP tile rows for L2 reuse. Dynamic shared memory:
// P_STAGES x (128 + 256) x 64 x 2 bytes = 144 KiB (the launcher raises the 48 KiB default).
#define P_BM 128
#define P_BN 256
#define P_BK 64
#define P_STAGES 3
#define P_GROUP 8

extern "C" __global__ void __launch_bounds__(256, 1)
bf16_pipeline(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
              int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    bf16_t* smem = reinterpret_cast<bf16_t*>(smem_raw);
    int tm, tn;
    grouped_tile(blockIdx.x, M / P_BM, N / P_BN, P_GROUP, tm, tn);
    const int bm = tm * P_BM, bn = tn * P_BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = (warp / 4) * 64, warp_col = (warp % 4) * 64;
    const int k_tiles = K / P_BK;
    float acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    auto load_stage = [&](int stage, int k0) {  // 1024 + 2048 chunks of 16 bytes, 12 per thread
        bf16_t* as = smem + stage * (P_BM + P_BN) * P_BK;
        bf16_t* bs = as + P_BM * P_BK;
#pragma unroll
        for (int i = 0; i < P_BM * P_BK / 8 / 256; ++i) {
            const int t = threadIdx.x + i * 256, r = t / 8, c = (t % 8) * 8;
            cp_async_16(smem_u32(as + tile_offset<P_BK, true>(r, c)), A + (size_t)(bm + r) * K + k0 + c);
        }
#pragma unroll
        for (int i = 0; i < P_BN * P_BK / 8 / 256; ++i) {
            const int t = threadIdx.x + i * 256, r = t / 8, c = (t % 8) * 8;
            cp_async_16(smem_u32(bs + tile_offset<P_BK, true>(r, c)), B + (size_t)(bn + r) * K + k0 + c);
        }
    };
#pragma unroll
    for (int s = 0; s < P_STAGES - 1; ++s) {  // prologue: fill all but one stage
        if (s < k_tiles) load_stage(s, s * P_BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<P_STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();                // ... everyone's, and everyone is done with tile kt - 1's stage
        const int next = kt + P_STAGES - 1;
        if (next < k_tiles) load_stage(next % P_STAGES, next * P_BK);  // overwrites tile kt - 1's stage
        cp_async_commit();
        const bf16_t* as = smem + (kt % P_STAGES) * (P_BM + P_BN) * P_BK;
        warp_mma<4, 8, P_BK, P_BK, true>(as, as + P_BM * P_BK, warp_row, warp_col, acc, lane);
    }
    store_acc<4, 8>(C, N, bm + warp_row, bn + warp_col, acc, lane);
}

// ------------------------------------------------------------------ step 4: Hopper wgmma + TMA (sm_90a)
// 128 x 256 block tile, BK = 64, G_STAGES = 4 stages of 48 KiB in shared memory. Three warp groups of
// 128 threads: warp group 0 is the producer (one thread issues the TMA copies: cp.async.bulk.tensor with
// a tensor map built on the host by cuTensorMapEncodeTiled, 128-byte swizzle); warp groups 1 and 2 are
// consumers, each owning 64 rows x 256 columns of C in 128 fp32 registers per thread and issuing
// wgmma.mma_async.m64n256k16 whose A and B are read by the tensor cores straight from shared memory
// (described by 64-bit "matrix descriptors"). Stages change hands through mbarriers: full[s] completes
// when the TMA bytes of stage s have landed (expect_tx), empty[s] when all 256 consumer threads are done
// with it. A consumer keeps one wgmma group in flight (wait_group 1) and frees the previous stage.
// The wgmma and setmaxnreg family exist only on sm_90a ("a": architecture-specific), so the body is
// compiled only there; on any other target the kernel is an empty stub the launcher refuses to run.
#define G_BM 128
#define G_BN 256
#define G_BK 64
#define G_STAGES 4
#define G_GROUP 8
#define G_A_BYTES (G_BM * G_BK * 2)
#define G_STAGE_BYTES ((G_BM + G_BN) * G_BK * 2)

#include "hopper_ptx.cuh"  // mbarriers, TMA, matrix descriptors, the wgmma shapes

extern "C" __global__ void __launch_bounds__(384, 1)
bf16_wgmma(const void* __restrict__ tmap_a, const void* __restrict__ tmap_b, bf16_t* __restrict__ C, int M, int N,
           int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023) & ~1023u;  // 128-byte swizzle atoms need 1024-byte alignment
    const unsigned bars = base + G_STAGES * G_STAGE_BYTES;  // full[s] at bars + 8 s, empty[s] after them
    const int wg = threadIdx.x / 128;
    int tm, tn;
    grouped_tile(blockIdx.x, M / G_BM, N / G_BN, G_GROUP, tm, tn);
    const int k_tiles = K / G_BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < G_STAGES; ++s) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (G_STAGES + s), 256);
        }
        mbar_fence_init();
    }
    __syncthreads();
    if (wg == 0) {  // producer
        if (threadIdx.x == 0) {
            // The tensor maps live in global memory (written by a host copy): order that write before use.
            tensormap_acquire(tmap_a);
            tensormap_acquire(tmap_b);
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int s = kt % G_STAGES;
                if (kt >= G_STAGES) mbar_wait(bars + 8 * (G_STAGES + s), ((kt / G_STAGES) - 1) & 1);
                const unsigned full = bars + 8 * s, dst = base + s * G_STAGE_BYTES;
                mbar_expect_tx(full, G_STAGE_BYTES);
                tma_load_2d(dst, tmap_a, kt * G_BK, tm * G_BM, full);
                tma_load_2d(dst + G_A_BYTES, tmap_b, kt * G_BK, tn * G_BN, full);
            }
        }
    } else {  // consumers: warp group 1 takes rows 0-63 of the block tile, warp group 2 rows 64-127
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] = 0.0f;
        const unsigned a_rows = (wg - 1) * 64 * G_BK * 2;
        for (int kt = 0; kt < k_tiles; ++kt) {
            const int s = kt % G_STAGES;
            mbar_wait(bars + 8 * s, (kt / G_STAGES) & 1);
            const unsigned a = base + s * G_STAGE_BYTES + a_rows, b = base + s * G_STAGE_BYTES + G_A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < G_BK / 16; ++kk)  // 16 bf16 = 32 bytes further along k, inside the swizzle atom
                wgmma_m64n256k16_bf16(d, wgmma_desc(a + 32 * kk), wgmma_desc(b + 32 * kk), 1);
            wgmma_commit();
            wgmma_wait<1>();  // tile kt - 1's group is done
            if (kt > 0) mbar_arrive(bars + 8 * (G_STAGES + (kt - 1) % G_STAGES));
        }
        wgmma_wait<0>();
        // Accumulator layout of m64nN: warp w of the group holds rows 16 w + g and 16 w + g + 8, and for
        // each n8 block j columns 8 j + 2 t, 8 j + 2 t + 1 in d[4 j .. 4 j + 3] (g = lane / 4, t = lane % 4).
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
        const int r = tm * G_BM + (wg - 1) * 64 + warp * 16 + (lane >> 2);
        bf16_t* c0 = C + (size_t)r * N + tn * G_BN + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            *reinterpret_cast<unsigned*>(c0 + 8 * j) = pack_bf16(d[4 * j], d[4 * j + 1]);
            *reinterpret_cast<unsigned*>(c0 + (size_t)8 * N + 8 * j) = pack_bf16(d[4 * j + 2], d[4 * j + 3]);
        }
    }
#endif
}
