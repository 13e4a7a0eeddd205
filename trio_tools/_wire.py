"""Helpers for the plain-JSON wire forms of :class:`ToolCall` and :class:`ToolResult`.

A wire form is a ``dict`` of plain JSON values (``dict``, ``list``, ``str``, ``int``,
``float``, ``bool``, ``None``) with a ``"v"`` key holding :data:`WIRE_VERSION`.  Reading one
back checks every field and raises ``ValueError`` naming the first bad one by its path
(``content[1].media_type``), so a journal or an adapter never builds a value from a
malformed record.
"""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NoReturn, TypeVar, cast

from ._json import NotJSONError, freeze, thaw

__all__ = ["WIRE_VERSION", "WireReader", "json_to_wire"]

WIRE_VERSION = 1
"""The version written in the ``"v"`` key of every wire form; the only one accepted."""

T = TypeVar("T")


def json_to_wire(what: str, field: str, value: object) -> object:
    """``value`` as plain JSON (a fresh copy), or ``ValueError`` naming ``what.field``."""
    try:
        return thaw(freeze(value))
    except NotJSONError as exc:
        raise ValueError(f"{what}.{field} is not losslessly JSON-serializable: {exc}") from None


class WireReader:
    """Reads the fields of one wire-form object, naming the bad field in every error."""

    __slots__ = ("_data", "_path", "_what")

    def __init__(self, what: str, path: str, data: object) -> None:
        self._what = what
        self._path = path
        if not isinstance(data, Mapping):
            self._fail(path or "the value", f"expected an object (a dict), got {data!r}")
        for key in cast("Mapping[object, object]", data):
            if not isinstance(key, str):
                self._fail(path or "the value", f"has a key that is not a str: {key!r}")
        self._data = cast("Mapping[str, object]", data)

    def _name(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def _fail(self, field: str, problem: str) -> NoReturn:
        raise ValueError(f"{self._what}.from_dict: {field}: {problem}")

    def fail(self, key: str, problem: str) -> NoReturn:
        """Raise ``ValueError`` for the field ``key`` of this object."""
        self._fail(self._name(key), problem)

    def only(self, keys: Collection[str]) -> None:
        """Refuse keys other than ``keys`` (a misspelt field is an error, not a default)."""
        for key in self._data:
            if key not in keys:
                self.fail(key, "unknown field")

    def version(self) -> None:
        """Check the ``"v"`` key."""
        if "v" not in self._data:
            self.fail("v", f"missing (the wire form version, {WIRE_VERSION})")
        version = self._data["v"]
        if type(version) is not int or version != WIRE_VERSION:
            self.fail("v", f"unsupported wire form version {version!r} (expected {WIRE_VERSION})")

    def get(self, key: str, default: object = ..., *, required: bool = True) -> object:
        """The raw value of ``key``; ``default`` when it is absent and not ``required``."""
        if key in self._data:
            return self._data[key]
        if required:
            self.fail(key, "missing")
        return default

    def typed(self, key: str, kind: type[T], default: object = ..., *, required: bool = True) -> T:
        """The value of ``key``, which must be exactly of type ``kind``."""
        value = self.get(key, default, required=required)
        if type(value) is not kind:
            self.fail(key, f"expected {kind.__name__}, got {value!r}")
        return value

    def optional_str(self, key: str) -> str | None:
        """The value of ``key``: a ``str`` or ``None`` (also when absent)."""
        value = self.get(key, None, required=False)
        if value is not None and type(value) is not str:
            self.fail(key, f"expected str or null, got {value!r}")
        return value

    def items(self, key: str) -> list[WireReader]:
        """The objects of the array ``key`` (absent means empty), each with its own path."""
        value = self.get(key, [], required=False)
        if not isinstance(value, list):
            self.fail(key, f"expected an array (a list), got {value!r}")
        return [
            WireReader(self._what, f"{self._name(key)}[{index}]", item)
            for index, item in enumerate(cast("list[object]", value))
        ]

    def child(self, key: str) -> WireReader | None:
        """The object ``key``, or ``None`` when it is ``null`` or absent."""
        value = self.get(key, None, required=False)
        if value is None:
            return None
        return WireReader(self._what, self._name(key), value)

    def json(self, key: str) -> Any:
        """The value of the required ``key`` as plain JSON, checked losslessly (a copy)."""
        value = self.get(key)
        try:
            return thaw(freeze(value))
        except NotJSONError as exc:
            self.fail(key, f"not losslessly JSON: {exc}")

    def frozen_json(self, key: str) -> object:
        """The value of ``key`` (``null`` when absent) as a frozen JSON value."""
        try:
            return freeze(self.get(key, None, required=False))
        except NotJSONError as exc:
            self.fail(key, f"not losslessly JSON: {exc}")
