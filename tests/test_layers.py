"""The package's layers (docs/ARCHITECTURE.md): each folder imports only the folders below it.

a. The import graph of every module (module-level and deferred imports alike, read from the
   source) has no cycle.
b. No module imports one of a higher layer: cli/ and experiments/ may import anything,
   filtering/ imports phase/ and below, phase/ imports core/ and below, core/ imports io/ and
   runtime/, io/ imports runtime/, runtime/ imports nothing of the package.
c. Only ``__init__``, ``__main__``, the version and the build check live at the package root.
d. Every module imports on its own: a child process imports each one with every module of the
   package forgotten before it, so none depends on another having been imported first.
"""
import ast
import os
import subprocess
import sys

import pytest

import aflite_fast

PACKAGE = os.path.dirname(os.path.abspath(aflite_fast.__file__))
#: Layers from the top; a module may import its own layer and any layer after it.
LAYERS = ("cli", "experiments", "filtering", "phase", "core", "io", "runtime")
RANK = {"cli": 0, "experiments": 1, "filtering": 2, "phase": 3, "core": 4, "io": 5, "runtime": 6}
ROOT_MODULES = {"__init__", "__main__", "_version", "_build_check"}


def _modules():
    """{dotted name: path} of the package's Python modules."""
    out = {}
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _imports(name, path, modules):
    """The package modules ``name`` imports (resolving ``from X import submodule``)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[:len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else None


def test_no_import_cycle():
    graph = _graph()
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_imports_a_higher_layer():
    upward = []
    for name, targets in _graph().items():
        own = _layer(name)
        if own is None:
            continue
        for target in sorted(targets):
            other = _layer(target)
            if other is not None and RANK[other] < RANK[own]:
                upward.append(f"{name} ({own}) imports {target} ({other})")
    assert not upward, "\n".join(upward)


def test_layers_are_folders_and_the_root_holds_only_the_entry_points():
    names = {os.path.splitext(n)[0] for n in os.listdir(PACKAGE)
             if n.endswith((".py", ".pyx")) and not n.startswith(".")}
    assert names == ROOT_MODULES
    folders = {n for n in os.listdir(PACKAGE) if os.path.isfile(os.path.join(PACKAGE, n, "__init__.py"))}
    assert folders == set(LAYERS)


def test_the_checks_see_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The two graph checks fail on a package that has what they look for."""
    pkg = tmp_path / "aflite_fast"
    for folder in ("core", "phase"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from aflite_fast.phase import b\n")
    (pkg / "phase" / "b.py").write_text("def f():\n    from aflite_fast.core.a import g\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", str(pkg))
    with pytest.raises(AssertionError, match="aflite_fast.core.a -> aflite_fast.phase.b -> aflite_fast.core.a"):
        test_no_import_cycle()
    with pytest.raises(AssertionError, match=r"aflite_fast.core.a \(core\) imports aflite_fast.phase.b \(phase\)"):
        test_no_module_imports_a_higher_layer()


_IMPORT_EACH = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "aflite_fast" or m.startswith("aflite_fast.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - reported, with the module's name
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_module_imports_on_its_own(child_process):
    names = sorted(n for n in _modules() if not n.endswith("__main__"))
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *names], capture_output=True, text=True,
                          timeout=300, **child_process)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", proc.stdout
