"""The run families: which builder makes each kind of run's affinity, and which code
names it takes.

An explicit table (:data:`RUN_FAMILIES`): each family maps the code names it
accepts to its builder's keyword arguments, so a code with a name that does not
apply to its kind of run is refused with the names that do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from rlframe.utils.launching.affinity.builders import (
    Affinity, build_async_affinity, build_async_cpu_affinity, build_cpu_affinity,
    build_gpu_affinity, build_multigpu_affinity,
)
from rlframe.utils.launching.affinity.codes import (
    ALTERNATING, ASYNC_SAMPLE, CODE_NAMES, CONTEXTS_PER_GPU, CPU_PER_RUN, CPU_PER_WORKER,
    CPU_RESERVED, GPU_PER_RUN, HYPERTHREAD_OFFSET, N_CPU_CORE, N_GPU, N_SOCKET,
    OPTIM_SAMPLE_SHARE_GPU, SAMPLE_GPU_PER_RUN, SET_AFFINITY,
)

__all__ = ["RunFamily", "RUN_FAMILIES", "run_family", "build_from_code_params"]


@dataclass(frozen=True)
class RunFamily:
    """One kind of run, the builder of its affinity and the code names it takes.

    Attributes:
        name: what the family is, for messages.
        builder: called as ``builder(run_slot, **keywords)``.
        keywords: code name -> the builder's keyword argument it is passed as.
    """
    name: str
    builder: Callable[..., Affinity]
    keywords: Mapping[str, str]

    def build(self, run_slot: int, params: Mapping[str, int], code: str) -> Affinity:
        """The builder's affinity for ``params`` (``{code name: number}`` of ``code``).

        Raises:
            ValueError: ``params`` holds names this family does not take.
        """
        extra = sorted(set(params) - set(self.keywords))
        if extra:
            raise ValueError(
                f"affinity code {code!r}: entries {extra} "
                f"({', '.join(CODE_NAMES[e].keyword for e in extra)}) do not apply to "
                f"{self.builder.__name__} ({self.name}); it takes {sorted(self.keywords)}.")
        return self.builder(run_slot, **{self.keywords[k]: v for k, v in params.items()})


def _same_names(*abbrevs: str) -> dict[str, str]:
    """Code names passed as the builder's keyword arguments of the same name."""
    return {abbrev: abbrev for abbrev in abbrevs}


_COMMON = (N_CPU_CORE, CPU_PER_WORKER, HYPERTHREAD_OFFSET, CPU_RESERVED, N_SOCKET, ALTERNATING,
           SET_AFFINITY)

RUN_FAMILIES: dict[str, RunFamily] = {family.name: family for family in (
    RunFamily("CPU-only runs", build_cpu_affinity,
              _same_names(*_COMMON, CPU_PER_RUN, N_GPU)),
    RunFamily("one GPU context per run", build_gpu_affinity,
              _same_names(*_COMMON, N_GPU, CONTEXTS_PER_GPU)),
    RunFamily("several GPUs per run", build_multigpu_affinity,
              _same_names(*_COMMON, N_GPU, GPU_PER_RUN)),
    RunFamily("asynchronous runs with GPUs", build_async_affinity,
              _same_names(*_COMMON, N_GPU, GPU_PER_RUN, SAMPLE_GPU_PER_RUN,
                          OPTIM_SAMPLE_SHARE_GPU)),
    RunFamily("asynchronous CPU-only runs", build_async_cpu_affinity,
              _same_names(*_COMMON, CPU_PER_RUN, N_GPU)),
)}


def run_family(params: Mapping[str, int], code: str) -> RunFamily:
    """The family of a decoded code (``{code name: number}``, run slot split off).

    Raises:
        ValueError: the code lacks the names its family needs (``cpu``; ``cpr``
            for CPU-only codes).
    """
    if N_CPU_CORE not in params:
        raise ValueError(f"affinity code {code!r} must give the number of cores ('<n>cpu').")
    is_async = params.get(ASYNC_SAMPLE, 0) > 0
    if params.get(N_GPU, 0) > 0:
        if is_async:
            return RUN_FAMILIES["asynchronous runs with GPUs"]
        if params.get(GPU_PER_RUN, 1) > 1:
            return RUN_FAMILIES["several GPUs per run"]
        return RUN_FAMILIES["one GPU context per run"]
    if CPU_PER_RUN not in params:
        raise ValueError(f"CPU-only affinity code {code!r} must give cores per run "
                         f"('<n>cpr').")
    return RUN_FAMILIES["asynchronous CPU-only runs" if is_async else "CPU-only runs"]


def build_from_code_params(run_slot: int, params: Mapping[str, int], code: str) -> Affinity:
    """The affinity of run ``run_slot`` from ``decode_affinity(code)``."""
    family = run_family(params, code)
    # ``ass`` chose the family; the builders do not take it.
    return family.build(run_slot, {k: v for k, v in params.items() if k != ASYNC_SAMPLE}, code)
