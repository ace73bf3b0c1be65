"""The affinity code string: its three-letter names, what each means, and its grammar.

A code is ``_``-joined tokens ``<int><name>``, e.g. ``"16cpu_8gpu_2gpr_24hto_2skt"``;
one run's code starts with its run slot, ``"<slot>slt_<code>"``. Each name
stands for one argument of :func:`~rlframe.utils.launching.affinity.encode_affinity`
(see :data:`CODE_NAMES`); the affinity builders take the names themselves as
keyword arguments (rlpyt's ``build_cpu_affinity(slt, cpu, cpr, ...)``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "N_GPU", "CONTEXTS_PER_GPU", "GPU_PER_RUN", "N_CPU_CORE", "HYPERTHREAD_OFFSET", "N_SOCKET",
    "RUN_SLOT", "CPU_PER_WORKER", "CPU_PER_RUN", "CPU_RESERVED", "ASYNC_SAMPLE",
    "SAMPLE_GPU_PER_RUN", "OPTIM_SAMPLE_SHARE_GPU", "ALTERNATING", "SET_AFFINITY", "ABBREVS",
    "CodeName", "CODE_NAMES", "describe", "decode_affinity", "prepend_run_slot",
    "remove_run_slot", "get_n_run_slots",
]

# Affinity code abbreviations (rlpyt's names).
N_GPU = "gpu"
CONTEXTS_PER_GPU = "cxg"  # Runs sharing one GPU.
GPU_PER_RUN = "gpr"  # Multi-GPU optimization.
N_CPU_CORE = "cpu"  # Physical cores, hyperthreads not counted.
HYPERTHREAD_OFFSET = "hto"  # Core c's hyperthread is c + hto; 0 turns hyperthreads off.
N_SOCKET = "skt"
RUN_SLOT = "slt"
CPU_PER_WORKER = "cpw"
CPU_PER_RUN = "cpr"  # CPU-only codes.
CPU_RESERVED = "res"  # Cores the master keeps away from the workers.
ASYNC_SAMPLE = "ass"
SAMPLE_GPU_PER_RUN = "sgr"
OPTIM_SAMPLE_SHARE_GPU = "oss"
ALTERNATING = "alt"
SET_AFFINITY = "saf"


@dataclass(frozen=True)
class CodeName:
    """One three-letter name of the affinity code.

    Attributes:
        abbrev: the name in the code (``"cpr"``); the builders' keyword argument.
        keyword: :func:`encode_affinity`'s argument it comes from (``"cpu_per_run"``).
        meaning: what its number says, for messages and readers.
    """
    abbrev: str
    keyword: str
    meaning: str


CODE_NAMES: dict[str, CodeName] = {name.abbrev: name for name in (
    CodeName(N_GPU, "n_gpu", "GPUs in use"),
    CodeName(CONTEXTS_PER_GPU, "contexts_per_gpu", "runs sharing each GPU"),
    CodeName(GPU_PER_RUN, "gpu_per_run", "GPUs per run (multi-GPU or async optimizer)"),
    CodeName(N_CPU_CORE, "n_cpu_core", "physical cores in use, hyperthreads not counted"),
    CodeName(HYPERTHREAD_OFFSET, "hyperthread_offset",
             "id distance from a core to its hyperthread (0: none)"),
    CodeName(N_SOCKET, "n_socket", "CPU sockets"),
    CodeName(RUN_SLOT, "run_slot", "which run of the machine this is"),
    CodeName(CPU_PER_WORKER, "cpu_per_worker", "cores per sampler worker"),
    CodeName(CPU_PER_RUN, "cpu_per_run", "cores per run (CPU-only codes)"),
    CodeName(CPU_RESERVED, "cpu_reserved", "cores kept for the master or each optimizer"),
    CodeName(ASYNC_SAMPLE, "async_sample", "1: asynchronous sampling and optimization"),
    CodeName(SAMPLE_GPU_PER_RUN, "sample_gpu_per_run", "async: sampler GPUs per run"),
    CodeName(OPTIM_SAMPLE_SHARE_GPU, "optim_sample_share_gpu",
             "async: 1 if the sampler uses the optimizer's GPUs"),
    CodeName(ALTERNATING, "alternating", "1: workers for an alternating sampler"),
    CodeName(SET_AFFINITY, "set_affinity", "0: leave processes unpinned"),
)}

# The names a code may hold after its run slot (rlpyt's list).
ABBREVS = [N_GPU, CONTEXTS_PER_GPU, GPU_PER_RUN, N_CPU_CORE, HYPERTHREAD_OFFSET, N_SOCKET,
           CPU_PER_RUN, CPU_PER_WORKER, CPU_RESERVED, ASYNC_SAMPLE, SAMPLE_GPU_PER_RUN,
           OPTIM_SAMPLE_SHARE_GPU, ALTERNATING, SET_AFFINITY]


def describe(abbrev: str) -> str:
    """``"cpu_per_run (cpr)"``: a code name as messages show it."""
    return f"{CODE_NAMES[abbrev].keyword} ({abbrev})"


def decode_affinity(affinity_code: str) -> dict[str, int]:
    """Parse an affinity code (without run slot) into ``{abbreviation: int}``.

    Raises:
        ValueError: a token is not ``<int><abbreviation>`` with a known abbreviation.
    """
    if not isinstance(affinity_code, str) or not affinity_code:
        raise ValueError(f"affinity_code must be a non-empty string such as '2cpu_0gpu_1cpr', "
                         f"got {affinity_code!r}.")
    params = {}
    for token in affinity_code.split("_"):
        abbrev, number = token[-3:], token[:-3]
        if abbrev == RUN_SLOT:
            raise ValueError(f"affinity code {affinity_code!r} starts with a run slot "
                             f"({token!r}); split it off with remove_run_slot() first.")
        if abbrev not in ABBREVS:
            raise ValueError(f"Unrecognized affinity code abbreviation {abbrev!r} in token "
                             f"{token!r} of {affinity_code!r}; known abbreviations: {ABBREVS}.")
        if not number.isdigit():
            raise ValueError(f"affinity code token {token!r} of {affinity_code!r} must be a "
                             f"non-negative integer followed by {abbrev!r}.")
        params[abbrev] = int(number)
    return params


def prepend_run_slot(run_slot: int, affinity_code: str) -> str:
    """Return ``"<run_slot>slt_" + affinity_code``."""
    return f"{run_slot}{RUN_SLOT}_" + affinity_code


def remove_run_slot(run_slot_affinity_code: str) -> tuple[int, str]:
    """Split ``"<slot>slt_<code>"`` into ``(slot, code)``.

    Raises:
        ValueError: the code does not start with a run-slot token.
    """
    slot_token, _, code = str(run_slot_affinity_code).partition("_")
    if slot_token[-3:] != RUN_SLOT or not slot_token[:-3].isdigit() or not code:
        raise ValueError(f"affinity code {run_slot_affinity_code!r} must start with a run slot "
                         f"token such as '0slt_' (see prepend_run_slot()).")
    return int(slot_token[:-3]), code


def get_n_run_slots(affinity_code: str) -> int:
    """Number of runs the code's machine holds at once (code without run slot)."""
    params = decode_affinity(affinity_code)
    gpu = params.get(N_GPU, 0)
    if gpu > 0 and params.get(ASYNC_SAMPLE, 0) > 0:
        oss = params.get(OPTIM_SAMPLE_SHARE_GPU, 0) > 0
        gpu_per_run = params.get(GPU_PER_RUN, 1) + (0 if oss else params.get(SAMPLE_GPU_PER_RUN, 0))
        return gpu // gpu_per_run
    if gpu > 0:
        return (gpu * params.get(CONTEXTS_PER_GPU, 1)) // params.get(GPU_PER_RUN, 1)
    if N_CPU_CORE not in params or CPU_PER_RUN not in params:
        raise ValueError(f"CPU-only affinity code {affinity_code!r} must give 'cpu' and 'cpr'.")
    return params[N_CPU_CORE] // params[CPU_PER_RUN]

# encode_affinity's argument for each abbreviation, for error messages.
_ARG_NAMES = {abbrev: name.keyword for abbrev, name in CODE_NAMES.items()}
