// Tensor-core main loop of the float16 matmul (kernels/tensor_core.py launches it).
//
// The one piece of the accelerator written in CUDA C++: Numba has no access to the `mma`,
// `wgmma` and `ldmatrix` instructions, so the Numba kernel calls this device function
// (cuda.declare_device, linked with link-time optimisation, so it is inlined) for the K loop of
// one 128 x 128 output tile, and applies bias, activation and the bounds-checked store itself.
//
// A block of 256 threads walks K in slices of 32. Slices are copied global -> shared with
// cp.async, three in flight, into XOR-swizzled rows of 16-byte chunks. Then, by target:
// - sm_90a (H100, H200; the arch-specific target, __CUDA_ARCH_FEAT_SM90_ALL): each of the two
//   warpgroups multiplies its 64 rows by the whole slice with wgmma.m64n128k16 straight from
//   shared memory (f16 in, f32 accumulate), the swizzles being wgmma's own 64-byte (K-major
//   rows) and 128-byte (the (K, N) form's N-major rows) modes;
// - sm_80 ... (and sm_90's portable PTX): 8 warps, 2 along M x 4 along N, each a 64 x 32
//   piece, read the slice with ldmatrix and multiply with mma.m16n8k16.
//
// acc (64 floats per thread) is handed back in the instruction's own register order, and
// simaccel_mma_cell(i) says which element of the tile acc[i] is (the epilogue asks it; both
// come from one compile, so they always agree). For mma.sync, acc[((mi * 4 + ni) * 4 + r)]
// holds the warp's m16 tile mi (0..3), n8 tile ni (0..3), C register r (0..3):
//   row = warp_m * 64 + mi * 16 + lane / 4 + 8 * (r / 2)
//   col = warp_n * 32 + ni * 8 + 2 * (lane % 4) + r % 2
// with warp = threadIdx.x / 32, warp_m = warp / 4, warp_n = warp % 4 (tensor_core.py's
// `fragment_position`, the simulator's layout). For wgmma, acc[i] is register i of
// m64n128's accumulator: row = warp * 16 + lane / 4 + 8 * (i / 2 % 2), col = i / 4 * 8 + 2 * (lane % 4) + i % 2.
//
// Operands: a is the tile's first row (row-major, leading dimension lda, m_left valid rows);
// b is the tile's first column, either (N, K) row-major (`_nk`: the dense form, B^T) or
// (K, N) row-major (`_kn`: ldmatrix.trans / wgmma's transposed B), leading dimension ldb,
// n_left valid columns. 16-byte copies need 16-byte aligned rows: where a pointer or a
// leading dimension is not (K or N not a multiple of 8, or a view at an odd offset), slices
// are staged with element loads instead, with the same bounds.

#include <cuda_fp16.h>

namespace {

#if __CUDA_ARCH__ >= 800  // cp.async and mma.m16n8k16

using uint32_t = unsigned int;

constexpr int BM = 128, BK = 32, STAGES = 3, THREADS = 256;  // tiles are BM x BM, 8 warps
constexpr int CHUNKS = BM * BK / 8;  // 16-byte chunks per operand slice (512)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
    // src-size 0 fills the 16 bytes with zeros and reads nothing.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void wait_groups() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Chunk (row, c) of a slice stored as rows of 4 chunks (32 halves): swizzled by row / 2.
__device__ __forceinline__ int rows_of_4(int row, int c) { return row * 4 + (c ^ ((row >> 1) & 3)); }

// Stage a slice of `rows` x 32 halves (row-major source, rows along M or N, K along the row)
// starting at column k0: 2 chunks per thread.
template <bool kFast>
__device__ __forceinline__ void stage_rows(uint4* dst, const __half* src, int ld, int rows_left, int k0, int K,
                                           int tid) {
#pragma unroll
    for (int i = 0; i < CHUNKS / THREADS; ++i) {
        const int q = tid + i * THREADS, row = q >> 2, c = q & 3, k = k0 + c * 8;
        uint4* d = dst + rows_of_4(row, c);
        if (kFast) {
            const bool valid = row < rows_left && k < K;
            copy16(d, valid ? src + (long long)row * ld + k : src, valid);
        } else {
            __align__(16) __half v[8];  // stored as one 16-byte chunk
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = (row < rows_left && k + e < K) ? src[(long long)row * ld + k + e] : __float2half(0.0f);
            *d = *reinterpret_cast<uint4*>(v);
        }
    }
}

// Chunk (k, c) of a (K, N) slice of 32 k rows x 128 halves, for ldmatrix.trans: k rows of 16
// chunks swizzled by k.
__device__ __forceinline__ int rows_of_16(int k, int c) { return k * 16 + (c ^ (k & 7)); }
// The same for wgmma's N-major B: two 64-column halves, each 32 k rows of 128 bytes (8 chunks)
// swizzled by k, wgmma's 128-byte mode (atoms of 8 rows, 1024 bytes).
__device__ __forceinline__ int n_major_128b(int k, int c) { return (c >> 3) * 256 + k * 8 + ((c & 7) ^ (k & 7)); }

// Stage a slice of 32 k rows x 128 halves of a (K, N) row-major source from row k0, in the
// layout of `rows_of_16`, or with kNMajor of `n_major_128b`.
template <bool kFast, bool kNMajor>
__device__ __forceinline__ void stage_k_rows(uint4* dst, const __half* src, int ld, int n_left, int k0, int K,
                                             int tid) {
#pragma unroll
    for (int i = 0; i < CHUNKS / THREADS; ++i) {
        const int q = tid + i * THREADS, k = q >> 4, c = q & 15, n = c * 8;
        uint4* d = dst + (kNMajor ? n_major_128b(k, c) : rows_of_16(k, c));
        if (kFast) {
            const bool valid = k0 + k < K && n < n_left;
            copy16(d, valid ? src + (long long)(k0 + k) * ld + n : src, valid);
        } else {
            __align__(16) __half v[8];  // stored as one 16-byte chunk
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = (k0 + k < K && n + e < n_left) ? src[(long long)(k0 + k) * ld + n + e] : __float2half(0.0f);
            *d = *reinterpret_cast<uint4*>(v);
        }
    }
}

// Both operands' slice from k0 into stage buffers sa, sb (the (K, N) form of B as stage_k_rows).
template <bool kTransB, bool kFast, bool kNMajor>
__device__ __forceinline__ void stage_slice(uint4* sa, uint4* sb, const __half* a, int lda, const __half* b, int ldb,
                                            int m_left, int n_left, int k0, int K, int tid) {
    stage_rows<kFast>(sa, a, lda, m_left, k0, K, tid);
    if (kTransB)
        stage_rows<kFast>(sb, b, ldb, n_left, k0, K, tid);
    else
        stage_k_rows<kFast, kNMajor>(sb, b, ldb, n_left, k0, K, tid);
}

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)  // mma.sync: sm_80 ... and sm_90's portable PTX

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool kTransB, bool kFast>
__device__ __forceinline__ void main_loop(uint4 (&sa)[STAGES][CHUNKS], uint4 (&sb)[STAGES][CHUNKS], float* acc,
                                          const __half* a, int lda, const __half* b, int ldb, int m_left, int n_left,
                                          int K) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp >> 2, warp_n = warp & 3;
    float c[4][4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) c[mi][ni][r] = 0.0f;

    auto stage = [&](int s, int k0) {
        stage_slice<kTransB, kFast, false>(sa[s], sb[s], a, lda, b, ldb, m_left, n_left, k0, K, tid);
    };

    const int slices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) stage(s, s * BK);
        commit();  // an empty group past the last slice keeps the wait count uniform
    }
    for (int t = 0; t < slices; ++t) {
        wait_groups<STAGES - 2>();
        __syncthreads();  // slice t is in; every warp is done with slice t - 1's buffer
        const int next = t + STAGES - 1;
        if (next < slices) stage(next % STAGES, next * BK);
        commit();
        const uint4* A = sa[t % STAGES];
        const uint4* B = sb[t % STAGES];
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t af[4][4], bf[2][4];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                const int row = warp_m * 64 + mi * 16 + (lane & 15);
                ldmatrix_x4(af[mi], A + rows_of_4(row, kk * 2 + (lane >> 4)));
            }
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int m = lane >> 3;  // which 8x8 matrix this lane addresses
                if (kTransB) {
                    const int n = warp_n * 32 + p * 16 + (m >> 1) * 8 + (lane & 7);
                    ldmatrix_x4(bf[p], B + rows_of_4(n, kk * 2 + (m & 1)));
                } else {
                    const int k = kk * 16 + (m & 1) * 8 + (lane & 7);
                    ldmatrix_x4_trans(bf[p], B + rows_of_16(k, (warp_n * 32 + p * 16) / 8 + (m >> 1)));
                }
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma16816(c[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
        }
    }
    wait_groups<0>();
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[(mi * 4 + ni) * 4 + r] = c[mi][ni][r];
}

#else  // wgmma: sm_90a only

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (all
// >> 4) and the swizzle mode (1: 128-byte, 2: 64-byte), base offset 0 (atoms are aligned).
__device__ __forceinline__ unsigned long long descriptor(const void* p, int lbo, int sbo, int swizzle) {
    return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
           (unsigned long long)(sbo >> 4) << 32 | (unsigned long long)swizzle << 62;
}

#define SIMACCEL_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                       "+f"(d[i + 6]), "+f"(d[i + 7])

// d += A (64 x 16, K-major) * B (16 x 128; kTransB: N-major) for this warpgroup.
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], unsigned long long a, unsigned long long b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
        "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
        "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, 0, %66;\n"
        : SIMACCEL_D8(0), SIMACCEL_D8(8), SIMACCEL_D8(16), SIMACCEL_D8(24), SIMACCEL_D8(32), SIMACCEL_D8(40),
          SIMACCEL_D8(48), SIMACCEL_D8(56)
        : "l"(a), "l"(b), "n"(kTransB));
}

#undef SIMACCEL_D8

// The accumulators are written by wgmma asynchronously, behind the compiler's back: this pins
// every one of them at this point (no read moved above the wait, no write below the fence).
__device__ __forceinline__ void fence_registers(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same entry as mma.sync's main_loop above, which this one replaces on sm_90a.
template <bool kTransB, bool kFast>
__device__ __forceinline__ void main_loop(uint4 (&sa)[STAGES][CHUNKS], uint4 (&sb)[STAGES][CHUNKS], float* acc,
                                                const __half* a, int lda, const __half* b, int ldb, int m_left,
                                                int n_left, int K) {
    const int tid = threadIdx.x, group = tid >> 7;  // warpgroup 0 or 1: rows 64 * group ...
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;

    auto stage = [&](int s, int k0) {
        stage_slice<kTransB, kFast, true>(sa[s], sb[s], a, lda, b, ldb, m_left, n_left, k0, K, tid);
    };

    const int slices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) stage(s, s * BK);
        commit();
    }
    // Slice t's wgmma runs while the block waits for slice t + 1 and stages slice t + 2: it
    // is waited for (wait_group 1) only when slice t + 1's has been issued behind it.
    for (int t = 0; t < slices; ++t) {
        wait_groups<STAGES - 2>();
        // This thread's copies of slice t, made by the generic proxy, seen by wgmma's async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // slice t is in
        const char* A = reinterpret_cast<const char*>(sa[t % STAGES]) + group * 64 * 64;  // 64 rows of 64 bytes
        const char* B = reinterpret_cast<const char*>(sb[t % STAGES]);
        fence_registers(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            // K-major, 64-byte swizzle: 8-row groups 512 bytes apart, k16 steps 32 bytes in.
            const unsigned long long da = descriptor(A + kk * 32, 16, 512, 2);
            const unsigned long long db = kTransB ? descriptor(B + kk * 32, 16, 512, 2)
                                                  // N-major, 128-byte swizzle: the two 64-column
                                                  // halves 4096 bytes apart, 8-k groups 1024.
                                                  : descriptor(B + kk * 16 * 128, 4096, 1024, 1);
            wgmma_m64n128k16<kTransB ? 0 : 1>(d, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // slice t - 1's is done
        fence_registers(d);
        __syncthreads();  // both warpgroups are done with slice t - 1's buffer
        const int next = t + STAGES - 1;
        if (next < slices) stage(next % STAGES, next * BK);
        commit();
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_registers(d);
    wait_groups<0>();
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = d[i];
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#else

// GPUs before sm_80 (no cp.async, no m16n8k16): each thread computes its 64 outputs of the same
// layout with float32 FMAs straight from global memory. Correct, not fast.
template <bool kTransB>
__device__ __forceinline__ void tile_without_tensor_cores(float* acc, const __half* a, int lda, const __half* b,
                                                          int ldb, int m_left, int n_left, int K) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = 0; i < 64; ++i) {
        const int mi = i >> 4, ni = (i >> 2) & 3, r = i & 3;
        const int row = (warp >> 2) * 64 + mi * 16 + (lane >> 2) + 8 * (r >> 1);
        const int col = (warp & 3) * 32 + ni * 8 + 2 * (lane & 3) + (r & 1);
        float sum = 0.0f;
        if (row < m_left && col < n_left)
            for (int k = 0; k < K; ++k)
                sum += __half2float(a[(long long)row * lda + k]) *
                       __half2float(kTransB ? b[(long long)col * ldb + k] : b[(long long)k * ldb + col]);
        acc[i] = sum;
    }
}

#endif

template <bool kTransB>
__device__ __forceinline__ void tile(float* acc, const __half* a, int lda, const __half* b, int ldb, int m_left,
                                     int n_left, int K) {
#if __CUDA_ARCH__ < 800
    tile_without_tensor_cores<kTransB>(acc, a, lda, b, ldb, m_left, n_left, K);
#else
    // 48 KiB, the most a block may declare statically; both paths share it. Aligned to 1024
    // bytes: wgmma's swizzle atoms (512 and 1024 bytes) start on their own boundaries.
    __shared__ __align__(1024) uint4 sa[STAGES][CHUNKS];
    __shared__ __align__(1024) uint4 sb[STAGES][CHUNKS];
    const bool aligned = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0 &&
                         lda % 8 == 0 && ldb % 8 == 0;
    if (aligned)  // mma.sync's main loop, or on sm_90a wgmma's
        main_loop<kTransB, true>(sa, sb, acc, a, lda, b, ldb, m_left, n_left, K);
    else
        main_loop<kTransB, false>(sa, sb, acc, a, lda, b, ldb, m_left, n_left, K);
#endif
}

}  // namespace

// C ABI entry points (cuda.declare_device(..., abi="c")); the int result is always 0.
// a_off / b_off: element offsets of the tile's first row / column in a / b. Sizes are 64-bit
// (what Numba passes); a tile's sizes and a matrix's K and N fit 32 bits (launch_matmul
// sends larger ones to the CUDA-core kernel).
extern "C" __device__ int simaccel_mma_tile_nk(float* acc, const __half* a, long long a_off, long long lda,
                                               const __half* b, long long b_off, long long ldb,
                                               long long m_left, long long n_left, long long K) {
    tile<true>(acc, a + a_off, lda, b + b_off, ldb, m_left, n_left, K);
    return 0;
}

extern "C" __device__ int simaccel_mma_tile_kn(float* acc, const __half* a, long long a_off, long long lda,
                                               const __half* b, long long b_off, long long ldb,
                                               long long m_left, long long n_left, long long K) {
    tile<false>(acc, a + a_off, lda, b + b_off, ldb, m_left, n_left, K);
    return 0;
}

// Which element of the tile this thread's accumulator i is, as row * 128 + column: the layout
// of the main loop compiled beside it (see the top of this file).
extern "C" __device__ int simaccel_mma_cell(long long i) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = (int)i & 3;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int row = warp * 16 + (lane >> 2) + 8 * (r >> 1);
    const int col = ((int)i >> 2) * 8 + 2 * (lane & 3) + (r & 1);
#else
    const int mi = (int)i >> 4, ni = ((int)i >> 2) & 3;
    const int row = (warp >> 2) * 64 + mi * 16 + (lane >> 2) + 8 * (r >> 1);
    const int col = (warp & 3) * 32 + ni * 8 + 2 * (lane & 3) + (r & 1);
#endif
    return row * 128 + col;
}
