"""Reading the product's code as text, for the tests that hold the house rules: which strings a module spells, which
attributes it reaches for and which calls it makes. Read with ast, never imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("vitviz", "vitviz_dashboard")


def product_files(top: str | None = None) -> list[Path]:
    """Every module of vitviz/ and vitviz_dashboard/ (or of ``top`` alone), in a stable order."""
    return [path for name in ([top] if top else PRODUCT) for path in sorted((ROOT / name).rglob("*.py"))]


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_strings(path: Path) -> list[str]:
    """The string constants of a module's code (f-strings' literal parts included), without its docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def nodes(source: str) -> Iterator[ast.AST]:
    return ast.walk(ast.parse(source))


def attribute_names(source: str) -> set[str]:
    """Every ``x.name`` the code reaches for."""
    return {node.attr for node in nodes(source) if isinstance(node, ast.Attribute)}


def called_names(source: str) -> set[str]:
    """The names of everything the code calls: ``f(...)`` gives "f", ``x.f(...)`` gives "f"."""
    found = set()
    for node in nodes(source):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                found.add(func.id)
            elif isinstance(func, ast.Attribute):
                found.add(func.attr)
    return found


def keyword_names(source: str) -> set[str]:
    """Every keyword argument the code passes (``f(x, attention_sink=s)`` gives "attention_sink")."""
    return {k.arg for node in nodes(source) if isinstance(node, ast.Call) for k in node.keywords if k.arg}
