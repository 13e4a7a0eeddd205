"""The public surface: exactly the ``from ._x import Name as Name`` lines of ``__init__.py``.

Every check is driven by ``trio_tools.__all__`` and the parsed ``__init__.py``, so it keeps
working as names are added (classes, functions, plain string constants, submodules).
"""

from __future__ import annotations

import ast
import enum
import inspect
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import trio_tools

INIT = Path(trio_tools.__file__)

# Public classes designed to be subclassed, which therefore need not be ``@final``.  Keep it
# short, with a comment saying why for each entry.
SUBCLASSABLE: frozenset[str] = frozenset()


def _init_imports() -> list[tuple[ast.ImportFrom | ast.Import, ast.alias]]:
    tree = ast.parse(INIT.read_text(encoding="utf-8"), filename=str(INIT))
    return [
        (node, alias)
        for node in tree.body
        if isinstance(node, ast.ImportFrom | ast.Import)
        for alias in node.names
    ]


def _is_reexport(node: ast.ImportFrom | ast.Import, alias: ast.alias) -> bool:
    """Whether type checkers treat this import as a re-export (PEP 484, typing spec)."""
    if alias.asname == alias.name:  # ``import X as X`` / ``from Y import X as X``
        return True
    # ``from . import submodule`` in an ``__init__.py`` is a re-export too.
    return (
        isinstance(node, ast.ImportFrom)
        and node.module is None
        and node.level == 1
        and alias.asname is None
    )


def _bound_name(node: ast.ImportFrom | ast.Import, alias: ast.alias) -> str:
    if alias.asname is not None:
        return alias.asname
    return alias.name if isinstance(node, ast.ImportFrom) else alias.name.partition(".")[0]


def _is_future_import(node: ast.ImportFrom | ast.Import) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def _is_submodule(value: object) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__.startswith("trio_tools.")


def _public(name: str) -> bool:
    return not name.startswith("_")


def _value(name: str) -> object:
    return getattr(trio_tools, name)


PUBLIC: list[str] = list(trio_tools.__all__)
PRESENT = [name for name in PUBLIC if hasattr(trio_tools, name)]
MODULES = [name for name in PRESENT if isinstance(_value(name), types.ModuleType)]
CLASSES = [name for name in PRESENT if inspect.isclass(_value(name))]
FUNCTIONS = [name for name in PRESENT if inspect.isroutine(_value(name))]
STRING_CONSTANTS = [name for name in PRESENT if isinstance(_value(name), str)]


def _meant_to_be_final(name: str) -> bool:
    cls = _value(name)
    assert isinstance(cls, type)
    if name in SUBCLASSABLE:
        return False
    if getattr(cls, "_is_protocol", False):
        return False  # a Protocol is implemented structurally, not subclassed
    # An Enum with members cannot be subclassed anyway.
    return not (issubclass(cls, enum.Enum) and len(cls) > 0)


FINAL_CANDIDATES = [name for name in CLASSES if _meant_to_be_final(name)]


def test_all_is_a_sequence_of_str_without_duplicates() -> None:
    assert isinstance(trio_tools.__all__, list | tuple)
    assert [] == [name for name in PUBLIC if not isinstance(name, str)]
    assert [] == [name for name, count in Counter(PUBLIC).items() if count > 1]


def test_all_has_no_underscore_name() -> None:
    assert [] == [name for name in PUBLIC if not _public(name)]


def test_every_name_in_all_exists() -> None:
    assert [] == [name for name in PUBLIC if not hasattr(trio_tools, name)]


def test_all_equals_the_reexports_in_init() -> None:
    reexported = {
        _bound_name(node, alias)
        for node, alias in _init_imports()
        if _is_reexport(node, alias) and _public(_bound_name(node, alias))
    }

    def without_submodules(names: set[str]) -> set[str]:
        return {name for name in names if not _is_submodule(getattr(trio_tools, name, None))}

    assert without_submodules(reexported) == without_submodules(set(PUBLIC))


def test_every_public_import_in_init_is_a_reexport() -> None:
    # ``from ._x import Name`` (without ``as Name``) is private to type checkers in strict
    # mode: the name would exist at run time but not for pyright and mypy.
    offending = [
        ast.unparse(node)
        for node, alias in _init_imports()
        if not _is_future_import(node)
        and _public(_bound_name(node, alias))
        and not _is_reexport(node, alias)
    ]

    assert [] == offending


def test_no_public_attribute_leaks_outside_all() -> None:
    # ``from __future__ import annotations`` binds a name, but it is a compiler directive.
    future = {
        _bound_name(node, alias) for node, alias in _init_imports() if _is_future_import(node)
    }
    leaked = {
        name
        for name, value in vars(trio_tools).items()
        if _public(name) and not _is_submodule(value) and name not in future
    } - set(PUBLIC)

    assert set() == leaked


def test_public_submodules_are_public_subpackages_with_a_docstring() -> None:
    for name in MODULES:
        module = _value(name)
        assert isinstance(module, types.ModuleType)
        assert f"trio_tools.{name}" == module.__name__
        assert (module.__doc__ or "").strip(), name


def test_package_has_a_docstring() -> None:
    assert (trio_tools.__doc__ or "").strip()


@pytest.mark.parametrize("name", CLASSES + FUNCTIONS)
def test_public_class_or_function_has_its_own_docstring(name: str) -> None:
    # The object's own __doc__: inspect.getdoc() would borrow a base class's docstring.
    doc = _value(name).__doc__

    assert isinstance(doc, str)
    assert doc.strip()


@pytest.mark.parametrize("name", CLASSES + FUNCTIONS)
def test_public_class_or_function_reports_module_trio_tools(name: str) -> None:
    assert "trio_tools" == _value(name).__module__


@pytest.mark.parametrize("name", STRING_CONSTANTS)
def test_string_constants_appear_in_the_api_docs(name: str) -> None:
    # A str cannot carry a docstring, so string constants are documented in docs/api.md.
    api = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    assert f"`{name}`" in api
    assert f"`{_value(name)}`" in api or f'"{_value(name)}"' in api


@pytest.mark.parametrize("name", FINAL_CANDIDATES)
def test_public_class_is_final(name: str) -> None:
    assert getattr(_value(name), "__final__", False) is True


def test_subclassable_allow_list_only_names_public_classes() -> None:
    assert set() == SUBCLASSABLE - set(CLASSES)


def _public_methods(cls: type) -> list[tuple[str, Any]]:
    return [
        (name, member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(member) or inspect.ismethod(member))
    ]


@pytest.mark.parametrize("name", CLASSES)
def test_public_methods_show_only_public_parameters(name: str) -> None:
    """``help()`` and ``inspect.signature`` of a public function or method show what a user
    passes, and its own documentation: no private parameter of the library's (such as the
    batch scheduler's hooks of ``execute``, whose code is the pipeline's entry itself)."""
    for method_name, method in _public_methods(_value(name)):
        signature = inspect.signature(method)
        private = [p for p in signature.parameters if p.startswith("_")]
        assert [] == private, f"{name}.{method_name}{signature}"
        assert getattr(method, "__doc__", None), f"{name}.{method_name} has no docstring"


def test_execute_is_documented_as_execute() -> None:
    execute = trio_tools.ToolRegistry().execute

    assert "(input: 'ToolExecutionInput') -> 'ToolResult'" == str(inspect.signature(execute))
    assert "ToolRegistry.execute" == execute.__qualname__
    assert (execute.__doc__ or "").startswith("Run one tool call through the pipeline")
    assert inspect.iscoroutinefunction(execute)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_public_functions_show_only_public_parameters(name: str) -> None:
    signature = inspect.signature(_value(name))
    assert [] == [p for p in signature.parameters if p.startswith("_")], f"{name}{signature}"
