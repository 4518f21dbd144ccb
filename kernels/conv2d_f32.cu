// Main loops of conv2d's implicit GEMM (kernels/conv2d.py launches them), where K runs over
// (kh, kw, channel) with channels fastest: the group's channel count CG a multiple of BK = 16,
// so a K slice is 16 channels at one tap (every ResNet convolution but the first).
//
// The Numba kernel calls one of these device functions (cuda.declare_device, linked with
// link-time optimisation, so it is inlined) for the K loop of one output tile (output channels x
// output pixels of one image and group), then runs its own epilogue. As matmul_f32.cu's loops:
// slices staged k-major in shared memory in two buffers, the next slice's global loads in
// flight (in registers) while the current one is multiplied, the inner loop unrolled. im2col
// is never stored: each thread stages the B values of one output pixel, whose input row and
// column it checks once per slice; a padding position is a zero, multiplied like any other
// input (as in TVM). On the H200 (results/gpu/2026-12-04-h200-vector-conv/) this loop took the
// batch-8 ResNet 3x3 convolutions from 1.53-2.09x cuDNN's time (Numba's loop) to 1.07-1.37x,
// and with sliced K (below) batch-1 14x14 and 7x7 ones to 0.88x, where 64 x 64 tiles took 2.6x.
//
// Operands: w is the tile's first output channel row of the (O, CG * KH * KW) weight (OIHW,
// row stride ldw = K), m_left of its rows in the group; x the group's first input channel of
// the image (C x H x W planes). T is float, __half or __nv_bfloat16; math is float32.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sliced_k.cuh"

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// A block's K loop over tiles of TILE output channels x TILE output pixels, its 256 threads in
// GROUPS groups of N = 256 / GROUPS: group g multiplies K slices g, g + GROUPS, ... (every group
// runs the same number of rounds, slices past K load zeros, so the block barriers stay
// uniform). Thread l of a group owns 4 x 4 outputs: rows (l / (TILE / 4)) * 4 + i, columns
// (l % (TILE / 4)) * 4 + j.
// - TILE 64, GROUPS 1: the 64 x 64 tiling; `acc` is the thread's 4 x 4 accumulators (row-major).
// - TILE 32, GROUPS 4: sliced K, for convolutions whose 64 x 64 tiles leave the GPU idle (a
//   batch-1 network's later stages): four times the blocks, each a quarter of the chain. The
//   groups' sums are added in group order (deterministic) into `acc`, then the block's shared
//   TILE x (TILE + 1) result tile.
template <typename T, int TILE, int GROUPS>
struct ConvLoop {
    static constexpr int BK = 16, N = 256 / GROUPS, LDA = TILE + 4;
    static constexpr int PER = TILE * BK / N;  // values of each operand a thread stages per slice
    static_assert(PER * N == TILE * BK && N % BK == 0 && N % TILE == 0, "whole staging passes");

    float (*As)[2][BK][LDA];  // As[group][buffer][k][m], rows padded (see `store`)
    float (*Bs)[2][BK][TILE];  // Bs[group][buffer][k][p]
    const T *w, *x;
    int ldw, m_left, CG, KHW, KW, H, W, dh, dw, g, l;
    long long plane;
    int ih0, iw0;  // this thread's staged pixel's top-left input position
    bool live;     // ... and whether that pixel is in the image (p < P)
    float ra[PER], rb[PER];

    // Slice s: tap s / (CG / BK), channels c0 .. c0 + 15. A: thread stages channel ka = l % 16 of
    // rows m = l / 16 + (N / 16) q (a warp reads 2 rows, 16 channels each; one row per thread
    // and k read 32 cache lines a warp load and kept L1 85% busy); B: channels l / TILE +
    // (N / TILE) q of its pixel.
    __device__ __forceinline__ void load(int s) {
        const int per_tap = CG / BK, slices = KHW * per_tap;
        const bool real = s < slices;
        const int tap = real ? s / per_tap : 0, c0 = real ? (s - tap * per_tap) * BK : 0;
        const int ka = l % BK, m = l / BK, k = l / TILE;
#pragma unroll
        for (int q = 0; q < PER; ++q) {
            const int row = m + (N / BK) * q;
            ra[q] = real && row < m_left ? to_float(w[(long long)row * ldw + (long long)(c0 + ka) * KHW + tap]) : 0.f;
        }
        const int kh = tap / KW, kw = tap - kh * KW;
        const int ih = ih0 + kh * dh, iw = iw0 + kw * dw;
        const bool inside = real && live && ih >= 0 && ih < H && iw >= 0 && iw < W;
        const T* src = x + (long long)(c0 + k) * plane + (long long)ih * W + iw;
#pragma unroll
        for (int q = 0; q < PER; ++q) rb[q] = inside ? to_float(src[(N / TILE) * q * plane]) : 0.f;
    }

    // A's rows are LDA floats apart (TILE + 4): a warp's 16 k x 2 m stores fall in 16 banks, two
    // each. B: 32 consecutive pixels of one k.
    __device__ __forceinline__ void store(int buffer) {
        const int ka = l % BK, m = l / BK, k = l / TILE, p = l % TILE;
#pragma unroll
        for (int q = 0; q < PER; ++q) {
            As[g][buffer][ka][m + (N / BK) * q] = ra[q];
            Bs[g][buffer][k + (N / TILE) * q][p] = rb[q];
        }
    }

    __device__ __forceinline__ void run(float* acc) {
        const int ty = l / (TILE / 4), tx = l % (TILE / 4);
        float c[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) c[i][j] = 0.f;
        const int rounds = (KHW * (CG / BK) + GROUPS - 1) / GROUPS;
        load(g);
        store(0);
        __syncthreads();
        for (int r = 0; r < rounds; ++r) {
            const bool more = r + 1 < rounds;
            if (more) load((r + 1) * GROUPS + g);  // in flight while this slice is multiplied
            const int cur = r & 1;
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                const float4 a = *reinterpret_cast<const float4*>(&As[g][cur][kk][ty * 4]);
                const float4 b = *reinterpret_cast<const float4*>(&Bs[g][cur][kk][tx * 4]);
                const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) c[i][j] = fmaf(av[i], bv[j], c[i][j]);
            }
            if (more) store(cur ^ 1);  // the other buffer: last read before the previous barrier
            __syncthreads();
        }
        if constexpr (GROUPS == 1) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i * 4 + j] = c[i][j];
        } else {
            add_groups_in_order<GROUPS, TILE + 1>(acc, c, g, ty, tx);  // rows TILE + 1 floats apart
        }
    }
};

template <typename T, int TILE, int GROUPS>
__device__ __forceinline__ void conv_tile(float* acc, const T* w, int ldw, int m_left, const T* x, int col0, int P,
                                          int OW, int H, int W, int CG, int KHW, int KW, int sh, int sw, int pt,
                                          int pl, int dh, int dw) {
    using Loop = ConvLoop<T, TILE, GROUPS>;
    // Two buffers of both operands per group: 16.5 KiB at 64 x 64, 34 at 32 x 32 (the Numba
    // kernel's epilogue stash or result tile takes 16 or 4 KiB more, within 48).
    __shared__ __align__(16) float As[GROUPS][2][16][Loop::LDA];
    __shared__ __align__(16) float Bs[GROUPS][2][16][TILE];
    const int tid = threadIdx.y * 16 + threadIdx.x, l = tid % Loop::N;
    const int p = col0 + l % TILE;
    const int oh = p / OW, ow = p - oh * OW;
    Loop loop{As, Bs, w, x, ldw, m_left, CG, KHW, KW, H, W, dh, dw, tid / Loop::N, l, (long long)H * W,
              oh * sh - pt, ow * sw - pl, p < P};
    loop.run(acc);
}

}  // namespace

// C ABI entry points (cuda.declare_device(..., abi="c")); the int result is always 0. w_off and
// x_off: element offsets of the tile's first weight row and of the group's first input channel
// in the image. Sizes are 64-bit (what Numba passes); each fits 32 bits (conv2d.py keeps a K of
// 2^22 and more off the implicit GEMM, and a plane's offsets are 64-bit here). The sliced
// entries' `acc` is the block's shared 32 x 33 result tile (every thread of the block calls
// them, and the tile is complete when they return).
#define SIMACCEL_CONV_TILE(NAME, T, TILE, GROUPS)                                                                     \
    extern "C" __device__ int NAME(float* acc, const T* w, long long w_off, long long ldw, long long m_left,         \
                                   const T* x, long long x_off, long long col0, long long P, long long OW, long long H, \
                                   long long W, long long CG, long long KHW, long long KW, long long sh, long long sw, \
                                   long long pt, long long pl, long long dh, long long dw) {                          \
        conv_tile<T, TILE, GROUPS>(acc, w + w_off, ldw, m_left, x + x_off, col0, P, OW, H, W, CG, KHW, KW, sh, sw, pt, \
                                   pl, dh, dw);                                                                       \
        return 0;                                                                                                     \
    }

SIMACCEL_CONV_TILE(simaccel_conv_tile_64_f32, float, 64, 1)
SIMACCEL_CONV_TILE(simaccel_conv_tile_64_f16, __half, 64, 1)
SIMACCEL_CONV_TILE(simaccel_conv_tile_64_bf16, __nv_bfloat16, 64, 1)
SIMACCEL_CONV_TILE(simaccel_conv_sliced_32_f32, float, 32, 4)
SIMACCEL_CONV_TILE(simaccel_conv_sliced_32_f16, __half, 32, 4)
SIMACCEL_CONV_TILE(simaccel_conv_sliced_32_bf16, __nv_bfloat16, 32, 4)
