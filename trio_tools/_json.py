"""Lossless JSON snapshots: validate and deep-freeze JSON-like values in one pass.

Accepted are exactly ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` /
``tuple`` and ``dict`` with ``str`` keys (exact types, no subclasses), and the library's own
:class:`FrozenDict`.  Arrays freeze to ``tuple``, objects to :class:`FrozenDict`.  The walk is
iterative (no ``RecursionError``), reads every value once, never mutates the caller's object,
and rejects cycles and nesting deeper than :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn, cast

__all__ = ["MAX_DEPTH", "FrozenDict", "NotJSONError", "freeze", "thaw", "to_compact_json"]

#: Deepest accepted nesting of arrays and objects.  Deeper values are rejected as not
#: losslessly JSON: Python's own ``==``, ``hash``, ``repr`` and ``json`` recurse on nested
#: containers, so a frozen value deeper than this could not be compared or encoded safely.
MAX_DEPTH = 512


class NotJSONError(TypeError):
    """A value is not losslessly JSON-serializable."""


class FrozenDict(dict[str, Any]):
    """An immutable, hashable ``dict`` holding frozen JSON values.

    It subclasses ``dict`` so that it is a real mapping to every consumer (``json``,
    ``msgspec``, ``isinstance(x, dict)``) while every mutating method raises ``TypeError``.
    """

    __slots__ = ("_hash",)

    # Hidden from the type checkers, which know ``dict`` as unhashable and mutable: to them
    # a FrozenDict is a plain ``dict[str, Any]`` (it is only ever handed out typed as
    # ``object`` or ``Mapping``), while at run time every mutator refuses.
    if not TYPE_CHECKING:

        def __hash__(self):
            try:
                return self._hash
            except AttributeError:
                self._hash = hash(frozenset(self.items()))
                return self._hash

        def _immutable(self, *args, **kwargs):
            raise TypeError("frozen JSON objects are immutable")

        __setitem__ = __delitem__ = __ior__ = _immutable
        clear = pop = popitem = setdefault = update = _immutable

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenDict:
        return self


_SCALARS = frozenset({str, int, bool, type(None)})
_EMPTY_OBJECT = FrozenDict()
_ARRAYS = (list, tuple)


def _reject(why: str) -> NoReturn:
    raise NotJSONError(why)


def freeze(value: object) -> object:
    """Return a deep-frozen lossless JSON snapshot of ``value``.

    Raises:
        NotJSONError: ``value`` holds anything but exact JSON types, a non-finite float, a
            non-``str`` key, a cycle, or nesting deeper than :data:`MAX_DEPTH`.
    """
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict:
        return value
    if kind is float:
        if not math.isfinite(cast(float, value)):
            _reject(f"non-finite float {value!r}")
        return value
    if kind is dict:
        # Fast path for the common flat object (tool arguments): one read of its items, and
        # the general walk only if a value is a container or a float.
        items = list(cast("dict[str, object]", value).items())
        for key, item in items:
            if type(key) is not str or type(item) not in _SCALARS:
                break
        else:
            return FrozenDict(items) if items else _EMPTY_OBJECT
        return _freeze_container(value, iter(items))
    if kind is not list and kind is not tuple:
        _reject(f"{kind.__name__} is not a JSON type")
    return _freeze_container(value)


def _freeze_container(root: object, root_items: Iterator[Any] | None = None) -> object:
    # Each frame: [the original container, its item iterator, the frozen items so far, whether
    # it is an object, the key of the child being frozen].  Post-order: a container is built
    # once all of its children are frozen.
    stack: list[list[Any]] = []
    on_path: set[int] = set()

    def push(container: Any, items: Iterator[Any] | None = None) -> None:
        if id(container) in on_path:
            _reject("cycle")
        if len(stack) >= MAX_DEPTH:
            _reject(f"nesting deeper than {MAX_DEPTH}")
        is_object = type(container) is dict
        if items is None:
            items = iter(cast("dict[str, Any]", container).items() if is_object else container)
        on_path.add(id(container))
        stack.append([container, items, [], is_object, None])

    push(root, root_items)
    while True:
        frame = stack[-1]
        items = frame[1]
        out: list[Any] = frame[2]
        is_object: bool = frame[3]
        descended = False
        item: Any
        for item in items:
            child: object
            if is_object:
                key, child = item
                if type(key) is not str:
                    _reject(f"object key {key!r} is not a str")
            else:
                key, child = None, item
            kind: type[object] = type(child)
            if kind in _SCALARS or kind is FrozenDict:
                pass
            elif kind is float:
                if not math.isfinite(cast(float, child)):
                    _reject(f"non-finite float {child!r}")
            elif kind is dict or kind is list or kind is tuple:
                frame[4] = key
                push(child)
                descended = True
                break
            else:
                _reject(f"{kind.__name__} is not a JSON type")
            out.append((key, child) if is_object else child)
        if descended:
            continue
        stack.pop()
        on_path.discard(id(frame[0]))
        built: object = FrozenDict(out) if is_object else tuple(out)
        if not stack:
            return built
        parent = stack[-1]
        parent[2].append((parent[4], built) if parent[3] else built)


def to_compact_json(value: object) -> str:
    """Encode a frozen JSON value compactly (``separators=(",", ":")``).

    Ints of any size are encoded, also past Python's int-to-text digit limit
    (``sys.get_int_max_str_digits()``), which ``json.dumps`` refuses.
    """
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        # Only a huge int gets here (everything else was validated by ``freeze``).  The
        # depth is bounded by MAX_DEPTH, so recursion is safe.
        out: list[str] = []
        _encode(value, out)
        return "".join(out)


_DIGITS_PER_CHUNK = 1000
_CHUNK = 10**_DIGITS_PER_CHUNK


def _int_text(number: int) -> str:
    try:
        return str(number)
    except ValueError:
        pass
    sign = "-" if number < 0 else ""
    number = abs(number)
    chunks: list[int] = []
    while number:
        number, chunk = divmod(number, _CHUNK)
        chunks.append(chunk)
    head = str(chunks.pop())
    return sign + head + "".join(f"{chunk:0{_DIGITS_PER_CHUNK}d}" for chunk in reversed(chunks))


def _encode(value: object, out: list[str]) -> None:
    kind = type(value)
    if kind is int:
        out.append(_int_text(cast(int, value)))
    elif kind is tuple or kind is list:
        out.append("[")
        for index, item in enumerate(cast("tuple[object, ...]", value)):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    elif kind is FrozenDict or kind is dict:
        out.append("{")
        for index, (key, item) in enumerate(cast("dict[str, object]", value).items()):
            if index:
                out.append(",")
            out.append(json.dumps(key))
            out.append(":")
            _encode(item, out)
        out.append("}")
    else:
        out.append(json.dumps(value, allow_nan=False))


def thaw(value: object) -> object:
    """The plain-JSON form of a frozen value: tuples as ``list``, objects as ``dict``.

    Always a fresh copy of the containers, so the caller may mutate it.  The depth of a
    frozen value is bounded by :data:`MAX_DEPTH`, so the recursion is safe.
    """
    kind = type(value)
    if kind is tuple or kind is list:
        return [thaw(item) for item in cast("tuple[object, ...]", value)]
    if kind is FrozenDict or kind is dict:
        return {key: thaw(item) for key, item in cast("dict[str, object]", value).items()}
    return value
