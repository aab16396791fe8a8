"""The package's shape: names live in the registry, small modules, no cycle between packages."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from drlhet import backends

PACKAGE = Path(__file__).resolve().parents[1] / "drlhet"
REPO = PACKAGE.parent
# where backend and device names may be written: the registry's own package
NAMES_ALLOWED_IN = ("backends",)


def modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are documentation: docstrings and attribute docstrings
    (a bare string statement); documentation may name anything."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def name_literals(tree: ast.Module, names: set[str]) -> list[tuple[int, str]]:
    """String constants (docstrings aside) that are a backend or platform name, or that hold a
    placement (``x@dev``) or a device (``cpu:0``)."""
    skip = docstrings(tree)
    device = re.compile(rf"\b({'|'.join(backends.PLATFORMS)}):\d|\w@({'|'.join(names)})\b")
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
            if text.strip().lower() in names or device.search(text):
                hits.append((node.lineno, text))
        if isinstance(node, ast.JoinedStr):  # f"cpu:{i}"
            lead = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if re.search(rf"\b({'|'.join(backends.PLATFORMS)}):", lead):
                hits.append((node.lineno, lead))
    return hits


def test_no_backend_or_device_name_outside_the_registry():
    names = set(backends.names()) | set(backends.PLATFORMS)
    found = []
    for path, tree in modules():
        if path.relative_to(PACKAGE).parts[0] in NAMES_ALLOWED_IN:
            continue
        found += [
            f"{path.relative_to(REPO)}:{line}: {text!r}"
            for line, text in name_literals(tree, names)
        ]
    assert not found, "\n".join(found)


def test_the_literal_check_can_fail():
    names = set(backends.names()) | set(backends.PLATFORMS)
    source = '"""cpu:0 in a docstring"""\nx = "native"\ny = f"cpu:{i}"\nz = "jax@cpu:1"\n'
    planted = ast.parse(source)
    assert len(name_literals(planted, names)) == 3


def test_functions_and_modules_are_small():
    too_long = []
    for path, tree in modules():
        lines = len(path.read_text().splitlines())
        if lines > 400:
            too_long.append(f"{path.relative_to(REPO)}: module of {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > 80:
                    too_long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {n}")
    assert not too_long, "\n".join(too_long)


def package_of(module: str) -> str | None:
    """``drlhet.runtime.run`` -> ``runtime``; top-level modules are their own package."""
    parts = module.split(".")
    if parts[0] != "drlhet" or len(parts) < 2:
        return None
    return parts[1]


def import_graph() -> dict[str, set[str]]:
    """Package -> the packages it imports (at any depth, function-local imports included)."""
    graph: dict[str, set[str]] = {}
    for path, tree in modules():
        rel = path.relative_to(PACKAGE).with_suffix("")
        here = rel.parts[0] if rel.parts[0] != "__init__" else None
        if here is None or here == "__main__":
            continue
        deps = graph.setdefault(here, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {p for p in map(package_of, targets) if p and p != here}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append(path[path.index(nxt) :] + [nxt])
            elif len(path) < len(graph):
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    return found


def test_no_import_cycle_between_packages():
    graph = import_graph()
    assert {"replay", "backends", "runtime", "dse", "cli"} <= set(graph)
    assert not cycles(graph), cycles(graph)[:3]
    assert "backends" not in graph["replay"]  # the reference takes tree operations as data
    assert not graph["replay"] - {"replay"}


def test_the_cycle_check_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    assert not cycles({"a": {"b"}, "b": {"c"}, "c": set()})


def test_the_pure_model_imports_no_jax():
    code = (
        "import sys; import drlhet.dse.model; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("tool", ["ruff-check", "ruff-format", "mypy"])
def test_lint_and_types_are_clean(tool):
    bin_dir = Path(sys.executable).parent
    commands = {
        "ruff-check": ["ruff", "check", "drlhet", "tests", "experiments"],
        "ruff-format": ["ruff", "format", "--check", "drlhet", "tests", "experiments"],
        "mypy": ["mypy", "--check-untyped-defs", "drlhet", "experiments"],
    }
    cmd = commands[tool]
    exe = bin_dir / cmd[0] if (bin_dir / cmd[0]).exists() else shutil.which(cmd[0])
    if exe is None:
        pytest.skip(f"{cmd[0]} is not installed (the `test` extra installs it)")
    out = subprocess.run([str(exe), *cmd[1:]], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
