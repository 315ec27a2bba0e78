// Global memory (HBM): how a warp's addresses become 32-byte sectors.
//
// A warp's load is served in 32-byte sectors. When the 32 threads read 32 consecutive floats
// (128 bytes) the request needs 4 sectors; when they read every `stride`-th float it needs
// min(32, 4 * stride) sectors for the same 128 useful bytes (see mlsys_lab.memory_hierarchy.simt).

// y[i] = x[i] with 16-byte loads and stores: the course's own copy, measured against cudaMemcpy.
extern "C" __global__ void copy_float4(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i];
}

// out[i] = x[i * stride]: same useful bytes for every stride, more sectors per warp as stride grows.
extern "C" __global__ void read_strided(const float* __restrict__ x, float* __restrict__ out, long long n, int stride) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i * stride];
}

// Read a buffer `passes` times (16-byte loads). A buffer smaller than L2 (50 MiB on H200) is served
// from L2 after the first pass: this measures the L2 ceiling of the hierarchical roofline.
extern "C" __global__ void read_passes(const float4* __restrict__ x, float* __restrict__ out, long long n4, int passes) {
    float acc = 0.0f;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += step) {
            const float4 v = x[i];
            acc += (v.x + v.y) + (v.z + v.w);
        }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
