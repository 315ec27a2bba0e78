// Fused attention, one warp per query row, online softmax (Milakov & Gimelshein 2018; FlashAttention's
// inner loop, Dao et al. 2022). out[b, i, :] = softmax(scale · q[b, i, :] · k[b, :, :]ᵀ [causal]) · v[b, :, :].
// The S×S score matrix never exists: each score lives in registers for one step of the loop over keys.
// q: [bh, s_q, d], k and v: [bh, s_k, d], out: [bh, s_q, d], float32, contiguous; d <= 128.
// NumPy reference: mlsys_lab.graph.eager (matmul, mul, causal_mask, softmax, matmul).
#define MAX_PER_LANE 4  // 4 × 32 lanes = head_dim up to 128

extern "C" __global__ void attention_rowwise(const float* __restrict__ q, const float* __restrict__ k,
                                             const float* __restrict__ v, float* __restrict__ out,
                                             int bh, int s_q, int s_k, int d, float scale, int causal) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // one of bh * s_q query rows
    const int lane = threadIdx.x % 32;
    if (row >= bh * s_q) return;
    const int b = row / s_q, i = row % s_q;
    const float* k_b = k + (size_t)b * s_k * d;
    const float* v_b = v + (size_t)b * s_k * d;
    float q_reg[MAX_PER_LANE], acc[MAX_PER_LANE];
    for (int t = 0; t < MAX_PER_LANE; ++t) {
        const int c = lane + 32 * t;
        q_reg[t] = c < d ? q[(size_t)row * d + c] * scale : 0.0f;
        acc[t] = 0.0f;
    }
    float running_max = -INFINITY, running_sum = 0.0f;
    const int j_end = causal ? min(s_k, i + 1 + s_k - s_q) : s_k;
    for (int j = 0; j < j_end; ++j) {
        float partial = 0.0f;
        for (int t = 0; t < MAX_PER_LANE; ++t) {
            const int c = lane + 32 * t;
            if (c < d) partial += q_reg[t] * k_b[(size_t)j * d + c];
        }
        for (int offset = 16; offset > 0; offset >>= 1) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
        const float new_max = fmaxf(running_max, partial);
        const float correction = __expf(running_max - new_max);  // exp(-inf) = 0 on the first key
        const float p = __expf(partial - new_max);
        running_sum = running_sum * correction + p;
        for (int t = 0; t < MAX_PER_LANE; ++t) {
            const int c = lane + 32 * t;
            if (c < d) acc[t] = acc[t] * correction + p * v_b[(size_t)j * d + c];
        }
        running_max = new_max;
    }
    for (int t = 0; t < MAX_PER_LANE; ++t) {
        const int c = lane + 32 * t;
        if (c < d) out[(size_t)row * d + c] = acc[t] / running_sum;
    }
}
