# Where the FP8 decode kernels' warps stall, instruction by instruction (GPU, Nsight Compute): ncu samples
# warp states on every SM, and `profile_stalls.py` prints each kernel's SASS lines with the most samples.
# DeepSeek-V3 gate/up at M = 16: the blockwise default, the blockwise default split 4 ways, the row-wise
# default; at M = 64 the blockwise default (the gluon kernel). Reports and CSVs go to $OUT (or ./bench-out).
out=${OUT:-bench-out}; mkdir -p "$out"
split='{"backend":"triton","BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"GROUP_M":1,"SPLIT_K":4,"FUSED_SPLIT":1,"STREAM_K":0,"SWAP_AB":1,"SCALES_AHEAD":1,"num_warps":4,"num_stages":3}'
run() {
  name=$1; shift
  ncu -k regex:gemm --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats \
      --warp-sampling-interval 0 -f -o "$out/$name" python benchmarks/profile_decode.py "$@" > "$out/$name.log" 2>&1
  grep rel_error "$out/$name.log"
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass > "$out/$name.csv" 2>&1
  python benchmarks/profile_stalls.py "$out/$name.csv" --name "$name"
}
run bw_ds16 --op gemm_fp8_blockwise --m 16 --n 4608 --k 7168
run bw_ds16_split4 --op gemm_fp8_blockwise --m 16 --n 4608 --k 7168 --config "$split"
run rw_ds16 --op gemm_fp8_rowwise --m 16 --n 4608 --k 7168
run bw_ds64 --op gemm_fp8_blockwise --m 64 --n 4608 --k 7168
