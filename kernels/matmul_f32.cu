// float32 main loop of the matmul kernels (kernels/matmul.py launches them).
//
// The Numba kernel calls this device function (cuda.declare_device, linked with link-time
// optimisation, so it is inlined) for the K loop of one output tile, then runs its own epilogue
// (bias, activation, bounds-checked store). C++ here, not Numba, for two things NVVM does not
// do with Numba's code: unroll the inner loop over a K slice, and keep the next slice's global
// loads in flight while the current one is multiplied (double buffering).
//
// A block of 16 x 16 threads (threadIdx.x = tx, threadIdx.y = ty, as the Numba kernel launches
// it) computes a BM x BN tile in K slices of BK: TM = BM / 16 rows by TN = BN / 16 columns per
// thread, rows ty * TM + i, columns (j / 4) * 64 + tx * 4 + j % 4 (runs of 4: one 16-byte shared
// load each; matmul.tile_steps' `column` is the same map). acc is row-major TM x TN.
// Slices are staged k-major in shared memory (A transposed), two buffers: while the block
// multiplies one, each thread holds its share of the next in registers.
//
// Operands as in tensor_core.cu: a is the tile's first row (row-major, leading dimension lda,
// m_left valid rows); b its first column, (N, K) row-major (`_nk`, the dense form) or (K, N)
// row-major (`_kn`), leading dimension ldb, n_left valid columns. 16-byte loads need 16-byte
// aligned rows; where a pointer or a leading dimension is not (K or N not a multiple of 4, a
// view at an odd offset) elements are loaded one by one, with the same bounds.

#include "sliced_k.cuh"

namespace {

template <int BM, int BN, int BK, bool kTransB, bool kFast>
struct MainLoop {
    static constexpr int TM = BM / 16, TN = BN / 16;
    static constexpr int PER_THREAD = BM * BK / 256;  // elements of a slice each thread stages
    static_assert(BM == BN && PER_THREAD == 4 && TN % 4 == 0, "one float4 of A and of B per thread");

    float (*As)[BK][BM];  // As[buffer][k][m]
    float (*Bs)[BK][BN];  // Bs[buffer][k][n]
    const float *a, *b;
    int lda, ldb, m_left, n_left, K, tid;
    float ra[4], rb[4];

    // Rows along M (A) or N (the dense form's B), 4 consecutive k: thread t takes row t / (BK/4).
    __device__ __forceinline__ void load_rows(float (&r)[4], const float* src, int ld, int rows_left, int k0) const {
        const int row = tid / (BK / 4), k = k0 + (tid % (BK / 4)) * 4;
        if (kFast) {
            const float4 v = row < rows_left && k < K ? *reinterpret_cast<const float4*>(src + (long long)row * ld + k)
                                                      : make_float4(0.f, 0.f, 0.f, 0.f);
            r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
        } else {
#pragma unroll
            for (int q = 0; q < 4; ++q) r[q] = row < rows_left && k + q < K ? src[(long long)row * ld + k + q] : 0.f;
        }
    }

    __device__ __forceinline__ void store_rows(float (*dst)[BM], const float (&r)[4]) const {
        const int row = tid / (BK / 4), k = (tid % (BK / 4)) * 4;
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[k + q][row] = r[q];
    }

    // B (K, N): 4 consecutive n of one k row: thread t takes k row t / (BN/4).
    __device__ __forceinline__ void load_k_row(int k0) {
        const int k = k0 + tid / (BN / 4), n = (tid % (BN / 4)) * 4;
        if (kFast) {
            const float4 v = k < K && n < n_left ? *reinterpret_cast<const float4*>(b + (long long)k * ldb + n)
                                                 : make_float4(0.f, 0.f, 0.f, 0.f);
            rb[0] = v.x, rb[1] = v.y, rb[2] = v.z, rb[3] = v.w;
        } else {
#pragma unroll
            for (int q = 0; q < 4; ++q) rb[q] = k < K && n + q < n_left ? b[(long long)k * ldb + n + q] : 0.f;
        }
    }

    __device__ __forceinline__ void load(int k0) {
        load_rows(ra, a, lda, m_left, k0);
        if (kTransB)
            load_rows(rb, b, ldb, n_left, k0);
        else
            load_k_row(k0);
    }

    __device__ __forceinline__ void store(int buffer) {
        store_rows(As[buffer], ra);
        if (kTransB) {
            store_rows(Bs[buffer], rb);
        } else {
            const int k = tid / (BN / 4), n = (tid % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[buffer][k][n]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
        }
    }

    __device__ __forceinline__ void run(float* acc) {
        const int ty = threadIdx.y, tx = threadIdx.x;
        float c[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) c[i][j] = 0.f;
        const int slices = (K + BK - 1) / BK;
        load(0);
        store(0);
        __syncthreads();
        for (int t = 0; t < slices; ++t) {
            const bool more = t + 1 < slices;
            if (more) load((t + 1) * BK);  // in flight while this slice is multiplied
            const int cur = t & 1;
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                float av[TM], bv[TN];
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&As[cur][kk][ty * TM + i]);
                    av[i] = v.x, av[i + 1] = v.y, av[i + 2] = v.z, av[i + 3] = v.w;
                }
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][kk][(j / 4) * 64 + tx * 4]);
                    bv[j] = v.x, bv[j + 1] = v.y, bv[j + 2] = v.z, bv[j + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) c[i][j] = fmaf(av[i], bv[j], c[i][j]);
            }
            if (more) store(cur ^ 1);  // the other buffer: last read before the previous barrier
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i * TN + j] = c[i][j];
    }
};

template <int BM, int BK, bool kTransB>
__device__ __forceinline__ void tile(float* acc, const float* a, int lda, const float* b, int ldb, int m_left,
                                     int n_left, int K) {
    // Two buffers of both operands, 16 KiB (the Numba epilogue's stash takes the rest of 48).
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BM];
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0 &&
                         lda % 4 == 0 && ldb % 4 == 0;
    if (aligned) {
        MainLoop<BM, BM, BK, kTransB, true> loop{As, Bs, a, b, lda, ldb, m_left, n_left, K, tid};
        loop.run(acc);
    } else {
        MainLoop<BM, BM, BK, kTransB, false> loop{As, Bs, a, b, lda, ldb, m_left, n_left, K, tid};
        loop.run(acc);
    }
}


// Sliced K, for GEMMs that 64 x 64 tiles leave the GPU idle on (a few tiles, each a long chain
// of K slices: a pointwise convolution of a 7 x 7 stage, a batch-1 linear layer). A block of
// 256 threads computes a 32 x 32 tile as GROUPS = 4 groups of 64 threads (g = tid / 64), group
// g taking K slices g, g + 4, g + 8, ...: four times the blocks of the 64 x 64 tiling and a
// quarter of the chain each. Thread l = tid % 64 of a group owns 4 x 4 outputs, rows
// (l / 8) * 4 + i and columns (l % 8) * 4 + j. Every group runs the same number of rounds
// (slices past K load zeros), so the block barriers stay uniform. At the end the groups' sums
// are added in group order (deterministic) into `out`, the Numba kernel's shared 32 x LD tile,
// from which it runs the epilogue.
template <int BK, bool kTransB, bool kFast>
struct SlicedLoop {
    static constexpr int T = 32, GROUPS = 4, LD = 33;
    static_assert(T * BK / 64 == 8, "two float4 of A and of B per thread and slice");

    float (*As)[2][BK][T];  // As[group][buffer][k][m]
    float (*Bs)[2][BK][T];  // Bs[group][buffer][k][n]
    const float *a, *b;
    int lda, ldb, m_left, n_left, K, g, l;
    float ra[8], rb[8];

    __device__ __forceinline__ float4 load4(const float* src, long long at, bool ok) const {
        return ok ? *reinterpret_cast<const float4*>(src + at) : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    // 8 consecutive k of one row (A, or the dense form's B): thread l takes row l / 2.
    __device__ __forceinline__ void load_rows(float (&r)[8], const float* src, int ld, int rows_left, int k0) const {
        const int row = l / 2, k = k0 + (l % 2) * 8;
        if (kFast) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float4 v = load4(src, (long long)row * ld + k + 4 * h, row < rows_left && k + 4 * h < K);
                r[4 * h] = v.x, r[4 * h + 1] = v.y, r[4 * h + 2] = v.z, r[4 * h + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int q = 0; q < 8; ++q) r[q] = row < rows_left && k + q < K ? src[(long long)row * ld + k + q] : 0.f;
        }
    }

    // B (K, N): 8 consecutive n of one k row: thread l takes k row l / 4.
    __device__ __forceinline__ void load_k_row(int k0) {
        const int k = k0 + l / 4, n = (l % 4) * 8;
        if (kFast) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float4 v = load4(b, (long long)k * ldb + n + 4 * h, k < K && n + 4 * h < n_left);
                rb[4 * h] = v.x, rb[4 * h + 1] = v.y, rb[4 * h + 2] = v.z, rb[4 * h + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int q = 0; q < 8; ++q) rb[q] = k < K && n + q < n_left ? b[(long long)k * ldb + n + q] : 0.f;
        }
    }

    __device__ __forceinline__ void load(int k0) {
        load_rows(ra, a, lda, m_left, k0);
        if (kTransB)
            load_rows(rb, b, ldb, n_left, k0);
        else
            load_k_row(k0);
    }

    __device__ __forceinline__ void store(int buffer) {
        const int row = l / 2, k = (l % 2) * 8;
#pragma unroll
        for (int q = 0; q < 8; ++q) As[g][buffer][k + q][row] = ra[q];
        if (kTransB) {
#pragma unroll
            for (int q = 0; q < 8; ++q) Bs[g][buffer][k + q][row] = rb[q];
        } else {
            const int kr = l / 4, n = (l % 4) * 8;
            *reinterpret_cast<float4*>(&Bs[g][buffer][kr][n]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
            *reinterpret_cast<float4*>(&Bs[g][buffer][kr][n + 4]) = make_float4(rb[4], rb[5], rb[6], rb[7]);
        }
    }

    __device__ __forceinline__ void run(float* out) {
        const int ty = l / 8, tx = l % 8;
        float c[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) c[i][j] = 0.f;
        const int slices = (K + BK - 1) / BK, rounds = (slices + GROUPS - 1) / GROUPS;
        load(g * BK);
        store(0);
        __syncthreads();
        for (int r = 0; r < rounds; ++r) {
            const bool more = r + 1 < rounds;
            if (more) load(((r + 1) * GROUPS + g) * BK);  // in flight while this slice is multiplied
            const int cur = r & 1;
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                const float4 av = *reinterpret_cast<const float4*>(&As[g][cur][kk][ty * 4]);
                const float4 bv = *reinterpret_cast<const float4*>(&Bs[g][cur][kk][tx * 4]);
                const float x[4] = {av.x, av.y, av.z, av.w}, y[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) c[i][j] = fmaf(x[i], y[j], c[i][j]);
            }
            if (more) store(cur ^ 1);
            __syncthreads();
        }
        add_groups_in_order<GROUPS, LD>(out, c, g, ty, tx);
    }
};

template <bool kTransB>
__device__ __forceinline__ void sliced(float* out, const float* a, int lda, const float* b, int ldb, int m_left,
                                       int n_left, int K) {
    constexpr int BK = 16, T = 32, GROUPS = 4;
    __shared__ __align__(16) float As[GROUPS][2][BK][T];  // 16 KiB
    __shared__ __align__(16) float Bs[GROUPS][2][BK][T];  // 16 KiB
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0 &&
                         lda % 4 == 0 && ldb % 4 == 0;
    if (aligned) {
        SlicedLoop<BK, kTransB, true> loop{As, Bs, a, b, lda, ldb, m_left, n_left, K, tid / 64, tid % 64};
        loop.run(out);
    } else {
        SlicedLoop<BK, kTransB, false> loop{As, Bs, a, b, lda, ldb, m_left, n_left, K, tid / 64, tid % 64};
        loop.run(out);
    }
}


}  // namespace

// C ABI entry points (cuda.declare_device(..., abi="c")), one per tiling and form of B; the int
// result is always 0. a_off / b_off: element offsets of the tile's first row / column. Sizes
// are 64-bit (what Numba passes); a tile's sizes and a matrix's K and N fit 32 bits
// (launch_matmul keeps larger ones on the Numba main loop).
#define SIMACCEL_F32_TILE(NAME, BM, BK, TRANS)                                                                        \
    extern "C" __device__ int NAME(float* acc, const float* a, long long a_off, long long lda, const float* b,        \
                                   long long b_off, long long ldb, long long m_left, long long n_left, long long K) { \
        tile<BM, BK, TRANS>(acc, a + a_off, lda, b + b_off, ldb, m_left, n_left, K);                                  \
        return 0;                                                                                                     \
    }

SIMACCEL_F32_TILE(simaccel_f32_tile_128_nk, 128, 8, true)
SIMACCEL_F32_TILE(simaccel_f32_tile_128_kn, 128, 8, false)
SIMACCEL_F32_TILE(simaccel_f32_tile_64_nk, 64, 16, true)
SIMACCEL_F32_TILE(simaccel_f32_tile_64_kn, 64, 16, false)

// The sliced-K kernel's: `acc` is the block's shared result tile (32 x 33; every thread of the
// block calls this, and the tile is complete when it returns). The GEMV's is gemv.cu.
#define SIMACCEL_F32_SHARED_TILE(NAME, LOOP, TRANS)                                                                   \
    extern "C" __device__ int NAME(float* acc, const float* a, long long a_off, long long lda, const float* b,        \
                                   long long b_off, long long ldb, long long m_left, long long n_left, long long K) { \
        LOOP<TRANS>(acc, a + a_off, lda, b + b_off, ldb, m_left, n_left, K);                                          \
        return 0;                                                                                                     \
    }

SIMACCEL_F32_SHARED_TILE(simaccel_f32_sliced_32_nk, sliced, true)
SIMACCEL_F32_SHARED_TILE(simaccel_f32_sliced_32_kn, sliced, false)
