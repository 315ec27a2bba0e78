// A fused elementwise chain: out = scale * gelu(x + bias), GELU in its tanh form, in one pass over memory.
// Unfused it is four kernels (add, the cube and tanh of the GELU, the scale) and four round trips through HBM;
// fused, each element is read once and written once, so the ceiling is the copy bandwidth.
//
// x and out are (rows, width) row-major, n = rows * width elements; bias has `width` elements and is added to
// every row. A grid-stride loop: any grid covers any n (the launcher sizes the grid to the GPU, not to n), and
// neighbouring threads touch neighbouring addresses on every pass (coalesced).

#define GELU_C 0.7978845608028654f  // sqrt(2 / pi)

extern "C" __global__ void bias_gelu(const float* __restrict__ x, const float* __restrict__ bias,
                                     float* __restrict__ out, float scale, long long n, int width) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i] + bias[i % width];
        const float inner = GELU_C * (v + 0.044715f * v * v * v);
        out[i] = scale * (0.5f * v * (1.0f + tanhf(inner)));
    }
}
