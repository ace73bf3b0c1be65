"""Affinity codes and the dicts built from them: rlpyt's layouts, CPU-only async, clear errors.

Validating and pinning are tested in test_pinning.py.
"""
import io

import pytest

from rlframe.utils.collections import AttrDict
from rlframe.utils.launching import affinity as aff
from rlframe.utils.launching.affinity import machine
from rlframe.utils.launching.affinity import (
    affinity_from_code, build_async_affinity, build_cpu_affinity, decode_affinity,
    encode_affinity, get_master_cpus, get_n_run_slots, get_workers_cpus, make_affinity,
    prepend_run_slot, quick_affinity_code, remove_run_slot,
)

# Machine facts passed explicitly so results do not depend on the test machine.
NO_HT = dict(hyperthread_offset=0, n_socket=1)


def sync(master, workers, threads=None, cpw=1, alt=False, saf=True, **extra):
    """Expected synchronous affinity dict."""
    return dict(all_cpus=master, master_cpus=master, workers_cpus=workers,
                master_torch_threads=threads if threads is not None else len(master),
                worker_torch_threads=cpw, alternating=alt, set_affinity=saf, **extra)


def assert_same(result, expected):
    """Equal, with AttrDicts for dicts and tuples for CPU groups (as rlpyt returns them)."""
    assert result == expected
    if isinstance(expected, list):
        for r, e in zip(result, expected):
            assert_same(r, e)
    elif isinstance(expected, dict):
        for key, value in expected.items():
            if isinstance(value, (dict, list)):
                assert_same(result[key], value)
            elif isinstance(value, tuple):
                assert type(result[key]) is tuple, key
                assert all(type(v) in (int, tuple) for v in result[key]), key


# --- Codes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,code", [
    (dict(n_cpu_core=2, n_gpu=0, cpu_per_run=1, hyperthread_offset=0, n_socket=1),
     "2cpu_0gpu_1cpr_0hto"),
    (dict(n_cpu_core=2, n_gpu=0, cpu_per_run=1, hyperthread_offset=2, n_socket=1),
     "2cpu_0gpu_1cpr"),
    (dict(n_cpu_core=16, n_gpu=8, gpu_per_run=2, n_socket=2, hyperthread_offset=24),
     "16cpu_8gpu_2gpr_24hto_2skt"),
    (dict(n_cpu_core=12, n_gpu=2, contexts_per_gpu=2, cpu_per_worker=2, cpu_reserved=1,
          alternating=True, set_affinity=False, **NO_HT),
     "12cpu_2gpu_2cxg_2cpw_0hto_1res_1alt_0saf"),
    (dict(n_cpu_core=8, n_gpu=2, sample_gpu_per_run=1, async_sample=True, **NO_HT),
     "8cpu_2gpu_0hto_1ass_1sgr"),
    (dict(n_cpu_core=8, n_gpu=2, gpu_per_run=2, optim_sample_share_gpu=True, async_sample=True,
          hyperthread_offset=8, n_socket=1),
     "8cpu_2gpu_2gpr_1ass_1oss"),
    (dict(n_cpu_core=4, n_gpu=0, cpu_per_run=4, async_sample=True, **NO_HT),
     "4cpu_0gpu_4cpr_0hto_1ass"),
])
def test_encode(kwargs, code):
    assert encode_affinity(**kwargs) == code


def test_encode_with_run_slot():
    assert encode_affinity(n_cpu_core=4, n_gpu=2, run_slot=1, **NO_HT) == "1slt_4cpu_2gpu_0hto"


@pytest.mark.parametrize("code,n_slots", [
    ("16cpu_8gpu_2gpr_24hto_2skt", 4),
    ("4cpu_0gpu_2cpr_0hto", 2),
    ("8cpu_2gpu_2cxg_0hto", 4),
    ("8cpu_4gpu", 4),
    ("8cpu_4gpu_0hto_1ass_1sgr", 2),
    ("8cpu_2gpu_2gpr_1ass_1oss", 1),
    ("4cpu_0gpu_2cpr_0hto_1ass", 2),
])
def test_get_n_run_slots(code, n_slots):
    assert get_n_run_slots(code) == n_slots


def test_decode_prepend_remove_round_trip():
    code = "12cpu_2gpu_2cxg_2cpw_0hto_2skt_1res_1alt_0saf"
    assert decode_affinity(code) == dict(cpu=12, gpu=2, cxg=2, cpw=2, hto=0, skt=2, res=1, alt=1,
                                         saf=0)
    slot_code = prepend_run_slot(3, code)
    assert slot_code == "3slt_" + code
    assert remove_run_slot(slot_code) == (3, code)
    assert encode_affinity(n_cpu_core=12, n_gpu=2, contexts_per_gpu=2, cpu_per_worker=2,
                           cpu_reserved=1, alternating=True, set_affinity=False,
                           hyperthread_offset=0, n_socket=2) == code


# --- Worked results --------------------------------------------------------------------------

def test_cpu_runs_without_hyperthreads():
    code = encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1, **NO_HT)
    assert_same(affinity_from_code(prepend_run_slot(0, code)), sync((0,), ((0,),)))
    assert_same(affinity_from_code(prepend_run_slot(1, code)), sync((1,), ((1,),)))
    assert isinstance(affinity_from_code(prepend_run_slot(0, code)), AttrDict)
    # rlpyt's encode only let CPU codes take slot 0; every slot of the machine works here.
    assert_same(make_affinity(run_slot=1, n_cpu_core=2, n_gpu=0, **NO_HT), sync((1,), ((1,),)))


def test_cpu_runs_with_hyperthreads():
    code = encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1, hyperthread_offset=2, n_socket=1)
    assert_same(affinity_from_code(prepend_run_slot(0, code)), sync((0, 2), ((0, 2),), threads=1))
    assert_same(affinity_from_code(prepend_run_slot(1, code)), sync((1, 3), ((1, 3),), threads=1))


def test_multigpu_two_sockets():
    kwargs = dict(n_cpu_core=16, n_gpu=8, gpu_per_run=2, n_socket=2, hyperthread_offset=24)
    assert_same(make_affinity(run_slot=0, **kwargs), [
        sync((0, 1, 24, 25), ((0, 24), (1, 25)), threads=2, cuda_idx=0),
        sync((2, 3, 26, 27), ((2, 26), (3, 27)), threads=2, cuda_idx=1),
    ])
    assert_same(make_affinity(run_slot=3, **kwargs), [
        sync((16, 17, 40, 41), ((16, 40), (17, 41)), threads=2, cuda_idx=6),
        sync((18, 19, 42, 43), ((18, 42), (19, 43)), threads=2, cuda_idx=7),
    ])


def test_alternating_without_hyperthreads_duplicates_workers():
    result = make_affinity(n_cpu_core=4, n_gpu=0, cpu_per_run=4, alternating=True, **NO_HT)
    workers = ((0,), (1,), (2,), (3,), (0,), (1,), (2,), (3,))
    assert_same(result, sync((0, 1, 2, 3), workers, threads=4, alt=True))


def test_contexts_per_gpu_spread_over_gpus_first():
    result = make_affinity(run_slot=1, n_cpu_core=8, n_gpu=2, contexts_per_gpu=2, **NO_HT)
    assert_same(result, sync((4, 5), ((4,), (5,)), cuda_idx=1))


def test_reserved_core_and_no_pinning():
    result = make_affinity(n_cpu_core=4, n_gpu=1, cpu_reserved=1, set_affinity=False, **NO_HT)
    assert_same(result, sync((0, 1, 2, 3), ((1,), (2,), (3,)), saf=False, cuda_idx=0))


def test_async_gpu_optimizer_cpu_sampler():
    result = make_affinity(run_slot=0, n_cpu_core=3, n_gpu=1, sample_gpu_per_run=0,
                           async_sample=True, **NO_HT)
    expected = dict(
        all_cpus=(0, 1, 2),
        optimizer=[dict(cpus=(0,), cuda_idx=0, torch_threads=1, set_affinity=True)],
        sampler=sync((1, 2), ((1,), (2,)), cuda_idx=None),
        set_affinity=True)
    assert_same(result, expected)
    assert isinstance(result.sampler, AttrDict)


def test_async_sampler_gpu():
    result = make_affinity(n_cpu_core=8, n_gpu=2, gpu_per_run=1, sample_gpu_per_run=1,
                           async_sample=True, **NO_HT)
    cores = tuple(range(1, 8))
    assert_same(result, dict(
        all_cpus=tuple(range(8)),
        optimizer=[dict(cpus=(0,), cuda_idx=0, torch_threads=1, set_affinity=True)],
        sampler=[sync(cores, tuple((c,) for c in cores), cuda_idx=1)],
        set_affinity=True))


def test_async_optimizer_and_sampler_share_gpus():
    result = make_affinity(n_cpu_core=8, n_gpu=2, gpu_per_run=2, optim_sample_share_gpu=True,
                           async_sample=True, hyperthread_offset=8, n_socket=1)
    assert_same(result.optimizer, [
        dict(cpus=(0, 8), cuda_idx=0, torch_threads=1, set_affinity=True),
        dict(cpus=(1, 9), cuda_idx=1, torch_threads=1, set_affinity=True),
    ])
    assert_same(result.sampler, [
        sync((2, 3, 4, 10, 11, 12), ((2, 10), (3, 11), (4, 12)), threads=3, cuda_idx=0),
        sync((5, 6, 7, 13, 14, 15), ((5, 13), (6, 14), (7, 15)), threads=3, cuda_idx=1),
    ])
    assert result.all_cpus == (0, 8, 1, 9, 2, 3, 4, 10, 11, 12, 5, 6, 7, 13, 14, 15)


def test_run_spanning_sockets_takes_cores_from_each():
    result = build_cpu_affinity(0, cpu=8, cpr=8, hto=12, skt=2)
    cores = (0, 1, 2, 3, 6, 7, 8, 9)
    assert result.master_cpus == cores + tuple(c + 12 for c in cores)
    assert result.workers_cpus[4] == (6, 18)


def test_async_run_spanning_sockets_has_no_overlapping_cpus():
    result = build_async_affinity(0, gpu=2, cpu=4, gpr=2, hto=0, skt=2)
    assert [o["cpus"] for o in result.optimizer] == [(0,), (2,)]
    assert result.sampler.master_cpus == (1, 3)
    result = build_async_affinity(0, gpu=2, cpu=8, gpr=2, oss=1, hto=0, skt=2)
    assert [s.master_cpus for s in result.sampler] == [(1, 2, 3), (5, 6, 7)]
    assert sorted(result.all_cpus) == list(range(8))


def test_cpu_group_helpers():
    assert get_master_cpus((0, 1), 0) == (0, 1)
    assert get_master_cpus([0, 1], 4) == (0, 1, 4, 5)
    assert get_workers_cpus((0, 1, 2), 2, 0) == ((0, 1),)  # Leftover core unused.
    assert get_workers_cpus((0, 1), 1, 4) == ((0, 4), (1, 5))
    assert get_workers_cpus((0, 1), 1, 4, alt=1) == ((0,), (1,), (4,), (5,))


# --- CPU-only asynchronous -------------------------------------------------------------------

def test_async_cpu_only():
    code = encode_affinity(n_cpu_core=4, n_gpu=0, cpu_per_run=4, async_sample=True, **NO_HT)
    assert code.endswith("_1ass")
    result = affinity_from_code(prepend_run_slot(0, code))
    assert_same(result, dict(
        all_cpus=(0, 1, 2, 3),
        optimizer=[dict(cpus=(0,), cuda_idx=None, torch_threads=1, set_affinity=True)],
        sampler=sync((1, 2, 3), ((1,), (2,), (3,)), cuda_idx=None),
        set_affinity=True))
    assert isinstance(result, AttrDict) and isinstance(result.sampler, AttrDict)


def test_async_cpu_only_second_slot_with_hyperthreads_and_reserve():
    result = make_affinity(run_slot=1, n_cpu_core=8, n_gpu=0, cpu_per_run=4, cpu_reserved=2,
                           async_sample=True, hyperthread_offset=8, n_socket=1)
    assert_same(result.optimizer,
                [dict(cpus=(4, 5, 12, 13), cuda_idx=None, torch_threads=2, set_affinity=True)])
    assert_same(result.sampler, sync((6, 7, 14, 15), ((6, 14), (7, 15)), threads=2,
                                     cuda_idx=None))


def test_async_cpu_only_needs_cores_beyond_the_optimizer():
    with pytest.raises(ValueError, match="cpu_per_run.*1"):
        make_affinity(n_cpu_core=4, n_gpu=0, cpu_per_run=1, async_sample=True, **NO_HT)
    with pytest.raises(ValueError, match=r"at least 2 cores.*n_cpu_core \(cpu\)=1"):
        make_affinity(n_cpu_core=1, n_gpu=0, async_sample=True, **NO_HT)


def test_async_cpu_only_default_is_one_run_over_every_core():
    """make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True): optimizer on
    core 0, sampler on core 1 (cpu_per_run defaults to all cores when async)."""
    result = make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True, **NO_HT)
    assert_same(result, dict(
        all_cpus=(0, 1),
        optimizer=[dict(cpus=(0,), cuda_idx=None, torch_threads=1, set_affinity=True)],
        sampler=sync((1,), ((1,),), cuda_idx=None),
        set_affinity=True))
    assert encode_affinity(n_cpu_core=2, n_gpu=0, async_sample=True, **NO_HT) == \
        encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=2, async_sample=True, **NO_HT)
    # Synchronous CPU runs keep one core per run.
    assert encode_affinity(n_cpu_core=2, n_gpu=0, **NO_HT) == \
        encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1, **NO_HT)


# --- This machine ----------------------------------------------------------------------------

def test_quick_affinity_code_on_this_machine():
    code = quick_affinity_code(n_parallel=2, use_gpu=False)
    params = decode_affinity(code)
    assert params["gpu"] == 0 and 1 <= get_n_run_slots(code) <= 2
    assert params["cpu"] == params["cpr"] * get_n_run_slots(code)
    for slot in range(get_n_run_slots(code)):
        assert affinity_from_code(prepend_run_slot(slot, code)).workers_cpus


@pytest.mark.parametrize("logical,physical,code", [
    (8, 4, "4cpu_0gpu_2cpr"),  # Hyperthreads at +4.
    (4, 4, "4cpu_0gpu_2cpr_0hto"),
    (1, 1, "1cpu_0gpu_1cpr_0hto"),
])
def test_quick_affinity_code_cpu(monkeypatch, logical, physical, code):
    monkeypatch.setattr(aff.psutil, "cpu_count",
                        lambda logical=True, _l=logical, _p=physical: _l if logical else _p)
    monkeypatch.setattr(machine, "get_n_socket", lambda: 1)
    assert quick_affinity_code(n_parallel=2, use_gpu=False) == code


def test_quick_affinity_code_needs_parallel_or_gpu():
    with pytest.raises(ValueError, match="n_parallel"):
        quick_affinity_code(use_gpu=False)


def test_machine_detection(monkeypatch):
    monkeypatch.setattr(aff.psutil, "cpu_count", lambda logical=True: 32 if logical else 16)
    assert aff.get_hyperthread_offset() == 16
    monkeypatch.setattr(aff.psutil, "cpu_count", lambda logical=True: 16)
    assert aff.get_hyperthread_offset() == 0
    cpuinfo = "processor\t: 0\nphysical id\t: 0\nprocessor\t: 1\nphysical id\t: 1\n" * 2
    monkeypatch.setattr(machine, "open", lambda *a, **k: io.StringIO(cpuinfo), raising=False)
    assert aff.get_n_socket() == 2
    monkeypatch.setattr(machine, "open", lambda *a, **k: io.StringIO("processor\t: 0\n"),
                        raising=False)
    assert aff.get_n_socket() == 1  # No "physical id" lines (e.g. some VMs).

    def no_proc(*args, **kwargs):
        raise FileNotFoundError("/proc/cpuinfo")
    monkeypatch.setattr(machine, "open", no_proc, raising=False)
    assert aff.get_n_socket() == 1  # macOS, Windows.


# --- Errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,error,words", [
    (dict(n_cpu_core=8, n_gpu=0, cpu_per_run=3), ValueError, r"cpu_per_run=3.*n_cpu_core=8"),
    (dict(n_cpu_core=4, n_gpu=0, cpu_per_run=2, run_slot=2), ValueError, r"run_slot=2.*2 run"),
    (dict(n_cpu_core=4, n_gpu=2, run_slot=-1), ValueError, r"run_slot"),
    (dict(n_cpu_core=4, n_gpu=0, contexts_per_gpu=2), ValueError, r"contexts_per_gpu=2.*n_gpu"),
    (dict(n_cpu_core=4, n_gpu=2, sample_gpu_per_run=1), ValueError,
     r"sample_gpu_per_run=1.*async_sample"),
    (dict(n_cpu_core=0), ValueError, r"n_cpu_core.*positive.*0"),
    (dict(n_cpu_core="4"), TypeError, r"n_cpu_core.*'4'"),
    (dict(n_cpu_core=8, n_gpu=0, cpu_per_run=8, hyperthread_offset=4, n_socket=1), ValueError,
     r"hyperthread_offset \(hto\)=4.*n_cpu_core \(cpu\)=8"),
    (dict(n_cpu_core=6, n_gpu=4, **NO_HT), ValueError, r"n_cpu_core \(cpu\)=6.*4"),
    (dict(n_cpu_core=4, n_gpu=1, gpu_per_run=2, async_sample=True, **NO_HT), ValueError,
     r"n_gpu \(gpu\)=1"),
    (dict(n_cpu_core=4, n_gpu=1, cpu_per_worker=3, **NO_HT), ValueError, r"cpu_per_worker.*=3"),
])
def test_encode_errors(kwargs, error, words):
    with pytest.raises(error, match=words):
        encode_affinity(**kwargs)


def test_code_errors():
    with pytest.raises(ValueError, match=r"abbreviation 'xyz'.*'4xyz'"):
        decode_affinity("2cpu_0gpu_4xyz")
    with pytest.raises(ValueError, match=r"'Xcpu'"):
        decode_affinity("Xcpu_0gpu")
    with pytest.raises(ValueError, match="remove_run_slot"):
        decode_affinity("0slt_2cpu_0gpu_1cpr")
    with pytest.raises(ValueError, match="run slot"):
        remove_run_slot("2cpu_0gpu_1cpr")
    with pytest.raises(ValueError, match=r"run_slot=2.*2 run"):
        affinity_from_code("2slt_2cpu_0gpu_1cpr_0hto")
    with pytest.raises(ValueError, match=r"\['cxg'\].*contexts_per_gpu"):
        affinity_from_code("0slt_2cpu_0gpu_1cpr_2cxg")
    with pytest.raises(ValueError, match="cpr"):
        affinity_from_code("0slt_2cpu_0gpu")
