// Grouped GEMM for a MoE layer, one launch for every expert: Y[rows of e] = X[rows of e] · W[e].
//   x  (rows, K) fp16: the routed tokens sorted by expert, so each expert's rows are one segment
//   w  (n_experts, K, N) fp16
//   y  (rows, N) fp16; relu != 0 applies max(., 0) before the store (the FFN's first GEMM)
// The host cuts every segment into 64-row tiles and passes one (expert, first row, segment end) triple
// per tile; block (tile, column tile) computes a 64 x 64 tile of Y with tensor cores: 4 warps, 32 x 32
// each, as 2 x 4 PTX mma.sync.m16n8k16 (fp16 in, fp32 accumulators) per 16-wide k step, fragments read
// from shared memory in the layout the PTX ISA gives for that instruction (no mma.h: NVRTC with the
// pip-installed CUDA headers cannot include it). Rows past the segment's end and columns past N are loaded
// as zeros and not stored, so segments of any length share one launch without padding in memory.
// Requires K % 32 == 0 and N % 8 == 0 (16-byte loads). Reference: moe_kernels.moe_ffn_loop.
#include <cuda_fp16.h>

#define BM 64
#define BN 64
#define BK 32
#define PAD 8

// Two halves in one 32-bit register, the first in the low 16 bits (the lower k index of a fragment pair).
__device__ __forceinline__ unsigned pack_halves(__half lo, __half hi) {
    return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}

extern "C" __global__ void __launch_bounds__(128)
grouped_gemm_f16(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                 const int* __restrict__ tile_expert, const int* __restrict__ tile_row0,
                 const int* __restrict__ tile_row_end, int K, int N, int relu) {
    __shared__ __align__(32) __half a_tile[BM][BK + PAD];
    __shared__ __align__(32) __half b_tile[BK][BN + PAD];
    __shared__ __align__(32) float c_tile[BM][BN + 4];
    const int tile = blockIdx.x;
    const int expert = tile_expert[tile], row0 = tile_row0[tile], row_end = tile_row_end[tile];
    const int col0 = blockIdx.y * BN;
    const __half* w_expert = w + (size_t)expert * K * N;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = lane >> 2, thread_in_group = lane & 3;  // the mma fragment coordinates
    const int warp_row = (warp / 2) * 32, warp_col = (warp % 2) * 32;
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int t = threadIdx.x; t < BM * BK / 8; t += blockDim.x) {  // 64 x 32 halves, 8 per load
            const int r = t / (BK / 8), c = (t % (BK / 8)) * 8;
            int4 v = make_int4(0, 0, 0, 0);
            if (row0 + r < row_end) v = *reinterpret_cast<const int4*>(x + (size_t)(row0 + r) * K + k0 + c);
            *reinterpret_cast<int4*>(&a_tile[r][c]) = v;
        }
        for (int t = threadIdx.x; t < BK * BN / 8; t += blockDim.x) {  // 32 x 64 halves
            const int r = t / (BN / 8), c = (t % (BN / 8)) * 8;
            int4 v = make_int4(0, 0, 0, 0);
            if (col0 + c < N) v = *reinterpret_cast<const int4*>(w_expert + (size_t)(k0 + r) * N + col0 + c);
            *reinterpret_cast<int4*>(&b_tile[r][c]) = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[2][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {  // A (16 x 16, row-major): rows group, group + 8; cols 2t, 2t + 8
                const int r = warp_row + i * 16 + group, c = kk + 2 * thread_in_group;
                a[i][0] = *reinterpret_cast<const unsigned*>(&a_tile[r][c]);
                a[i][1] = *reinterpret_cast<const unsigned*>(&a_tile[r + 8][c]);
                a[i][2] = *reinterpret_cast<const unsigned*>(&a_tile[r][c + 8]);
                a[i][3] = *reinterpret_cast<const unsigned*>(&a_tile[r + 8][c + 8]);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {  // B (16 x 8, "col"): k = 2t, 2t + 1 (and + 8) of column group
                const int n = warp_col + j * 8 + group, k = kk + 2 * thread_in_group;
                b[j][0] = pack_halves(b_tile[k][n], b_tile[k + 1][n]);
                b[j][1] = pack_halves(b_tile[k + 8][n], b_tile[k + 9][n]);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                        "{%8,%9}, {%0,%1,%2,%3};\n"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // C (16 x 8): rows group, group + 8; cols 2t, 2t + 1
            const int r = warp_row + i * 16 + group, c = warp_col + j * 8 + 2 * thread_in_group;
            c_tile[r][c] = acc[i][j][0];
            c_tile[r][c + 1] = acc[i][j][1];
            c_tile[r + 8][c] = acc[i][j][2];
            c_tile[r + 8][c + 1] = acc[i][j][3];
        }
    __syncthreads();
    for (int t = threadIdx.x; t < BM * BN; t += blockDim.x) {
        const int r = t / BN, c = t % BN;
        if (row0 + r < row_end && col0 + c < N) {
            float v = c_tile[r][c];
            if (relu) v = fmaxf(v, 0.0f);
            y[(size_t)(row0 + r) * N + col0 + c] = __float2half(v);
        }
    }
}
