python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
run() { name=$1; shift; ncu -k regex:gemm --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats python benchmarks/profile_decode.py "$@" > $OUT/$name.txt 2>&1; echo "== $name"; grep -E 'rel_error|Duration|DRAM Throughput|Memory Throughput|Grid Size|Registers Per|Achieved Occupancy|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Shared Memory Configuration Size|Dynamic Shared' $OUT/$name.txt | head -30; }
run bw_ds16 --op gemm_fp8_blockwise --m 16 --n 4608 --k 7168
run rw_ds16 --op gemm_fp8_rowwise --m 16 --n 4608 --k 7168
run bw_ll64 --op gemm_fp8_blockwise --m 64 --n 8192 --k 3584
run rw_ll64 --op gemm_fp8_rowwise --m 64 --n 8192 --k 3584
