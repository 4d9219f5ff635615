"""The layout is the architecture: every package's docstring maps its modules, imports flow one way and never in a
circle, and pyproject.toml ships every package. The imports are read with ast, never run."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = ("vitviz", "vitviz_dashboard")


# maps that another piece of work owns and rewrites; strict, so the mark goes as soon as the map is whole
def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_dirs() -> list[Path]:
    return sorted(init.parent for top in TOP_LEVEL for init in (ROOT / top).rglob("__init__.py"))


def module_files() -> dict[str, Path]:
    """Every module of the two packages by dotted name; a package by its own name (its __init__.py)."""
    return {module_name(path): path for top in TOP_LEVEL for path in sorted((ROOT / top).rglob("*.py"))}


MODULES = module_files()
PACKAGES = [module_name(folder / "__init__.py") for folder in package_dirs()]


def imported_modules(name: str, path: Path) -> set[str]:
    """The modules of vitviz and vitviz_dashboard that ``name`` imports, anywhere in the file (imports inside
    functions too), and the other top-level names it imports (streamlit...). ``from package import module`` is
    an import of that module; ``from package import name`` one of the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            node.body = []  # imports for annotations only: never run, so they make no dependency
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, up level - 1
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            found |= {
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source for alias in node.names
            }
    return {known(module) for module in found}


def known(module: str) -> str:
    """The longest prefix of ``module`` that is one of ours (``vitviz.model.vit.ViT`` -> ``vitviz.model.vit``), else
    its top-level name (``torch.nn`` -> ``torch``)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in MODULES:
            return ".".join(parts[:end])
    return parts[0]


IMPORTS = {name: imported_modules(name, path) for name, path in MODULES.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def missing_from_map(folder: Path) -> list[str]:
    """What the package docstring of ``folder`` leaves out: each module must appear as ``name.py``, each
    sub-package as ``name/``."""
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    entries = [p.name for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    entries += [f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(entry for entry in entries if entry not in docstring)


def stale_on_map(folder: Path) -> list[str]:
    """What the package docstring of ``folder`` names that is not there: a map line (four spaces, then ``name.py``
    or ``name/``) whose module or sub-package does not exist, as after a move."""
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    entries = [m.group(1) for m in re.finditer(r"^    ([\w.]+\.py|\w+/)(?:\s|$)", docstring, re.MULTILINE)]
    present = {p.name for p in folder.glob("*.py")} | {
        f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()
    }
    return sorted(entry for entry in entries if entry not in present)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_is_on_its_package_map(package):
    missing = missing_from_map(MODULES[package].parent)
    assert not missing, f"{package}'s docstring does not name {', '.join(missing)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_map_names_nothing_that_is_gone(package):
    stale = stale_on_map(MODULES[package].parent)
    assert not stale, f"{package}'s docstring names {', '.join(stale)}, which is not in the package"


def test_the_map_check_finds_a_missing_module_and_sub_package(tmp_path):
    (tmp_path / "__init__.py").write_text(
        '"""The map.\n\n    kept.py   on the map\n    kept/     on the map too\n"""\n'
    )
    for name in ("kept.py", "lost.py", "__main__.py"):
        (tmp_path / name).write_text("")
    for name in ("kept", "gone"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()  # a folder without __init__.py is not a package
    assert missing_from_map(tmp_path) == ["gone/", "lost.py"]


def test_the_map_check_finds_a_stale_entry(tmp_path):
    (tmp_path / "__init__.py").write_text(
        '"""The map.\n\n    kept.py   here\n    moved.py  moved away\n    old/      gone too\n\nSee docs/x.py.\n"""\n'
    )
    (tmp_path / "kept.py").write_text("")
    assert stale_on_map(tmp_path) == ["moved.py", "old/"]


def test_no_import_circle():
    assert circles(IMPORTS) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_library_never_imports_streamlit_or_the_dashboard():
    offenders = {
        name: sorted(
            found & {"streamlit", "vitviz_dashboard"} | {m for m in found if m.startswith("vitviz_dashboard.")}
        )
        for name, found in IMPORTS.items()
        if name.split(".")[0] == "vitviz"
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_model_imports_nothing_above_it():
    """vitviz.model is the bottom but for vitviz.messages and vitviz.layout (the token layouts its outputs carry):
    explain, loading, render... build on it, never the other way."""
    below = ("vitviz.model", "vitviz.layout")
    upward = {
        name: sorted(
            m for m in found if m.split(".")[0] in TOP_LEVEL and not m.startswith(below) and m != "vitviz.messages"
        )
        for name, found in IMPORTS.items()
        if name == "vitviz.model" or name.startswith("vitviz.model.")
    }
    assert {name: found for name, found in upward.items() if found} == {}


def test_the_token_layouts_import_nothing_of_ours_but_themselves():
    """vitviz.layout sits under the model: numpy records that every map, the model and the VLM code read."""
    outside = {
        name: sorted(m for m in found if m.split(".")[0] in TOP_LEVEL and not m.startswith("vitviz.layout"))
        for name, found in IMPORTS.items()
        if name == "vitviz.layout" or name.startswith("vitviz.layout.")
    }
    assert {name: found for name, found in outside.items() if found} == {}


def test_the_message_helpers_import_nothing_of_ours():
    """vitviz.messages is the bottom layer: every module, the model's config checks included, may echo a value."""
    assert sorted(m for m in IMPORTS["vitviz.messages"] if m.split(".")[0] in TOP_LEVEL) == []


def test_only_the_command_line_imports_the_commands():
    """The commands sit on top: no library module, and not the dashboard, imports vitviz.commands."""
    allowed = ("vitviz.commands", "vitviz.__main__")
    callers = {
        name: sorted(m for m in found if m == "vitviz.commands" or m.startswith("vitviz.commands."))
        for name, found in IMPORTS.items()
        if not name.startswith(allowed)
    }
    assert {name: found for name, found in callers.items() if found} == {}


def test_pyproject_ships_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(config["packages"]) == sorted([*PACKAGES, "vitviz.checkpoints"])
    assert config["package-dir"] == {"vitviz.checkpoints": "checkpoints"}
