// The sliced-K reduction the float32 main loops of matmul_f32.cu (SlicedLoop) and conv2d_f32.cu
// (ConvLoop, GROUPS 4) share: each group of a block has multiplied its share of the K slices
// into a thread's 4 x 4 sums, and the groups' sums are added into the block's result tile.
//
// Included by both files: the function is __forceinline__ and internal to the file that
// includes it, so each main loop compiles to the code it had with the loop written out in it
// (the same PTX and SASS). NVRTC finds this header beside the file that includes it:
// simaccel.aot names a file by its path, and so does kernels/target.py's `cpp_link` for
// numba-cuda.
#pragma once

namespace {

// Group g's 4 x 4 sums `c` (rows ty * 4 + i, columns tx * 4 + j)
// added into `out`, the block's shared result tile of row stride LD, one group after the
// other: ((g0 + g1) + g2) + g3, the same order on every run. Every thread of the block calls it.
template <int GROUPS, int LD>
__device__ __forceinline__ void add_groups_in_order(float* out, const float (&c)[4][4], int g, int ty, int tx) {
    for (int h = 0; h < GROUPS; ++h) {
        if (g == h) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float* at = out + (ty * 4 + i) * LD + tx * 4 + j;
                    *at = h == 0 ? c[i][j] : *at + c[i][j];
                }
        }
        __syncthreads();
    }
}

}  // namespace
