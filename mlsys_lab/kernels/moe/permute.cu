// The token permutation of a MoE layer, as data movement only: the router has decided (expert, slot) for every
// (token, choice) pair, pair p = t * k + j of the (T, k) arrays; slot -1 marks a pair dropped at capacity.
//
// moe_scatter: buffers[expert[p], slot[p], :] = x[t, :] for every kept pair. One block per pair (a grid-stride
//   loop over pairs), its threads copying the row: neighbouring threads touch neighbouring floats (coalesced),
//   as float4 when d % 4 == 0. No atomics: a kept pair's slot is unique in its expert. The slots nobody fills
//   must be zero: the launcher zeroes the buffers before the launch.
// moe_gather: out[t, :] = sum_j weight[t, j] * y[expert[t, j], slot[t, j], :] over the kept pairs of token t.
//   One block per token: each thread sums its columns of the token's k rows in registers and writes each output
//   element once. No atomics and no zeroed output (a token with no kept pair gets zeros from the empty sum), and
//   the sum runs in the same order j = 0, 1, ... on every run: the result is deterministic.
//
// The slow lookalikes the exercise's check names: a thread per pair copying its whole row (uncoalesced), and
// the combine as a scatter-add with atomics into a zeroed output (a block per pair).

extern "C" __global__ void moe_scatter(const float* __restrict__ x, const int* __restrict__ expert,
                                       const int* __restrict__ slot, float* __restrict__ buffers, int n_tokens,
                                       int k, int d, int capacity) {
    const long long n_pairs = (long long)n_tokens * k;
    for (long long p = blockIdx.x; p < n_pairs; p += gridDim.x) {
        const int s = slot[p];
        if (s < 0) continue;  // dropped at capacity: the residual connection carries the token
        const float* src = x + (p / k) * d;
        float* dst = buffers + ((long long)expert[p] * capacity + s) * d;
        if ((d & 3) == 0) {  // rows start 16-byte aligned: move them as float4
            const float4* src4 = reinterpret_cast<const float4*>(src);
            float4* dst4 = reinterpret_cast<float4*>(dst);
            for (int c = threadIdx.x; c < d / 4; c += blockDim.x) dst4[c] = src4[c];
        } else {
            for (int c = threadIdx.x; c < d; c += blockDim.x) dst[c] = src[c];
        }
    }
}

extern "C" __global__ void moe_gather(const float* __restrict__ y, const int* __restrict__ expert,
                                      const int* __restrict__ slot, const float* __restrict__ weight,
                                      float* __restrict__ out, int n_tokens, int k, int d, int capacity) {
    for (long long t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        const int* e_t = expert + t * k;
        const int* s_t = slot + t * k;
        const float* w_t = weight + t * k;
        if ((d & 3) == 0) {
            float4* dst4 = reinterpret_cast<float4*>(out + t * d);
            for (int c = threadIdx.x; c < d / 4; c += blockDim.x) {
                float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                for (int j = 0; j < k; ++j) {
                    const int s = s_t[j];
                    if (s < 0) continue;
                    const float w = w_t[j];
                    const float4 v = reinterpret_cast<const float4*>(y + ((long long)e_t[j] * capacity + s) * d)[c];
                    acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
                }
                dst4[c] = acc;
            }
        } else {
            for (int c = threadIdx.x; c < d; c += blockDim.x) {
                float acc = 0.0f;
                for (int j = 0; j < k; ++j) {
                    const int s = s_t[j];
                    if (s >= 0) acc += w_t[j] * y[((long long)e_t[j] * capacity + s) * d + c];
                }
                out[t * d + c] = acc;
            }
        }
    }
}

// Lookalike: one thread per pair copies the whole row, so that the 32 threads of a warp touch 32 rows d floats
// apart on every step (a transaction per thread instead of one per warp).
extern "C" __global__ void moe_scatter_thread_per_pair(const float* __restrict__ x, const int* __restrict__ expert,
                                                       const int* __restrict__ slot, float* __restrict__ buffers,
                                                       int n_tokens, int k, int d, int capacity) {
    const long long n_pairs = (long long)n_tokens * k;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < n_pairs;
         p += (long long)gridDim.x * blockDim.x) {
        const int s = slot[p];
        if (s < 0) continue;
        const float* src = x + (p / k) * d;
        float* dst = buffers + ((long long)expert[p] * capacity + s) * d;
        for (int c = 0; c < d; ++c) dst[c] = src[c];
    }
}

// Lookalike: the combine as a scatter-add, a block per pair adding weight * row into out with atomics. out must
// be zeroed first (one more pass over it), and the order of the k additions varies from run to run.
extern "C" __global__ void moe_gather_atomic(const float* __restrict__ y, const int* __restrict__ expert,
                                             const int* __restrict__ slot, const float* __restrict__ weight,
                                             float* __restrict__ out, int n_tokens, int k, int d, int capacity) {
    const long long n_pairs = (long long)n_tokens * k;
    for (long long p = blockIdx.x; p < n_pairs; p += gridDim.x) {
        const int s = slot[p];
        if (s < 0) continue;
        const float w = weight[p];
        const float* src = y + ((long long)expert[p] * capacity + s) * d;
        float* dst = out + (p / k) * d;
        for (int c = threadIdx.x; c < d; c += blockDim.x) atomicAdd(dst + c, w * src[c]);
    }
}
