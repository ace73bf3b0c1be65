import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest
import torch

from rlframe.utils.buffer import (OWN_ARENA_BYTES, RowWriter, buffer_from_example, buffer_func,
                                  buffer_method, buffer_to, get_leading_dims, np_mp_array,
                                  numpify_buffer, torchify_buffer)
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.misc import extract_sequences, iterate_mb_idxs
from rlframe.utils.tensor import (from_onehot, infer_leading_dims, restore_leading_dims,
                                  select_at_indexes, to_onehot, valid_mean)

Ex = namedarraytuple("Ex", ["obs", "inner", "empty"])
Inner = namedarraytuple("Inner", ["r", "flag"])


def example():
    return Ex(obs=np.zeros((3,), dtype=np.uint8),
              inner=Inner(r=np.float32(1.5), flag=np.bool_(True)), empty=None)


def test_row_writer_writes_what_namedarraytuple_assignment_writes():
    T, B = 3, 2
    for make_src in (lambda row: row, torchify_buffer):  # numpy rows, torch rows
        fast, reference = (buffer_from_example(example(), (T, B)) for _ in range(2))
        writer = RowWriter(fast)
        for t in range(T):
            row = buffer_from_example(example(), B)
            row.obs[:] = np.arange(3 * B).reshape(B, 3) + t
            row.inner.r[:] = [t, -t]
            row.inner.flag[:] = [t % 2, 1]
            writer.write(t, make_src(row))
            reference[t] = row
        for a, b in zip((fast.obs, fast.inner.r, fast.inner.flag),
                        (reference.obs, reference.inner.r, reference.inner.flag)):
            np.testing.assert_array_equal(a, b)
        assert fast.empty is None


def test_row_writer_single_leaf_arrays_and_other_sources():
    One = namedarraytuple("One", ["timeout"])
    buf = One(np.zeros((2, 3), bool))
    writer = RowWriter(buf)
    writer.write(0, One(np.array([True, False, True])))
    writer.write(1, One(torch.tensor([False, True, False])))
    assert buf.timeout.tolist() == [[True, False, True], [False, True, False]]
    Other = namedarraytuple("Other", ["timeout"])  # Same fields, another class.
    writer.write(0, Other(np.zeros(3, bool)))
    assert not buf.timeout[0].any()
    array = np.zeros((2, 3), np.float32)
    RowWriter(array).write(1, torch.ones(3))
    assert array.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_buffer_from_example_shapes_dtypes_structure():
    buf = buffer_from_example(example(), (4, 2))
    assert buf.obs.shape == (4, 2, 3) and buf.obs.dtype == np.uint8
    assert buf.inner.r.shape == (4, 2) and buf.inner.r.dtype == np.float32
    assert buf.inner.flag.dtype == np.bool_ and buf.empty is None
    assert np.all(buf.obs == 0)
    with pytest.raises(TypeError, match="object"):
        buffer_from_example(np.array([object()]), 3)


def test_torchify_numpify_share_memory():
    buf = buffer_from_example(example(), (4, 2))
    pyt = torchify_buffer(buf)
    assert isinstance(pyt.obs, torch.Tensor) and type(pyt) is Ex and pyt.empty is None
    pyt.inner.r[1, 1] = 7.
    assert buf.inner.r[1, 1] == 7.
    back = numpify_buffer(pyt)
    back.obs[0, 0, 0] = 9
    assert buf.obs[0, 0, 0] == 9


def test_buffer_to_method_func_and_leading_dims():
    pyt = torchify_buffer(buffer_from_example(example(), (4, 2)))
    moved = buffer_to(pyt, "cpu")
    assert type(moved) is Ex
    with pytest.raises(TypeError):
        buffer_to(np.zeros(3), "cpu")
    floats = buffer_method(pyt, "float")
    assert floats.obs.dtype == torch.float32 and floats.inner.flag.dtype == torch.float32
    summed = buffer_func(pyt, torch.sum)
    assert summed.obs.shape == ()
    assert get_leading_dims(pyt, n_dim=2) == (4, 2)
    bad = Ex(obs=torch.zeros(4, 2), inner=Inner(torch.zeros(3, 2), None), empty=None)
    with pytest.raises(ValueError, match="mismatch"):
        get_leading_dims(bad, n_dim=2)


def _child_write(arr, view):
    arr[2] = 42.
    view[0, 1] = 7.  # view[0, 1] is arr[-2].


@pytest.mark.slow
@pytest.mark.parametrize("size", [5, 3 * OWN_ARENA_BYTES // 4], ids=["small", "large"])
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_np_mp_array_shared_with_child(method, size):
    arr = np_mp_array((size,), np.float32)
    assert np.all(arr == 0)
    ctx = mp.get_context(method)
    p = ctx.Process(target=_child_write, args=(arr, arr[-4:].reshape(2, 2)[1:, ::-1]))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0
    assert arr[2] == 42. and arr[-2] == 7.
    assert np.count_nonzero(arr) == 2
    view = pickle.loads(pickle.dumps(arr[1:3]))  # views pickle by value
    assert isinstance(view, np.ndarray) and view[1] == 42.


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_large_np_mp_array_takes_memory_only_where_written():
    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1])
    arr = np_mp_array((2 ** 28,), np.float32)  # 1 GiB
    arr[::2 ** 20] = 1.
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1]) - before
    assert pages * os.sysconf("SC_PAGE_SIZE") < 2 ** 26
    assert arr[2 ** 20] == 1. and arr[1] == 0.


def test_tensor_helpers():
    x = torch.arange(24.).reshape(2, 3, 4)
    idx = torch.tensor([[0, 3, 1], [2, 2, 0]])
    sel = select_at_indexes(idx, x)
    assert sel.tolist() == [[0., 7., 9.], [14., 18., 20.]]
    oh = to_onehot(torch.tensor([1, 0, 2]), 3, dtype=torch.float)
    assert oh.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]
    assert from_onehot(oh).tolist() == [1, 0, 2]
    v = torch.tensor([1., 2., 3., 4.])
    assert valid_mean(v, torch.tensor([1, 1, 0, 0])).item() == 1.5
    assert valid_mean(v).item() == 2.5
    for shape, expect in [((5, 6, 3), (2, 5, 6)), ((6, 3), (1, 1, 6)), ((3,), (0, 1, 1))]:
        lead_dim, T, B, s = infer_leading_dims(torch.zeros(shape), 1)
        assert (lead_dim, T, B) == expect and s == (3,)
        out = restore_leading_dims(torch.zeros(T * B, 2), lead_dim, T, B)
        assert out.shape == shape[:-1] + (2,)
    with pytest.raises(ValueError):
        infer_leading_dims(torch.zeros(1, 2, 3, 4), 1)


def test_misc_helpers():
    batches = list(iterate_mb_idxs(10, 3))
    assert batches == [slice(0, 3), slice(3, 6), slice(6, 9)]
    shuffled = np.concatenate(list(iterate_mb_idxs(12, 4, shuffle=True)))
    assert sorted(shuffled.tolist()) == list(range(12))
    a = np.arange(10)[:, None] * 10 + np.arange(2)[None]
    seq = extract_sequences(a, T_idxs=[8, 1], B_idxs=[0, 1], T=3)
    assert seq.tolist() == [[80, 11], [90, 21], [0, 31]]  # wraps around in time


def _child_write_views(buffers):
    action, reward = buffers
    action[1, 0] = 5  # a view starting one row into the shared array
    reward[:, 1] = 2.5


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_shared_views_are_shared_under_every_start_method(method):
    all_action = np_mp_array((4, 2), np.int64)
    all_reward = np_mp_array((4, 3), np.float32)
    views = (all_action[1:], all_reward[:-1, :])
    ctx = mp.get_context(method)
    p = ctx.Process(target=_child_write_views, args=(views,))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0
    assert all_action[2, 0] == 5 and all_action.sum() == 5
    assert np.all(all_reward[:3, 1] == 2.5) and all_reward[3, 1] == 0
