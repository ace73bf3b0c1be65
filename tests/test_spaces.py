import pickle

import numpy as np
import pytest
from gymnasium import spaces as gym_spaces

from rlframe.spaces import Composite, FloatBox, GymSpaceWrapper, IntBox
from rlframe.spaces.gym_wrapper import dict_to_nt, nt_to_dict, to_identifier
from rlframe.utils.collections import is_namedarraytuple, namedarraytuple


def test_int_box_sample_contains_null():
    space = IntBox(2, 7, shape=(3, 4), dtype="int64")
    assert space.n == 5 and space.bounds == (2, 7) and space.shape == (3, 4)
    for _ in range(20):
        s = space.sample()
        assert s.shape == (3, 4) and s.dtype == np.int64
        assert space.contains(s) and s.min() >= 2 and s.max() <= 6
    assert not space.contains(np.full((3, 4), 7))
    assert not space.contains(np.full((3,), 2))
    np.testing.assert_array_equal(space.null_value(), np.full((3, 4), 2))
    assert IntBox(0, 4, null_value=3).null_value() == 3
    assert repr(IntBox(0, 4)) == "IntBox(0-3 shape=())"
    scalar = IntBox(0, 4).sample()
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar.dtype == np.int32


@pytest.mark.parametrize("kwargs", [dict(low=3, high=3), dict(low=0, high=2, dtype="float32"),
                                    dict(low=0, high=2, null_value=5),
                                    dict(low=0, high=300, dtype="uint8")])
def test_int_box_rejects_bad_args(kwargs):
    with pytest.raises(ValueError):
        IntBox(**kwargs)


def test_float_box_scalar_and_array_bounds():
    space = FloatBox(-1., 1., shape=(5,))
    s = space.sample()
    assert s.dtype == np.float32 and s.shape == (5,) and space.contains(s)
    assert not space.contains(np.full(5, 2.))
    np.testing.assert_array_equal(space.null_value(), np.zeros(5, np.float32))
    assert FloatBox(0, 1, shape=2, null_value=0.5).null_value().tolist() == [0.5, 0.5]
    arr = FloatBox(low=np.array([0., -np.inf, 1., -np.inf]), high=np.array([1., np.inf, np.inf, 0.]))
    assert arr.shape == (4,)
    for _ in range(20):
        x = arr.sample()
        assert np.all(np.isfinite(x)) and arr.contains(x)
    with pytest.raises(ValueError):
        FloatBox(np.zeros(2), np.ones(3))


def test_seed_determinism():
    for space in (IntBox(0, 100, shape=(6,)), FloatBox(-1, 1, shape=(6,))):
        space.seed(3)
        a = [space.sample() for _ in range(3)]
        space.seed(3)
        b = [space.sample() for _ in range(3)]
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
        space.seed(4)
        assert not np.array_equal(space.sample(), a[0])


def test_unseeded_space_follows_global_numpy_seed():
    np.random.seed(11)
    a = IntBox(0, 1000, shape=(8,)).sample()
    np.random.seed(11)
    b = IntBox(0, 1000, shape=(8,)).sample()
    np.testing.assert_array_equal(a, b)


def test_composite():
    Nt = namedarraytuple("CompositeTestNt", ["a", "b"])
    space = Composite([IntBox(0, 3), FloatBox(0, 1, shape=(2,))], Nt)
    s = space.sample()
    assert isinstance(s, Nt) and space.contains(s)
    assert space.names == ("a", "b")
    assert space.shape == Nt((), (2,))
    assert isinstance(space.spaces.a, IntBox)
    assert space.null_value().b.tolist() == [0., 0.]
    space.seed(1)
    x = space.sample()
    space.seed(1)
    y = space.sample()
    assert x.a == y.a and np.array_equal(x.b, y.b)


@pytest.mark.filterwarnings("ignore:.*precision lowered")
def test_gym_box_seed_then_sample_twice_is_equal():
    space = GymSpaceWrapper(gym_spaces.Box(low=np.zeros(1), high=np.ones(1)))
    space.seed(0)
    a = space.sample()
    space.seed(0)
    b = space.sample()
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and space.dtype == np.float32
    assert space.low.dtype == np.float32 and space.shape == (1,)
    assert space.null_value().dtype == np.float32


def test_gym_float64_box_is_presented_as_float32():
    space = GymSpaceWrapper(gym_spaces.Box(0, 1, (1,), np.float64))
    assert space.dtype == np.float32 and space.sample().dtype == np.float32
    assert space.high.dtype == np.float32
    assert space.convert(np.array([0.5])).dtype == np.float32
    assert space.revert(np.array([0.5], np.float32)).dtype == np.float64
    kept = GymSpaceWrapper(gym_spaces.Box(0, 1, (1,), np.float64), force_float32=False)
    assert kept.dtype == np.float64 and kept.sample().dtype == np.float64


def test_gym_discrete_and_multi_spaces():
    d = GymSpaceWrapper(gym_spaces.Discrete(4), null_value=1)
    assert d.n == 4 and d.shape == () and d.contains(d.sample())
    assert d.null_value() == 1 and isinstance(d.revert(np.array(2)), int)
    assert d == GymSpaceWrapper(gym_spaces.Discrete(4)) and d == gym_spaces.Discrete(4)
    with pytest.raises(AttributeError):
        _ = d.low
    mb = GymSpaceWrapper(gym_spaces.MultiBinary(3))
    assert mb.sample().shape == (3,) and mb.n == 3
    md = GymSpaceWrapper(gym_spaces.MultiDiscrete([2, 5]))
    assert md.contains(md.sample()) and md.null_value().shape == (2,)
    with pytest.raises(TypeError, match="Tuple"):
        GymSpaceWrapper(gym_spaces.Tuple([gym_spaces.Discrete(2)]))


def test_gym_dict_space_to_composite():
    gym_space = gym_spaces.Dict({
        "pos": gym_spaces.Box(-1, 1, (2,), np.float64),
        "mode": gym_spaces.Discrete(3),
        "nested": gym_spaces.Dict({"v.x": gym_spaces.Box(0, 1, (1,), np.float32)}),
    })
    space = GymSpaceWrapper(gym_space, name="obs")
    assert isinstance(space.space, Composite)
    assert set(space.space.names) == {"pos", "mode", "nested"}
    s = space.sample()
    assert is_namedarraytuple(s) and type(s).__name__ == "obs"
    assert type(s.nested).__name__ == "obs_nested" and s.nested._fields == ("v_x",)
    assert s.pos.dtype == np.float32 and space.contains(s)
    space.seed(5)
    a = space.sample()
    space.seed(5)
    b = space.sample()
    assert np.array_equal(a.pos, b.pos) and a.mode == b.mode
    raw = gym_space.sample()
    nt = space.convert(raw)
    assert nt.pos.dtype == np.float32 and np.allclose(nt.pos, raw["pos"])
    back = space.revert(nt)
    assert set(back) == {"pos", "mode", "nested"} and set(back["nested"]) == {"v.x"}
    assert gym_space.contains(back)
    assert pickle.loads(pickle.dumps(nt)).nested.v_x == nt.nested.v_x


def test_dict_to_nt_and_back():
    nt = dict_to_nt({"a": np.zeros(2), "b": {"c": 1}}, "thing")
    assert nt.a.dtype == np.float32 and nt.b.c == 1 and type(nt.b).__name__ == "thing_b"
    assert nt_to_dict(nt) == {"a": nt.a, "b": {"c": 1}}


@pytest.mark.parametrize("key, name", [("ale.lives", "ale_lives"), ("3d", "k_3d"),
                                       ("_x", "k__x"), ("class", "class_"), ("items", "items_"),
                                       ("a b-c", "a_b_c")])
def test_to_identifier(key, name):
    assert to_identifier(key) == name
