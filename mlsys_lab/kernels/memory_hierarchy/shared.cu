// Shared memory: tiling a transpose, bank conflicts, and padding.
//
// Shared memory has 32 banks of 4-byte words; word w lives in bank w % 32. A warp's request is
// split into as many passes as the largest number of *distinct* words it asks of one bank.

#ifndef TILE
#define TILE 32
#endif
#define ROWS_PER_PASS 8  // a TILE x ROWS_PER_PASS block sweeps a TILE x TILE tile in TILE / 8 passes

// out (cols, rows) = in (rows, cols)^T, straight from global memory: reads are coalesced, writes
// stride by `rows` floats, so every write of a warp lands in a different sector.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    const int x = blockIdx.x * TILE + threadIdx.x;  // column of `in`
    const int y0 = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS) {
        const int y = y0 + j;
        if (x < cols && y < rows) out[(long long)x * rows + y] = in[(long long)y * cols + x];
    }
}

// Stage a tile in shared memory so that both the read of `in` and the write of `out` are coalesced.
// With PAD = 0 the column read tile[threadIdx.x][j] hits one bank 32 times (32-way conflict);
// PAD = 1 shifts each row by one bank and the conflict disappears.
template <int PAD>
__device__ void transpose_tiled(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + PAD];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(long long)(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;  // column of `out` = row of `in`
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < rows && y + j < cols) out[(long long)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" __global__ void transpose_shared(const float* in, float* out, int rows, int cols) {
    transpose_tiled<0>(in, out, rows, cols);
}

extern "C" __global__ void transpose_shared_padded(const float* in, float* out, int rows, int cols) {
    transpose_tiled<1>(in, out, rows, cols);
}

// Every thread reads shared word lane * stride, `iters` times. The words are distinct, and
// gcd(stride, 32) lanes share a bank, so the request takes gcd(stride, 32) passes.
// out[thread] = iters * (lane * stride) exactly (small integers in float32).
extern "C" __global__ void shared_stride(float* __restrict__ out, int stride, int iters) {
    __shared__ float words[32 * 32];
    for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) words[i] = (float)i;
    __syncthreads();
    volatile float* vwords = words;  // volatile: every iteration really loads
    const int index = ((threadIdx.x & 31) * stride) & (32 * 32 - 1);
    float acc = 0.0f;
#pragma unroll 16
    for (int it = 0; it < iters; ++it) acc += vwords[index];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
