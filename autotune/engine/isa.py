"""The instruction mix of a compiled kernel: its instructions counted by class, from AMDGPU assembly or
from PTX. Pure functions over text.

Counts are static: each instruction of the binary counts once, however often a loop runs it. The classes
(`autotune.core.static.MIX_CLASSES`, which says what each counts) are the same on both vendors; a class
a vendor's text cannot show stays at zero.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["amd_mix", "ptx_mix"]

_OPCODE = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_:]+)*;?$")
_AMD_LABEL = re.compile(r"^[A-Za-z_][\w.$]*:")
_AMD_SGPR_SPILLS = re.compile(r"^\s*\.sgpr_spill_count:\s+(\d+)")
_AMD_MMA = ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")
_AMD_CTRL = re.compile(
    r"^s_(?:waitcnt|wait_|barrier|nop|branch|cbranch|endpgm|setprio|sleep|sendmsg|trap|sethalt|"
    r"icache_inv|delay_alu|clause|set_inst_prefetch|setpc|swappc|call|code_end)"
)
_AMD_SMEM = re.compile(r"^s_(?:buffer_)?(?:load|store|atomic|prefetch)|^s_(?:dcache|scratch_)")


def amd_mix(asm: str) -> dict[str, int]:
    """The instruction mix of the kernel in AMDGPU assembly `asm` (`kernel.asm["amdgcn"]`).

    Only the function body counts: from the kernel's label to `.Lfunc_end`, without directives, labels
    and comments. SGPR spills are lane writes and reads (`v_writelane_b32`, `v_readlane_b32`): counted as
    `spill` where the kernel's metadata reports spilled SGPRs, else as `valu` (a cross-lane read).
    """
    spilled_sgprs = any(int(m.group(1)) for m in map(_AMD_SGPR_SPILLS.match, asm.splitlines()) if m)
    counts: Counter[str] = Counter()
    body = False
    for line in asm.splitlines():
        text = line.strip()
        if not body:
            body = bool(_AMD_LABEL.match(line)) and not text.startswith(".")
            continue
        if text.startswith(".Lfunc_end"):
            break
        op = _opcode(text, ";")
        if op:
            counts[_amd_class(op, text, spilled_sgprs)] += 1
    return dict(counts)


def _amd_class(op: str, text: str, spilled_sgprs: bool) -> str:
    comment = text.split(";", 1)[1] if ";" in text else ""
    if op.startswith(_AMD_MMA) and not op.startswith("v_mfma_ld_scale"):
        return "mma"
    if op.startswith("scratch_") or "Spill" in comment or "Reload" in comment:
        return "spill"
    if op.startswith(("v_writelane", "v_readlane")):
        return "spill" if spilled_sgprs else "valu"
    if op.startswith("v_accvgpr_"):
        return "agpr"
    if op.startswith(("global_", "buffer_", "flat_", "image_")):
        return "vmem"
    if op.startswith("ds_"):
        return "lds"
    if op.startswith("v_"):
        return "valu"
    if op.startswith("s_"):
        if _AMD_CTRL.match(op):
            return "ctrl"
        return "smem" if _AMD_SMEM.match(op) else "salu"
    return "other"


_PTX_PRED = re.compile(r"^@!?%\w+\s+")
_PTX_CTRL = ("bra", "bar", "barrier", "ret", "exit", "membar", "fence", "mbarrier", "elect", "trap",
             "griddepcontrol", "setmaxnreg", "nanosleep", "call", "wgmma")  # fmt: skip
_PTX_GROUPS = re.compile(r"^cp\.async\.(?:bulk\.)?(?:commit_group|wait_group)|^cp\.async\.mbarrier")


def ptx_mix(ptx: str) -> dict[str, int]:
    """The instruction mix of PTX text (`kernel.asm["ptx"]`), directives, labels and comments skipped.

    PTX is not the final ISA: ptxas schedules, fuses and expands it, so these counts are those of the
    virtual ISA, comparable between configs of one kernel and not with SASS or AMD counts. ptxas also
    decides the spills, which PTX never shows: `spill` counts only the local loads and stores in the PTX
    (the features' `spills` come from the binary). Whatever is not memory, matrix or control counts as
    `valu`; `salu` and `agpr` stay at zero.
    """
    counts: Counter[str] = Counter()
    for line in ptx.splitlines():
        text = _PTX_PRED.sub("", line.strip())
        op = _opcode(text, "//")
        if op:
            counts[_ptx_class(op.rstrip(";"))] += 1
    return dict(counts)


def _ptx_class(op: str) -> str:
    parts = op.split(".")
    head = parts[0]
    memory = head in ("ld", "st", "atom", "red")
    if op.startswith(("mma.", "wgmma.mma_async", "tcgen05.mma")):
        return "mma"
    if head in ("ldmatrix", "stmatrix") or (memory and any(p.startswith("shared") for p in parts)):
        return "lds"
    if memory and "local" in parts:
        return "spill"
    if memory and ("param" in parts or "const" in parts):
        return "smem"
    if _PTX_GROUPS.match(op) or head in _PTX_CTRL:
        return "ctrl"
    if head in ("ld", "st", "atom", "red", "prefetch", "multimem", "cp"):
        return "vmem"
    return "valu"


def _opcode(text: str, comment: str) -> str:
    """The opcode of an instruction line, or "" for a directive, label, comment or continuation."""
    if not text or text.startswith((".", comment, "$")):
        return ""
    first = text.split(comment, 1)[0].split(None, 1)
    if not first:
        return ""
    op = first[0]
    return op if _OPCODE.match(op) and not op.endswith(":") else ""
