"""Two gloo ranks sum and average gradients by one exchange of point-to-point
messages; the numbers are gloo all_reduce's, bitwise, on both ranks."""
import multiprocessing as mp
import os

import pytest
import torch
import torch.distributed as dist

from rlframe.agents.base import wrap_ddp
from rlframe.models.running_mean_std import RunningMeanStdModel
from rlframe.utils import distributed as rd
from rlframe.utils.distributed import master_store


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def rank_main(rank, port, queue):
    try:
        torch.set_num_threads(1)
        # The test process listens on the port (it took it; no other run can).
        store = dist.TCPStore("127.0.0.1", port, 2, is_master=False)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
        results = {}
        calls = []
        original = rd.sum_over_ranks_

        def counting(tensor, group=None):
            calls.append(tensor.numel())
            return original(tensor, group)
        rd.sum_over_ranks_ = counting

        # Sums: the exchange against gloo's all_reduce, on odd and large sizes.
        g = torch.Generator().manual_seed(rank)
        for n in (1, 1001, 300_000):
            x = torch.randn(n, generator=g)
            expected = x.clone()
            dist.all_reduce(expected)
            results[f"sum{n}"] = bool(torch.equal(rd.sum_over_ranks_(x.clone()), expected))
            results[f"digest{n}"] = rd.state_digest(rd.sum_over_ranks_(x.clone()))

        # DDP with the hook against DDP with gloo's default all_reduce.
        x = torch.randn(64, 5, generator=g)
        grads = {}
        for hooked in (True, False):
            ddp = wrap_ddp(model(), torch.device("cpu"))
            if not hooked:
                ddp = torch.nn.parallel.DistributedDataParallel(model())
            n_calls = len(calls)
            ddp(x).pow(2).mean().backward()
            results[f"hook_calls_{hooked}"] = len(calls) - n_calls
            grads[hooked] = [p.grad.clone() for p in ddp.parameters()]
        results["ddp_equal"] = all(torch.equal(a, b) for a, b in zip(grads[True], grads[False]))
        results["ddp_digest"] = rd.state_digest(grads[True])

        # Observation statistics: every rank folds in the union of the ranks' batches.
        rms = RunningMeanStdModel(3)
        for i in range(2):
            batch = torch.arange(12., dtype=torch.float32).reshape(4, 3) * (rank + 1) + i
            rms.update(batch)
        results["rms"] = (rms.mean.tolist(), rms.var.tolist(), rms.count.item())

        # SAC's temperature gradient: averaged outside DDP.
        p = torch.nn.Parameter(torch.zeros(1))
        p.grad = torch.tensor([float(rank + 1)])
        rd.average_gradients([p])
        results["average"] = p.grad.item()
        dist.destroy_process_group()
        queue.put((rank, results))
    except BaseException as e:  # Reported to the test, which fails on it.
        queue.put((rank, repr(e)))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_gloo_ranks_sum_by_exchange_with_all_reduces_numbers():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = master_store(0, world_size=2, timeout_s=90)
    procs = [ctx.Process(target=rank_main, args=(r, store.port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = dict(queue.get(timeout=90) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    for rank in (0, 1):
        assert isinstance(results[rank], dict), results[rank]
    r0, r1 = results[0], results[1]
    for n in (1, 1001, 300_000):
        assert r0[f"sum{n}"] and r1[f"sum{n}"]
        assert r0[f"digest{n}"] == r1[f"digest{n}"]
    assert r0["hook_calls_True"] >= 1 and r0["hook_calls_False"] == 0
    assert r0["ddp_equal"] and r1["ddp_equal"]
    assert r0["ddp_digest"] == r1["ddp_digest"]
    assert r0["average"] == r1["average"] == 1.5
    assert r0["rms"] == r1["rms"]
    union = torch.cat([torch.arange(12.).reshape(4, 3) * (r + 1) + i
                       for i in range(2) for r in range(2)])
    mean, var, count = r0["rms"]
    assert count == 16
    torch.testing.assert_close(torch.tensor(mean), union.mean(0))
    torch.testing.assert_close(torch.tensor(var), union.var(0, correction=0))


def test_without_a_process_group_nothing_is_a_pair():
    assert not dist.is_initialized()
    assert not rd.is_gloo_pair()
    assert os.environ.get("WORLD_SIZE") in (None, "1")
