// GEMV main loop of the matmul kernels (kernels/matmul.py launches it), for GEMMs of at most
// 4 rows: a batch-1 linear layer, a classifier, a decoder's step. float32, float16 and
// bfloat16 operands, float32 sums.
//
// Nothing is reused across rows, so what counts is streaming B once with enough loads in
// flight. A block of 256 threads computes a 4 x 8 tile (8 columns: four times the blocks of a
// 32-column tile, so a 1000-way classifier fills the GPU) and leaves it in `out`, the Numba
// kernel's shared 4 x 8 float32 tile. Sums are reduced in a fixed order (deterministic).
// - B (N, K), the dense form: warp w takes column w, its lanes consecutive k, 16 bytes each
//   where aligned (4 float32 or 8 16-bit values), then a shuffle reduction.
// - B (K, N): thread t takes k rows and 16 bytes of the tile's 8 columns (float32: k rows
//   t / 2 + 128 i and 4 columns (t % 2) * 4..; 16-bit: k rows t + 256 i and all 8 columns);
//   element by element where unaligned (k rows t / 8 + 32 i, column t % 8). The lanes of a
//   warp that share columns are reduced by shuffles, the 8 warps through shared memory.
// 16-byte loads need 16-byte aligned rows; where a pointer or a leading dimension is not (K or
// N not a multiple of 16 bytes, a view at an odd offset) elements are loaded one by one.

#include "mma.cuh"  // Element<T>: the 16-bit operand types' float32 values

namespace {

constexpr int GEMV_ROWS = 4, GEMV_COLS = 8;

// The operand types: how many make 16 bytes, and their float32 values.
template <typename T>
constexpr int kVector = 16 / sizeof(T);

__device__ __forceinline__ float value(float x) { return x; }
template <typename T>
__device__ __forceinline__ float value(T x) { return Element<T>::value(x); }

template <typename T>  // the kVector<T> values of the 16 bytes at p (16-byte aligned), as float32
__device__ __forceinline__ void load_vector(const T* p, float (&v)[kVector<T>]) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const T* x = reinterpret_cast<const T*>(&q);
#pragma unroll
    for (int i = 0; i < kVector<T>; ++i) v[i] = value(x[i]);
}

template <typename T, int WIDTH>  // the first `left` of WIDTH elements at p, zeros after
__device__ __forceinline__ void load_elements(const T* p, float (&v)[WIDTH], int left) {
#pragma unroll
    for (int q = 0; q < WIDTH; ++q) v[q] = q < left ? value(p[q]) : 0.f;
}

__device__ __forceinline__ float warp_sum(float v, int from) {  // over lanes that differ in bits >= `from`
#pragma unroll
    for (int offset = 16; offset >= from; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T, bool kFast>
__device__ __forceinline__ void gemv_nk(float* out, const T* a, int lda, const T* b, int ldb, int m_left, int n_left,
                                        int K) {
    constexpr int V = kVector<T>;
    const int warp = (threadIdx.y * 16 + threadIdx.x) / 32, lane = threadIdx.x + (threadIdx.y % 2) * 16;
    float c[GEMV_ROWS] = {0.f, 0.f, 0.f, 0.f};
    if (warp < n_left) {
        const T* w = b + (long long)warp * ldb;
        if (kFast) {
#pragma unroll 4
            for (int k = lane * V; k < K; k += 32 * V) {
                float wv[V], x[V];
                load_vector(w + k, wv);
#pragma unroll
                for (int r = 0; r < GEMV_ROWS; ++r)
                    if (r < m_left) {
                        load_vector(a + (long long)r * lda + k, x);
#pragma unroll
                        for (int q = 0; q < V; ++q) c[r] = fmaf(x[q], wv[q], c[r]);
                    }
            }
        } else {
#pragma unroll 4
            for (int k = lane; k < K; k += 32) {
                const float wk = value(w[k]);
#pragma unroll
                for (int r = 0; r < GEMV_ROWS; ++r)
                    if (r < m_left) c[r] = fmaf(value(a[(long long)r * lda + k]), wk, c[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; ++r) c[r] = warp_sum(c[r], 1);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r) out[r * GEMV_COLS + warp] = c[r];
    }
    __syncthreads();
}

template <typename T, bool kFast>
__device__ __forceinline__ void gemv_kn(float* out, const T* a, int lda, const T* b, int ldb, int m_left, int n_left,
                                        int K) {
    constexpr int WIDTH = kFast ? kVector<T> : 1, PER_ROW = GEMV_COLS / WIDTH, STEP = 256 / PER_ROW;
    __shared__ float partial[8][GEMV_ROWS][GEMV_COLS];
    const int tid = threadIdx.y * 16 + threadIdx.x, warp = tid / 32;
    const int n = (tid % PER_ROW) * WIDTH;
    float c[GEMV_ROWS][WIDTH] = {};
#pragma unroll 4
    for (int k = tid / PER_ROW; k < K; k += STEP) {
        float w[WIDTH];
        const T* row = b + (long long)k * ldb + n;
        if constexpr (kFast) {
            if (n + WIDTH <= n_left)
                load_vector(row, w);
            else
                load_elements(row, w, n_left - n);
        } else {
            load_elements(row, w, n_left - n);
        }
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r)
            if (r < m_left) {
                const float x = value(a[(long long)r * lda + k]);
#pragma unroll
                for (int q = 0; q < WIDTH; ++q) c[r][q] = fmaf(x, w[q], c[r][q]);
            }
    }
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; ++r)
#pragma unroll
        for (int q = 0; q < WIDTH; ++q) c[r][q] = warp_sum(c[r][q], PER_ROW);
    if (tid % 32 < PER_ROW) {
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r)
#pragma unroll
            for (int q = 0; q < WIDTH; ++q) partial[warp][r][n + q] = c[r][q];
    }
    __syncthreads();
    if (tid < GEMV_ROWS * GEMV_COLS) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w) sum += partial[w][tid / GEMV_COLS][tid % GEMV_COLS];
        out[tid] = sum;
    }
    __syncthreads();
}

template <typename T, bool kTransB>
__device__ __forceinline__ void gemv(float* out, const T* a, int lda, const T* b, int ldb, int m_left, int n_left,
                                     int K) {
    constexpr int V = kVector<T>;
    const bool aligned = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0 &&
                         lda % V == 0 && ldb % V == 0;
    if (kTransB) {
        if (aligned)
            gemv_nk<T, true>(out, a, lda, b, ldb, m_left, n_left, K);
        else
            gemv_nk<T, false>(out, a, lda, b, ldb, m_left, n_left, K);
    } else {
        if (aligned)
            gemv_kn<T, true>(out, a, lda, b, ldb, m_left, n_left, K);
        else
            gemv_kn<T, false>(out, a, lda, b, ldb, m_left, n_left, K);
    }
}

}  // namespace

// C ABI entry points (cuda.declare_device(..., abi="c")), one per operand type and form of B,
// with the float32 main loops' arguments (matmul_f32.cu): `acc` is the block's shared 4 x 8
// result tile (every thread of the block calls this, and the tile is complete when it
// returns); a_off / b_off: element offsets of the tile's first row / column; the int result is
// always 0.
#define SIMACCEL_GEMV(NAME, T, TRANS)                                                                                 \
    extern "C" __device__ int NAME(float* acc, const T* a, long long a_off, long long lda, const T* b,                \
                                   long long b_off, long long ldb, long long m_left, long long n_left, long long K) { \
        gemv<T, TRANS>(acc, a + a_off, lda, b + b_off, ldb, m_left, n_left, K);                                       \
        return 0;                                                                                                     \
    }

SIMACCEL_GEMV(simaccel_f32_gemv_nk, float, true)
SIMACCEL_GEMV(simaccel_f32_gemv_kn, float, false)
SIMACCEL_GEMV(simaccel_f16_gemv_nk, __half, true)
SIMACCEL_GEMV(simaccel_f16_gemv_kn, __half, false)
SIMACCEL_GEMV(simaccel_bf16_gemv_nk, __nv_bfloat16, true)
SIMACCEL_GEMV(simaccel_bf16_gemv_kn, __nv_bfloat16, false)
