"""A space made of named sub-spaces, sampled into a namedtuple."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rlframe.spaces.base import Space

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple


class Composite(Space):
    """Named sub-spaces; values are instances of ``NamedTupleCls``.

    Args:
        spaces: one space per field of ``NamedTupleCls``, in field order.
        NamedTupleCls: the (namedarraytuple) class holding a value.
    """

    def __init__(self, spaces: Sequence[Space], NamedTupleCls: type) -> None:
        spaces = list(spaces)
        if len(spaces) != len(NamedTupleCls._fields):
            raise ValueError(f"Composite: got {len(spaces)} spaces for the "
                             f"{len(NamedTupleCls._fields)} fields {NamedTupleCls._fields}.")
        self._spaces: list[Space] = spaces
        self._NamedTupleCls: type = NamedTupleCls

    def sample(self) -> NamedArrayTuple:
        """A ``NamedTupleCls`` of sub-space samples."""
        return self._NamedTupleCls(*(s.sample() for s in self._spaces))

    def null_value(self) -> NamedArrayTuple:
        """A ``NamedTupleCls`` of sub-space null values."""
        return self._NamedTupleCls(*(s.null_value() for s in self._spaces))

    def seed(self, seed: int | None = None) -> None:
        """Seed each sub-space with ``seed + i`` (or fresh entropy when ``None``)."""
        for i, space in enumerate(self._spaces):
            space.seed(None if seed is None else seed + i)

    def contains(self, x: object) -> bool:
        """True for a namedtuple with these fields whose entries lie in their sub-spaces."""
        return (getattr(x, "_fields", None) == self.names
                and all(s.contains(v) for s, v in zip(self._spaces, x)))

    @property
    def shape(self) -> tuple:
        """A ``NamedTupleCls`` of sub-space shapes."""
        return self._NamedTupleCls(*(s.shape for s in self._spaces))

    @property
    def is_composite(self) -> bool:
        """Always True: values are namedtuples."""
        return True

    @property
    def names(self) -> tuple[str, ...]:
        """Field names."""
        return self._NamedTupleCls._fields

    @property
    def spaces(self) -> tuple:
        """A ``NamedTupleCls`` of the sub-spaces."""
        return self._NamedTupleCls(*self._spaces)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={s!r}" for k, s in zip(self.names, self._spaces))
        return f"Composite({self._NamedTupleCls.__name__}: {inner})"
