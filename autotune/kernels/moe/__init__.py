"""The fused MoE op (`op.MoeOp`): its search space and default (`space`), its Triton kernel (`kernel`) and
the reference and baseline it is checked and timed against (`ref`)."""
