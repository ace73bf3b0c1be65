"""save__init__args for user classes."""
from __future__ import annotations

import pytest

from rlframe.utils.quick_args import save__init__args


class Base:
    def __init__(self, a, b=2, **kwargs):
        save__init__args(locals())


class Child(Base):
    def __init__(self, c, a=5, *, d="x", **kwargs):
        save__init__args(locals())
        super().__init__(a=a + 1, b=kwargs.get("b", 2))


class Hidden:
    def __init__(self, lr=0.1):
        save__init__args(locals(), underscore=True)


class OnlyMine(Base):
    def __init__(self, c=1, b=3):
        save__init__args(locals(), subclass_only=True)


class Overwriting(Base):
    def __init__(self, a=1):
        self.a = "old"
        save__init__args(locals(), overwrite=True)


def test_saves_arguments_of_every_init_in_the_mro():
    obj = Base(1)
    assert (obj.a, obj.b) == (1, 2)
    assert not hasattr(obj, "kwargs")


def test_subclass_called_first_wins_and_keyword_only_args_are_saved():
    obj = Child(c=3, b=9)
    assert (obj.c, obj.a, obj.d) == (3, 5, "x")  # Base's a=6 does not replace the child's
    assert obj.b == 9


def test_underscore_subclass_only_and_overwrite():
    assert Hidden()._lr == 0.1 and not hasattr(Hidden(), "lr")
    obj = OnlyMine()
    assert (obj.c, obj.b) == (1, 3) and not hasattr(obj, "a")
    assert Overwriting().a == 1


def test_requires_locals_with_self():
    with pytest.raises(ValueError, match="'self'"):
        save__init__args(dict(a=1))
