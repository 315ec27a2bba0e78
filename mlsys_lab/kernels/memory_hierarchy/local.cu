// Registers and local memory: a kernel whose working set is N_LIVE floats per thread.
//
// With enough registers the array r[] lives in registers (every index is a constant after
// unrolling). Cap the registers (-maxrregcount / --maxrregcount) below what it needs and the
// compiler spills: `ptxas -v` reports "spill stores/loads", and those values go to local memory,
// which is per-thread but physically in HBM, cached in L1/L2.

#ifndef N_LIVE
#define N_LIVE 64
#endif

// r[j] <- (r[j] + r[j+1 mod N_LIVE]) / 2, `iters` sweeps in order j = 0 .. N_LIVE - 1; out[i] = sum(r).
extern "C" __global__ void register_pressure(const float* __restrict__ x, float* __restrict__ out, int n, int iters) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float r[N_LIVE];
    const float xi = x[i];
#pragma unroll
    for (int j = 0; j < N_LIVE; ++j) r[j] = xi * (float)(j + 1);
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < N_LIVE; ++j) r[j] = 0.5f * r[j] + 0.5f * r[(j + 1) % N_LIVE];
    }
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < N_LIVE; ++j) total += r[j];
    out[i] = total;
}
