// Fused attention, one warp per query row, online softmax (Milakov & Gimelshein 2018; FlashAttention's
// inner loop, Dao et al. 2022). out[b, i, :] = softmax(scale · q[b, i, :] · k[b, :, :]ᵀ [causal]) · v[b, :, :].
// The S×S score matrix never exists: each score lives in registers for one step of the loop over keys.
// q: [bh, s_q, d], k and v: [bh, s_k, d], out: [bh, s_q, d], float32, contiguous; d <= 128.
// NumPy reference: mlsys_lab.operators.eager (matmul, mul, causal_mask, softmax, matmul).
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
    float running_max = -__int_as_float(0x7f800000), running_sum = 0.0f;  // -inf
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

// Tiled version: a block of ROWS warps takes ROWS query rows of one (batch, head); K and V are staged in
// shared memory 32 keys at a time and reused by every row of the block. Within a warp, lane l scores key l
// of the tile (a full dot product, no shuffles), the warp folds the 32 scores into the running max and sum
// once per tile (online softmax), then every lane accumulates its columns of p·V from shared memory.
// grid = (ceil(s_q / ROWS), bh), block = 32 * ROWS threads.
#define ROWS 8
#define TILE 32
#define MAX_D 128
#define K_STRIDE (MAX_D + 1)  // +1 float of padding: lane l reads row l, so rows fall in different banks

extern "C" __global__ void attention_tiled(const float* __restrict__ q, const float* __restrict__ k,
                                           const float* __restrict__ v, float* __restrict__ out,
                                           int bh, int s_q, int s_k, int d, float scale, int causal) {
    __shared__ float k_tile[TILE * K_STRIDE];
    __shared__ float v_tile[TILE * MAX_D];
    __shared__ float q_rows[ROWS * MAX_D];
    const int b = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * ROWS + warp;  // this warp's query row
    const bool active = i < s_q;
    const float* k_b = k + (size_t)b * s_k * d;
    const float* v_b = v + (size_t)b * s_k * d;
    for (int c = lane; c < d; c += 32) q_rows[warp * MAX_D + c] = active ? q[((size_t)b * s_q + i) * d + c] * scale : 0.0f;
    const int last_row = min(s_q - 1, (int)(blockIdx.x * ROWS + ROWS - 1));
    const int keys_block = causal ? min(s_k, last_row + 1 + s_k - s_q) : s_k;  // keys any row of the block needs
    const int keys_row = causal ? min(s_k, i + 1 + s_k - s_q) : s_k;
    float running_max = -__int_as_float(0x7f800000), running_sum = 0.0f;
    float acc[MAX_D / 32];
    for (int t = 0; t < MAX_D / 32; ++t) acc[t] = 0.0f;
    for (int j0 = 0; j0 < keys_block; j0 += TILE) {
        __syncthreads();  // the previous tile is no longer read
        for (int idx = threadIdx.x; idx < TILE * d; idx += blockDim.x) {
            const int r = idx / d, c = idx % d;
            const bool in_range = j0 + r < s_k;
            k_tile[r * K_STRIDE + c] = in_range ? k_b[(size_t)(j0 + r) * d + c] : 0.0f;
            v_tile[r * MAX_D + c] = in_range ? v_b[(size_t)(j0 + r) * d + c] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;
        const int j = j0 + lane;
        float score = 0.0f;
        for (int c = 0; c < d; ++c) score += q_rows[warp * MAX_D + c] * k_tile[lane * K_STRIDE + c];
        const bool valid = j < keys_row;
        float tile_max = valid ? score : -__int_as_float(0x7f800000);
        for (int offset = 16; offset > 0; offset >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
        const float new_max = fmaxf(running_max, tile_max);
        if (new_max == -__int_as_float(0x7f800000)) continue;  // every key so far is masked
        const float correction = __expf(running_max - new_max);
        const float p = valid ? __expf(score - new_max) : 0.0f;
        float tile_sum = p;
        for (int offset = 16; offset > 0; offset >>= 1) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, offset);
        running_sum = running_sum * correction + tile_sum;
        for (int t = 0; t < MAX_D / 32; ++t) acc[t] *= correction;
        for (int jj = 0; jj < TILE; ++jj) {
            const float p_jj = __shfl_sync(0xffffffffu, p, jj);
            for (int t = 0; t < MAX_D / 32; ++t) {
                const int c = lane + 32 * t;
                if (c < d) acc[t] += p_jj * v_tile[jj * MAX_D + c];
            }
        }
        running_max = new_max;
    }
    if (!active) return;
    for (int t = 0; t < MAX_D / 32; ++t) {
        const int c = lane + 32 * t;
        if (c < d) out[((size_t)b * s_q + i) * d + c] = acc[t] / running_sum;
    }
}
