# Profiles the FP8 decode defaults under ncu (GPU): blockwise against row-wise on DeepSeek-V3 gate/up at
# M = 16 and Llama-3.1-70B down at M = 64. Details per kernel go to $OUT (or ./bench-out).
out=${OUT:-bench-out}; mkdir -p "$out"
metrics="regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,smsp__inst_executed_op_shared_ld.sum,dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
run() {
  name=$1; shift
  ncu -k regex:gemm --launch-skip 2 --launch-count 1 --page raw --metrics "$metrics" \
      python benchmarks/profile_decode.py "$@" > "$out/$name.txt" 2>&1
  echo "== $name"; grep -E 'rel_error|gpu__time|inst_executed|dram__bytes|lts__t_bytes|issue_active' "$out/$name.txt"
  grep -E 'stalled' "$out/$name.txt" | sort -k3 -g -r | head -8
}
run bw_ds16 --op gemm_fp8_blockwise --m 16 --n 4608 --k 7168
run rw_ds16 --op gemm_fp8_rowwise --m 16 --n 4608 --k 7168
run bw_ll64 --op gemm_fp8_blockwise --m 64 --n 8192 --k 3584
run rw_ll64 --op gemm_fp8_rowwise --m 64 --n 8192 --k 3584
