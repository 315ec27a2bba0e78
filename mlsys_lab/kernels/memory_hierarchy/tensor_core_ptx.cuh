// Inline-PTX helpers shared by the tensor-core kernels of this lesson (bf16_gemm.cu, flash_attention.cu, and
// through hopper_ptx.cuh the sm_90a kernels).
// No CUDA header is included: NVRTC with CuPy's headers cannot include mma.h, so every tensor-core and
// copy instruction is written as PTX. Needs compute capability 8.0 (bf16 mma.sync, ldmatrix, cp.async).
#pragma once

typedef unsigned short bf16_t;  // the bits of a bfloat16: sign, 8 exponent bits, 7 mantissa bits

__device__ __forceinline__ unsigned smem_u32(const void* p) {  // generic -> shared-window address
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// Two floats -> one register of two bf16 (round to nearest even); lo lands in the low 16 bits.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ldmatrix.x4: four 8 x 8 matrices of 16-bit values; lane l gives the address of row l % 8 of matrix
// l / 8, and receives, of each matrix, row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1: exactly the
// mma.sync fragment layout. The .trans form hands out the transpose (attention's row-major V: P·V needs
// fragments whose pairs run along the key axis).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D (16 x 8, fp32) += A (16 x 16, bf16, row) · B (16 x 8, bf16, col): one warp, one instruction.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async_16(unsigned smem_addr, const void* gmem) {  // 16 bytes, L2 only
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Block tile (tm, tn) of block `bid` when blocks walk GROUP rows of tiles at a time (L2 reuse: the
// blocks running together share A panels and B panels instead of streaming all of B per row).
__device__ __forceinline__ void grouped_tile(int bid, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
    const int per_group = group * tiles_n;
    const int first_m = (bid / per_group) * group;
    const int size = min(tiles_m - first_m, group);
    tm = first_m + (bid % per_group) % size;
    tn = (bid % per_group) / size;
}

__device__ __forceinline__ float ex2(float x) {  // 2^x in one SFU instruction (-inf -> 0)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
