// Tensor-core attention (simaccel.attention) for float16 and bfloat16 with head dims 64 and 128
// (kernels/attention.py launches it; other cases take its one-warp-per-row kernel).
//
// One block of 4 warps computes 64 query rows of one batch and one key/value head against all
// the keys they may see, flash-attention style: the rows are the head's query rows packed with
// its query-head group (GQA: query heads h * G ... h * G + G - 1 share key/value head h, so row
// p of the packed sequence is query row p / G of query head h * G + p % G; G = 1 for plain
// multi-head attention, and a decode step's G heads fill G rows of one tile). Each warp holds
// 16 rows: their Q as mma A fragments in registers, their output as float32 accumulators, the
// running max and sum of each row. Keys come in tiles of 64, K and V staged global -> shared
// with cp.async (double-buffered: tile t + 1 is in flight while tile t is multiplied), in rows
// of 16-byte chunks XOR-swizzled so that the 8 rows an ldmatrix reads lie in distinct banks.
// Per tile: S = Q K^T (mma.m16n8k16, K read with ldmatrix), masks (keys past the end, the
// causal diagonal), the online softmax in base 2 (max across the quad of lanes that share a
// row; ex2.approx), then O = O * correction + P V, with P's accumulators repacked in
// registers as the A fragments of the second mma (their layouts coincide) and V read with
// ldmatrix.trans. Causal tiles past a block's last visible key are never loaded.
//
// Warps whose 16 rows are all past the packed sequence's end (a decode tile's) only stage.
//
// A bias (simaccel.attention_bias: rank 4, broadcast to (B, H, S, T) through element strides,
// 0 along its dims of 1) is read per score, float32 or the operands' dtype, and added after the
// scaling, before the causal mask (in base 2: times log2 e, as the scores). Only the `_bias`
// entries read it: the tile without a bias is compiled without that code (its per-score index
// arithmetic made the unbiased tile 38% slower on an H100).
//
// Split keys (flash-decoding): where the tiles alone would leave the GPU idle (a decode step's
// few rows), the keys are split into `splits` ranges of `chunk` keys, one block each, and a
// block writes its rows' unnormalised float32 output, running max (base 2) and sum to
// `partial` instead of `out`; attention.py's combining kernel then weighs the splits.
//
// Below sm_80 (no mma.sync, no cp.async) the same entry computes the same rows with float32
// FMAs, one thread a row: correct, not fast.
//
// Entry: simaccel_attention[_bias]_{f16,bf16}_d{64,128}(out, q, k, v, partial, S, T, H, HKV,
// scale, causal, offset, splits, chunk, bias, bias_kind, bs0, bs1, bs2, bs3), block (64-row
// tile, key/value head, batch * splits + split) = (blockIdx.x, blockIdx.y, blockIdx.z), 128 threads, `shared_bytes<D>()` of dynamic shared
// memory (attention.py's `dynamic_shared_bytes`; less traps). Tensors are contiguous BSNH: q
// and out (B, S, H, D), k and v (B, T, HKV, D). A causal mask keeps key j for query row i where
// j <= i + offset. Rows that see no key are 0. With splits > 1, `partial` holds a row of D + 2
// floats (output, max, sum) for each (batch, key/value head, split, packed row), in that order.
// bias_kind (read by the `_bias` entries only): 1 a float32 bias, 2 one of the operands' dtype;
// bs0..bs3 its element strides along (batch, query head, query row, key).

#include "mma.cuh"  // Element<T> (the operand types), cp.async, ldmatrix, mma.sync

namespace {

constexpr int BLOCK_M = 64, BLOCK_N = 64, THREADS = 128;  // 4 warps of 16 query rows
constexpr float LOG2E = 1.4426950408889634f;
#define NEG_INF (-__int_as_float(0x7f800000))  // NVRTC has no math.h INFINITY

// Dynamic shared memory of a block: its Q tile and two stages of K and V tiles (attention.py's
// `dynamic_shared_bytes` says the same).
template <int D>
__device__ constexpr unsigned shared_bytes() { return (BLOCK_M + 4 * BLOCK_N) * D * 2; }

// What one block computes: the packed rows [m0, m0 + BLOCK_M) of key/value head `kvh` of batch `b`.
struct Problem {
    int S, T, H, HKV;
    int G;  // query heads per key/value head
    float scale;
    bool causal;
    int offset;
    int b, kvh, m0, rows;  // rows: S * G, the packed sequence's length
    int splits, split, chunk;  // this block's keys: [split * chunk, (split + 1) * chunk), where splits > 1
    const void* bias;
    int bias_kind;  // 0 none, 1 float32, 2 the operands' dtype
    long long bs0, bs1, bs2, bs3;  // the bias' element strides along (batch, query head, query row, key)

    // Element offset of packed row p's query (and output) row, p < rows.
    __device__ __forceinline__ long long q_row(int p, int D) const {
        return ((static_cast<long long>(b) * S + p / G) * H + kvh * G + p % G) * D;
    }
    __device__ __forceinline__ long long kv_row(int j, int D) const {
        return ((static_cast<long long>(b) * T + j) * HKV + kvh) * D;
    }
    // Keys the block's rows see at most: all T, or up to its last row's diagonal, and before
    // the end of its split's range.
    __device__ __forceinline__ int keys() const {
        int end = T;
        if (causal) {
            const int last = (m0 + BLOCK_M < rows ? m0 + BLOCK_M : rows) - 1;
            const long long limit = static_cast<long long>(last / G) + offset + 1;
            end = limit < 0 ? 0 : (limit < T ? static_cast<int>(limit) : T);
        }
        if (splits > 1) {
            const long long stop = static_cast<long long>(split + 1) * chunk;
            end = stop < end ? static_cast<int>(stop) : end;
        }
        return end;
    }
    // Element offset of packed row p's bias row (its key 0), p < rows.
    __device__ __forceinline__ long long bias_row(int p) const {
        return b * bs0 + static_cast<long long>(kvh * G + p % G) * bs1 + static_cast<long long>(p / G) * bs2;
    }
    // The bias at element offset i, as a float.
    template <typename T>
    __device__ __forceinline__ float bias_at(long long i) const {
        return bias_kind == 1 ? static_cast<const float*>(bias)[i] : Element<T>::value(static_cast<const T*>(bias)[i]);
    }
    // The first key of the block's range (0 without splits).
    __device__ __forceinline__ int first_key() const { return splits > 1 ? split * chunk : 0; }
    // Float offset of packed row p's partial row (D + 2 floats: output, max, sum), splits > 1.
    __device__ __forceinline__ long long partial_row(int p, int D) const {
        return ((((static_cast<long long>(b) * HKV + kvh) * splits + split) * rows) + p) * (D + 2);
    }
};

#if __CUDA_ARCH__ >= 800  // cp.async, ldmatrix and mma.m16n8k16

__device__ __forceinline__ float exp2_approx(float x) {  // 2^x; -inf gives 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Chunk c (16 bytes, 8 elements) of row `row` of a tile stored as rows of D / 8 chunks.
template <int D>
__device__ __forceinline__ int chunk(int row, int c) {
    return row * (D / 8) + (c ^ (row & 7));
}

// Stage `count` rows of D elements into `dst` (a tile of `chunk` layout): row r is `src +
// offset(r)`, or zeros where `valid(r)` is false. 16-byte cp.async copies where every row is
// 16-byte aligned (`aligned`), else element loads.
template <typename T, int D, typename Offset, typename Valid>
__device__ __forceinline__ void stage(uint4* dst, const T* src, Offset offset, Valid valid, bool aligned) {
    constexpr int C = D / 8, PER_THREAD = BLOCK_N * C / THREADS;  // BLOCK_M == BLOCK_N
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int q = threadIdx.x + i * THREADS, row = q / C, c = q % C;
        const bool ok = valid(row);
        const T* from = ok ? src + offset(row) + c * 8 : src;
        if (aligned) {
            copy16(dst + chunk<D>(row, c), from, ok);
        } else {
            __align__(16) T v[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = ok ? from[e] : Element<T>::from(0.0f);
            dst[chunk<D>(row, c)] = *reinterpret_cast<uint4*>(v);
        }
    }
}

template <typename T, int D, bool BIAS>
__device__ __forceinline__ void attention_tile(T* out, float* partial, const T* q, const T* k, const T* v,
                                               const Problem& pr) {
    constexpr int KSTEPS = D / 16, NT = BLOCK_N / 8, DT = D / 8;  // Q K^T k-steps, S's n8 tiles, O's
    extern __shared__ __align__(16) uint4 smem[];
    uint32_t given;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(given));
    if (given < shared_bytes<D>()) __trap();
    uint4* const Qs = smem;
    uint4* const Ks = Qs + BLOCK_M * D / 8;  // two stages
    uint4* const Vs = Ks + 2 * BLOCK_N * D / 8;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool aligned = ((reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(k) |
                           reinterpret_cast<unsigned long long>(v)) & 15) == 0;
    const int keys = pr.keys(), start = pr.first_key() / BLOCK_N, tiles = (keys + BLOCK_N - 1) / BLOCK_N;
    const bool busy = pr.m0 + warp * 16 < pr.rows;  // a warp with rows to compute (else it only stages)

    stage<T, D>(Qs, q, [&](int r) { return pr.q_row(pr.m0 + r, D); }, [&](int r) { return pr.m0 + r < pr.rows; },
                aligned);
    commit();
    auto stage_kv = [&](int t) {
        const int n0 = t * BLOCK_N;
        const int s = t & 1;
        auto offset = [&](int r) { return pr.kv_row(n0 + r, D); };
        auto valid = [&](int r) { return n0 + r < keys; };
        stage<T, D>(Ks + s * BLOCK_N * D / 8, k, offset, valid, aligned);
        stage<T, D>(Vs + s * BLOCK_N * D / 8, v, offset, valid, aligned);
    };
    if (start < tiles) stage_kv(start);
    commit();
    wait_groups<1>();  // Q is in
    __syncthreads();

    uint32_t qf[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) ldmatrix_x4(qf[kk], Qs + chunk<D>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));

    // This thread's two rows (lane / 4 and lane / 4 + 8 of its warp's 16) and the last key each sees.
    int row[2], last[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        row[i] = pr.m0 + warp * 16 + (lane >> 2) + 8 * i;
        const long long diagonal = static_cast<long long>(row[i] / pr.G) + pr.offset;
        last[i] = pr.causal && diagonal < keys - 1 ? static_cast<int>(diagonal) : keys - 1;
    }
    const float scale = pr.scale * LOG2E;  // scores in base 2
    float o[DT][4], top[2] = {NEG_INF, NEG_INF}, sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DT; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) o[n][r] = 0.0f;

    for (int t = start; t < tiles; ++t) {
        if (t + 1 < tiles) stage_kv(t + 1);
        commit();
        wait_groups<1>();  // tile t is in
        __syncthreads();
        if (!busy) {
            __syncthreads();
            continue;
        }
        const uint4* K = Ks + (t & 1) * BLOCK_N * D / 8;
        const uint4* V = Vs + (t & 1) * BLOCK_N * D / 8;
        const int m = lane >> 3;  // which 8x8 matrix of an ldmatrix.x4 this lane addresses

        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) s[n][r] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
            for (int p = 0; p < NT / 2; ++p) {
                uint32_t b[4];
                ldmatrix_x4(b, K + chunk<D>(p * 16 + (m >> 1) * 8 + (lane & 7), kk * 2 + (m & 1)));
                mma16816<T>(s[2 * p], qf[kk], b[0], b[1]);
                mma16816<T>(s[2 * p + 1], qf[kk], b[2], b[3]);
            }

        // Scale, add the bias, mask where this tile crosses a row's last key (keys past it have
        // no bias to read), and the new running max.
        const int n0 = t * BLOCK_N;
        const bool masked = n0 + BLOCK_N - 1 > (last[0] < last[1] ? last[0] : last[1]);
        // Where each row's bias starts (-1: a row past the end): found per tile, not held across
        // the loop (a tile of head dim 128 has no registers to spare).
        long long bias_row[2] = {-1, -1};
        if constexpr (BIAS) {
#pragma unroll
            for (int i = 0; i < 2; ++i) bias_row[i] = row[i] < pr.rows ? pr.bias_row(row[i]) : -1;
        }
        float next[2] = {top[0], top[1]};
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = r >> 1, j = n0 + n * 8 + 2 * (lane & 3) + (r & 1);
                float x = s[n][r] * scale;
                if (masked && j > last[i])
                    x = NEG_INF;
                else if (BIAS && bias_row[i] >= 0)
                    x += pr.bias_at<T>(bias_row[i] + j * pr.bs3) * LOG2E;
                s[n][r] = x;
                next[i] = fmaxf(next[i], x);
            }
        float correction[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            next[i] = fmaxf(next[i], __shfl_xor_sync(0xffffffffu, next[i], 1));
            next[i] = fmaxf(next[i], __shfl_xor_sync(0xffffffffu, next[i], 2));
            const float base = next[i] == NEG_INF ? 0.0f : next[i];  // a row with no key yet
            correction[i] = exp2_approx(top[i] - base);
            top[i] = next[i];
            sum[i] *= correction[i];
        }
        // P = 2^(s - max), as the A fragments of P V: key step j's registers are S's n8 tiles
        // 2j and 2j + 1 (rows lane / 4 and + 8, keys 2 (lane % 4) and + 1 of each).
        uint32_t pf[BLOCK_N / 16][4];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            float e[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = r >> 1;
                e[r] = exp2_approx(s[n][r] - (top[i] == NEG_INF ? 0.0f : top[i]));
                sum[i] += e[r];
            }
            pf[n >> 1][(n & 1) * 2] = Element<T>::pack(e[0], e[1]);
            pf[n >> 1][(n & 1) * 2 + 1] = Element<T>::pack(e[2], e[3]);
        }
#pragma unroll
        for (int n = 0; n < DT; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) o[n][r] *= correction[r >> 1];
#pragma unroll
        for (int j = 0; j < BLOCK_N / 16; ++j)
#pragma unroll
            for (int p = 0; p < DT / 2; ++p) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, V + chunk<D>(j * 16 + (m & 1) * 8 + (lane & 7), p * 2 + (m >> 1)));
                mma16816<T>(o[2 * p], pf[j], b[0], b[1]);
                mma16816<T>(o[2 * p + 1], pf[j], b[2], b[3]);
            }
        __syncthreads();  // every warp is done with this tile's buffers before tile t + 2 fills them
    }
    wait_groups<0>();

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row[i] >= pr.rows) continue;
        if (pr.splits > 1) {  // this split's share, for the combining kernel
            float* dst = partial + pr.partial_row(row[i], D);
#pragma unroll
            for (int n = 0; n < DT; ++n) {
                const int col = n * 8 + 2 * (lane & 3);
                dst[col] = o[n][2 * i];
                dst[col + 1] = o[n][2 * i + 1];
            }
            if ((lane & 3) == 0) {
                dst[D] = top[i];
                dst[D + 1] = sum[i];
            }
            continue;
        }
        T* dst = out + pr.q_row(row[i], D);
        // No key seen (a sum of 0): 0. A NaN sum (a NaN score) stays NaN, as the reference's.
        const bool none = sum[i] == 0.0f;
        const float inv = none ? 0.0f : 1.0f / sum[i];
#pragma unroll
        for (int n = 0; n < DT; ++n) {
            const int col = n * 8 + 2 * (lane & 3);
            const float a = none ? 0.0f : o[n][2 * i] * inv, c = none ? 0.0f : o[n][2 * i + 1] * inv;
            dst[col] = Element<T>::from(a);
            dst[col + 1] = Element<T>::from(c);
        }
    }
}

#else  // no tensor cores: one thread a row, float32 FMAs

template <typename T, int D, bool BIAS>
__device__ __forceinline__ void attention_tile(T* out, float* partial, const T* q, const T* k, const T* v,
                                               const Problem& pr) {
    const int p = pr.m0 + threadIdx.x;
    if (threadIdx.x >= BLOCK_M || p >= pr.rows) return;
    const T* qr = q + pr.q_row(p, D);
    const long long diagonal = static_cast<long long>(p / pr.G) + pr.offset;
    const int end = pr.keys();
    const int last = pr.causal && diagonal < end - 1 ? static_cast<int>(diagonal) : end - 1;
    const long long bias_row = BIAS ? pr.bias_row(p) : -1;
    float acc[D], top = NEG_INF, sum = 0.0f;
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    for (int j = pr.first_key(); j <= last; ++j) {
        const T* kr = k + pr.kv_row(j, D);
        const T* vr = v + pr.kv_row(j, D);
        float x = 0.0f;
        for (int d = 0; d < D; ++d) x += Element<T>::value(qr[d]) * Element<T>::value(kr[d]);
        x *= pr.scale;
        if (bias_row >= 0) x += pr.bias_at<T>(bias_row + j * pr.bs3);
        const float next = fmaxf(top, x), correction = top == NEG_INF ? 0.0f : expf(top - next);
        const float e = next == NEG_INF ? 0.0f : expf(x - next);  // every score so far -inf: no weight
        sum = sum * correction + e;
        for (int d = 0; d < D; ++d) acc[d] = acc[d] * correction + e * Element<T>::value(vr[d]);
        top = next;
    }
    if (pr.splits > 1) {  // this split's share: the max in base 2, as the tensor-core tiles write it
        float* dst = partial + pr.partial_row(p, D);
        for (int d = 0; d < D; ++d) dst[d] = acc[d];
        dst[D] = top * LOG2E;
        dst[D + 1] = sum;
        return;
    }
    T* dst = out + pr.q_row(p, D);
    for (int d = 0; d < D; ++d) dst[d] = Element<T>::from(sum == 0.0f ? 0.0f : acc[d] / sum);
}

#endif

template <typename T, int D, bool BIAS>
__device__ __forceinline__ int attention(T* out, const T* q, const T* k, const T* v, float* partial, long long S,
                                         long long T_, long long H, long long HKV, float scale, long long causal,
                                         long long offset, long long splits, long long chunk, const void* bias,
                                         long long bias_kind, long long bs0, long long bs1, long long bs2,
                                         long long bs3) {
    const int G = static_cast<int>(H / HKV), n = static_cast<int>(splits);
    const int z = static_cast<int>(blockIdx.z);
    const Problem pr{static_cast<int>(S), static_cast<int>(T_), static_cast<int>(H), static_cast<int>(HKV), G, scale,
                     causal != 0, static_cast<int>(offset), z / n, static_cast<int>(blockIdx.y),
                     static_cast<int>(blockIdx.x) * BLOCK_M, static_cast<int>(S) * G, n, z % n, static_cast<int>(chunk),
                     bias, static_cast<int>(bias_kind), bs0, bs1, bs2, bs3};
    attention_tile<T, D, BIAS>(out, partial, q, k, v, pr);
    return 0;
}

}  // namespace

#define SIMACCEL_ATTENTION_ENTRY(name, T, D, BIAS)                                                           \
    extern "C" __device__ int name(T* out, const T* q, const T* k, const T* v, float* partial, long long S,      \
                                   long long T_, long long H, long long HKV, float scale, long long causal,     \
                                   long long offset, long long splits, long long chunk, const void* bias,       \
                                   long long bias_kind, long long bs0, long long bs1, long long bs2,            \
                                   long long bs3) {                                                             \
        return attention<T, D, BIAS>(out, q, k, v, partial, S, T_, H, HKV, scale, causal, offset, splits, chunk, \
                                     bias, bias_kind, bs0, bs1, bs2, bs3);                                      \
    }
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_f16_d64, __half, 64, false)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_f16_d128, __half, 128, false)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_bf16_d64, __nv_bfloat16, 64, false)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_bf16_d128, __nv_bfloat16, 128, false)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_bias_f16_d64, __half, 64, true)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_bias_f16_d128, __half, 128, true)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_bias_bf16_d64, __nv_bfloat16, 64, true)
SIMACCEL_ATTENTION_ENTRY(simaccel_attention_bias_bf16_d128, __nv_bfloat16, 128, true)
