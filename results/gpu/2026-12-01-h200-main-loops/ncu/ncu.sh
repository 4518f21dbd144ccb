SECTIONS="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats"
run() {
  echo "===== $1 (kernel $2)" >> $OUT/ncu.txt
  timeout 40 /usr/local/cuda/bin/ncu $SECTIONS -k regex:$2 -c 1 python3 -P scripts/profile_ops_gpu.py "$1" >> $OUT/ncu.txt 2>&1
  echo "===== rc=$?" >> $OUT/ncu.txt
}
run "conv 14x14x256->256 3x3 b8" _conv2d_gemm
run "softmax 32768x1024" _softmax_rows
run "layer_norm 32768x1024" _layer_norm_rows
run "mean spatial b64x512x56x56" _row_sum
run "add broadcast 64M" _binary
run "permute (0,2,1,3) 64x512x16x64" _gather
run "max_pool 3x3/2 b8x64x112x112" _max_pool2d
