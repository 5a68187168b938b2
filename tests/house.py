"""The house rules, measured from the source (docs/design/architecture.md#layout): import
circles among the project's modules, private names imported across modules, reaches into
another object's private members, one node role reaching into another's data through the
core, long functions, big modules, and modules directly under ``smr/``.

Every measure is a pure function of a checkout's root, so that ``tests/test_house.py`` runs
it on this repository and on small trees it plants in a temporary directory. Each returns its
violations as a ``Counter`` of readable keys ("smr/node/loop.py: serve"), and :func:`ratchet`
compares them with an allowlist: a new violation fails, and so does a listed one that is gone
(the list may only shrink). ``python -m tests.house`` prints the current figures.

The import graph counts every import statement of a module, wherever it stands: at the top,
inside a function, or under ``if TYPE_CHECKING``. An import moved into a function to get past
an import-time circle still makes each module depend on the other, which is what a circle
says: the state and the code that changes it live in two rooms. Importing a module also
runs its packages' ``__init__.py`` first: so importing ``smr.node.disk`` depends on the
package ``smr.node``, and a package depends on every module its ``__init__.py`` imports, as
any module does (a facade whose names load on first use names their homes as strings, for
``importlib``, and gives their types in a stub beside it, ``__init__.pyi``, which no import
runs and this graph does not read).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGES = ("smr", "ring", "checkpoint")
FUNCTION_LINES_MAX = 80
MODULE_LINES_MAX = 500
TOP_LEVEL_MODULES_MAX = 12
DOCSTRING_LINES_MAX = 30

# Attributes that start with "_" but are public API of the standard library (namedtuple's
# methods, os._exit): reaching them is no reach into another object's state.
PUBLIC_UNDERSCORE_NAMES = frozenset(
    {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"}
)


@dataclass(frozen=True)
class Module:
    """One module of the project: its dotted name, its file, and its parsed source."""

    name: str
    path: str  # relative to the root, with "/"
    is_package: bool
    source: str
    tree: ast.Module


@cache
def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Module]:
    """Every ``.py`` module under `packages` of `root`, by dotted name (a package by its own
    name, from its ``__init__.py``). Read once per root: a tree is not expected to change
    while it is measured."""
    modules: dict[str, Module] = {}
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            relative = file.relative_to(root)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[:2] in (["smr", "ring"], ["smr", "checkpoint"]):
                continue  # ring/ and checkpoint/ seen through smr's links to them
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            source = file.read_text(encoding="utf-8")
            modules[".".join(parts)] = Module(
                ".".join(parts), relative.as_posix(), is_package, source, ast.parse(source)
            )
    return modules


def _imported_base(module: Module, node: ast.ImportFrom) -> str:
    """The dotted name a ``from ... import`` statement of `module` imports from."""
    if not node.level:
        return node.module or ""
    parts = module.name.split(".")
    if not module.is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def _canonical(name: str) -> str:
    """``smr.ring.view``, the installed name, is the module ``ring.view`` of this tree."""
    for installed in ("smr.ring", "smr.checkpoint"):
        if name == installed or name.startswith(installed + "."):
            return name.removeprefix("smr.")
    return name


def _owning_module(name: str, modules: Mapping[str, Module]) -> str | None:
    """The project module `name` is or lies in (``smr.node.core.NodeCore`` -> its module)."""
    name = _canonical(name)
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: Module, modules: Mapping[str, Module]) -> list[tuple[str, str | None]]:
    """Each project module `module` imports, anywhere in its source, with the name it takes
    from it (None for ``import x``, and for ``from pkg import submodule``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _owning_module(alias.name, modules)
                if target:
                    found.append((target, None))
        elif isinstance(node, ast.ImportFrom):
            base = _imported_base(module, node)
            for alias in node.names:
                submodule = _canonical(f"{base}.{alias.name}")
                if submodule in modules:
                    found.append((submodule, None))
                else:
                    target = _owning_module(base, modules)
                    if target:
                        found.append((target, alias.name))
    return [(target, name) for target, name in found if target != module.name]


def _packages_of(name: str, modules: Mapping[str, Module]) -> list[str]:
    """The project packages that hold `name`, outermost first (``smr``, ``smr.node``)."""
    parts = name.split(".")
    return [
        ".".join(parts[:end]) for end in range(1, len(parts)) if ".".join(parts[:end]) in modules
    ]


def import_graph(modules: Mapping[str, Module]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, and each package holding one of them
    (Python runs a package's ``__init__.py`` before any of its modules); a package is a
    module like any other, its edges every import of its ``__init__.py``."""

    def with_packages(targets: set[str]) -> set[str]:
        return targets.union(*(_packages_of(target, modules) for target in targets))

    graph: dict[str, set[str]] = {}
    for name, module in modules.items():
        targets = {target for target, _ in imports_of(module, modules)}
        graph[name] = with_packages(targets) - {name}
    return graph


def strongly_connected(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of `graph` with more than one node: its import
    circles (Tarjan's algorithm, iterative, so that a deep graph needs no deep recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(frozenset(component))
    return components


def import_circles(root: Path) -> Counter[str]:
    """Each import circle among the project's modules, as its sorted members."""
    circles = strongly_connected(import_graph(project_modules(root)))
    return Counter(", ".join(sorted(circle)) for circle in circles)


def private_imports(root: Path) -> Counter[str]:
    """``from x import _y`` where ``x`` is another project module: "importer <- x._y"."""
    modules = project_modules(root)
    found: Counter[str] = Counter()
    for module in modules.values():
        for target, name in imports_of(module, modules):
            if name and _is_private(name):
                found[f"{module.name} <- {target}.{name}"] += 1
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(root: Path) -> Counter[str]:
    """Attribute reads and writes ``x._y`` where ``x`` is not the bare ``self``, ``cls`` or
    ``super()``: "path: x._y", counted. ``self.other._y`` counts (a member's private
    member), and so does a class's method reaching into another instance of its own class
    (``other._members`` in an ``__eq__``): that instance is asked through named methods
    like any other. The standard library's public names that start with ``_`` (``os._exit``,
    a namedtuple's ``_replace``) are no reach."""
    found: Counter[str] = Counter()
    for module in project_modules(root).values():
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and _is_private(node.attr)
                and node.attr not in PUBLIC_UNDERSCORE_NAMES
                and not _is_self(node.value)
            ):
                found[f"{module.path}: {ast.unparse(node.value)}.{node.attr}"] += 1
    return found


def _is_self(node: ast.expr) -> bool:
    """Whether `node` is ``self``, ``cls`` or ``super()``."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


ROLE_HOLDER = ("smr/node/core.py", "NodeCore")
# Records the core shares with every role rather than roles: the counters (each role is to
# keep its own, docs/design/layout.md#node-context) are not counted as a role's data.
SHARED_RECORDS = frozenset({"NodeCounters"})
NODE_NAMES = frozenset({"node", "_node", "core", "_core"})


def node_roles(root: Path) -> dict[str, tuple[str, set[str]]]:
    """The node's roles: each attribute ``NodeCore`` sets to an instance of a class of
    ``smr/node/`` (``self.replication = Replication(self)``; not the ``SHARED_RECORDS``), with
    the path of the class's module and the names the class offers (its methods and
    properties)."""
    modules = project_modules(root)
    classes: dict[str, tuple[str, set[str]]] = {}
    for module in modules.values():
        if not module.path.startswith("smr/node/"):
            continue
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef):
                offered = {
                    item.name
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
                classes[node.name] = (module.path, offered)
    holder = next((m for m in modules.values() if m.path == ROLE_HOLDER[0]), None)
    roles: dict[str, tuple[str, set[str]]] = {}
    if holder is None:
        return roles
    for holder_class in ast.walk(holder.tree):
        if isinstance(holder_class, ast.ClassDef) and holder_class.name == ROLE_HOLDER[1]:
            for assign in ast.walk(holder_class):
                if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
                    continue
                target = assign.targets[0]
                if not (isinstance(target, ast.Attribute) and _is_self(target.value)):
                    continue
                # The outermost call: Balancer(self, BalanceConfig(above)) is a Balancer.
                calls = [
                    call.func.id
                    for call in ast.walk(assign.value)
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                ]
                if calls and calls[0] in classes and calls[0] not in SHARED_RECORDS:
                    roles[target.attr] = classes[calls[0]]
    return roles


def _is_node(node: ast.expr) -> bool:
    """Whether `node` names the node core: ``node``, ``core``, ``self.node``, ``self._core``."""
    if isinstance(node, ast.Name):
        return node.id in NODE_NAMES
    return isinstance(node, ast.Attribute) and node.attr in NODE_NAMES and _is_self(node.value)


def role_reaches(root: Path) -> Counter[str]:
    """Reads and writes of another node role's data through the core, from ``smr/node/``:
    ``node.replication.replicas`` (or ``replication.replicas`` after ``replication =
    node.replication``) in a module other than the role's own, where ``replicas`` is not a
    method or property of the role's class: "path: role.member", counted. A role asks another
    through the names it offers; its data is its own."""
    roles = node_roles(root)
    found: Counter[str] = Counter()
    for module in project_modules(root).values():
        if not module.path.startswith("smr/node/"):
            continue
        functions = [
            node
            for node in ast.walk(module.tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        seen: set[int] = set()
        for function in functions:
            aliases = {
                assign.targets[0].id: assign.value.attr
                for assign in ast.walk(function)
                if isinstance(assign, ast.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0], ast.Name)
                and isinstance(assign.value, ast.Attribute)
                and assign.value.attr in roles
                and _is_node(assign.value.value)
            }
            for node in ast.walk(function):
                if id(node) in seen or not isinstance(node, ast.Attribute):
                    continue
                value = node.value
                if (
                    isinstance(value, ast.Attribute)
                    and value.attr in roles
                    and _is_node(value.value)
                ):
                    role = value.attr
                elif isinstance(value, ast.Name) and value.id in aliases:
                    role = aliases[value.id]
                else:
                    continue
                seen.add(id(node))
                path, offered = roles[role]
                if path != module.path and node.attr not in offered:
                    found[f"{module.path}: {role}.{node.attr}"] += 1
    return found


def long_functions(root: Path, lines_max: int = FUNCTION_LINES_MAX) -> Counter[str]:
    """Functions (methods, nested functions) longer than `lines_max` lines, from ``def`` to
    their last line: "path: Outer.name"."""
    found: Counter[str] = Counter()
    for module in project_modules(root).values():
        for qualname, node in _functions(module.tree, ""):
            if node.end_lineno is not None and node.end_lineno - node.lineno + 1 > lines_max:
                found[f"{module.path}: {qualname}"] += 1
    return found


def function_lengths(root: Path) -> dict[str, int]:
    """Every function's length in lines, by "path: qualname" (for the figures)."""
    lengths: dict[str, int] = {}
    for module in project_modules(root).values():
        for qualname, node in _functions(module.tree, ""):
            last_line = node.end_lineno or node.lineno
            lengths[f"{module.path}: {qualname}"] = last_line - node.lineno + 1
    return lengths


def _functions(
    tree: ast.AST, prefix: str
) -> Iterable[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def long_docstrings(root: Path, lines_max: int = DOCSTRING_LINES_MAX) -> dict[str, int]:
    """Module docstrings longer than `lines_max` lines, by path, with their length: the essays
    that belong in docs/design/ (docs/design/layout.md#docstrings). A figure, not a rule."""
    found: dict[str, int] = {}
    for module in project_modules(root).values():
        first = module.tree.body[0] if module.tree.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and first.end_lineno is not None
        ):
            lines = first.end_lineno - first.lineno + 1
            if lines > lines_max:
                found[module.path] = lines
    return found


def big_modules(root: Path, lines_max: int = MODULE_LINES_MAX) -> Counter[str]:
    """Modules longer than `lines_max` lines, by path."""
    return Counter(
        module.path
        for module in project_modules(root).values()
        if len(module.source.splitlines()) > lines_max
    )


def top_level_modules(root: Path) -> list[str]:
    """The modules directly under ``smr/`` (``__init__.py`` aside)."""
    return sorted(
        module.path
        for module in project_modules(root, ("smr",)).values()
        if module.path.count("/") == 1 and not module.is_package
    )


def flat_modules(root: Path, modules_max: int = TOP_LEVEL_MODULES_MAX) -> Counter[str]:
    """When more than `modules_max` modules sit directly under ``smr/``, each of them (the
    violation is the flat floor, and each module on it is a part to move)."""
    found = top_level_modules(root)
    return Counter(found) if len(found) > modules_max else Counter()


def ratchet(rule: str, current: Counter[str], allowed: Counter[str]) -> str:
    """The figures of `rule`; raises ``AssertionError`` if `current` holds a violation
    `allowed` does not (a new one), or `allowed` one that `current` no longer holds (fixed:
    take it off the list, which only shrinks)."""
    new = current - allowed
    fixed = allowed - current
    figures = f"{rule}: {sum(current.values())} ({len(current)} distinct, {len(allowed)} listed)"
    problems = []
    if new:
        problems.append(
            f"{rule}: new, fix them (do not list them):\n"
            + "\n".join(f"  {key}  (x{count})" for key, count in sorted(new.items()))
        )
    if fixed:
        problems.append(
            f"{rule}: fixed, take them off the allowlist (or lower their count):\n"
            + "\n".join(f"  {key}  (x{count})" for key, count in sorted(fixed.items()))
        )
    assert not problems, figures + "\n" + "\n".join(problems)
    return figures


def figures(root: Path) -> str:
    """One line per rule: how many violations the checkout at `root` has."""
    circles = strongly_connected(import_graph(project_modules(root)))
    lengths = function_lengths(root)
    longest = sorted(lengths.items(), key=lambda item: -item[1])
    return "\n".join(
        [
            f"import circles: {len(circles)} ({sum(map(len, circles))} modules)",
            f"private names imported across modules: {sum(private_imports(root).values())}",
            f"reaches into another object's _private members: "
            f"{sum(private_reaches(root).values())}",
            f"reaches into another node role's data: {sum(role_reaches(root).values())}",
            f"functions over {FUNCTION_LINES_MAX} lines: "
            + str(sum(1 for _, n in longest if n > FUNCTION_LINES_MAX)),
            f"modules over {MODULE_LINES_MAX} lines: {len(big_modules(root))}",
            f"modules directly under smr/: {len(top_level_modules(root))}"
            f" (at most {TOP_LEVEL_MODULES_MAX})",
            f"module docstrings over {DOCSTRING_LINES_MAX} lines: {len(long_docstrings(root))}",
        ]
    )


if __name__ == "__main__":
    print(figures(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")))
