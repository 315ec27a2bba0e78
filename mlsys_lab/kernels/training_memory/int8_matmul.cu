// Weight-only int8 matmul for small batches (the decode shape): y = x · (scale ⊙ W)ᵀ.
//   x     (M, K) fp16, row-major: activations stay in 16-bit float
//   w     (N, K) int8, row-major: one output channel per row, symmetric codes in [-127, 127]
//   scale (N)    fp32: one scale per output channel
//   y     (M, N) fp16
// One warp computes one output channel n for all M rows: each lane reads 16 int8 weights with one
// 16-byte load, converts them to float in registers (the dequantization happens in the kernel, so
// HBM carries 1 byte per weight instead of 2), multiplies by x, and the warp sums by shuffles.
//
// Two things keep HBM busy (Little's law, lesson 03): K_UNROLL loads per lane are issued before any of
// them is used, so each lane has K_UNROLL x 16 bytes in flight instead of 16; and MAX_M, the batch rows
// the kernel is compiled for, is the smallest power of two >= M, so a batch of 1 does not hold 16
// accumulators and the registers it saves let more warps reside on an SM.
// Requires K % 16 == 0 and M <= MAX_M. Reference: int8_matmul.int8_weight_matmul_reference (NumPy).
#include <cuda_fp16.h>

#ifndef MAX_M
#define MAX_M 16
#endif
#ifndef K_UNROLL
#define K_UNROLL 4
#endif

extern "C" __global__ void int8_weight_matmul(const __half* __restrict__ x, const signed char* __restrict__ w,
                                              const float* __restrict__ scale, __half* __restrict__ y,
                                              int M, int N, int K) {
    const int warps_per_block = blockDim.x / 32;
    const int n = blockIdx.x * warps_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (n >= N) return;
    float acc[MAX_M];
#pragma unroll
    for (int m = 0; m < MAX_M; ++m) acc[m] = 0.0f;
    const signed char* row = w + (size_t)n * K;
    for (int k0 = lane * 16; k0 < K; k0 += 32 * 16 * K_UNROLL) {
        int4 packed[K_UNROLL];
#pragma unroll
        for (int u = 0; u < K_UNROLL; ++u) {  // all loads first: K_UNROLL x 16 bytes in flight per lane
            const int k = k0 + u * 32 * 16;
            packed[u] = k < K ? __ldg(reinterpret_cast<const int4*>(row + k)) : make_int4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < K_UNROLL; ++u) {
            const int k = k0 + u * 32 * 16;
            if (k >= K) break;
            const signed char* q = reinterpret_cast<const signed char*>(&packed[u]);
            float wf[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) wf[j] = (float)q[j];               // dequantize in registers
#pragma unroll
            for (int m = 0; m < MAX_M; ++m) {
                if (m < M) {
                    const int4* xv = reinterpret_cast<const int4*>(x + (size_t)m * K + k);
                    const int4 xa = xv[0], xb = xv[1];                        // 16 halves in two loads
                    const __half* ha = reinterpret_cast<const __half*>(&xa);
                    const __half* hb = reinterpret_cast<const __half*>(&xb);
                    float s = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; ++j) s += __half2float(ha[j]) * wf[j] + __half2float(hb[j]) * wf[8 + j];
                    acc[m] += s;
                }
            }
        }
    }
    const float channel_scale = scale[n];
#pragma unroll
    for (int m = 0; m < MAX_M; ++m) {
        if (m < M) {
            float v = acc[m];
            for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
            if (lane == 0) y[(size_t)m * N + n] = __float2half(v * channel_scale);
        }
    }
}
