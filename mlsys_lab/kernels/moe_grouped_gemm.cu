// Grouped GEMM for a MoE layer, one launch for every expert: Y[rows of e] = X[rows of e] · W[e].
//   x  (rows, K) fp16: the routed tokens sorted by expert, so each expert's rows are one segment
//   w  (n_experts, K, N) fp16
//   y  (rows, N) fp16; relu != 0 applies max(., 0) before the store (the FFN's first GEMM)
// The host cuts every segment into 64-row tiles and passes one (expert, first row, segment end) triple
// per tile; block (tile, column tile) computes a 64 x 64 tile of Y with tensor cores (WMMA 16x16x16,
// fp32 accumulators): 4 warps, 32 x 32 each. Rows past the segment's end and columns past N are loaded
// as zeros and not stored, so segments of any length share one launch without padding in memory.
// Requires K % 32 == 0 and N % 8 == 0 (16-byte loads). Reference: moe_kernels.moe_ffn_loop.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define PAD 8

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
    const int warp = threadIdx.x / 32;
    const int warp_row = (warp / 2) * 32, warp_col = (warp % 2) * 32;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

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
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &a_tile[warp_row + i * 16][kk], BK + PAD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &b_tile[kk][warp_col + j * 16], BN + PAD);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&c_tile[warp_row + i * 16][warp_col + j * 16], acc[i][j], BN + 4,
                                    wmma::mem_row_major);
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
