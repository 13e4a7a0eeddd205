"""Building the library's frozen attrs objects on the hot path, with plain attribute stores.

A frozen attrs class refuses assignment in its ``__setattr__``, so setting its slots one by
one takes a descriptor call per field, the dearest part of building a result or an input.
Instead, each such class derives from a plain class that holds its slots (``ToolResult``
from ``_ResultFields``, ...): attrs reuses those slots and adds none, so both classes have
one memory layout.  The library makes an object of the plain base, stores every field with
ordinary attribute assignments, then sets ``obj.__class__`` to the frozen class.  From then
on the object is the frozen class's (equality, hashing, repr, pickling, weak references and
the refusal of assignment are attrs' own); nothing can observe the moment before, since no
user code runs in between.

CPython allows that ``__class__`` assignment between classes of one layout, and checks it
cheaply when one class is the other's only base and adds nothing to it.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["check_fields_base"]


def check_fields_base(cls: type[Any]) -> type[Any]:
    """Check, at import, that frozen attrs class ``cls`` can be built as its base; return
    the base.

    The base must be a plain class holding exactly ``cls``'s fields and ``__weakref__`` as
    slots, and ``cls`` must add none.

    Raises:
        TypeError: it cannot (the layouts would differ, or a field would have no slot).
    """
    base: type[Any] = cls.__bases__[0]
    fields = {field.name for field in attrs.fields(cls)}
    slots = set(getattr(base, "__slots__", ()))
    if (
        len(cls.__bases__) != 1
        or base.__bases__ != (object,)
        or slots != {*fields, "__weakref__"}
        or cls.__slots__ != ()
    ):
        raise TypeError(
            f"{cls.__qualname__} cannot be built as {base.__qualname__}: the base must hold "
            f"exactly its fields and __weakref__ as slots, and it must add none"
        )
    # The layouts must agree exactly: CPython checks it here, once, rather than per object.
    probe: Any = object.__new__(base)
    probe.__class__ = cls
    return base
