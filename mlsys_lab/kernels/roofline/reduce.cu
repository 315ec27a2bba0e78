// A full reduction, sum(x) of float32, in one kernel: a grid-stride loop sums each thread's share in a
// register, warp shuffles add the 32 lanes of a warp without shared memory, shared memory holds one partial
// per warp, the first warp adds those, and one atomicAdd per block adds the block's sum into *out.
// Each element is read once (4 bytes, 1 FLOP): intensity 1/4 FLOP per byte, far below any ridge point, so the
// ceiling is the memory bandwidth. *out must be zero before the launch; blockDim.x a multiple of 32, <= 1024.

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // lane 0 holds the warp's sum
}

extern "C" __global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ out, long long n) {
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += x[i];
    acc = warp_sum(acc);
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();  // every warp's partial is in shared memory before warp 0 reads them
    if (warp == 0) {
        acc = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        acc = warp_sum(acc);
        if (lane == 0) atomicAdd(out, acc);
    }
}
