"""Named tuples whose fields can be indexed together, and small dict helpers.

A ``namedarraytuple`` is a namedtuple whose ``[]`` applies to every field:
``samples[t, b]`` returns the same structure holding ``field[t, b]`` for each
field, and ``samples[t] = other`` writes field by field. This is how every
``[T, B, ...]`` buffer in rlframe is read and written.

Static types: classes made by :func:`namedarraytuple` exist only at run time,
so a type checker cannot use their names in annotations. Every module that
defines a fixed namedarraytuple type therefore names it for type checkers as
an alias of :class:`NamedArrayTuple` (the interface all of them share) and
builds the class in the ``else:`` branch::

    if TYPE_CHECKING:
        AgentStep: TypeAlias = NamedArrayTuple
    else:
        AgentStep = namedarraytuple("AgentStep", ["action", "agent_info"])

The run-time class is exactly what it was. An annotation such as
``-> AgentStep`` tells a reader which structure (its fields are listed right
there), and a type checker that the value is a namedarraytuple: indexing
returns the same type, fields read as ``Any``. All these names are one type
to the checker, so an algorithm may narrow a hook's ``SamplesFromReplay |
SequenceSamplesFromReplay`` argument to the one its replay makes.
"""
from __future__ import annotations

import inspect
import sys
from collections import OrderedDict, namedtuple
from typing import (TYPE_CHECKING, Any, Iterable, Iterator, Literal, NamedTuple, Sequence,
                    TypeGuard, overload)

if TYPE_CHECKING:
    from typing_extensions import Self

    class NamedArrayTuple(tuple[Any, ...]):
        """Static interface of every namedarraytuple (type checkers only; not at run time).

        Indexing applies to every field and returns the same type; fields are
        read as attributes. Fixed namedarraytuple types are aliases of it for
        type checkers (see the module docstring).
        """

        _fields: tuple[str, ...]

        def __new__(cls, *args: Any, **kwargs: Any) -> Self:
            raise NotImplementedError

        def __getattr__(self, name: str) -> Any:
            raise NotImplementedError

        def __getitem__(self, loc: Any) -> Self:  # type: ignore[override]
            raise NotImplementedError

        def __setitem__(self, loc: Any, value: Any) -> None:
            raise NotImplementedError

        def get(self, index: int) -> Any:
            raise NotImplementedError

        def items(self) -> Iterator[tuple[str, Any]]:
            raise NotImplementedError

        def _replace(self, **kwargs: Any) -> Self:
            raise NotImplementedError

        def _asdict(self) -> dict[str, Any]:
            raise NotImplementedError


RESERVED_NAMES = ("get", "items")
_tuple_new = tuple.__new__

# Classes are cached by (typename, fields, module) so that an instance pickled in
# one process is rebuilt as an instance of the *same* class in another, even when
# the class was made at run time (e.g. an env's info schema) and is not reachable
# by its module path.
_NT_CACHE: dict[tuple, type] = {}
_NAT_CACHE: dict[tuple, type] = {}


def _caller_module(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    return frame.f_globals.get("__name__", "__main__")


def _rebuild_namedtuple(typename: str, fields: tuple, module: str, values: tuple) -> tuple:
    return namedtuple_cls(typename, fields, module=module)(*values)


def _rebuild_namedarraytuple(typename: str, fields: tuple, module: str,
                             suffix: bool, values: tuple) -> tuple:
    cls = namedarraytuple(typename, fields, classname_suffix=suffix, module=module)
    return cls(*values)


def namedtuple_cls(typename: str, field_names: Sequence[str] | str,
                   module: str | None = None) -> type:
    """A namedtuple class that pickles by value, wherever it was created.

    Use it for namedtuples made at run time (for example an env's info schema),
    which ``pickle`` could not otherwise find by module path.
    """
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    fields = tuple(field_names)
    module = module or _caller_module()
    key = (typename, fields, module)
    cls = _NT_CACHE.get(key)
    if cls is None:
        base = namedtuple(typename, fields)

        def __reduce__(self):
            return (_rebuild_namedtuple, (typename, fields, module, tuple(self)))

        cls = type(typename, (base,), {"__slots__": (), "__reduce__": __reduce__,
                                       "__module__": module})
        _NT_CACHE[key] = cls
    return cls


@overload
def namedarraytuple(typename: str, field_names: Sequence[str] | str,
                    return_namedtuple_cls: Literal[False] = False, classname_suffix: bool = False,
                    module: str | None = None) -> type[NamedArrayTuple]: ...
@overload
def namedarraytuple(typename: str, field_names: Sequence[str] | str,
                    return_namedtuple_cls: Literal[True], classname_suffix: bool = False,
                    module: str | None = None) -> tuple[type[NamedArrayTuple], type]: ...
def namedarraytuple(typename: str, field_names: Sequence[str] | str,
                    return_namedtuple_cls: bool = False, classname_suffix: bool = False,
                    module: str | None = None
                    ) -> type[NamedArrayTuple] | tuple[type[NamedArrayTuple], type]:
    """Make a namedtuple subclass whose indexing applies to every field.

    Args:
        typename: class name.
        field_names: field names (sequence, or a string split on commas/spaces).
        return_namedtuple_cls: also return the plain namedtuple base class.
        classname_suffix: name the classes ``<typename>_nat`` / ``<typename>_nt``.
        module: module recorded as the class's home (default: the caller's).

    ``x[loc]`` (int, slice, index array, or a tuple of them) indexes each
    non-None field and returns a new instance; ``x[loc] = value`` assigns field
    by field when ``value`` has the same ``_fields``, else broadcasts ``value``
    into each non-None field. Field names ``get`` and ``items`` are reserved.
    """
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    fields = tuple(field_names)
    for name in fields:
        if name in RESERVED_NAMES:
            raise ValueError(f"Disallowed field name: {name!r} (reserved: {RESERVED_NAMES}).")
    module = module or _caller_module()
    key = (typename, fields, module, classname_suffix)
    cached = _NAT_CACHE.get(key)
    if cached is not None:
        return (cached, cached.__bases__[0]) if return_namedtuple_cls else cached

    nt_name = f"{typename}_nt" if classname_suffix else typename
    nat_name = f"{typename}_nat" if classname_suffix else typename
    NtCls = namedtuple(nt_name, fields)
    NtCls.__module__ = module

    def __getitem__(self, loc):
        try:
            # tuple.__new__ skips namedtuple's argument handling (hot path).
            return _tuple_new(type(self), [None if s is None else s[loc] for s in self])
        except IndexError as e:
            for j, s in enumerate(self):
                if s is None:
                    continue
                try:
                    _ = s[loc]
                except IndexError:
                    raise Exception(f"Occured in {self.__class__} at field "
                                    f"'{self._fields[j]}'.") from e
            raise

    def __setitem__(self, loc, value):
        if not (isinstance(value, tuple) and getattr(value, "_fields", None) == self._fields):
            value = tuple(None if s is None else value for s in self)
        for j, (s, v) in enumerate(zip(self, value)):
            if s is None:
                continue
            try:
                s[loc] = v
            except Exception as e:
                # Report the full path of the failing leaf, e.g. 'env.observation'.
                inner = getattr(e, "nat_field_path", None)
                path = self._fields[j] if inner is None else f"{self._fields[j]}.{inner}"
                err = Exception(f"Occured in {typename} assignment at field '{path}': "
                                f"{e.__cause__ or e}")
                err.nat_field_path = path
                raise err from (e.__cause__ or e)

    def __contains__(self, key):
        return key in self._fields

    def get(self, index):
        """Plain tuple indexing (``x[i]`` indexes into the fields instead)."""
        return tuple.__getitem__(self, index)

    def items(self):
        """Iterate over ``(field_name, value)`` pairs."""
        for k, v in zip(self._fields, self):
            yield k, v

    def __reduce__(self):
        return (_rebuild_namedarraytuple,
                (typename, fields, module, classname_suffix, tuple(self)))

    body = {
        "__slots__": (),
        "__getitem__": __getitem__,
        "__setitem__": __setitem__,
        "__contains__": __contains__,
        "get": get,
        "items": items,
        "__reduce__": __reduce__,
        "__module__": module,
        "_is_namedarraytuple": True,
    }
    cls = type(nat_name, (NtCls,), body)
    _NAT_CACHE[key] = cls
    return (cls, NtCls) if return_namedtuple_cls else cls


def _cached_namedtuple_cls(key: tuple) -> type:
    typename, fields, module = key
    return namedtuple_cls(typename, fields, module=module)


def _cached_namedarraytuple(key: tuple, base: bool) -> type:
    typename, fields, module, suffix = key
    cls = namedarraytuple(typename, fields, classname_suffix=suffix, module=module)
    return cls.__bases__[0] if base else cls


def reduce_runtime_class(cls: type) -> tuple | None:
    """How to pickle a class made at run time by :func:`namedtuple_cls` or
    :func:`namedarraytuple` (or the namedtuple base of the latter), which ``pickle``
    cannot find by name: rebuild it from its name, fields and module. None for
    other classes. For ``pickle.Pickler.reducer_override``."""
    for key, made in _NT_CACHE.items():
        if made is cls:
            return _cached_namedtuple_cls, (key,)
    for key, made in _NAT_CACHE.items():
        if made is cls or made.__bases__[0] is cls:
            return _cached_namedarraytuple, (key, made is not cls)
    return None


def is_namedtuple_class(obj: object) -> bool:
    """True for a class derived from a namedtuple (and tuple)."""
    return (inspect.isclass(obj) and issubclass(obj, tuple)
            and hasattr(obj, "_fields") and hasattr(obj, "_asdict"))


def is_namedarraytuple_class(obj: object) -> TypeGuard[type[NamedArrayTuple]]:
    """True for a class made by :func:`namedarraytuple`."""
    return is_namedtuple_class(obj) and getattr(obj, "_is_namedarraytuple", False)


def is_namedtuple(obj: object) -> bool:
    """True for a namedtuple instance (namedarraytuples included)."""
    return is_namedtuple_class(type(obj))


def is_namedarraytuple(obj: object) -> TypeGuard[NamedArrayTuple]:
    """True for a namedarraytuple instance."""
    return is_namedarraytuple_class(type(obj))


def namedarraytuple_like(namedtuple_or_class: tuple | type,
                         classname_suffix: bool = False) -> type[NamedArrayTuple]:
    """The namedarraytuple class with the same name and fields as the argument."""
    cls = namedtuple_or_class if inspect.isclass(namedtuple_or_class) else type(namedtuple_or_class)
    if is_namedarraytuple_class(cls):
        return cls
    if not is_namedtuple_class(cls):
        raise TypeError(f"Input must be a namedtuple or namedarraytuple, got {cls}.")
    name = cls.__name__
    if classname_suffix and name.endswith("_nt"):
        name = name[:-3]
    return namedarraytuple(name, cls._fields, classname_suffix=classname_suffix,
                           module=cls.__module__)


class AttrDict(dict):
    """A dict whose keys are also attributes: ``d.key is d["key"]``."""

    def __getattr__(self, name: str) -> Any:  # Values of any type.
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def copy(self) -> "AttrDict":
        """Copy, recursing into nested AttrDicts (other values are shared)."""
        return AttrDict((k, v.copy() if isinstance(v, AttrDict) else v) for k, v in self.items())

    def __getstate__(self):
        return dict(self)

    def __setstate__(self, state):
        self.update(state)


def dict_to_namedtuple(d: dict, typename: str = "nt") -> tuple:
    """Convert a (nested) dict into (nested) namedtuples, fields in key order; a nested
    dict under key ``k`` becomes a namedtuple type named ``<typename>_<k>``."""
    keys = tuple(d.keys())
    values = [dict_to_namedtuple(v, f"{typename}_{k}") if isinstance(v, dict) else v
              for k, v in d.items()]
    return namedtuple_cls(typename, keys, module=__name__)(*values)


def namedtuple_to_dict(nt: object) -> object:
    """Convert (nested) namedtuples back into (nested) dicts."""
    if is_namedtuple(nt):
        return OrderedDict((k, namedtuple_to_dict(v)) for k, v in zip(nt._fields, nt))
    return nt


def iter_fields(nt: NamedTuple | NamedArrayTuple) -> Iterator[tuple[str, Any]]:
    """Yield ``(name, value)`` pairs of a namedtuple."""
    return zip(nt._fields, nt)


def iter_leaves(tree: object, path: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, leaf)`` of every leaf of nested dicts, (named)tuples and lists.

    Paths join dict keys, namedtuple field names and list/tuple indexes, e.g.
    ``"agent_inputs.observation"`` or ``"model.0.weight"``.
    """
    if isinstance(tree, dict):
        items = [(str(key), value) for key, value in tree.items()]
    elif isinstance(tree, (tuple, list)):
        names = getattr(tree, "_fields", None) or [str(i) for i in range(len(tree))]
        items = list(zip(names, tree))
    else:
        return [(path, tree)]
    out: list[tuple[str, Any]] = []
    for name, value in items:
        out.extend(iter_leaves(value, f"{path}.{name}" if path else name))
    return out


__all__: Iterable[str] = [
    "namedarraytuple", "namedtuple_cls", "is_namedtuple_class", "is_namedarraytuple_class",
    "is_namedtuple", "is_namedarraytuple", "namedarraytuple_like", "AttrDict",
    "dict_to_namedtuple", "namedtuple_to_dict", "iter_fields", "iter_leaves",
]
