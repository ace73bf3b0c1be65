"""The affinity code's names: their table, the round trip through a code, and which
names each run family's builder takes (an explicit table, not signature matching)."""
import inspect

import pytest

from rlframe.utils.launching.affinity import (ABBREVS, RUN_SLOT, affinity_from_code,
                                              decode_affinity, encode_affinity,
                                              prepend_run_slot)
from rlframe.utils.launching.affinity.families import RUN_FAMILIES, RunFamily, run_family
from rlframe.utils.launching.affinity.codes import CODE_NAMES, describe

NO_HT = dict(hyperthread_offset=0, n_socket=1)

# One valid encode_affinity call per code name, giving that name a number it shows in
# the code: (code name, kwargs, number expected after the name).
ROUND_TRIPS = [
    ("gpu", dict(n_cpu_core=4, n_gpu=2, **NO_HT), 2),
    ("cxg", dict(n_cpu_core=4, n_gpu=1, contexts_per_gpu=2, **NO_HT), 2),
    ("gpr", dict(n_cpu_core=4, n_gpu=2, gpu_per_run=2, **NO_HT), 2),
    ("cpu", dict(n_cpu_core=6, n_gpu=0, cpu_per_run=3, **NO_HT), 6),
    ("hto", dict(n_cpu_core=2, n_gpu=0, cpu_per_run=1, hyperthread_offset=4, n_socket=1), 4),
    ("skt", dict(n_cpu_core=4, n_gpu=0, cpu_per_run=2, hyperthread_offset=4, n_socket=2), 2),
    ("cpr", dict(n_cpu_core=6, n_gpu=0, cpu_per_run=3, **NO_HT), 3),
    ("cpw", dict(n_cpu_core=4, n_gpu=0, cpu_per_run=4, cpu_per_worker=2, **NO_HT), 2),
    ("res", dict(n_cpu_core=4, n_gpu=0, cpu_per_run=4, cpu_reserved=1, **NO_HT), 1),
    ("ass", dict(n_cpu_core=4, n_gpu=0, async_sample=True, **NO_HT), 1),
    ("sgr", dict(n_cpu_core=8, n_gpu=2, sample_gpu_per_run=1, async_sample=True, **NO_HT), 1),
    ("oss", dict(n_cpu_core=8, n_gpu=2, gpu_per_run=2, optim_sample_share_gpu=True,
                 async_sample=True, **NO_HT), 1),
    ("alt", dict(n_cpu_core=2, n_gpu=0, cpu_per_run=2, alternating=True, **NO_HT), 1),
    ("saf", dict(n_cpu_core=2, n_gpu=0, cpu_per_run=2, set_affinity=False, **NO_HT), 0),
]


def test_every_code_name_has_its_encode_argument_and_meaning():
    encode_args = set(inspect.signature(encode_affinity).parameters)
    assert set(CODE_NAMES) == set(ABBREVS) | {RUN_SLOT}
    for abbrev, name in CODE_NAMES.items():
        assert name.abbrev == abbrev and len(abbrev) == 3
        assert name.keyword in encode_args, abbrev
        assert name.meaning
    assert describe("cpr") == "cpu_per_run (cpr)"


def test_round_trips_cover_every_code_name():
    assert sorted(abbrev for abbrev, _, _ in ROUND_TRIPS) == sorted(ABBREVS)


@pytest.mark.parametrize("abbrev,kwargs,number", ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS])
def test_code_name_round_trips_and_reaches_the_builder(abbrev, kwargs, number, monkeypatch):
    code = encode_affinity(**kwargs)
    params = decode_affinity(code)
    assert params[abbrev] == number
    family = run_family(params, code)
    taken = {k: v for k, v in params.items() if k != "ass"}
    assert abbrev == "ass" or abbrev in family.keywords
    # The family hands every name of the code to its builder, as the keyword it states.
    received = {}

    def recorder(run_slot, **keywords):
        received.update(keywords, run_slot=run_slot)
        return "built"
    spy = RunFamily(family.name, recorder, family.keywords)
    assert spy.build(0, taken, code) == "built"
    assert received == {"run_slot": 0, **{family.keywords[k]: v for k, v in taken.items()}}
    assert affinity_from_code(prepend_run_slot(0, code))  # The real builder accepts them.


@pytest.mark.parametrize("family", list(RUN_FAMILIES.values()), ids=list(RUN_FAMILIES))
def test_each_family_states_only_names_its_builder_takes(family):
    parameters = list(inspect.signature(family.builder).parameters)
    assert set(family.keywords) <= set(ABBREVS)
    assert set(family.keywords.values()) <= set(parameters[1:])  # After the run slot.


@pytest.mark.parametrize("code,words", [
    ("4cpu_1gpu_2cpr", ["'cpr'", "cpu_per_run", "build_gpu_affinity", "it takes ['alt'"]),
    ("4cpu_0gpu_2cpr_1sgr", ["'sgr'", "sample_gpu_per_run", "build_cpu_affinity"]),
    ("4cpu_2gpu_2gpr_2cxg", ["'cxg'", "contexts_per_gpu", "build_multigpu_affinity"]),
])
def test_a_name_that_does_not_apply_is_named_with_the_allowed_ones(code, words):
    with pytest.raises(ValueError) as error:
        affinity_from_code(prepend_run_slot(0, code))
    for word in words:
        assert word in str(error.value), (word, str(error.value))


def test_an_unknown_code_name_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"'xyz'.*known abbreviations: \['gpu', 'cxg'"):
        affinity_from_code("0slt_4cpu_0gpu_2cpr_1xyz")


def test_typed_affinities_give_the_dicts_runners_read():
    from rlframe.utils.collections import AttrDict
    from rlframe.utils.launching.affinity import make_affinity
    from rlframe.utils.launching.affinity.builders import OptimizerAffinity, ProcessAffinity
    run = make_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=2, **NO_HT)
    expected = ProcessAffinity(master_cpus=(0, 1), workers_cpus=((0,), (1,)),
                               master_torch_threads=2, worker_torch_threads=1,
                               alternating=False, set_affinity=True).as_dict()
    assert type(run) is AttrDict and run == expected and "cuda_idx" not in run
    assert list(run) == ["all_cpus", "master_cpus", "workers_cpus", "master_torch_threads",
                         "worker_torch_threads", "alternating", "set_affinity"]
    run = make_affinity(n_cpu_core=3, n_gpu=0, async_sample=True, **NO_HT)
    assert run.optimizer == [OptimizerAffinity((0,), None, 1, True).as_dict()]
    assert type(run.optimizer[0]) is dict
    assert run.sampler == ProcessAffinity((1, 2), ((1,), (2,)), 2, 1, False, True).as_dict(
        cuda_idx=None)
    assert run["sampler"]["cuda_idx"] is None and run["sampler"]["workers_cpus"] == ((1,), (2,))
