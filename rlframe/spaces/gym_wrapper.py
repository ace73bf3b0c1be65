"""Present gymnasium spaces through rlframe's :class:`Space` interface.

gymnasium ``Dict`` spaces become a :class:`Composite` whose values are
namedarraytuples, so ``[T, B]`` buffers can hold dict observations.
"""
from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from gymnasium import spaces as gym_spaces

from rlframe.spaces.base import Space
from rlframe.spaces.composite import Composite
from rlframe.utils.collections import RESERVED_NAMES, is_namedtuple, namedarraytuple

if TYPE_CHECKING:
    import numpy.typing as npt

    from rlframe.spaces.base import SpaceValue
    from rlframe.utils.collections import NamedArrayTuple

SUPPORTED_SPACES = (gym_spaces.Box, gym_spaces.Discrete, gym_spaces.MultiBinary,
                    gym_spaces.MultiDiscrete, gym_spaces.Dict)


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)
def to_identifier(key: object) -> str:
    """A namedtuple field name for a dict key: ``"ale.lives"`` -> ``"ale_lives"``.

    Characters outside ``[0-9a-zA-Z_]`` become ``_``; a name that does not start
    with a letter gets the prefix ``k_``; keywords and the namedarraytuple
    reserved names (``get``, ``items``) get a trailing ``_``.
    """
    name = re.sub(r"[^0-9a-zA-Z_]", "_", str(key))
    if not name[:1].isalpha():
        name = "k_" + name
    if keyword.iskeyword(name) or name in RESERVED_NAMES:
        name += "_"
    return name


class GymSpaceWrapper(Space):
    """A gymnasium space seen as an rlframe space.

    Args:
        space: a gymnasium ``Box``, ``Discrete``, ``MultiBinary``,
            ``MultiDiscrete`` or ``Dict`` (nested Dicts allowed).
        null_value: fill value of :meth:`null_value` (``None``: zeros).
        name: class name of the namedarraytuple for a ``Dict`` space; sub-space
            ``key`` is named ``<name>_<key>``.
        force_float32: report and produce ``float32`` for ``float64`` boxes.

    Raises:
        TypeError: for other gymnasium spaces (``Tuple``, ``Text``, ``Graph``, ...).
    """

    def __init__(self, space: gym_spaces.Space, null_value: float | None = 0, name: str = "obs",
                 force_float32: bool = True) -> None:
        if not isinstance(space, SUPPORTED_SPACES):
            raise TypeError(
                f"GymSpaceWrapper: unsupported gymnasium space {space!r} "
                f"(type {type(space).__name__}); supported: "
                f"{', '.join(c.__name__ for c in SUPPORTED_SPACES)}.")
        self._gym_space: gym_spaces.Space = space
        self._base_name: str = name
        self._null_value: float | None = null_value
        self._force_float32: bool = force_float32
        self._keys: tuple = ()  # Dict keys, in field order
        self._dtype: np.dtype | None = None
        self.space: gym_spaces.Space | Composite
        if isinstance(space, gym_spaces.Dict):
            self._keys = tuple(space.spaces.keys())
            fields = [to_identifier(k) for k in self._keys]
            if len(set(fields)) != len(fields):
                raise ValueError(f"GymSpaceWrapper: Dict keys {list(self._keys)} give "
                                 f"duplicate field names {fields}.")
            NtCls = namedarraytuple(name, fields, module=__name__)
            subs = [GymSpaceWrapper(space[k], null_value=null_value, name=f"{name}_{f}",
                                    force_float32=force_float32)
                    for k, f in zip(self._keys, fields)]
            self.space = Composite(subs, NtCls)
        else:
            self.space = space
            dtype = np.dtype(space.dtype)
            self._dtype = np.dtype(np.float32) if (force_float32 and dtype == np.float64) else dtype

    @property
    def is_composite(self) -> bool:
        """True when wrapping a ``Dict`` space."""
        return isinstance(self.space, Composite)

    @property
    def names(self) -> tuple[str, ...]:
        """Field names of a ``Dict`` space's values (empty for other spaces)."""
        return self.space.names if isinstance(self.space, Composite) else ()

    def sample(self) -> SpaceValue:
        """A random value: ``[*shape]`` array, or a namedarraytuple for ``Dict``."""
        if self.is_composite:
            return self.space.sample()
        return np.asarray(self.space.sample(), dtype=self._dtype)

    def null_value(self) -> SpaceValue:
        """Array(s) shaped like :meth:`sample`, filled with ``null_value``."""
        if self.is_composite:
            return self.space.null_value()
        fill = 0 if self._null_value is None else self._null_value
        return np.full(self.shape, fill, dtype=self._dtype)

    def convert(self, value: npt.ArrayLike | Mapping[Any, Any]) -> SpaceValue:
        """gymnasium value -> rlframe value (dict -> namedarraytuple, float64 -> float32)."""
        if self.is_composite:
            return self.space._NamedTupleCls(*(sub.convert(value[k]) for k, sub
                                               in zip(self._keys, self.space._spaces)))
        return np.asarray(value, dtype=self._dtype)

    def revert(self, value: SpaceValue | Mapping[Any, Any]
               ) -> np.ndarray | int | Mapping[Any, Any]:
        """rlframe value -> gymnasium value (namedtuple -> dict, dtype of the gym space)."""
        if self.is_composite:
            if isinstance(value, Mapping):
                return value
            return {k: sub.revert(v) for k, sub, v in zip(self._keys, self.space._spaces, value)}
        if isinstance(self._gym_space, gym_spaces.Discrete):
            return int(np.asarray(value))
        return np.asarray(value, dtype=self._gym_space.dtype)

    def revert_rows(self, value: SpaceValue | Mapping[Any, Any]
                    ) -> np.ndarray | Mapping[Any, Any]:
        """rlframe rows -> one gymnasium batch, as a gymnasium vector env takes actions.

        Args:
            value: ``[n, *shape]`` array (a namedarraytuple of them for ``Dict``).

        Returns:
            ``[n, *shape]`` array of the gym space's dtype (a dict of them for ``Dict``).
        """
        if self.is_composite:
            if isinstance(value, Mapping):
                return value
            return {k: sub.revert_rows(v) for k, sub, v in zip(self._keys, self.space._spaces,
                                                               value)}
        return np.asarray(value, dtype=self._gym_space.dtype)

    def contains(self, x: object) -> bool:
        """Membership test of the wrapped space (namedtuples for ``Dict``)."""
        if self.is_composite:
            return self.space.contains(x)
        return bool(self._gym_space.contains(x))

    def seed(self, seed: int | None = None) -> None:
        """Seed the gymnasium space (``Dict`` seeds its sub-spaces from it)."""
        self._gym_space.seed(seed)

    @property
    def dtype(self) -> np.dtype | NamedArrayTuple:
        """numpy dtype of values (a namedtuple of dtypes for ``Dict``)."""
        if self.is_composite:
            return self.space._NamedTupleCls(*(s.dtype for s in self.space._spaces))
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...] | NamedArrayTuple:
        """Shape of one value (a namedtuple of shapes for ``Dict``)."""
        return self.space.shape

    @property
    def low(self) -> np.ndarray:
        """Lower bounds of a ``Box``."""
        return np.asarray(self._box().low, dtype=self._dtype)

    @property
    def high(self) -> np.ndarray:
        """Upper bounds of a ``Box``."""
        return np.asarray(self._box().high, dtype=self._dtype)

    @property
    def n(self) -> int | Sequence[int] | np.ndarray:
        """Number of values of a ``Discrete`` (``MultiBinary``: its ``n``)."""
        if isinstance(self._gym_space, gym_spaces.Discrete):
            return int(self._gym_space.n)
        if isinstance(self._gym_space, gym_spaces.MultiBinary):
            return self._gym_space.n
        raise AttributeError(f"`n` is defined for Discrete and MultiBinary spaces, "
                             f"not {self._gym_space!r}.")

    def _box(self) -> gym_spaces.Box:
        if not isinstance(self._gym_space, gym_spaces.Box):
            raise AttributeError(f"`low`/`high` are defined for Box spaces, not {self._gym_space!r}.")
        return self._gym_space

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GymSpaceWrapper):
            other = other._gym_space
        return self._gym_space == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GymSpaceWrapper({self.space!r})"


def dict_to_nt(value: object, name: str) -> object:
    """Nested dicts -> nested namedarraytuples (class ``name``, sub-classes ``name_key``).

    Keys go through :func:`to_identifier`; float64 arrays become float32.
    """
    if isinstance(value, Mapping):
        fields = [to_identifier(k) for k in value]
        cls = namedarraytuple(name, fields, module=__name__)
        return cls(*(dict_to_nt(v, f"{name}_{f}") for f, v in zip(fields, value.values())))
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        return value.astype(np.float32)
    return value


def nt_to_dict(value: object) -> object:
    """Nested namedtuples -> nested dicts keyed by field name."""
    if is_namedtuple(value):
        return {k: nt_to_dict(v) for k, v in zip(value._fields, value)}
    return value
