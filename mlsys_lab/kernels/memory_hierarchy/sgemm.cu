// SGEMM progression: C = A @ B in FP32, row-major, A (M, K), B (K, N), C (M, N).
//
// Each step fixes the bottleneck the previous one measured, after Simon Boehm, "How to Optimize a
// CUDA Matmul Kernel for cuBLAS-like Performance: a Worklog" (2022), and the CUTLASS docs on
// hierarchical tiling (block tile -> warp tile -> thread tile).
//
//   1 naive          one thread per C element; consecutive threads walk down a column of C
//   2 coalesced      consecutive threads walk along a row of C: B and C accesses are coalesced
//   3 smem           32 x 32 tiles of A and B staged in shared memory: each value read from HBM once per tile
//   4 blocktile_1d   each thread computes TM results of a column: TM FMAs per shared load of B
//   5 blocktile_2d   each thread computes a TM x TN tile: an outer product of registers
//   6 vectorized     float4 global loads; A stored transposed in shared memory so its reads are float4 too
//   7 double_buffer  two shared buffers: the next tile is fetched into registers during the FMAs
//   8 warptile       a warp owns a WM x WN tile: threads of a warp share rows and columns (fewer bank conflicts)
//   9 warptile_db    8 with the double buffering of 7
//  10 grouped        9 with blocks launched in L2-friendly groups of rows (GROUP template parameter)
//
// Kernels 4-9 need M % BM == 0, N % BN == 0 and K % BK == 0 (the launcher checks, and says so).

// ---------------------------------------------------------------------------------------- 1, 2, 3
extern "C" __global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // threadIdx.x runs down a column: strided
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

extern "C" __global__ void sgemm_coalesced(int M, int N, int K, const float* A, const float* B, float* C) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // threadIdx.x runs along a row: coalesced
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

extern "C" __global__ void sgemm_smem(int M, int N, int K, const float* A, const float* B, float* C) {
    constexpr int T = 32;
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// ------------------------------------------------------------------------------------------ 4
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__((BM * BN) / TM)
sgemm_blocktile_1d(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                   float* __restrict__ C) {
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int thread_col = threadIdx.x % BN;
    const int thread_row = threadIdx.x / BN;  // in [0, BM / TM)
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;
    // (BM * BN / TM) threads load BM * BK and BK * BN values: one each when BM * BK == BM * BN / TM.
    const int a_col = threadIdx.x % BK, a_row = threadIdx.x / BK;
    const int b_col = threadIdx.x % BN, b_row = threadIdx.x / BN;
    float acc[TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[a_row * BK + a_col] = A[a_row * K + a_col];
        Bs[b_row * BN + b_col] = B[b_row * N + b_col];
        __syncthreads();
        A += BK;
        B += BK * N;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k * BN + thread_col];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[(thread_row * TM + i) * BK + k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) C[(thread_row * TM + i) * N + thread_col] = acc[i];
}

// ------------------------------------------------------------------------------------------ 5
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM * BN) / (TM * TN))
sgemm_blocktile_2d(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                   float* __restrict__ C) {
    constexpr int THREADS = (BM * BN) / (TM * TN);
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int thread_col = threadIdx.x % (BN / TN);
    const int thread_row = threadIdx.x / (BN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;
    const int a_col = threadIdx.x % BK, a_row = threadIdx.x / BK;
    constexpr int A_STRIDE = THREADS / BK;
    const int b_col = threadIdx.x % BN, b_row = threadIdx.x / BN;
    constexpr int B_STRIDE = THREADS / BN;
    float acc[TM * TN] = {0.0f};
    float reg_m[TM], reg_n[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < BM; r += A_STRIDE) As[(a_row + r) * BK + a_col] = A[(a_row + r) * K + a_col];
#pragma unroll
        for (int r = 0; r < BK; r += B_STRIDE) Bs[(b_row + r) * BN + b_col] = B[(b_row + r) * N + b_col];
        __syncthreads();
        A += BK;
        B += BK * N;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) reg_m[i] = As[(thread_row * TM + i) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) reg_n[j] = Bs[k * BN + thread_col * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i * TN + j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) C[(thread_row * TM + i) * N + thread_col * TN + j] = acc[i * TN + j];
}

// ------------------------------------------------------------------------------------- 6 and 7
// Shared helpers for the vectorized kernels: A tile stored transposed (As[k][m]) so that a thread
// reads TM consecutive floats of one k; B tile stored as is (Bs[k][n]).
template <int BM, int BN, int BK, int THREADS>
struct TileLoader {
    static constexpr int A_VEC = (BM * BK) / (4 * THREADS);  // float4 per thread for the A tile
    static constexpr int B_VEC = (BK * BN) / (4 * THREADS);
    static constexpr int A_ROW_STRIDE = (4 * THREADS) / BK;
    static constexpr int B_ROW_STRIDE = (4 * THREADS) / BN;
    float4 a[A_VEC];
    float4 b[B_VEC];

    __device__ void fetch(const float* __restrict__ A, const float* __restrict__ B, int K, int N) {
        const int a_row = threadIdx.x / (BK / 4), a_col = threadIdx.x % (BK / 4);
        const int b_row = threadIdx.x / (BN / 4), b_col = threadIdx.x % (BN / 4);
#pragma unroll
        for (int v = 0; v < A_VEC; ++v)
            a[v] = reinterpret_cast<const float4*>(&A[(a_row + v * A_ROW_STRIDE) * K + a_col * 4])[0];
#pragma unroll
        for (int v = 0; v < B_VEC; ++v)
            b[v] = reinterpret_cast<const float4*>(&B[(b_row + v * B_ROW_STRIDE) * N + b_col * 4])[0];
    }

    __device__ void store(float* As, float* Bs) const {
        const int a_row = threadIdx.x / (BK / 4), a_col = threadIdx.x % (BK / 4);
        const int b_row = threadIdx.x / (BN / 4), b_col = threadIdx.x % (BN / 4);
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            const int m = a_row + v * A_ROW_STRIDE;
            As[(a_col * 4 + 0) * BM + m] = a[v].x;
            As[(a_col * 4 + 1) * BM + m] = a[v].y;
            As[(a_col * 4 + 2) * BM + m] = a[v].z;
            As[(a_col * 4 + 3) * BM + m] = a[v].w;
        }
#pragma unroll
        for (int v = 0; v < B_VEC; ++v)
            reinterpret_cast<float4*>(&Bs[(b_row + v * B_ROW_STRIDE) * BN + b_col * 4])[0] = b[v];
    }
};

// One 16-byte shared-memory load into four registers.
__device__ __forceinline__ void unpack4(float* dst, const float* src) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
}

// One BK slice of the thread-tile outer product: acc[TM][TN] += As[:, rows] x Bs[:, cols].
template <int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void thread_tile_fma(const float* As, const float* Bs, int thread_row, int thread_col,
                                                float* acc) {
    float reg_m[TM], reg_n[TN];
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
        for (int i = 0; i < TM; i += 4) unpack4(reg_m + i, &As[k * BM + thread_row * TM + i]);
#pragma unroll
        for (int j = 0; j < TN; j += 4) unpack4(reg_n + j, &Bs[k * BN + thread_col * TN + j]);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i * TN + j] += reg_m[i] * reg_n[j];
    }
}

template <int BM, int BN, int TM, int TN>
__device__ __forceinline__ void store_thread_tile(float* C, int N, int thread_row, int thread_col, const float* acc) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            reinterpret_cast<float4*>(&C[(thread_row * TM + i) * N + thread_col * TN + j])[0] =
                make_float4(acc[i * TN + j], acc[i * TN + j + 1], acc[i * TN + j + 2], acc[i * TN + j + 3]);
}

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM * BN) / (TM * TN))
sgemm_vectorized(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C) {
    constexpr int THREADS = (BM * BN) / (TM * TN);
    __shared__ __align__(16) float As[BK * BM];
    __shared__ __align__(16) float Bs[BK * BN];
    const int thread_col = threadIdx.x % (BN / TN);
    const int thread_row = threadIdx.x / (BN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;
    TileLoader<BM, BN, BK, THREADS> loader;
    float acc[TM * TN] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        loader.fetch(A, B, K, N);
        loader.store(As, Bs);
        __syncthreads();
        A += BK;
        B += BK * N;
        thread_tile_fma<BM, BN, BK, TM, TN>(As, Bs, thread_row, thread_col, acc);
        __syncthreads();
    }
    store_thread_tile<BM, BN, TM, TN>(C, N, thread_row, thread_col, acc);
}

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM * BN) / (TM * TN))
sgemm_double_buffer(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C) {
    constexpr int THREADS = (BM * BN) / (TM * TN);
    __shared__ __align__(16) float As[2][BK * BM];
    __shared__ __align__(16) float Bs[2][BK * BN];
    const int thread_col = threadIdx.x % (BN / TN);
    const int thread_row = threadIdx.x / (BN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;
    TileLoader<BM, BN, BK, THREADS> loader;
    float acc[TM * TN] = {0.0f};
    loader.fetch(A, B, K, N);
    loader.store(As[0], Bs[0]);
    __syncthreads();
    int stage = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) loader.fetch(A + BK, B + BK * N, K, N);  // in flight during the FMAs below
        thread_tile_fma<BM, BN, BK, TM, TN>(As[stage], Bs[stage], thread_row, thread_col, acc);
        if (has_next) loader.store(As[stage ^ 1], Bs[stage ^ 1]);
        __syncthreads();  // one barrier: the other buffer was last read before the previous barrier
        stage ^= 1;
        A += BK;
        B += BK * N;
    }
    store_thread_tile<BM, BN, TM, TN>(C, N, thread_row, thread_col, acc);
}

// ------------------------------------------------------------------------------------- 8 and 9
// Block tile BM x BN, split among warps as WM x WN tiles; each warp tile is swept in WMITER x WNITER
// sub-tiles of (WM / WMITER) x (WN / WNITER); each thread holds TM x TN of every sub-tile.
template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int THREADS>
struct WarpTile {
    static constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
    static constexpr int WSUBM = WM / WMITER;
    static constexpr int WSUBN = WN / WNITER;
    static constexpr int RESULTS = WMITER * TM * WNITER * TN;
    static_assert((BM / WM) * (BN / WN) * 32 == THREADS, "one warp per warp tile");
    static_assert(WMITER * WSUBM == WM && (WSUBN / TN) * (WSUBM / TM) == 32, "a warp covers its sub-tile");
};

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int THREADS>
__device__ __forceinline__ void warp_tile_fma(const float* As, const float* Bs, int warp_row, int warp_col,
                                              int t_row, int t_col, float* acc) {
    using W = WarpTile<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>;
    float reg_m[W::WMITER * TM], reg_n[WNITER * TN];
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
        for (int ws = 0; ws < W::WMITER; ++ws)
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                unpack4(reg_m + ws * TM + i, &As[k * BM + warp_row * WM + ws * W::WSUBM + t_row * TM + i]);
#pragma unroll
        for (int ws = 0; ws < WNITER; ++ws)
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                unpack4(reg_n + ws * TN + j, &Bs[k * BN + warp_col * WN + ws * W::WSUBN + t_col * TN + j]);
#pragma unroll
        for (int wm = 0; wm < W::WMITER; ++wm)
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j)
                        acc[(wm * TM + i) * (WNITER * TN) + wn * TN + j] += reg_m[wm * TM + i] * reg_n[wn * TN + j];
    }
}

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int THREADS>
__device__ __forceinline__ void store_warp_tile(float* C, int N, int t_row, int t_col, const float* acc) {
    using W = WarpTile<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>;
#pragma unroll
    for (int wm = 0; wm < W::WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn) {
            float* c_sub = C + (wm * W::WSUBM) * N + wn * W::WSUBN;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float* r = &acc[(wm * TM + i) * (WNITER * TN) + wn * TN + j];
                    reinterpret_cast<float4*>(&c_sub[(t_row * TM + i) * N + t_col * TN + j])[0] =
                        make_float4(r[0], r[1], r[2], r[3]);
                }
        }
}

// Grouped block order (as in Triton's matmul tutorial): blocks launched one after another cover a
// GROUP-tall band of C column by column, so the strips of A and B they read are still in L2.
// GROUP = 1 is the plain row-by-row order. Returns (block row, block column).
template <int GROUP>
__device__ __forceinline__ int2 grouped_block() {
    const int pid = blockIdx.y * gridDim.x + blockIdx.x;
    const int per_group = GROUP * gridDim.x;
    const int first_row = (pid / per_group) * GROUP;
    const int rows = min((int)gridDim.y - first_row, GROUP);
    return make_int2(first_row + (pid % per_group) % rows, (pid % per_group) / rows);
}

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int THREADS, int GROUP>
__global__ void __launch_bounds__(THREADS)
sgemm_warptile(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
               float* __restrict__ C) {
    using W = WarpTile<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>;
    __shared__ __align__(16) float As[BK * BM];
    __shared__ __align__(16) float Bs[BK * BN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_col = warp % (BN / WN), warp_row = warp / (BN / WN);
    const int t_col = lane % (W::WSUBN / TN), t_row = lane / (W::WSUBN / TN);
    const int2 block = grouped_block<GROUP>();  // (row, column) of this block's tile of C
    A += block.x * BM * K;
    B += block.y * BN;
    C += (block.x * BM + warp_row * WM) * N + block.y * BN + warp_col * WN;
    TileLoader<BM, BN, BK, THREADS> loader;
    float acc[W::RESULTS] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        loader.fetch(A, B, K, N);
        loader.store(As, Bs);
        __syncthreads();
        A += BK;
        B += BK * N;
        warp_tile_fma<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>(As, Bs, warp_row, warp_col, t_row, t_col, acc);
        __syncthreads();
    }
    store_warp_tile<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>(C, N, t_row, t_col, acc);
}

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int THREADS, int GROUP>
__global__ void __launch_bounds__(THREADS)
sgemm_warptile_db(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                  float* __restrict__ C) {
    using W = WarpTile<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>;
    __shared__ __align__(16) float As[2][BK * BM];
    __shared__ __align__(16) float Bs[2][BK * BN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_col = warp % (BN / WN), warp_row = warp / (BN / WN);
    const int t_col = lane % (W::WSUBN / TN), t_row = lane / (W::WSUBN / TN);
    const int2 block = grouped_block<GROUP>();  // (row, column) of this block's tile of C
    A += block.x * BM * K;
    B += block.y * BN;
    C += (block.x * BM + warp_row * WM) * N + block.y * BN + warp_col * WN;
    TileLoader<BM, BN, BK, THREADS> loader;
    float acc[W::RESULTS] = {0.0f};
    loader.fetch(A, B, K, N);
    loader.store(As[0], Bs[0]);
    __syncthreads();
    int stage = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) loader.fetch(A + BK, B + BK * N, K, N);
        warp_tile_fma<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>(As[stage], Bs[stage], warp_row, warp_col,
                                                                   t_row, t_col, acc);
        if (has_next) loader.store(As[stage ^ 1], Bs[stage ^ 1]);
        __syncthreads();
        stage ^= 1;
        A += BK;
        B += BK * N;
    }
    store_warp_tile<BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS>(C, N, t_row, t_col, acc);
}
