"""The quantized GEMM ops: inputs, input checks, reference, tolerance, search space and launches.

One class serves the five ops of `QUANT_OPS` (`autotune.kernels.quant.problem`); each op name has one
instance in OPS.
Inputs are (a, b, a_scale, b_scale) with B as (N, K):

| op | a | b | a_scale | b_scale |
|---|---|---|---|---|
| gemm_fp8_rowwise | (M, K) fp8 | (N, K) fp8 | (M, 1) or (1, 1) fp32 | (N, 1) or (1, 1) fp32 |
| gemm_fp8_blockwise | (M, K) fp8 | (N, K) fp8 | (M, K/128) fp32 | (cdiv(N, 128), K/128) fp32 |
| gemm_mxfp8 | (M, K) e4m3fn | (N, K) e4m3fn | (M, K/32) e8m0 (uint8) | (N, K/32) e8m0 |
| gemm_mxfp4 | (M, K/2) packed e2m1 (uint8) | (N, K/2) packed | (M, K/32) e8m0 | (N, K/32) e8m0 |
| gemm_mxfp4_bf16a | (M, K) bf16 | (N, K/2) packed | None | (N, K/32) e8m0 |

fp8 is the target's e4m3 (e4m3fnuz on gfx942, e4m3fn elsewhere) or explicitly e4m3fnuz (gfx942 only).
Bad inputs raise ValueError (TypeError for a non-tensor) before anything is launched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core.backend import Backend
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch, Recorder
from autotune.core.problem import Problem, cdiv
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.kernels.quant.backends import quant_backends
from autotune.kernels.quant.problem import QUANT_OPS, QuantRules
from autotune.kernels.quant.space import (
    mx_native,
    quant_default_candidates,
    quant_default_config,
    quant_space,
)

if TYPE_CHECKING:
    import torch

__all__ = ["QUANT_DEFAULT_MAX_M", "QUANT_GEMMS", "QuantGemmOp", "check_inputs"]

_OUT = {"bf16": "bfloat16", "fp16": "float16"}
_TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3}
_FP8_BLOCK = 128
#: Up to this M (per op) the FP8 GEMMs on NVIDIA GPUs run their heuristic default for a shape no table
#: covers, not torch._scaled_mm; above it the vendor library is the safe default. Timed as served, the
#: row-wise default beat `_scaled_mm` at every M up to 64, the blockwise default up to M = 32 but not at
#: M = 40 (BENCHMARKS.md, "Serve every M"; docs/notes/2026-11-27-serve-every-m-rules.md).
QUANT_DEFAULT_MAX_M = {"gemm_fp8_rowwise": 64, "gemm_fp8_blockwise": 32}
_VENDOR = Config(backend="torch")
_MX = {"gemm_mxfp8": ("e4m3", "e4m3"), "gemm_mxfp4": ("e2m1", "e2m1"), "gemm_mxfp4_bf16a": ("bf16", "e2m1")}


#: A Triton kernel's launcher of one config, recording into the list given (`QuantGemmOp._kernel_launch`).
Launcher = Callable[[Config, Target, "list[KernelCall] | None"], Any]


def _out_dtype(name: str) -> torch.dtype:
    import torch

    return getattr(torch, _OUT[name])


def _arch(target: Target) -> str:
    return "interpreter" if target.interpreter else target.arch


def _expected(problem: Problem, arch: str) -> list[tuple[str, tuple[tuple[int, ...], ...], Any]]:
    """(name, allowed shapes, dtype) of a, b, a_scale and b_scale; dtype None for a_scale: must be None."""
    import torch

    from autotune.kernels.common.formats import MX_BLOCK, fp8_dtype

    M, N, K, op = problem.M, problem.N, problem.K, problem.op
    if op.startswith("gemm_fp8"):
        fp8 = fp8_dtype(problem.dtype_a, arch)
        if op == "gemm_fp8_rowwise":
            sa: tuple[tuple[int, ...], ...] = ((M, 1), (1, 1))
            sb: tuple[tuple[int, ...], ...] = ((N, 1), (1, 1))
        else:
            sa, sb = ((M, K // _FP8_BLOCK),), ((cdiv(N, _FP8_BLOCK), K // _FP8_BLOCK),)
        return [("a", ((M, K),), fp8), ("b", ((N, K),), fp8), ("a_scale", sa, torch.float32),
                ("b_scale", sb, torch.float32)]  # fmt: skip
    a_fmt, b_fmt = _MX[op]
    g = K // MX_BLOCK
    data = {"e4m3": (K, torch.float8_e4m3fn), "e2m1": (K // 2, torch.uint8), "bf16": (K, torch.bfloat16)}
    ka, adt = data[a_fmt]
    kb, bdt = data[b_fmt]
    a_scale = ("a_scale", ((M, g),), torch.uint8) if a_fmt != "bf16" else ("a_scale", (), None)
    return [("a", ((M, ka),), adt), ("b", ((N, kb),), bdt), a_scale, ("b_scale", ((N, g),), torch.uint8)]


def check_inputs(problem: Problem, arch: str, inputs: Inputs) -> None:
    """ValueError naming the first input whose shape, dtype or device does not fit `problem` on `arch`
    (scales included); TypeError for something that is not a tensor."""
    import torch

    if len(inputs) != 4:
        raise ValueError(f"{problem.op} takes (a, b, a_scale, b_scale), got {len(inputs)} inputs")
    device = None
    for (name, shapes, dtype), t in zip(_expected(problem, arch), inputs, strict=True):
        if dtype is None:
            if t is not None:
                raise ValueError(f"{problem.op}: a_scale must be None (the kernel quantizes A itself)")
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{problem.op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            raise ValueError(f"{problem.op}: {name} must be {dtype} on {arch}, got {t.dtype}")
        if tuple(t.shape) not in shapes:
            want = " or ".join(str(s) for s in shapes)
            raise ValueError(f"{problem.op}: {name} must have shape {want}, got {tuple(t.shape)}")
        if device is not None and t.device != device:
            raise ValueError(f"{problem.op}: {name} is on {t.device}, not {device} like a")
        device = t.device


class QuantGemmOp(QuantRules):
    """A quantized GEMM C (M, N) = dequant(A) · dequant(B)ᵀ in bf16 or fp16 (see the module docstring).

    Backends (`records`, declared by `backends.quant_backends`): "triton" (our kernel: `quant.kernel` or
    `quant.mx`), "torch" (torch._scaled_mm, where the installed torch runs the scaling mode: probed),
    "aiter" on AMD (where importable), "gluon" for gemm_fp8_blockwise on Hopper (`quant.gluon`, where
    Triton has Gluon; a gluon config elsewhere is a ValueError at `prepare`), and for the FP8 ops
    "triton_tma" (`quant.tma`) and "triton_gemv" (`quant.gemv`, A of at most 4 rows).
    `native_mx` forces the MX path (None: the target decides, `mx_native`). Stateless and thread-safe.
    """

    def __init__(self, name: str, native_mx: bool | None = None) -> None:
        if name not in QUANT_OPS:
            raise ValueError(f"unknown quantized GEMM {name!r}; known: {', '.join(QUANT_OPS)}")
        self.name = name
        self.native_mx = native_mx
        self.records = quant_backends(self)

    def __repr__(self) -> str:
        return f"QuantGemmOp({self.name!r})"

    def backends(self, target: Target) -> tuple[str, ...]:
        return self.records.names(target)

    def backend(self, name: str) -> Backend:
        return self.records[name]

    def source_hash(self, backend: str) -> str:
        return self.records[backend].source_hash()

    def check_problem(self, problem: Problem, target: Target | None = None) -> None:
        """ValueError unless `problem` is this op's, with an FP8 flavour `target` supports."""
        if problem.op != self.name:
            raise ValueError(f"{self.name} got a {problem.op} problem")
        if target is not None and problem.op.startswith("gemm_fp8"):
            from autotune.kernels.common.formats import fp8_dtype

            fp8_dtype(problem.dtype_a, _arch(target))

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        self.check_problem(problem, target)
        return quant_space(problem, target, self.records, backends)

    def default_candidates(self, problem: Problem, target: Target) -> tuple[Config, ...]:
        self.check_problem(problem, target)
        return quant_default_candidates(problem, target)

    def default_config(self, problem: Problem, target: Target) -> Config:
        return quant_default_config(problem, target)

    def fallback_config(self, problem: Problem, target: Target) -> Config:
        """torch._scaled_mm where this op's space on `target` holds it (the installed torch runs the op's
        scaling mode at this M: probed), except for the FP8 ops on NVIDIA GPUs at M <=
        QUANT_DEFAULT_MAX_M[op]; else (MX formats on sm_90, gemm_mxfp4_bf16a, ...) the heuristic default."""
        decode_max = QUANT_DEFAULT_MAX_M.get(problem.op, 0)
        if target.is_nvidia and decode_max >= problem.M:
            return quant_default_config(problem, target)
        if _VENDOR in self.space(problem, target, ("torch",)):
            return _VENDOR
        return quant_default_config(problem, target)

    def make_inputs(self, problem: Problem, device: str, seed: int) -> Inputs:
        import torch

        import autotune.kernels.common.formats as quant

        self.check_problem(problem)
        M, N, K, op = problem.M, problem.N, problem.K, problem.op
        gen = torch.Generator(device=device).manual_seed(seed)  # drawn and quantized where they are used
        x = torch.randn(M, K, generator=gen, device=device)
        w = torch.randn(N, K, generator=gen, device=device) * K**-0.5
        if op.startswith("gemm_fp8"):
            fp8 = quant.fp8_dtype(problem.dtype_a, quant.device_arch(device))
            blocks = ((1, 0), (1, 0)) if op == "gemm_fp8_rowwise" else ((1, _FP8_BLOCK), (_FP8_BLOCK,) * 2)
            a, sa = quant.quantize_fp8(x, fp8, blocks[0])
            b, sb = quant.quantize_fp8(w, fp8, blocks[1])
        else:
            a_fmt, b_fmt = _MX[op]
            b, sb = quant.quantize_mx(w, b_fmt)
            if a_fmt == "bf16":
                a, sa = x.to(torch.bfloat16), None
            else:
                a, sa = quant.quantize_mx(x, a_fmt)
        moved = [t if t is None else t.to(device) for t in (a, b, sa, sb)]
        return moved  # type: ignore[return-value]

    def make_output(self, problem: Problem, device: str) -> torch.Tensor:
        import torch

        return torch.empty(problem.M, problem.N, device=device, dtype=_out_dtype(problem.dtype_out))

    def dequantized(self, problem: Problem, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """A and B in fp32 exactly as the kernel reads them (bf16 activations quantized as the kernel
        quantizes them)."""
        import autotune.kernels.common.formats as quant

        a, b, sa, sb = inputs
        op = problem.op
        if op.startswith("gemm_fp8"):
            blocks = ((1, 0), (1, 0)) if op == "gemm_fp8_rowwise" else ((1, _FP8_BLOCK), (_FP8_BLOCK,) * 2)
            return quant.dequantize_fp8(a, sa, blocks[0]), quant.dequantize_fp8(b, sb, blocks[1])
        a_fmt, b_fmt = _MX[op]
        if a_fmt == "bf16":
            a, sa = quant.quantize_mx(a.float(), "e2m1")
            a_fmt = "e2m1"
        return quant.dequantize_mx(a, sa, a_fmt), quant.dequantize_mx(b, sb, b_fmt)

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        a, b = self.dequantized(problem, inputs)
        return a @ b.t()

    def tolerance(self, problem: Problem) -> float:
        return _TOLERANCE[problem.dtype_out]

    #: The module of the op's run-time entry point, whose `entry_launch` launches its own call
    #: (`autotune.kernels.served_launch`); named, not imported, so that the op needs no torch.
    entry_module = "autotune.kernels.quant.api"
    #: The module of the ops' parts of other projects' files (aiter's FP8 GEMM tables, TunableOp's scaled
    #: GEMM results): named, not imported (it imports the database).
    format_modules = ("autotune.kernels.quant.formats",)

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        self.check_problem(problem, target)
        check_inputs(problem, _arch(target), inputs)
        if tuple(out.shape) != (problem.M, problem.N) or out.dtype != _out_dtype(problem.dtype_out):
            raise ValueError(f"{self.name}: out must be ({problem.M}, {problem.N}) {problem.dtype_out}")
        return self.records[config.backend].launch(problem, config, target, inputs, out)

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        import torch

        record = self.records[config.backend]
        if record.library:
            return []
        self.check_problem(problem, target)
        inputs: Any = [
            None if dtype is None else torch.empty(shapes[0], device="meta", dtype=dtype)
            for _, shapes, dtype in _expected(problem, _arch(target))
        ]
        out = torch.empty(problem.M, problem.N, device="meta", dtype=_out_dtype(problem.dtype_out))
        calls: list[KernelCall] = []
        record.launch(problem, config, target, inputs, out, calls)()
        return calls

    def _gluon_launch(
        self, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
        calls: list[KernelCall] | None = None,
    ) -> Launch:  # fmt: skip
        """The Gluon kernel's launch, descriptors built here (once per prepare); ValueError where it
        cannot run: another op or arch, no Gluon in this Triton, a config or an operand layout it refuses."""
        if config.backend not in self.backends(target):
            raise ValueError(
                f"the gluon backend runs gemm_fp8_blockwise on NVIDIA Hopper (sm_90) only, not {self.name} "
                f"on {_arch(target)}: {config.short()}"
            )
        from autotune.kernels.quant.space import gluon_missing

        missing = gluon_missing()
        if missing:
            raise ValueError(f"{self.name} config {config.short()}: {missing}")
        from autotune.kernels.quant.gluon import gluon_fp8_blockwise_kernel, gluon_launcher

        kernel = None if calls is None else Recorder(gluon_fp8_blockwise_kernel, calls)
        launcher = gluon_launcher(config, num_sms=target.cu_count, kernel=kernel)
        a, b, sa, sb = inputs
        return launcher.bind(a, b, sa, sb, out)

    def _kernel_launch(
        self,
        make: Launcher,
        problem: Problem,
        config: Config,
        target: Target,
        inputs: Inputs,
        out: torch.Tensor,
        calls: list[KernelCall] | None = None,
    ) -> Launch:
        """A launch of one of the op's Triton kernels: `make(config, target, calls)` is its launcher."""
        import torch

        a, b, sa, sb = inputs
        if calls is None:  # built once per (op, config, target): `gemm_quant` prepares a launch per call
            from autotune.kernels.launch import pinning

            key = (self.name, self.native_mx, config, target.arch, target.cu_count, pinning())
            run = _launchers.get(key)
            if run is None:
                run = make(config, target, None)
                if len(_launchers) >= 1024:
                    _launchers.clear()
                _launchers[key] = run
        else:
            run = make(config, target, calls)
        strides: tuple[int, ...]
        if self.name == "gemm_fp8_blockwise":
            strides = (sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))
        elif self.name == "gemm_fp8_rowwise":  # per row, or 0: one scale for the whole tensor
            strides = (sa.stride(0) if sa.numel() > 1 else 0, 0, sb.stride(0) if sb.numel() > 1 else 0, 0)
        else:
            strides = (sa.stride(0), sa.stride(1)) if sa is not None else (0, 0)
            strides = (*strides, sb.stride(0), sb.stride(1))
        split_k = int(config.get("SPLIT_K", 1))
        M, N, K = problem.M, problem.N, problem.K
        workspace = None
        if split_k > 1 and not config.get("FUSED_SPLIT", 0):  # the reduce kernel sums the K slices
            workspace = torch.empty(split_k * M * N, device=out.device, dtype=torch.float32)
            if not out.is_contiguous():
                raise ValueError(f"SPLIT_K={split_k} reduces into a contiguous C; got strides {out.stride()}")
        args = (a, b, out, sa, sb, strides, M, N, K, workspace)

        def launch() -> None:
            run(*args)

        return launch

    def _gemv_launcher(self, config: Config, target: Target, calls: list[KernelCall] | None) -> Any:
        """The FP8 GEMV kernel's launch for `config` (recording into `calls` if given)."""
        from autotune.kernels.quant.gemv import gemv_fp8_kernel, gemv_fp8_launcher

        return gemv_fp8_launcher(
            config, blockwise=self.name == "gemm_fp8_blockwise",
            kernel=None if calls is None else Recorder(gemv_fp8_kernel, calls),
        )  # fmt: skip

    def _tma_launcher(self, config: Config, target: Target, calls: list[KernelCall] | None) -> Any:
        """The FP8 TMA kernel's launch for `config` (recording into `calls` if given); ValueError where
        it does not exist."""
        if config.backend not in self.backends(target):
            raise ValueError(f"{self.name} has no TMA kernel on {_arch(target)}: {config.short()}")
        from autotune.kernels.common.splitk import splitk_reduce_kernel
        from autotune.kernels.quant.tma import fp8_tma_launcher, gemm_fp8_tma_kernel

        kernels = None if calls is None else (Recorder(gemm_fp8_tma_kernel, calls),
                                              Recorder(splitk_reduce_kernel, calls))  # fmt: skip
        interpret = target.interpreter
        blockwise = self.name == "gemm_fp8_blockwise"
        return fp8_tma_launcher(
            config, num_sms=target.cu_count, interpret=interpret, kernels=kernels, blockwise=blockwise
        )

    def _pointer_launcher(self, config: Config, target: Target, calls: list[KernelCall] | None) -> Any:
        """`quant_launcher` of this op's kernel and mode for `config` (recording into `calls` if given)."""
        from autotune.kernels.common.splitk import splitk_reduce_kernel
        from autotune.kernels.quant.kernel import quant_launcher

        constexprs: dict[str, Any] = {"DOT_F32": True} if target.interpreter else {}
        if self.name.startswith("gemm_fp8"):
            from autotune.kernels.quant.kernel import FP8_SCALE_BLOCK, gemm_fp8_kernel

            kernel: Any = gemm_fp8_kernel
            constexprs.update(BLOCKWISE=self.name == "gemm_fp8_blockwise", SCALE_BLOCK=FP8_SCALE_BLOCK)
        else:
            from autotune.kernels.quant.mx import gemm_mx_kernel

            kernel = gemm_mx_kernel
            a_fmt, b_fmt = _MX[self.name]
            native = mx_native(target) if self.native_mx is None else self.native_mx
            constexprs.update(A_FMT=a_fmt, B_FMT=b_fmt, NATIVE=native)
            if int(config.get("HW_FP4_CVT", 0)):  # the interpreter runs the instruction's model
                if not (target.arch == "gfx950" or target.interpreter):
                    raise ValueError(
                        f"HW_FP4_CVT needs gfx950's v_cvt_scalef32_pk_fp4_bf16, not {target.arch}: "
                        f"{config.short()}"
                    )
                constexprs["CVT_MODEL"] = target.interpreter
        reduce: Any = splitk_reduce_kernel
        summer: Any = None
        if calls is not None:
            from autotune.kernels.quant.kernel import gemm_fp8_sum_kernel

            kernel, reduce = Recorder(kernel, calls), Recorder(splitk_reduce_kernel, calls)
            summer = Recorder(gemm_fp8_sum_kernel, calls)
        return quant_launcher(
            kernel, config, is_amd=target.is_amd, constexprs=constexprs, reduce_kernel=reduce,
            sum_kernel=summer, num_sms=target.cu_count,
        )  # fmt: skip


#: Launch functions by (op, config, target): `gemm_quant` prepares a launch per call.
_launchers: dict[tuple[Any, ...], Any] = {}

#: One op per quantized GEMM.
QUANT_GEMMS: dict[str, QuantGemmOp] = {name: QuantGemmOp(name) for name in QUANT_OPS}
