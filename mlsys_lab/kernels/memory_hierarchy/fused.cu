// Fused memory-bound kernels: each reads its input once and writes its output once, so its
// ceiling is the copy bandwidth. Block reductions use warp shuffles, then one word per warp.

#ifndef SOFTMAX_THREADS
#define SOFTMAX_THREADS 256
#endif
#ifndef SOFTMAX_VEC
#define SOFTMAX_VEC 4  // float4 values per thread: n_cols <= 4 * SOFTMAX_VEC * SOFTMAX_THREADS
#endif
#ifndef SOFTMAX_MIN_BLOCKS
#define SOFTMAX_MIN_BLOCKS 1  // blocks that must fit on one SM: caps registers per thread (occupancy)
#endif
#ifndef SOFTMAX_STREAMING
#define SOFTMAX_STREAMING 0  // 1: evict-first loads and stores (__ldcs/__stcs): the row is touched once
#endif
#if SOFTMAX_STREAMING
#define SOFTMAX_LOAD(p) __ldcs(p)
#define SOFTMAX_STORE(p, v) __stcs(p, v)
#else
#define SOFTMAX_LOAD(p) (*(p))
#define SOFTMAX_STORE(p, v) (*(p) = (v))
#endif

#define NEG_INF __int_as_float(0xff800000)  // -infinity (NVRTC has no math.h INFINITY)

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Every thread gets the block's max (or sum). `scratch` holds one word per warp.
__device__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_max(lane < (int)(blockDim.x >> 5) ? scratch[lane] : NEG_INF);
    __syncthreads();
    return v;
}

__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_sum(lane < (int)(blockDim.x >> 5) ? scratch[lane] : 0.0f);
    __syncthreads();
    return v;
}

// A row of n4 float4 values held in registers, SOFTMAX_VEC per thread. Lanes past the row's end hold -inf:
// exp gives 0 there, so the max and the sum are unchanged.
__device__ __forceinline__ void softmax_load_row(const float4* row_in, int n4, float4 (&v)[SOFTMAX_VEC]) {
#pragma unroll
    for (int j = 0; j < SOFTMAX_VEC; ++j) {
        const int c = threadIdx.x + j * SOFTMAX_THREADS;
        v[j] = c < n4 ? SOFTMAX_LOAD(row_in + c) : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    }
}

// In place: v <- exp(v - max(row)); returns 1 / sum(row) (two block reductions, no memory traffic).
__device__ __forceinline__ float softmax_exp_in_registers(float4 (&v)[SOFTMAX_VEC], float* scratch) {
    float row_max = NEG_INF;
#pragma unroll
    for (int j = 0; j < SOFTMAX_VEC; ++j)
        row_max = fmaxf(row_max, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    row_max = block_max(row_max, scratch);
    float row_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < SOFTMAX_VEC; ++j) {
        v[j].x = __expf(v[j].x - row_max);
        v[j].y = __expf(v[j].y - row_max);
        v[j].z = __expf(v[j].z - row_max);
        v[j].w = __expf(v[j].w - row_max);
        row_sum += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    return 1.0f / block_sum(row_sum, scratch);
}

__device__ __forceinline__ void softmax_store_row(float4* row_out, int n4, const float4 (&v)[SOFTMAX_VEC], float inv) {
#pragma unroll
    for (int j = 0; j < SOFTMAX_VEC; ++j) {
        const int c = threadIdx.x + j * SOFTMAX_THREADS;
        if (c < n4) SOFTMAX_STORE(row_out + c, make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv));
    }
}

// One block per row; the row stays in registers between the max, the sum and the write:
// 4 * n_cols bytes read and 4 * n_cols written, nothing more. n_cols % 4 == 0.
extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS, SOFTMAX_MIN_BLOCKS)
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int n_cols) {
    __shared__ float scratch[32];
    const int n4 = n_cols / 4;
    float4 v[SOFTMAX_VEC];
    softmax_load_row(reinterpret_cast<const float4*>(x + (long long)blockIdx.x * n_cols), n4, v);
    const float inv = softmax_exp_in_registers(v, scratch);
    softmax_store_row(reinterpret_cast<float4*>(y + (long long)blockIdx.x * n_cols), n4, v, inv);
}

// Persistent variant: gridDim.x blocks (a few per SM) walk the rows with stride gridDim.x, and each block
// issues the loads of its next row before the reductions of the current one, so HBM stays busy while
// the block synchronizes (software pipelining across rows). Same traffic: one read, one write.
extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS, SOFTMAX_MIN_BLOCKS)
softmax_rows_persistent(const float* __restrict__ x, float* __restrict__ y, int n_rows, int n_cols) {
    __shared__ float scratch[32];
    const int n4 = n_cols / 4;
    float4 cur[SOFTMAX_VEC], nxt[SOFTMAX_VEC];
    int row = blockIdx.x;
    if (row < n_rows) softmax_load_row(reinterpret_cast<const float4*>(x + (long long)row * n_cols), n4, cur);
    for (; row < n_rows; row += gridDim.x) {
        const int next = row + gridDim.x;
        if (next < n_rows) softmax_load_row(reinterpret_cast<const float4*>(x + (long long)next * n_cols), n4, nxt);
        const float inv = softmax_exp_in_registers(cur, scratch);
        softmax_store_row(reinterpret_cast<float4*>(y + (long long)row * n_cols), n4, cur, inv);
#pragma unroll
        for (int j = 0; j < SOFTMAX_VEC; ++j) cur[j] = nxt[j];
    }
}

// A fused elementwise chain: z = x * scale + bias; y = z * sigmoid(z) (SiLU of an affine map).
// Unfused, the same chain is four kernels and four round trips through HBM.
__device__ __forceinline__ float silu_affine1(float x, float scale, float bias) {
    const float z = fmaf(x, scale, bias);
    return z / (1.0f + __expf(-z));
}

extern "C" __global__ void silu_affine(const float4* __restrict__ x, float4* __restrict__ y, float scale, float bias,
                                       long long n4) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n4) {
        const float4 v = x[i];
        y[i] = make_float4(silu_affine1(v.x, scale, bias), silu_affine1(v.y, scale, bias),
                           silu_affine1(v.z, scale, bias), silu_affine1(v.w, scale, bias));
    }
}

// Sum reduction, first stage: each block writes the sum of its grid-stride share to partial[block].
extern "C" __global__ void sum_partials(const float4* __restrict__ x, float* __restrict__ partial, long long n4) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
