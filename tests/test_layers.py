"""The package's imports go one way (issue 34): read from the source with ast, nothing imported.

Layers, top to bottom; a module may import its own layer or any layer below it, never one above:
    cli -> jobs/answers/api/spark/collect -> build -> store -> ingest/views -> normalize/schema/runmeta -> errors
Three rules fail the test: an import cycle between modules (function-level imports count: they
hide a cycle, they do not remove it), an upward import, and a private name (`_x`) imported from
another module or reached through it (`warehouse._real_names`). Today's violations that the moves
have not fixed yet are listed in KNOWN, each with its reason; the test asserts the list equals
what it finds, so fixing one fails the test until its entry is deleted, and a new one fails it
until it is fixed or listed."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "kwarehouse"

# The top-level name under kwarehouse -> its layer (0 is the top). A new top-level module or
# package fails test_every_module_has_a_layer until it is placed here.
LAYERS = {
    "__init__": 0, "__main__": 0, "cli": 0,     # the package's face: kwarehouse.open() and `kwh`
    "jobs": 1, "answers": 1, "api": 1, "spark": 1, "collect": 1,
    "build": 2,
    "store": 3,
    "ingest": 4, "views": 4,
    "normalize": 5, "schema": 5, "runmeta": 5,
    "settings": 6, "errors": 6, "cache": 6,
}

KNOWN: dict[tuple, str] = {}


def modules():
    """{dotted module name: parsed tree} for every .py file under src/kwarehouse."""
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (ast.parse(path.read_text(encoding="utf-8"), str(path)), is_package)
    return found


def imports(name, tree, is_package, known):
    """(imported module, imported name or None) for each kwarehouse import in the tree, function-level
    imports included: `from kwarehouse.store import catalog` is the module kwarehouse.store.catalog,
    `from kwarehouse.store.warehouse import _x` is the name _x of kwarehouse.store.warehouse."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}", None
                else:
                    yield base, alias.name


def private_uses(tree, bound):
    """(module, name) for each `alias._name` in the tree where alias is a kwarehouse module
    bound by an import: `warehouse._real_names(...)` reaches into warehouse as an import of it would."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            yield bound[node.value.id], node.attr


def module_aliases(tree, known):
    """{local name: kwarehouse module} the tree's imports bind (`from kwarehouse.store import
    warehouse as store` binds store; `import kwarehouse.x` binds only kwarehouse, left out)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    bound[alias.asname] = alias.name
    return bound


def layer(module):
    top = module.split(".")[1] if "." in module else "__init__"
    return LAYERS.get(top)


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter[0]
                    counter[0] += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def violations(known):
    """{("cycle", modules) | ("upward", importer, imported) | ("private", importer, module.name)}."""
    graph = {name: set() for name in known}
    found = set()
    for name, (tree, is_package) in known.items():
        for module, imported in imports(name, tree, is_package, known):
            if module not in known or module == name:
                continue
            graph[name].add(module)
            if layer(name) is not None and layer(module) is not None and layer(module) < layer(name):
                found.add(("upward", name, module))
            if imported and imported.startswith("_") and not imported.startswith("__"):
                found.add(("private", name, f"{module}.{imported}"))
        for module, attribute in private_uses(tree, module_aliases(tree, known)):
            if module != name:
                found.add(("private", name, f"{module}.{attribute}"))
    for component in cycles(graph):
        found.add(("cycle", " ".join(component)))
    return found


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in modules() if layer(name) is None)
    assert not unplaced, f"place these in LAYERS of tests/test_layers.py: {unplaced}"


def test_imports_go_one_way():
    found = violations(modules())
    new = sorted(found - set(KNOWN))
    fixed = sorted(set(KNOWN) - found)
    assert not new, f"new layer violations (fix them, or list them in KNOWN with a reason): {new}"
    assert not fixed, f"fixed: delete these from KNOWN in tests/test_layers.py: {fixed}"


def test_the_checker_sees_each_kind_of_violation():
    """The rules themselves, on a tree written for the purpose: a cycle hidden behind a
    function-level import, an upward import and a private name are each found."""
    store = ast.parse("import os\n\ndef commit():\n    from kwarehouse.jobs import rollup\n    rollup._later()\n")
    rollup = ast.parse("from kwarehouse.store.files import _private, public\nfrom kwarehouse import errors\n")
    errors = ast.parse("from . import errors as same\n")
    known = {"kwarehouse.store.files": (store, False), "kwarehouse.jobs.rollup": (rollup, False),
             "kwarehouse.errors": (errors, False)}
    assert violations(known) == {("cycle", "kwarehouse.jobs.rollup kwarehouse.store.files"),
                                 ("upward", "kwarehouse.store.files", "kwarehouse.jobs.rollup"),
                                 ("private", "kwarehouse.jobs.rollup", "kwarehouse.store.files._private"),
                                 ("private", "kwarehouse.store.files", "kwarehouse.jobs.rollup._later")}
