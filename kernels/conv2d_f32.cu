// Main loop of conv2d's implicit GEMM (kernels/conv2d.py launches it), where K runs over
// (kh, kw, channel) with channels fastest: the group's channel count CG a multiple of BK = 16,
// so a K slice is 16 channels at one tap (every ResNet convolution but the first).
//
// The Numba kernel calls this device function (cuda.declare_device, linked with link-time
// optimisation, so it is inlined) for the K loop of one 64 x 64 output tile (output channels x
// output pixels of one image and group), then runs its own epilogue. As matmul_f32.cu's
// MainLoop: slices staged k-major in shared memory in two buffers, the next slice's global
// loads in flight (in registers) while the current one is multiplied, the inner loop unrolled.
// im2col is never stored: each thread stages the B values of one output pixel (tid % 64),
// whose input row and column it checks once per tap; a padding position is a zero, multiplied
// like any other input (as in TVM).
//
// A block of 16 x 16 threads: thread (ty, tx) owns rows ty * 4 + i and columns tx * 4 + j of
// the tile (matmul.tile_column's map for 64-wide tiles), acc row-major 4 x 4.
// Operands: w is the tile's first output channel row of the (O, CG * KH * KW) weight (OIHW,
// row stride ldw = K), m_left of its rows in the group; x the group's first input channel of
// the image (C x H x W planes). T is float or __half; math is float32.

#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
struct ConvLoop {
    static constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4, LDA = BM + 4;

    float (*As)[BK][LDA];  // As[buffer][k][m], rows padded (see `store`)
    float (*Bs)[BK][BN];  // Bs[buffer][k][p]
    const T *w, *x;
    int ldw, m_left, CG, KHW, KW, H, W, dh, dw, tid;
    long long plane;
    int ih0, iw0;  // this thread's staged pixel's top-left input position
    bool live;     // ... and whether that pixel is in the image (p < P)
    float ra[4], rb[4];

    // Slice s: tap s / (CG / BK), channels c0 .. c0 + 15. A: thread stages k = tid % 16 of rows
    // m = tid / 16 + 16q (a warp reads 2 rows, 16 channels each: one row per k in a warp read
    // 32 rows, 32 cache lines a load, and left L1 85% busy); B: the channels k = tid / 64 + 4q
    // of its pixel.
    __device__ __forceinline__ void load(int s) {
        const int per_tap = CG / BK;
        const int tap = s / per_tap, c0 = (s - tap * per_tap) * BK;
        const int ka = tid % BK, m = tid / BK, k = tid / BN;
#pragma unroll
        for (int q = 0; q < 4; ++q)
            ra[q] = m + 16 * q < m_left ? to_float(w[(long long)(m + 16 * q) * ldw + (long long)(c0 + ka) * KHW + tap]) : 0.f;
        const int kh = tap / KW, kw = tap - kh * KW;
        const int ih = ih0 + kh * dh, iw = iw0 + kw * dw;
        const bool inside = live && ih >= 0 && ih < H && iw >= 0 && iw < W;
        const T* src = x + (long long)(c0 + k) * plane + (long long)ih * W + iw;
#pragma unroll
        for (int q = 0; q < 4; ++q) rb[q] = inside ? to_float(src[4 * q * plane]) : 0.f;
    }

    // A's rows are LDA = 68 floats apart: a warp's 16 k x 2 m stores fall in 16 banks, two each
    // (64 apart, 16 to a bank). B: 32 consecutive pixels of one k.
    __device__ __forceinline__ void store(int buffer) {
        const int ka = tid % BK, m = tid / BK, k = tid / BN, p = tid % BN;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            As[buffer][ka][m + 16 * q] = ra[q];
            Bs[buffer][k + 4 * q][p] = rb[q];
        }
    }

    __device__ __forceinline__ void run(float* acc) {
        const int ty = threadIdx.y, tx = threadIdx.x;
        float c[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) c[i][j] = 0.f;
        const int slices = KHW * (CG / BK);
        load(0);
        store(0);
        __syncthreads();
        for (int t = 0; t < slices; ++t) {
            const bool more = t + 1 < slices;
            if (more) load(t + 1);  // in flight while this slice is multiplied
            const int cur = t & 1;
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                const float4 a = *reinterpret_cast<const float4*>(&As[cur][kk][ty * TM]);
                const float4 b = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx * TN]);
                const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
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

template <typename T>
__device__ __forceinline__ void conv_tile(float* acc, const T* w, int ldw, int m_left, const T* x, int col0, int P,
                                          int OW, int H, int W, int CG, int KHW, int KW, int sh, int sw, int pt,
                                          int pl, int dh, int dw) {
    // Two buffers of both operands, 16.5 KiB (the Numba epilogue's stash takes 16 of the rest of 48).
    __shared__ __align__(16) float As[2][16][68];
    __shared__ __align__(16) float Bs[2][16][64];
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const int p = col0 + tid % 64;
    const int oh = p / OW, ow = p - oh * OW;
    ConvLoop<T> loop{As, Bs, w, x, ldw, m_left, CG, KHW, KW, H, W, dh, dw, tid, (long long)H * W,
                     oh * sh - pt, ow * sw - pl, p < P};
    loop.run(acc);
}

}  // namespace

// C ABI entry points (cuda.declare_device(..., abi="c")); the int result is always 0. w_off and
// x_off: element offsets of the tile's first weight row and of the group's first input channel
// in the image. Sizes are 64-bit (what Numba passes); each fits 32 bits (conv2d.py keeps a K of
// 2^22 and more off the implicit GEMM, and a plane's offsets are 64-bit here).
#define SIMACCEL_CONV_TILE(NAME, T)                                                                                   \
    extern "C" __device__ int NAME(float* acc, const T* w, long long w_off, long long ldw, long long m_left,         \
                                   const T* x, long long x_off, long long col0, long long P, long long OW, long long H, \
                                   long long W, long long CG, long long KHW, long long KW, long long sh, long long sw, \
                                   long long pt, long long pl, long long dh, long long dw) {                          \
        conv_tile<T>(acc, w + w_off, ldw, m_left, x + x_off, col0, P, OW, H, W, CG, KHW, KW, sh, sw, pt, pl, dh, dw); \
        return 0;                                                                                                     \
    }

SIMACCEL_CONV_TILE(simaccel_conv_tile_64_f32, float)
SIMACCEL_CONV_TILE(simaccel_conv_tile_64_f16, __half)
