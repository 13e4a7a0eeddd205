"""Lossless JSON snapshots: validate and deep-freeze JSON-like values in one pass.

Accepted are exactly ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` /
``tuple`` and ``dict`` with ``str`` keys (exact types, no subclasses).  Arrays freeze to
``tuple``, objects to :class:`FrozenDict`; a :class:`FrozenDict` the library made is taken as
is, one made by hand is checked like any ``dict``.  The walk is iterative (no
``RecursionError``), reads every value once, never mutates the caller's object, and rejects
cycles and nesting deeper than :data:`MAX_DEPTH`.

:class:`JSONText` carries a model's raw JSON text of arguments to the registry, which parses
it at entry with the same rules (and the same depth limit).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn, cast

__all__ = [
    "MAX_DEPTH",
    "FrozenDict",
    "JSONText",
    "NestingTooDeepError",
    "NotJSONError",
    "freeze",
    "from_json_text",
    "thaw",
    "to_compact_json",
]

#: Deepest accepted nesting of arrays and objects.  Deeper values are rejected as not
#: losslessly JSON: Python's own ``==``, ``hash``, ``repr`` and ``json`` recurse on nested
#: containers, so a frozen value deeper than this could not be compared or encoded safely.
MAX_DEPTH = 512


class NotJSONError(TypeError):
    """A value is not losslessly JSON-serializable."""


class NestingTooDeepError(NotJSONError):
    """A value (or JSON text) nests arrays and objects deeper than :data:`MAX_DEPTH`."""

    def __init__(self) -> None:
        super().__init__(f"nesting deeper than {MAX_DEPTH}")


class FrozenDict(dict[str, Any]):
    """An immutable, hashable ``dict`` holding frozen JSON values.

    It subclasses ``dict`` so that it is a real mapping to every consumer (``json``,
    ``msgspec``, ``isinstance(x, dict)``) while every mutating method raises ``TypeError``.
    """

    # ``_sealed`` is set only on the mappings the library froze itself (see _sealed()):
    # only those may skip validation.  It holds the mapping's nesting depth (``1``: no
    # container inside), so that reusing one inside another value still counts its depth.
    __slots__ = ("_hash", "_sealed")

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


_set_sealed = FrozenDict.__dict__["_sealed"].__set__
_get_sealed = FrozenDict.__dict__["_sealed"].__get__


def _sealed(items: Any, depth: int) -> FrozenDict:
    """A :class:`FrozenDict` of already-frozen items nesting ``depth`` deep, marked as made
    by the library."""
    frozen = FrozenDict(items)
    _set_sealed(frozen, depth)
    return frozen


def _sealed_depth(value: object) -> int:
    """The depth of ``value`` (a :class:`FrozenDict`) if the library froze it, else ``0``."""
    try:
        return _get_sealed(value)  # type: ignore[no-any-return]  # the slot holds an int
    except AttributeError:  # the slot was never set: made by hand
        return 0


_SCALARS = frozenset({str, int, bool, type(None)})
_EMPTY_OBJECT = _sealed((), 1)
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
    if kind is FrozenDict:
        if _sealed_depth(value):
            return value
        kind = dict  # made by hand: it may hold anything, so check it like a dict
    # A dict first: every tool call's arguments are one.
    if kind is dict:
        if not value:  # `{}`: no-argument tools, the most common arguments of all
            return _EMPTY_OBJECT
        # Fast path for the common flat object (tool arguments): a check of its items, then
        # one C-level copy; the general walk only if a value is a container or a float.
        # (Reading a plain dict twice is unobservable: only exact builtin types are looked
        # at, so no user code runs in between.)
        mapping: Any = value  # (a dict: no `cast` call on every tool call's arguments)
        for key, item in mapping.items():
            if type(key) is not str or type(item) not in _SCALARS:
                return _freeze_container(value)
        frozen = FrozenDict(mapping)
        _set_sealed(frozen, 1)  # its depth: no container inside
        return frozen
    if kind in _SCALARS:
        return value
    if kind is float:
        if not math.isfinite(cast(float, value)):
            _reject(f"non-finite float {value!r}")
        return value
    if kind is not list and kind is not tuple:
        _reject(f"{kind.__name__} is not a JSON type")
    return _freeze_container(value)


def _freeze_container(root: object, root_items: Iterator[Any] | None = None) -> object:
    # Each frame: [the original container, its item iterator, the frozen items so far, whether
    # it is an object, the key of the child being frozen, the depth of its deepest container
    # child so far].  Post-order: a container is built once all of its children are frozen.
    # A frozen mapping reused as it is counts with the depth it was sealed with: the limit
    # holds for the whole value, however it was put together.
    stack: list[list[Any]] = []
    on_path: set[int] = set()

    def push(container: Any, items: Iterator[Any] | None = None) -> None:
        if id(container) in on_path:
            _reject("cycle")
        if len(stack) >= MAX_DEPTH:
            raise NestingTooDeepError
        is_object = isinstance(container, dict)
        if items is None:
            items = iter(cast("dict[str, Any]", container).items() if is_object else container)
        on_path.add(id(container))
        stack.append([container, items, [], is_object, None, 0])

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
            if kind in _SCALARS:
                pass
            elif kind is FrozenDict and (depth := _sealed_depth(child)):
                if len(stack) + depth > MAX_DEPTH:
                    raise NestingTooDeepError
                if depth > frame[5]:
                    frame[5] = depth
            elif kind is float:
                if not math.isfinite(cast(float, child)):
                    _reject(f"non-finite float {child!r}")
            elif kind is dict or kind is list or kind is tuple or kind is FrozenDict:
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
        depth = frame[5] + 1
        built: object = _sealed(out, depth) if is_object else tuple(out)
        if not stack:
            return built
        parent = stack[-1]
        parent[2].append((parent[4], built) if parent[3] else built)
        if depth > parent[5]:
            parent[5] = depth


# What ``json.dumps(value, separators=(",", ":"), allow_nan=False)`` builds per call, once.
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def to_compact_json(value: object) -> str:
    """Encode a frozen JSON value compactly (``separators=(",", ":")``).

    Ints of any size are encoded, also past Python's int-to-text digit limit
    (``sys.get_int_max_str_digits()``), which ``json.dumps`` refuses.
    """
    try:
        return _COMPACT.encode(value)
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

    Always a fresh copy of the containers, so the caller may mutate it.  Every value
    :func:`freeze` accepts is thawed, down to :data:`MAX_DEPTH`; anything deeper (or a
    cycle) raises ``RecursionError``.
    """
    try:
        return _thaw(value)
    except RecursionError:
        # Two frames per level (the call, its comprehension): near the limit, too many.
        return _thaw_iteratively(value)


def _thaw(value: object) -> object:
    kind = type(value)
    if kind is tuple or kind is list:
        return [_thaw(item) for item in cast("tuple[object, ...]", value)]
    if kind is FrozenDict or kind is dict:
        if not value:  # `{}`: the arguments of most calls
            return {}
        return {key: _thaw(item) for key, item in cast("dict[str, object]", value).items()}
    return value


def _thaw_iteratively(root: object) -> object:
    """:func:`_thaw` without recursion, for values too deep for the stack."""
    top: list[object] = []
    # Each frame: the copy being filled, whether it is a list, the (key, item) pairs left.
    stack: list[tuple[Any, bool, Iterator[tuple[Any, object]]]] = [(top, True, iter([(0, root)]))]
    while stack:
        into, is_list, pairs = stack[-1]
        for key, item in pairs:
            kind = type(item)
            is_array = kind is tuple or kind is list
            made: Any = [] if is_array else {} if kind is FrozenDict or kind is dict else item
            if is_list:
                into.append(made)
            else:
                into[key] = made
            if made is not item:  # a container: its items next
                if len(stack) > MAX_DEPTH:
                    raise RecursionError(f"value nested deeper than {MAX_DEPTH}")
                items: Any = enumerate(cast("tuple[object, ...]", item)) if is_array else item
                stack.append((made, is_array, iter(items if is_array else items.items())))
                break
        else:
            stack.pop()
    return top[0]


# ---------------------------------------------------------------------------------------
# JSON text


class JSONText:
    """A model's raw JSON text of a call's arguments, for the registry to parse at entry.

    Parsed once (the result is kept): into the frozen value, or into the violation that
    tells the model what was wrong with its text.  Integers of any size parse losslessly;
    a number too large for a float is a violation at its path (``$.timeout: number out of
    range``); text that is not JSON (``NaN`` and ``Infinity`` included) is the violation
    ``not valid JSON ({reason} at line L column C)``; empty or whitespace-only text is
    ``{}``; nesting deeper than :data:`MAX_DEPTH` raises :class:`NestingTooDeepError`, as
    for a value.
    """

    __slots__ = ("_outcome", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._outcome: tuple[object, str | None] | NestingTooDeepError | None = None

    def __repr__(self) -> str:
        return f"JSONText({self.text!r})"

    def parse(self) -> tuple[object, str | None]:
        """``(frozen value, None)``, or ``(self.text, violation)`` when it does not parse.

        Raises:
            NestingTooDeepError: the text nests deeper than :data:`MAX_DEPTH`.
        """
        outcome = self._outcome
        if outcome is None:
            try:
                outcome = _parse_text(self.text)
            except NestingTooDeepError as exc:
                outcome = exc
            self._outcome = outcome
        if isinstance(outcome, NestingTooDeepError):
            raise outcome
        return outcome


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        pass
    # Past Python's int-from-text digit limit: convert in chunks below it.
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("-")
    number = 0
    for start in range(0, len(digits), _DIGITS_PER_CHUNK):
        chunk = digits[start : start + _DIGITS_PER_CHUNK]
        number = number * 10 ** len(chunk) + int(chunk)
    return sign * number


class _ConstantError(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in JSON text: not JSON."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is not JSON")
        self.name = name


def _reject_constant(name: str) -> NoReturn:
    raise _ConstantError(name)


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_constant=_reject_constant)
# For arguments: ints left to C (the common case, fast); _decode falls back to _DECODER
# only for an int past Python's digit limit.
_FAST_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# A JSON string, or a bare constant outside strings: to find where a constant is.
_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')


def from_json_text(text: str) -> object:
    """Decode JSON text written by :func:`to_compact_json`: ints of any size, no NaN.

    Arrays come back as ``list`` and objects as ``dict`` (plain JSON, not frozen).

    Raises:
        ValueError: ``text`` is not JSON.
    """
    return _DECODER.decode(text)


def _position(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - text.rfind("\n", 0, index)
    return f"at line {line} column {column}"


def _decode(text: str) -> object:
    try:
        return _FAST_DECODER.decode(text)
    except (json.JSONDecodeError, _ConstantError):
        raise
    except ValueError:  # an int past the digit limit
        return _DECODER.decode(text)


_PARSED_EMPTY_OBJECT: tuple[object, str | None] = (_EMPTY_OBJECT, None)


def _parse_text(text: str) -> tuple[object, str | None]:
    if text == "{}":  # a model's most common arguments: no decoder run
        return _PARSED_EMPTY_OBJECT
    if not text.strip():
        return _EMPTY_OBJECT, None
    try:
        value = _decode(text)
    except json.JSONDecodeError as exc:
        return text, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except _ConstantError as exc:
        where = next((m.start(1) for m in _CONSTANT.finditer(text) if m.group(1) is not None), None)
        position = "" if where is None else f" {_position(text, where)}"
        return text, f"not valid JSON ({exc.name} is not allowed{position})"
    except RecursionError:
        # Python's decoder recurses per level: text this deep is beyond MAX_DEPTH anyway.
        raise NestingTooDeepError from None
    try:
        return freeze(value), None
    except NestingTooDeepError:
        raise
    except NotJSONError:
        # Only a number too large for a float (parsed as an infinity) gets here.
        return text, "; ".join(f"{path}: number out of range" for path in _infinities(value))


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _infinities(value: object) -> list[str]:
    """The JSON paths of the infinite floats in a decoded (not frozen) value."""
    paths: list[str] = []
    stack: list[tuple[str, object]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if type(item) is float and not math.isfinite(item):
            paths.append(path)
        elif type(item) is list:
            children = cast("list[object]", item)
            stack.extend(
                (f"{path}[{i}]", child) for i, child in reversed(list(enumerate(children)))
            )
        elif type(item) is dict:
            members = cast("dict[str, object]", item)
            stack.extend(
                (
                    f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]",
                    child,
                )
                for key, child in reversed(members.items())
            )
    return paths
