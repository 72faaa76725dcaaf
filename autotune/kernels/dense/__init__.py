"""The dense GEMM op, C = A · B in bf16 or fp16 (`op.GemmOp`; the package is `dense` because
`autotune.kernels.gemm` is its run-time entry point): the search space and heuristic default (`space`),
the Triton kernels (`kernel`: tiled, with split-K; `tma`: Hopper TMA, persistent; `gemv`: A of at most 4
rows) and the entry points `gemm` and `linear` (`api`). What it shares with the other ops (helpers,
split-K, constraints, geometry) is `autotune.kernels.common`."""
