// Fused softmax cross-entropy, forward and backward in one kernel, over a (T tokens x V classes) float32 logit
// matrix z, row-major. For each row t with label y = labels[t]:
//
//     loss[t]       = logsumexp(z_t) - z_t[y]                       (nats)
//     dlogits[t, j] = softmax(z_t)_j - [j == y]                     (the gradient of sum_t loss[t])
//
// One block per row. Pass 1 reads the row once and keeps, per thread, the running max m and the running sum
// s = sum exp(z - m), rescaling s whenever m grows (the online softmax of Milakov & Gimelshein 2018); a block
// reduction (warp shuffles, then one (m, s) per warp in shared memory) merges them. Pass 2 reads the row again
// and writes p - onehot. The softmax p itself is never stored: a framework's unfused chain writes it to memory
// (T * V floats, kept until the backward) and reads it back for the gradient.
//
// Traffic: the row is read twice and dlogits written once. While a block runs, its row was read a few
// microseconds earlier, so the second read can come from L2 when the resident blocks' rows fit in it; the first
// read and the write stream through with evict-first hints (__ldcs / __stcs is for the last use; the first read
// is a normal load so that the row stays for the second). A label outside [0, V) gives a NaN loss and no one-hot.

#ifndef XENT_THREADS
#define XENT_THREADS 512
#endif

#define XENT_LOWEST (-3.402823466e+38f)  // -FLT_MAX: a start for the running max whose exp(lowest - lowest) is 1, not NaN

// (m, s) <- the running max and sum of exp(. - m) of both halves: s is rescaled to the larger max.
__device__ __forceinline__ void xent_merge(float& m, float& s, float m2, float s2) {
    const float top = fmaxf(m, m2);
    s = s * __expf(m - top) + s2 * __expf(m2 - top);
    m = top;
}

// One more value z into (m, s): one exp either way.
__device__ __forceinline__ void xent_add(float& m, float& s, float z) {
    if (z > m) {
        s = s * __expf(m - z) + 1.0f;
        m = z;
    } else {
        s += __expf(z - m);
    }
}

// Every thread gets the block's (m, s). `scratch` holds one (m, s) per warp; used once per kernel (no reuse, so
// no barrier is needed after the final read).
__device__ __forceinline__ void xent_block_merge(float& m, float& s, float2* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        xent_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    if (lane == 0) scratch[warp] = make_float2(m, s);
    __syncthreads();
    const float2 mine = lane < (int)(blockDim.x >> 5) ? scratch[lane] : make_float2(XENT_LOWEST, 0.0f);
    m = mine.x;
    s = mine.y;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        xent_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
}

// The row's loss, written by thread 0: (m - z_y) + log s, in that order (m + log s would round at |m|'s scale).
__device__ __forceinline__ void xent_loss(const float* row, int y, int n_cols, float m, float s, float* loss) {
    if (threadIdx.x == 0)
        loss[blockIdx.x] = ((unsigned)y < (unsigned)n_cols) ? (m - row[y]) + logf(s) : __int_as_float(0x7fc00000);
}

// V % 4 == 0: float4 loads and stores (every row starts 16-byte aligned).
extern "C" __global__ void __launch_bounds__(XENT_THREADS)
softmax_xent_vec4(const float* __restrict__ logits, const int* __restrict__ labels, float* __restrict__ loss,
                  float* __restrict__ dlogits, int n_cols) {
    __shared__ float2 scratch[32];
    const long long offset = (long long)blockIdx.x * n_cols;
    const float4* row4 = reinterpret_cast<const float4*>(logits + offset);
    float4* out4 = reinterpret_cast<float4*>(dlogits + offset);
    const int n4 = n_cols >> 2, y = labels[blockIdx.x];
    float m = XENT_LOWEST, s = 0.0f;
    for (int c = threadIdx.x; c < n4; c += XENT_THREADS) {
        const float4 v = row4[c];
        const float top = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));  // one rescale per four values, not four
        if (top > m) {
            s *= __expf(m - top);
            m = top;
        }
        s += (__expf(v.x - m) + __expf(v.y - m)) + (__expf(v.z - m) + __expf(v.w - m));
    }
    xent_block_merge(m, s, scratch);
    xent_loss(logits + offset, y, n_cols, m, s, loss);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < n4; c += XENT_THREADS) {
        const float4 v = __ldcs(row4 + c);  // the row's last use
        float4 p = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv, __expf(v.z - m) * inv,
                               __expf(v.w - m) * inv);
        const int j = y - 4 * c;  // the label's place in this float4, if it is in it
        if (j == 0) p.x -= 1.0f;
        if (j == 1) p.y -= 1.0f;
        if (j == 2) p.z -= 1.0f;
        if (j == 3) p.w -= 1.0f;
        __stcs(out4 + c, p);
    }
}

// Any V: one float a thread per step (still coalesced: neighbouring threads, neighbouring floats).
extern "C" __global__ void __launch_bounds__(XENT_THREADS)
softmax_xent_scalar(const float* __restrict__ logits, const int* __restrict__ labels, float* __restrict__ loss,
                    float* __restrict__ dlogits, int n_cols) {
    __shared__ float2 scratch[32];
    const long long offset = (long long)blockIdx.x * n_cols;
    const float* row = logits + offset;
    float* out = dlogits + offset;
    const int y = labels[blockIdx.x];
    float m = XENT_LOWEST, s = 0.0f;
    for (int c = threadIdx.x; c < n_cols; c += XENT_THREADS) xent_add(m, s, row[c]);
    xent_block_merge(m, s, scratch);
    xent_loss(row, y, n_cols, m, s, loss);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < n_cols; c += XENT_THREADS)
        __stcs(out + c, __expf(__ldcs(row + c) - m) * inv - (c == y ? 1.0f : 0.0f));
}

// --- correct but slow, for the exercise's figure --------------------------------------------------------------

// One thread per row: thread t walks row t alone. Neighbouring threads read floats V apart (uncoalesced: each
// 4-byte load is its own 32-byte sector), and T threads are a few blocks, far too few to fill the GPU.
extern "C" __global__ void softmax_xent_thread_per_row(const float* __restrict__ logits, const int* __restrict__ labels,
                                                       float* __restrict__ loss, float* __restrict__ dlogits,
                                                       int n_rows, int n_cols) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows) return;
    const float* row = logits + (long long)t * n_cols;
    float* out = dlogits + (long long)t * n_cols;
    const int y = labels[t];
    float m = XENT_LOWEST, s = 0.0f;
    for (int c = 0; c < n_cols; ++c) xent_add(m, s, row[c]);
    loss[t] = ((unsigned)y < (unsigned)n_cols) ? (m - row[y]) + logf(s) : __int_as_float(0x7fc00000);
    const float inv = 1.0f / s;
    for (int c = 0; c < n_cols; ++c) out[c] = __expf(row[c] - m) * inv - (c == y ? 1.0f : 0.0f);
}

// The fused kernel as first written: the loops step by blockDim.x, known only at run time, and exp is the accurate
// expf. Each thread then has one load in flight at a time (the compiler cannot unroll a loop whose trip count and
// stride it does not know), too few bytes in flight to cover the memory latency (Little's law).
extern "C" __global__ void softmax_xent_runtime_stride(const float* __restrict__ logits,
                                                       const int* __restrict__ labels, float* __restrict__ loss,
                                                       float* __restrict__ dlogits, int n_cols) {
    __shared__ float2 scratch[32];
    const long long offset = (long long)blockIdx.x * n_cols;
    const float* row = logits + offset;
    float* out = dlogits + offset;
    const int y = labels[blockIdx.x];
    float m = XENT_LOWEST, s = 0.0f;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        const float z = row[c];
        if (z > m) {
            s = s * expf(m - z) + 1.0f;
            m = z;
        } else {
            s += expf(z - m);
        }
    }
    xent_block_merge(m, s, scratch);
    xent_loss(row, y, n_cols, m, s, loss);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) out[c] = expf(row[c] - m) * inv - (c == y ? 1.0f : 0.0f);
}

// Three passes, two block reductions: the max, then the sum of exp(z - max), then the write. The row is read
// three times; the third read misses L2 more often than the second, as more rows pass through it meanwhile.
extern "C" __global__ void __launch_bounds__(XENT_THREADS)
softmax_xent_three_pass(const float* __restrict__ logits, const int* __restrict__ labels, float* __restrict__ loss,
                        float* __restrict__ dlogits, int n_cols) {
    __shared__ float2 scratch[32];
    __shared__ float2 scratch2[32];
    const long long offset = (long long)blockIdx.x * n_cols;
    const float* row = logits + offset;
    float* out = dlogits + offset;
    const int y = labels[blockIdx.x];
    float m = XENT_LOWEST, s = 0.0f, ignored = 0.0f;
    for (int c = threadIdx.x; c < n_cols; c += XENT_THREADS) m = fmaxf(m, row[c]);
    xent_block_merge(m, ignored, scratch);  // the max of the maxes (the sums are all zero)
    for (int c = threadIdx.x; c < n_cols; c += XENT_THREADS) s += __expf(row[c] - m);
    float m2 = m;
    xent_block_merge(m2, s, scratch2);  // every thread holds the same max: a plain sum
    xent_loss(row, y, n_cols, m, s, loss);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < n_cols; c += XENT_THREADS)
        out[c] = __expf(row[c] - m) * inv - (c == y ? 1.0f : 0.0f);
}
