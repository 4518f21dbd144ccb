// Tensor-core main loop of the float16 and bfloat16 matmuls (kernels/tensor_core.py launches it).
//
// The one piece of the accelerator written in CUDA C++: Numba has no access to the `mma`,
// `wgmma` and `ldmatrix` instructions, so the Numba kernel calls this device function
// (cuda.declare_device, linked with link-time optimisation, so it is inlined) for the K loop of
// one 128 x BN output tile (BN = 128 or 256), and applies bias, activation and the
// bounds-checked store itself.
//
// A block of 256 threads walks K in slices of BK, copied global -> shared with cp.async into
// XOR-swizzled rows of 16-byte chunks, STAGES buffers in dynamic shared memory (the launcher
// asks for `shared_bytes`, tensor_core.py's `dynamic_shared_bytes` says the same per target;
// too little traps). Then, by target:
// - sm_90a (H100, H200; the arch-specific target, __CUDA_ARCH_FEAT_SM90_ALL): BK = 64, 4
//   stages; each of the two warpgroups multiplies its 64 rows by the whole slice with
//   wgmma.m64nBNk16 straight from shared memory (f16 or bf16 in, f32 accumulate), in wgmma's 128-byte
//   swizzle (K-major rows of A and of the dense form's B; the (K, N) form's B N-major). One
//   barrier per slice: slice t + 2 is staged into the buffer of slice t - 2, whose wgmma every
//   warpgroup has waited for, while slice t's runs;
// - sm_80 ... (and sm_90's portable PTX): BK = 32, 8 warps, 2 along M x 4 along N, each a
//   64 x BN/4 piece, read the slice with ldmatrix and multiply with mma.m16n8k16; 4 stages at
//   BN = 256 (96 KiB, within the 99 KiB a block may have on sm_86/89/120), 3 at BN = 128.
//
// The epilogue reads the tile as BN / 2 slots a thread: simaccel_mma_acc(acc, i, BN) is slot
// i's value and simaccel_mma_cell(i, BN) its element of the tile (both come from one compile,
// so they always agree with the main loop beside them); slots 2p and 2p + 1 are neighbours in
// a row. On sm_90a the main loop leaves the tile row-major in shared memory and slot i of
// thread t is element (i / 2) * 512 + 2t + i % 2 (a warp's pairs, 32 in a row). Elsewhere the
// accumulators come back in `acc`, in mma.sync's register order: with NI = BN / 32 n8 tiles
// per warp, acc[((mi * NI + ni) * 4 + r)] holds the warp's m16 tile mi (0..3), n8 tile ni,
// C register r (0..3):
//   row = warp_m * 64 + mi * 16 + lane / 4 + 8 * (r / 2)
//   col = warp_n * BN / 4 + ni * 8 + 2 * (lane % 4) + r % 2
// with warp = threadIdx.x / 32, warp_m = warp / 4, warp_n = warp % 4 (tensor_core.py's
// `fragment_position`, the simulator's layout). wgmma's register i of m64nBN's accumulator
// is at row = warp * 16 + lane / 4 + 8 * (i / 2 % 2), col = i / 4 * 8 + 2 * (lane % 4) + i % 2.
//
// Operands: a is the tile's first row (row-major, leading dimension lda, m_left valid rows);
// b is the tile's first column, either (N, K) row-major (`_nk`: the dense form, B^T) or
// (K, N) row-major (`_kn`: ldmatrix.trans / wgmma's transposed B), leading dimension ldb,
// n_left valid columns. 16-byte copies need 16-byte aligned rows: where a pointer or a
// leading dimension is not (K or N not a multiple of 8, or a view at an odd offset), slices
// are staged with element loads instead, with the same bounds.

#include "mma.cuh"  // Element<T> (the operand types), cp.async, ldmatrix, mma.sync

namespace {

constexpr int BM = 128, THREADS = 256;  // 8 warps

#if __CUDA_ARCH__ >= 800  // cp.async and mma.m16n8k16

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int BK = 64;  // one 128-byte swizzle row of K per operand row
template <int BN>
__device__ constexpr int stages() { return 4; }
#else
constexpr int BK = 32;
template <int BN>
__device__ constexpr int stages() { return BN == 256 ? 4 : 3; }
#endif
constexpr int KCHUNKS = BK / 8;  // 16-byte chunks along K in an operand row

// Row stride (floats) of the tile that wgmma's main loop hands to the epilogue in shared memory.
template <int BN>
__device__ constexpr int handoff_stride() { return BN + 8; }

// The dynamic shared memory a BM x BN tile's main loop needs: its stage buffers, and 1 KiB to
// align them to wgmma's swizzle atoms (tensor_core.py's `dynamic_shared_bytes` says the same).
template <int BN>
__device__ constexpr unsigned shared_bytes() { return stages<BN>() * (BM + BN) * BK * 2 + 1024; }

// The dynamic shared memory, aligned to 1024 bytes (wgmma's swizzle atoms).
__device__ __forceinline__ uint4* aligned_shared() {
    extern __shared__ __align__(16) uint4 dynamic[];
    const uint32_t base = smem_addr(dynamic);
    return dynamic + (((base + 1023) & ~1023u) - base) / 16;
}

// The block's stage buffers. A launch that gave less than the main loop needs traps rather
// than write past it.
template <int BN>
__device__ __forceinline__ uint4* stage_memory() {
    uint32_t given;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(given));
    if (given < shared_bytes<BN>()) __trap();
    return aligned_shared();
}

// Chunk (row, c) of a slice stored as rows of KCHUNKS chunks, K along the row: swizzled so
// that the 8 rows an ldmatrix or a wgmma core matrix reads lie in distinct banks. With BK =
// 64 (rows of 128 bytes) this is wgmma's 128-byte swizzle; with BK = 32 (64 bytes), its 64-byte one.
__device__ __forceinline__ int k_major(int row, int c) {
    return row * KCHUNKS + (KCHUNKS == 8 ? c ^ (row & 7) : c ^ ((row >> 1) & 3));
}

// Chunk (k, c) of a (K, N) slice of BK k rows x BN halves. For ldmatrix.trans (kNMajor false):
// k rows of BN / 8 chunks swizzled by k. For wgmma's N-major B: BN / 64 column blocks, each BK
// k rows of 128 bytes swizzled by k, wgmma's 128-byte mode (atoms of 8 rows, 1024 bytes).
template <int BN, bool kNMajor>
__device__ __forceinline__ int n_rows(int k, int c) {
    return kNMajor ? (c >> 3) * BK * 8 + k * 8 + ((c & 7) ^ (k & 7)) : k * (BN / 8) + (c ^ (k & 7));
}

// This thread's share of staging a row-major operand (rows along M or N, K along the row),
// worked out once per tile: chunk i of a slice is `src + i * stride` in global memory (STEP
// rows below chunk 0) and `dst + i * THREADS` in the stage buffer (the swizzle of k_major
// depends on row % 8, which a step of STEP rows keeps). `stage` copies one slice and moves
// `src` on to the next: slices are staged in order.
template <typename T, int ROWS>
struct RowChunks {
    static constexpr int N = ROWS * KCHUNKS / THREADS, STEP = THREADS / KCHUNKS;
    static_assert(ROWS * KCHUNKS % THREADS == 0, "whole chunks per thread");
    const T* src;
    long long stride;
    int dst, col;    // its chunks' place in a stage buffer (chunk 0) and column in a slice
    unsigned valid;  // bit i: chunk i's row is in the matrix

    __device__ __forceinline__ RowChunks(const T* base, int ld, int rows_left, int tid) {
        const int row = tid / KCHUNKS, c = tid % KCHUNKS;
        col = c * 8;
        src = base + (long long)row * ld + col;
        stride = (long long)STEP * ld;
        dst = k_major(row, c);
        valid = 0;
#pragma unroll
        for (int i = 0; i < N; ++i) valid |= (row + i * STEP < rows_left ? 1u : 0u) << i;
    }

    __device__ __forceinline__ void stage(uint4* buffer, int k0, int K) {
        const bool in_k = k0 + col < K;
#pragma unroll
        for (int i = 0; i < N; ++i) copy16(buffer + dst + i * THREADS, src + i * stride, in_k && (valid >> i & 1));
        src += BK;
    }
};

// The same for a (K, N) row-major operand laid out as `n_rows`: chunk i is STEP k rows below
// chunk 0 (a multiple of 8, so the swizzle stays), its column fixed.
template <typename T, int BN, bool kNMajor>
struct KRowChunks {
    static constexpr int ROW = BN / 8, N = BK * ROW / THREADS, STEP = THREADS / ROW;
    static_assert(STEP % 8 == 0, "the swizzle of n_rows repeats every 8 k rows");
    const T* src;
    long long stride;
    int dst, k;
    bool in_n;  // its column is in the matrix

    __device__ __forceinline__ KRowChunks(const T* base, int ld, int n_left, int tid) {
        const int c = tid % ROW;
        k = tid / ROW;
        src = base + (long long)k * ld + c * 8;
        stride = (long long)STEP * ld;
        dst = n_rows<BN, kNMajor>(k, c);
        in_n = c * 8 < n_left;
    }

    __device__ __forceinline__ void stage(uint4* buffer, int k0, int K) {
        constexpr int DST_STEP = kNMajor ? STEP * 8 : THREADS;
#pragma unroll
        for (int i = 0; i < N; ++i)
            copy16(buffer + dst + i * DST_STEP, src + i * stride, in_n && k0 + k + i * STEP < K);
        src += stride * (BK / STEP);
    }
};

// Stage `ROWS` x BK halves of a row-major source from column k0 with element loads (rows or
// pointers not 16-byte aligned), a chunk at a time: unrolled, the loads of every chunk would
// all be in flight, in registers the accumulators need (the kernel gets the larger count).
template <int ROWS, typename T>
__device__ __forceinline__ void stage_rows_by_element(uint4* dst, const T* src, int ld, int rows_left, int k0,
                                                      int K, int tid) {
#pragma unroll 1
    for (int i = 0; i < ROWS * KCHUNKS / THREADS; ++i) {
        const int q = tid + i * THREADS, row = q / KCHUNKS, c = q % KCHUNKS, k = k0 + c * 8;
        __align__(16) T v[8];  // stored as one 16-byte chunk
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = (row < rows_left && k + e < K) ? src[(long long)row * ld + k + e] : Element<T>::zero();
        dst[k_major(row, c)] = *reinterpret_cast<uint4*>(v);
    }
}

// The same for BK k rows x BN halves of a (K, N) source from row k0, laid out as `n_rows`.
template <int BN, bool kNMajor, typename T>
__device__ __forceinline__ void stage_k_rows_by_element(uint4* dst, const T* src, int ld, int n_left, int k0,
                                                        int K, int tid) {
    constexpr int ROW = BN / 8;  // chunks per k row
#pragma unroll 1
    for (int i = 0; i < BK * ROW / THREADS; ++i) {
        const int q = tid + i * THREADS, k = q / ROW, c = q % ROW, n = c * 8;
        __align__(16) T v[8];  // stored as one 16-byte chunk
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = (k0 + k < K && n + e < n_left) ? src[(long long)(k0 + k) * ld + n + e] : Element<T>::zero();
        dst[n_rows<BN, kNMajor>(k, c)] = *reinterpret_cast<uint4*>(v);
    }
}

// How this thread stages both operands' slices into a stage buffer: A's BM rows, then B's.
// kFast: 16-byte cp.async copies from pointers worked out once; else element loads.
template <typename T, int BN, bool kTransB, bool kFast, bool kNMajor>
struct Stager;

template <bool kFirst, typename T, typename F>
struct Pick { using type = T; };
template <typename T, typename F>
struct Pick<false, T, F> { using type = F; };

template <typename T, int BN, bool kTransB, bool kNMajor>
struct Stager<T, BN, kTransB, true, kNMajor> {
    RowChunks<T, BM> a;
    typename Pick<kTransB, RowChunks<T, BN>, KRowChunks<T, BN, kNMajor>>::type b;
    int K;

    __device__ __forceinline__ Stager(const T* a_, int lda, const T* b_, int ldb, int m_left, int n_left, int K,
                                      int tid)
        : a(a_, lda, m_left, tid), b(b_, ldb, n_left, tid), K(K) {}

    __device__ __forceinline__ void operator()(uint4* buffer, int k0) {
        a.stage(buffer, k0, K);
        b.stage(buffer + BM * KCHUNKS, k0, K);
    }
};

template <typename T, int BN, bool kTransB, bool kNMajor>
struct Stager<T, BN, kTransB, false, kNMajor> {
    const T *a, *b;
    int lda, ldb, m_left, n_left, K, tid;

    __device__ __forceinline__ Stager(const T* a, int lda, const T* b, int ldb, int m_left, int n_left, int K,
                                      int tid)
        : a(a), b(b), lda(lda), ldb(ldb), m_left(m_left), n_left(n_left), K(K), tid(tid) {}

    __device__ __forceinline__ void operator()(uint4* buffer, int k0) {
        stage_rows_by_element<BM>(buffer, a, lda, m_left, k0, K, tid);
        if constexpr (kTransB)
            stage_rows_by_element<BN>(buffer + BM * KCHUNKS, b, ldb, n_left, k0, K, tid);
        else
            stage_k_rows_by_element<BN, kNMajor>(buffer + BM * KCHUNKS, b, ldb, n_left, k0, K, tid);
    }
};

template <int BN>
__device__ constexpr int stage_chunks() { return (BM + BN) * KCHUNKS; }

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)  // mma.sync: sm_80 ... and sm_90's portable PTX

template <int BN, bool kTransB, bool kFast, typename T>
__device__ __forceinline__ void main_loop(float* acc, const T* a, int lda, const T* b, int ldb, int m_left,
                                          int n_left, int K) {
    constexpr int STAGES = stages<BN>(), WN = BN / 4, NI = WN / 8;  // a warp's columns, its n8 tiles
    uint4* const smem = stage_memory<BN>();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp >> 2, warp_n = warp & 3;
    float c[4][NI][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) c[mi][ni][r] = 0.0f;

    Stager<T, BN, kTransB, kFast, false> stager(a, lda, b, ldb, m_left, n_left, K, tid);
    auto stage = [&](int s, int k0) { stager(smem + s * stage_chunks<BN>(), k0); };

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
        const uint4* A = smem + (t % STAGES) * stage_chunks<BN>();
        const uint4* B = A + BM * KCHUNKS;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t af[4][4], bf[NI / 2][4];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                const int row = warp_m * 64 + mi * 16 + (lane & 15);
                ldmatrix_x4(af[mi], A + k_major(row, kk * 2 + (lane >> 4)));
            }
#pragma unroll
            for (int p = 0; p < NI / 2; ++p) {
                const int m = lane >> 3;  // which 8x8 matrix this lane addresses
                if (kTransB) {
                    const int n = warp_n * WN + p * 16 + (m >> 1) * 8 + (lane & 7);
                    ldmatrix_x4(bf[p], B + k_major(n, kk * 2 + (m & 1)));
                } else {
                    const int k = kk * 16 + (m & 1) * 8 + (lane & 7);
                    ldmatrix_x4_trans(bf[p], B + n_rows<BN, false>(k, (warp_n * WN + p * 16) / 8 + (m >> 1)));
                }
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < NI; ++ni)
                    mma16816<T>(c[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
        }
    }
    wait_groups<0>();
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[(mi * NI + ni) * 4 + r] = c[mi][ni][r];
}

#else  // wgmma: sm_90a only

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (all
// >> 4) and the swizzle mode (1: 128-byte), base offset 0 (atoms are aligned).
__device__ __forceinline__ unsigned long long descriptor(const void* p, int lbo, int sbo, int swizzle) {
    return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
           (unsigned long long)(sbo >> 4) << 32 | (unsigned long long)swizzle << 62;
}

#define SIMACCEL_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                       "+f"(d[i + 6]), "+f"(d[i + 7])
// The operand lists of wgmma's accumulators: %0 ... %63, and %64 ... %127.
#define SIMACCEL_R64 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,"  \
    "%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"    \
    "%57,%58,%59,%60,%61,%62,%63"
#define SIMACCEL_R64_128 \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,"    \
    "%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114," \
    "%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define SIMACCEL_D64(i) SIMACCEL_D8(i), SIMACCEL_D8(i + 8), SIMACCEL_D8(i + 16), SIMACCEL_D8(i + 24), \
                        SIMACCEL_D8(i + 32), SIMACCEL_D8(i + 40), SIMACCEL_D8(i + 48), SIMACCEL_D8(i + 56)

// d += A (64 x 16, K-major) * B (16 x BN; kNMajor: N-major, the (K, N) form) for this warpgroup.
template <typename T, int BN, int kNMajor>
__device__ __forceinline__ void wgmma(float (&d)[BN / 2], unsigned long long a, unsigned long long b) {
    if constexpr (BN == 128 && Element<T>::kBf16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 SIMACCEL_R64 "}, %64, %65, 1, 1, 1, 0, %66;\n"
                     : SIMACCEL_D64(0)
                     : "l"(a), "l"(b), "n"(kNMajor));
    } else if constexpr (BN == 256 && Element<T>::kBf16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 SIMACCEL_R64 "," SIMACCEL_R64_128 "}, %128, %129, 1, 1, 1, 0, %130;\n"
                     : SIMACCEL_D64(0), SIMACCEL_D64(64)
                     : "l"(a), "l"(b), "n"(kNMajor));
    } else if constexpr (BN == 128) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
                 "}, %64, %65, 1, 1, 1, 0, %66;\n"
                     : SIMACCEL_D64(0)
                     : "l"(a), "l"(b), "n"(kNMajor));
    } else {
        static_assert(BN == 256, "tiles are 128 or 256 wide");
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
                 "}, %128, %129, 1, 1, 1, 0, %130;\n"
                     : SIMACCEL_D64(0), SIMACCEL_D64(64)
                     : "l"(a), "l"(b), "n"(kNMajor));
    }
}

#undef SIMACCEL_D64
#undef SIMACCEL_D8
#undef SIMACCEL_R64
#undef SIMACCEL_R64_128

// The accumulators are written by wgmma asynchronously, behind the compiler's back: this pins
// every one of them at this point (no read moved above the wait, no write below the fence).
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same entry as mma.sync's main_loop above, which this one replaces on sm_90a.
template <int BN, bool kTransB, bool kFast, typename T>
__device__ __forceinline__ void main_loop(float* acc, const T* a, int lda, const T* b, int ldb, int m_left,
                                          int n_left, int K) {
    constexpr int STAGES = stages<BN>();
    uint4* const smem = stage_memory<BN>();
    const int tid = threadIdx.x, group = tid >> 7;  // warpgroup 0 or 1: rows 64 * group ...
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;

    Stager<T, BN, kTransB, kFast, true> stager(a, lda, b, ldb, m_left, n_left, K, tid);
    auto stage = [&](int s, int k0) { stager(smem + s * stage_chunks<BN>(), k0); };

    // The first buffer's operands: K-major with the 128-byte swizzle, 8-row groups 1024 bytes
    // apart (this warpgroup's 64 rows of A); the (K, N) form's B N-major with it, 64-column
    // blocks BK rows of 128 bytes apart, 8-k groups 1024.
    const unsigned long long a_desc = descriptor(smem + group * 64 * KCHUNKS, 16, 1024, 1);
    const unsigned long long b_desc = kTransB ? descriptor(smem + BM * KCHUNKS, 16, 1024, 1)
                                              : descriptor(smem + BM * KCHUNKS, BK * 128, 1024, 1);
    const int slices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < slices) stage(s, s * BK);
        commit();
    }
    // One barrier per slice. At slice t's barrier every warpgroup has waited for slice t - 2's
    // wgmma (wait_group 1 after issuing t - 1's), so its buffer takes slice t + STAGES - 2
    // while slice t's wgmma runs; t - 1's stays in flight until t's has been issued.
    for (int t = 0; t < slices; ++t) {
        wait_groups<STAGES - 3>();
        // This thread's copies of slice t, made by the generic proxy, seen by wgmma's async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // slice t is in; slice t - 2's buffer is free
        const int next = t + STAGES - 2;
        if (next < slices) stage(next % STAGES, next * BK);
        commit();
        // Descriptors address in units of 16 bytes, as the buffers count chunks: slice t's
        // are the first buffer's moved on by its offset, each k16 step by 32 bytes (K-major)
        // or 16 k rows of 128 bytes (N-major).
        const unsigned long long offset = (t % STAGES) * stage_chunks<BN>();
        fence_registers(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            wgmma<T, BN, kTransB ? 0 : 1>(d, a_desc + offset + kk * 2, b_desc + offset + kk * (kTransB ? 2 : 128));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // slice t - 1's is done
        fence_registers(d);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_registers(d);
    wait_groups<0>();
    // The accumulators go to the epilogue through the stage buffers, now free (every
    // warpgroup's wgmma done), as the tile itself: row-major, rows of BN + 8 floats (a
    // half-warp's 8-byte stores of 4 rows x 8 columns then meet 32 distinct banks). Through
    // local memory (the acc array) they missed the L1, which the stage buffers leave small,
    // and the epilogue's reads each waited on L2 (50 us a wave of 128 x 256 tiles at 4096^3);
    // row-major, the epilogue's consecutive threads store consecutive columns.
    static_assert(BM * handoff_stride<BN>() * 4 <= stages<BN>() * (BM + BN) * BK * 2, "the tile fits the stage buffers");
    __syncthreads();
    float* const tile = reinterpret_cast<float*>(aligned_shared());
    const int lane = tid & 31, row = (tid >> 5) * 16 + (lane >> 2), col = 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
        float2* at = reinterpret_cast<float2*>(tile + (row + 8 * (i / 2 % 2)) * handoff_stride<BN>() + i / 4 * 8 + col);
        *at = make_float2(d[i], d[i + 1]);
    }
    __syncthreads();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#else

// GPUs before sm_80 (no cp.async, no m16n8k16): each thread computes its BN / 2 outputs of
// the mma.sync layout with float32 FMAs straight from global memory. Correct, not fast.
template <int BN, bool kTransB, typename T>
__device__ __forceinline__ void tile_without_tensor_cores(float* acc, const T* a, int lda, const T* b,
                                                          int ldb, int m_left, int n_left, int K) {
    constexpr int NI = BN / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = 0; i < BN / 2; ++i) {
        const int mi = i / (NI * 4), ni = (i >> 2) % NI, r = i & 3;
        const int row = (warp >> 2) * 64 + mi * 16 + (lane >> 2) + 8 * (r >> 1);
        const int col = (warp & 3) * (BN / 4) + ni * 8 + 2 * (lane & 3) + (r & 1);
        float sum = 0.0f;
        if (row < m_left && col < n_left)
            for (int k = 0; k < K; ++k)
                sum += Element<T>::value(a[(long long)row * lda + k]) *
                       Element<T>::value(kTransB ? b[(long long)col * ldb + k] : b[(long long)k * ldb + col]);
        acc[i] = sum;
    }
}

#endif

template <int BN, bool kTransB, typename T>
__device__ __forceinline__ void tile(float* acc, const T* a, int lda, const T* b, int ldb, int m_left,
                                     int n_left, int K) {
#if __CUDA_ARCH__ < 800
    tile_without_tensor_cores<BN, kTransB>(acc, a, lda, b, ldb, m_left, n_left, K);
#else
    const bool aligned = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0 &&
                         lda % 8 == 0 && ldb % 8 == 0;
    if (aligned)  // mma.sync's main loop, or on sm_90a wgmma's
        main_loop<BN, kTransB, true>(acc, a, lda, b, ldb, m_left, n_left, K);
    else
        main_loop<BN, kTransB, false>(acc, a, lda, b, ldb, m_left, n_left, K);
#endif
}

}  // namespace

// C ABI entry points (cuda.declare_device(..., abi="c")), one per tile width and form of B;
// the int result is always 0. a_off / b_off: element offsets of the tile's first row / column
// in a / b. Sizes are 64-bit (what Numba passes); a tile's sizes and a matrix's K and N fit 32
// bits (launch_matmul sends larger ones to the CUDA-core kernel).
#define SIMACCEL_TILE_ENTRY(name, T, BN, kTransB)                                                                     \
    extern "C" __device__ int name(float* acc, const T* a, long long a_off, long long lda, const T* b,               \
                                   long long b_off, long long ldb, long long m_left, long long n_left, long long K) { \
        tile<BN, kTransB>(acc, a + a_off, lda, b + b_off, ldb, m_left, n_left, K);                                    \
        return 0;                                                                                                     \
    }
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_nk_128, __half, 128, true)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_kn_128, __half, 128, false)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_nk_256, __half, 256, true)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_kn_256, __half, 256, false)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_bf16_nk_128, __nv_bfloat16, 128, true)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_bf16_kn_128, __nv_bfloat16, 128, false)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_bf16_nk_256, __nv_bfloat16, 256, true)
SIMACCEL_TILE_ENTRY(simaccel_mma_tile_bf16_kn_256, __nv_bfloat16, 256, false)
#undef SIMACCEL_TILE_ENTRY

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The tile element of this thread's slot i on sm_90a: pairs of neighbours, consecutive threads
// on consecutive pairs.
__device__ __forceinline__ int slot_element(int i) { return (i >> 1) * (2 * THREADS) + 2 * (int)threadIdx.x + (i & 1); }
#endif

// The epilogue takes a thread's BN / 2 values as slots i = 0 .. BN / 2 - 1: simaccel_mma_acc
// gives slot i's value, simaccel_mma_cell its element of the tile. On sm_90a the main loop
// left the tile in shared memory, row-major, and slots are `slot_element`; elsewhere slot i
// is accumulator i, in `acc`.
extern "C" __device__ float simaccel_mma_acc(const float* acc, long long i, long long bn) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int e = slot_element((int)i), b = (int)bn;
    return reinterpret_cast<const float*>(aligned_shared())[e / b * (b + 8) + e % b];  // handoff_stride
#else
    return acc[i];
#endif
}

// Which element of a 128 x bn tile this thread's slot i is, as row * bn + column: the layout
// of the main loop compiled beside it (see the top of this file).
extern "C" __device__ int simaccel_mma_cell(long long i, long long bn) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    return slot_element((int)i);
#else
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = (int)i & 3;
    const int ni_count = (int)bn / 32;
    const int mi = (int)i / (ni_count * 4), ni = ((int)i >> 2) % ni_count;
    const int row = (warp >> 2) * 64 + mi * 16 + (lane >> 2) + 8 * (r >> 1);
    const int col = (warp & 3) * ((int)bn / 4) + ni * 8 + 2 * (lane & 3) + (r & 1);
    return row * (int)bn + col;
#endif
}
