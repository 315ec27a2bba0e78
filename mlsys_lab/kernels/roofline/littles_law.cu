// Little's law on the GPU: n = R * t. Microbenchmarks that measure the latency t of one operation
// (a dependent chain in one thread or warp, timed with clock64) and the throughput R reached with a
// given amount of work in flight (warps x independent chains), for HBM loads, FP32 FMAs and
// tensor-core MMAs. Sizes of the sweeps are set by the launcher (mlsys_lab/kernels/roofline/littles_law.py).

#ifndef CHAINS
#define CHAINS 1  // independent dependency chains per thread (instruction-level parallelism)
#endif

// One thread follows next[] for `steps` hops. Every load depends on the previous one, so the time
// per hop is the load latency. __ldcg caches in L2 only: a buffer larger than L2 measures HBM.
extern "C" __global__ void pointer_chase(const unsigned* __restrict__ next, unsigned* out, int steps,
                                         unsigned first, long long* cycles) {
    unsigned j = first;
    const long long start = clock64();
    for (int s = 0; s < steps; ++s) j = __ldcg(next + j);
    const long long stop = clock64();
    out[0] = j;
    cycles[0] = stop - start;
}

// Each thread keeps CHAINS float4 loads in flight at a time (the adds wait for them), so the bytes in
// flight are threads * CHAINS * 16. x has n4 float4; every thread sweeps its grid-stride share.
extern "C" __global__ void read_inflight(const float4* __restrict__ x, float* __restrict__ out, long long n4) {
    float acc = 0.0f;
    const long long step = (long long)gridDim.x * blockDim.x * CHAINS;
    long long i = blockIdx.x * (long long)blockDim.x * CHAINS + threadIdx.x;
#pragma unroll 1
    for (; i + (CHAINS - 1) * (long long)blockDim.x < n4; i += step) {
        float4 v[CHAINS];
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) v[c] = __ldcg(x + i + c * blockDim.x);
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) acc += (v[c].x + v[c].y) + (v[c].z + v[c].w);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// CHAINS independent chains of `iters` dependent FMAs a = a * m + c per thread.
// out[thread] = sum of the chains; cycles[block] = clock64 span of thread 0.
extern "C" __global__ void ffma_chains(float* __restrict__ out, int iters, float m, float c, long long* cycles) {
    float a[CHAINS];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) a[k] = (float)k;
    const long long start = clock64();
#pragma unroll 16  // amortise the loop's own instructions (counter, compare, branch)
    for (int it = 0; it < iters; ++it)
#pragma unroll
        for (int k = 0; k < CHAINS; ++k) a[k] = fmaf(a[k], m, c);
    const long long stop = clock64();
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) total += a[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = total;
    if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}

// CHAINS independent chains of `iters` dependent tensor-core MMAs per warp:
// D(16x8, f32) += A(16x16, f16) B(16x8, f16), 2 * 16 * 8 * 16 = 4096 FLOP each.
// A is all zeros, so D stays equal to its start value (checked by the launcher); the tensor core
// does the full work whatever the values.
extern "C" __global__ void mma_chains(float* __restrict__ out, int iters, long long* cycles) {
    float d[CHAINS][4];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) d[k][0] = d[k][1] = d[k][2] = d[k][3] = (float)k;
    const unsigned a0 = 0u, a1 = 0u, a2 = 0u, a3 = 0u;
    const unsigned b0 = 0x3c003c00u, b1 = 0x3c003c00u;  // two halves of 1.0 each
    const long long start = clock64();
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < CHAINS; ++k)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+f"(d[k][0]), "+f"(d[k][1]), "+f"(d[k][2]), "+f"(d[k][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    const long long stop = clock64();
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) total += (d[k][0] + d[k][1]) + (d[k][2] + d[k][3]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = total;
    if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}
