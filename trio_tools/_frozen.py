"""Building the library's frozen attrs objects on the hot path, with plain attribute stores.

A frozen attrs class refuses assignment in its ``__setattr__``, so the library used to set
each slot through its member descriptor: a method-wrapper call per field, the dearest part
of building a result or an input.  Instead, an object is made as the class's *twin* (a
plain class with the very same slots, so the same memory layout), filled with ordinary
attribute stores, and then given the frozen class with ``obj.__class__ = cls``.  The object
is the frozen class's from then on: nothing of the twin remains, and nothing can observe
the moment before (no user code runs in between).

CPython allows that ``__class__`` assignment only between classes of identical layout, and
it recognises a ``__weakref__`` slot only right after the base class's slots.  A class that
adds fields and ``__weakref__`` itself therefore has no twin; one that inherits its
``__weakref__`` from :class:`Weakrefable` does (weak references work exactly as before).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Weakrefable", "mutable_twin"]


class Weakrefable:
    """The base of a frozen class that has a twin: it holds the class's ``__weakref__``."""

    __slots__ = ("__weakref__",)


def mutable_twin(cls: type[Any]) -> Any:
    """A plain class with the slots of frozen slotted ``cls`` (a :class:`Weakrefable`).

    ``obj = object.__new__(twin)``, one store per field, then ``obj.__class__ = cls``: the
    result is the object ``cls`` would have built.  Typed ``Any``: the stores are checked
    by the code that builds ``cls``'s values, not by the twin.

    Raises:
        TypeError: ``cls`` has no twin (its layout is not a twin's), at import.
    """
    if cls.__bases__ != (Weakrefable,):
        raise TypeError(f"{cls.__qualname__} has no twin: it must derive from Weakrefable alone")
    twin = type(f"_{cls.__name__}Fields", (Weakrefable,), {"__slots__": cls.__slots__})
    # The layouts must agree exactly: CPython checks it here, once, rather than per object.
    probe: Any = object.__new__(twin)
    probe.__class__ = cls
    return twin
