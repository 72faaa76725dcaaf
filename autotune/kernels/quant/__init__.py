"""The quantized GEMMs (FP8 row-wise and blockwise, MXFP8, MXFP4, MXFP4 with bf16 activations): the op
(`op.QuantGemmOp`), the search space and defaults (`space`), the Triton kernels (`kernel`, `tma`, `gemv`,
`mx`), the Gluon kernel for Hopper (`gluon`), the vendor backends (`vendor`) and the run-time entry point
`gemm_quant` (`api`). The operand formats are `autotune.kernels.common.formats`, which the MoE shares."""
