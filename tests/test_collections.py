import pickle
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlframe.utils.collections import (AttrDict, is_namedarraytuple, is_namedtuple,
                                       namedarraytuple, namedarraytuple_like, namedtuple_cls)

Point = namedarraytuple("Point", ["x", "y"])
Nested = namedarraytuple("Nested", ["a", "p", "none"])


def make_nested(T=3, B=2):
    return Nested(a=np.arange(T * B).reshape(T, B),
                  p=Point(np.zeros((T, B, 4)), torch.ones(T, B)), none=None)


def test_indexing_returns_same_structure():
    n = make_nested()
    sub = n[1]
    assert type(sub) is Nested and type(sub.p) is Point
    assert sub.none is None
    np.testing.assert_array_equal(sub.a, [2, 3])
    assert sub.p.x.shape == (2, 4) and sub.p.y.shape == (2,)
    tb = n[2, 1]
    assert tb.a == 5 and tb.p.x.shape == (4,)


def test_slicing_and_index_arrays():
    n = make_nested(T=5)
    s = n[1:4]
    assert s.a.shape == (3, 2) and s.p.x.shape == (3, 2, 4)
    idx = np.array([0, 4])
    picked = n[idx, idx % 2]
    np.testing.assert_array_equal(picked.a, [0, 8])


def test_nested_assignment_field_by_field_and_broadcast():
    n = make_nested()
    n[0] = Nested(a=np.array([7, 8]), p=Point(np.full((2, 4), 3.), torch.zeros(2)), none=None)
    np.testing.assert_array_equal(n.a[0], [7, 8])
    assert np.all(n.p.x[0] == 3.) and torch.all(n.p.y[0] == 0)
    n[1, 0] = 0  # broadcast a scalar into every non-None field
    assert n.a[1, 0] == 0 and np.all(n.p.x[1, 0] == 0) and n.p.y[1, 0] == 0
    assert n.a[1, 1] == 3  # neighbours untouched


def test_assignment_error_names_field():
    n = make_nested()
    with pytest.raises(Exception, match="field 'p.x'"):
        n[0] = Nested(a=np.array([1, 2]), p=Point(np.zeros((3, 3)), torch.zeros(2)), none=None)


def test_tuple_behaviour_contains_get_items():
    p = Point(1, 2)
    x, y = p
    assert (x, y) == (1, 2) and p.get(0) == 1
    assert "x" in p and "z" not in p
    assert dict(p.items()) == {"x": 1, "y": 2}
    assert p._replace(y=5).y == 5 and p._asdict() == {"x": 1, "y": 2}


def test_reserved_names_rejected():
    with pytest.raises(ValueError, match="get"):
        namedarraytuple("Bad", ["get", "x"])


def test_pickling_module_level_and_runtime_classes():
    n = make_nested()
    m = pickle.loads(pickle.dumps(n))
    assert type(m) is Nested and m.none is None
    np.testing.assert_array_equal(m.a, n.a)
    Runtime = namedarraytuple("RuntimeMade", ["u", "v"], module="made.at.runtime")
    r = pickle.loads(pickle.dumps(Runtime(np.ones(2), None)))
    assert type(r) is Runtime and r.v is None
    Info = namedtuple_cls("info", ["ale_lives", "timeout"], module="made.at.runtime")
    i = pickle.loads(pickle.dumps(Info(3, False)))
    assert type(i) is Info and i.ale_lives == 3


def test_type_checks_and_like():
    NT = namedtuple("NT", ["a", "b"])
    assert is_namedtuple(NT(1, 2)) and not is_namedarraytuple(NT(1, 2))
    assert is_namedarraytuple(Point(1, 2)) and is_namedtuple(Point(1, 2))
    NAT = namedarraytuple_like(NT(1, 2))
    assert NAT._fields == ("a", "b") and is_namedarraytuple(NAT(np.zeros(2), np.zeros(2)))
    assert namedarraytuple_like(Point) is Point
    with pytest.raises(TypeError):
        namedarraytuple_like((1, 2))


def test_attrdict():
    d = AttrDict(a=1, b=AttrDict(c=2))
    d.e = 5
    assert d["e"] == 5 and d.b.c == 2
    c = d.copy()
    c.b.c = 9
    assert d.b.c == 2  # nested AttrDict copied
    with pytest.raises(AttributeError):
        _ = d.missing
    assert pickle.loads(pickle.dumps(d)) == d


def test_dict_to_namedtuple_round_trip_nested():
    from rlframe.utils.collections import dict_to_namedtuple, namedtuple_to_dict
    d = {"a": 1, "inner": {"x": 2.5, "deeper": {"y": 3}}, "b": "s"}
    nt = dict_to_namedtuple(d, "cfg")
    assert nt._fields == ("a", "inner", "b")
    assert type(nt.inner).__name__ == "cfg_inner"
    assert type(nt.inner.deeper).__name__ == "cfg_inner_deeper"
    assert nt.inner.deeper.y == 3
    assert namedtuple_to_dict(nt) == d


def test_iter_leaves_paths_through_dicts_namedtuples_and_lists():
    from rlframe.utils.collections import iter_leaves
    Inputs = namedarraytuple("Inputs", ["observation", "prev_action"])
    tree = dict(batch=Inputs(observation=1, prev_action=[2, 3]), state={"w": 4})
    assert iter_leaves(tree) == [("batch.observation", 1), ("batch.prev_action.0", 2),
                                 ("batch.prev_action.1", 3), ("state.w", 4)]
    assert iter_leaves(5) == [("", 5)]
