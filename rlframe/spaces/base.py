"""The space interface shared by every action and observation space."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

    SpaceValue: TypeAlias = "np.ndarray | NamedArrayTuple"
    """A value of a space: an array, or a namedarraytuple of them (a composite space)."""


class Space:
    """A set of values an env accepts or produces, with sampling and a null value.

    Each space owns a numpy ``Generator``. Until :meth:`seed` is called, the
    generator is derived from numpy's global RNG on first use, so a global
    ``set_seed`` alone already makes samples reproducible.
    """

    _rng: np.random.Generator | None = None

    @property
    def is_composite(self) -> bool:
        """Whether values are namedtuples of sub-values (a Dict space), not one array."""
        return False

    @property
    def names(self) -> tuple[str, ...]:
        """Field names of a composite space's values (empty otherwise)."""
        return ()

    @property
    def rng(self) -> np.random.Generator:
        """The generator behind :meth:`sample`."""
        if self._rng is None:
            self._rng = np.random.default_rng(np.random.randint(2 ** 31 - 1))
        return self._rng

    def seed(self, seed: int | None = None) -> None:
        """Reseed :meth:`sample` (``None``: fresh OS entropy)."""
        self._rng = np.random.default_rng(seed)

    def sample(self) -> SpaceValue:
        """A random value from the space."""
        raise NotImplementedError

    def null_value(self) -> SpaceValue:
        """The value used for "no action / no observation" (e.g. ``prev_action`` at t=0)."""
        raise NotImplementedError

    def contains(self, x: object) -> bool:
        """Whether ``x`` belongs to the space."""
        raise NotImplementedError
