// Loop transformations on the GPU beyond matmul, float32.
//
// jacobi5: one step of the 2-D 5-point stencil, interior only, one thread per point; threadIdx.x
//   walks columns (coalesced). jacobi5_cols: the interchanged mapping (threadIdx.x walks rows).
// affine / relu / affine_relu: loop fusion. Two kernels write y = s*x + t to memory and read it back;
//   the fused kernel keeps y in a register: 2 memory passes instead of 4.

extern "C" __global__ void jacobi5(const float* __restrict__ u, float* __restrict__ out, int rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < 1 || j < 1 || i >= rows - 1 || j >= cols - 1) return;
    out[i * cols + j] = 0.25f * (u[(i - 1) * cols + j] + u[(i + 1) * cols + j] + u[i * cols + j - 1] +
                                 u[i * cols + j + 1]);
}

extern "C" __global__ void jacobi5_cols(const float* __restrict__ u, float* __restrict__ out, int rows,
                                        int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < 1 || j < 1 || i >= rows - 1 || j >= cols - 1) return;
    out[i * cols + j] = 0.25f * (u[(i - 1) * cols + j] + u[(i + 1) * cols + j] + u[i * cols + j - 1] +
                                 u[i * cols + j + 1]);
}

extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, float s, float t,
                                  long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = s * x[i] + t;
}

extern "C" __global__ void relu(const float* __restrict__ y, float* __restrict__ out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = fmaxf(y[i], 0.0f);
}

extern "C" __global__ void affine_relu(const float* __restrict__ x, float* __restrict__ out, float s, float t,
                                       long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = fmaxf(s * x[i] + t, 0.0f);
}
