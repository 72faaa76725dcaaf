# The gluon kernel swapped (SWAP_AB: the weight's rows on wgmma's M side, the activations' on its N side)
# against the blockwise decode default, on the 7 dense layers of DeepSeek-V3 and Llama-3.1-70B at TP 8 and
# M = 16, 32, 64 (GPU): `config_grid.py` over a grid of swapped gluon configs, each checked against the
# reference first. Prints each row's default and best swapped config last; JSON per M goes to $OUT.
out=${OUT:-bench-out}
layers="1536,7168 7168,2048 4608,7168 7168,2304 1280,8192 7168,8192 8192,3584"
grid="--grid BLOCK_N=64,128 --grid num_stages=6,8 --grid SPLIT_K=1,2,4 --grid WARP_SPEC=0,1"
for m in 16 32 64; do
  base='{"backend":"gluon","BLOCK_M":'$m',"BLOCK_N":64,"num_warps":4,"num_stages":6,"PERSISTENT":0,"GROUP_M":1,"WARP_SPEC":0,"SPLIT_K":1,"SWAP_AB":1}'
  rows=""; for nk in $layers; do rows="$rows $m,$nk"; done
  python benchmarks/config_grid.py --op gemm_fp8_blockwise --rows $rows --base "$base" $grid --out "$out/m$m" \
    | grep -E "^M=|copy"
done
