"""What aiter's tuned tables share, whichever op's problems their rows are: the GPU each compute-unit count
(cu_num) names, and the backend their kernels are stored under."""

from __future__ import annotations

__all__ = ["AITER_BACKEND", "AITER_CU_DEVICES"]

#: The backend of aiter's kernels (a vendor library: its source is not ours).
AITER_BACKEND = "aiter"
#: The device (vLLM spelling) of each compute-unit count aiter records.
AITER_CU_DEVICES: dict[int, str] = {
    304: "AMD_Instinct_MI300X",
    256: "AMD_Instinct_MI355X",
    80: "AMD_Instinct_MI308X",
}
