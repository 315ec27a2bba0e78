// Constant memory: a cached, read-only 64 KiB space made for values every thread of a warp reads
// at the same address (a broadcast). Different addresses within a warp are served one at a time.
//
// out[i] = Horner(x[i]) over N_COEFFS coefficients; lane L uses coefficient (k + L * spread) % N_COEFFS
// at step k. spread = 0: the whole warp reads one address (broadcast); spread = 1: 32 addresses.

#define N_COEFFS 64

__constant__ float const_coeffs[N_COEFFS];

extern "C" __global__ void poly_constant(const float* __restrict__ x, float* __restrict__ out, long long n, int spread) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int shift = (threadIdx.x & 31) * spread;
    const float xi = x[i];
    float acc = 0.0f;
#pragma unroll 16
    for (int k = 0; k < N_COEFFS; ++k) acc = fmaf(acc, xi, const_coeffs[(k + shift) & (N_COEFFS - 1)]);
    out[i] = acc;
}

// The same computation with the coefficients in global memory (served by L1 after the first touch).
extern "C" __global__ void poly_global(const float* __restrict__ x, const float* __restrict__ coeffs,
                                       float* __restrict__ out, long long n, int spread) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int shift = (threadIdx.x & 31) * spread;
    const float xi = x[i];
    float acc = 0.0f;
#pragma unroll 16
    for (int k = 0; k < N_COEFFS; ++k) acc = fmaf(acc, xi, coeffs[(k + shift) & (N_COEFFS - 1)]);
    out[i] = acc;
}
