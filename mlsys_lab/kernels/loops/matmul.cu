// Loop transformations on the GPU: C = A @ B, float32, row-major. A (M, K), B (K, N), C (M, N).
//
// matmul_rows_inner / matmul_cols_inner: the same triple loop with the thread-to-index mapping
//   interchanged. threadIdx.x walks j (columns): a warp reads 32 neighbouring B and C elements
//   (coalesced); threadIdx.x walks i (rows): a warp touches 32 different rows (stride N).
// matmul_tiled: loop blocking into shared memory, TILE x TILE tiles (Kirk & Hwu, ch. 5).
// matmul_tunable: the kernel the autotuner searches. Compile-time parameters (-D):
//   BM, BN, BK  block tile (tiling);     TM, TN  outputs per thread (unroll-and-jam, "work per thread")
//   UNROLL      unroll factor of the kk loop;  VEC  1 or 4: scalar or float4 global loads (vectorization)
//   PIPE        0 or 1: software pipelining (load tile t+1 into registers while computing tile t,
//               two shared buffers, one barrier per tile)
// Requires M % BM == N % BN == K % BK == 0 (the launcher checks).

#ifndef TILE
#define TILE 32
#endif
#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef PIPE
#define PIPE 1
#endif

#define THREADS ((BM / TM) * (BN / TN))
#define PRAGMA(x) _Pragma(#x)
#define UNROLL_BY(n) PRAGMA(unroll n)

extern "C" __global__ void matmul_rows_inner(const float* __restrict__ A, const float* __restrict__ B,
                                             float* __restrict__ C, int M, int N, int K) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;  // fastest-varying thread index -> column
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= M || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
    C[i * N + j] = acc;
}

extern "C" __global__ void matmul_cols_inner(const float* __restrict__ A, const float* __restrict__ B,
                                             float* __restrict__ C, int M, int N, int K) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // fastest-varying thread index -> row
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= M || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
    C[i * N + j] = acc;
}

extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int i = blockIdx.y * TILE + ty, j = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (i < M && k0 + tx < K) ? A[i * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && j < N) ? B[(k0 + ty) * N + j] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (i < M && j < N) C[i * N + j] = acc;
}

// Chunks of VEC floats each thread stages per tile.
#define A_CHUNKS (BM * BK / VEC)
#define B_CHUNKS (BK * BN / VEC)
#define A_PER_THREAD ((A_CHUNKS + THREADS - 1) / THREADS)
#define B_PER_THREAD ((B_CHUNKS + THREADS - 1) / THREADS)

__device__ __forceinline__ void load_chunk(const float* src, float* dst) {
#if VEC == 4
    float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x; dst[1] = v.y; dst[2] = v.z; dst[3] = v.w;
#else
    dst[0] = src[0];
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tunable(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
               int M, int N, int K) {
    __shared__ float As[1 + PIPE][BK][BM];  // A tile stored transposed: As[k][m]
    __shared__ float Bs[1 + PIPE][BK][BN];
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int ty = tid / (BN / TN), tx = tid % (BN / TN);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float ra[A_PER_THREAD][VEC], rb[B_PER_THREAD][VEC];

    // Stage tile k0 of A and B from global memory into registers ra, rb.
#define LOAD_TILE(k0)                                                                            \
    _Pragma("unroll") for (int p = 0; p < A_PER_THREAD; ++p) {                                   \
        int c = tid + p * THREADS;                                                               \
        if (c < A_CHUNKS) {                                                                      \
            int r = c / (BK / VEC), q = (c % (BK / VEC)) * VEC;                                  \
            load_chunk(&A[(row0 + r) * K + (k0) + q], ra[p]);                                    \
        }                                                                                        \
    }                                                                                            \
    _Pragma("unroll") for (int p = 0; p < B_PER_THREAD; ++p) {                                   \
        int c = tid + p * THREADS;                                                               \
        if (c < B_CHUNKS) {                                                                      \
            int r = c / (BN / VEC), q = (c % (BN / VEC)) * VEC;                                  \
            load_chunk(&B[((k0) + r) * N + col0 + q], rb[p]);                                    \
        }                                                                                        \
    }
    // Store the staged registers into shared buffer buf.
#define STORE_TILE(buf)                                                                          \
    _Pragma("unroll") for (int p = 0; p < A_PER_THREAD; ++p) {                                   \
        int c = tid + p * THREADS;                                                               \
        if (c < A_CHUNKS) {                                                                      \
            int r = c / (BK / VEC), q = (c % (BK / VEC)) * VEC;                                  \
            _Pragma("unroll") for (int v = 0; v < VEC; ++v) As[buf][q + v][r] = ra[p][v];        \
        }                                                                                        \
    }                                                                                            \
    _Pragma("unroll") for (int p = 0; p < B_PER_THREAD; ++p) {                                   \
        int c = tid + p * THREADS;                                                               \
        if (c < B_CHUNKS) {                                                                      \
            int r = c / (BN / VEC), q = (c % (BN / VEC)) * VEC;                                  \
            _Pragma("unroll") for (int v = 0; v < VEC; ++v) Bs[buf][r][q + v] = rb[p][v];        \
        }                                                                                        \
    }

    const int n_tiles = K / BK;
    LOAD_TILE(0)
    STORE_TILE(0)
    __syncthreads();
    for (int t = 0; t < n_tiles; ++t) {
        const int cur = PIPE ? (t & 1) : 0;
        if (PIPE && t + 1 < n_tiles) {
            LOAD_TILE((t + 1) * BK)  // in flight while the FMAs below run
        }
        UNROLL_BY(UNROLL)
        for (int kk = 0; kk < BK; ++kk) {
            float a_frag[TM], b_frag[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a_frag[i] = As[cur][kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b_frag[j] = Bs[cur][kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
        }
        if (t + 1 < n_tiles) {
            if (PIPE) {
                STORE_TILE(cur ^ 1)
            } else {
                __syncthreads();
                LOAD_TILE((t + 1) * BK)
                STORE_TILE(0)
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) C[(row0 + ty * TM + i) * N + col0 + tx * TN + j] = acc[i][j];
}
