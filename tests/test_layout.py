"""The layout a newcomer can carry on: packages depend in one direction only, and every extension is
found by its registry (a model is one file plus one conf/model YAML)."""
import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1] / "fourdb"
# the foundations, in the order they may import each other: each only the ones before it
FOUNDATIONS = ("fourdb", "fourdb.errors", "fourdb.untrusted", "fourdb.utils", "fourdb.registry", "fourdb.contracts", "fourdb.metrics",
               "fourdb.defaults")
# the data flow, earliest first: a module may import its own package and earlier layers, never a later layer
# nor another package of its own layer
LAYERS = [(name,) for name in FOUNDATIONS] + [
    ("fourdb.rdb",),
    ("fourdb.datasets",),
    ("fourdb.tasks",),
    ("fourdb.importers",),  # a converted dataset's tasks are materialized once, so importers come after tasks
    ("fourdb.columns",),  # the column encoders both features and graph use
    ("fourdb.features", "fourdb.graph"),
    ("fourdb.describe",),  # which columns each model kind reads: from features (DFS) and graph alike
    ("fourdb.engine",),
    ("fourdb.models",),
    ("fourdb.train",),
    ("fourdb.experiment",),  # the run layer, from here to the run record
    ("fourdb.experiment.record",),  # the typed run record, and the JSON/YAML view of types settings share
    ("fourdb.experiment.inputs", "fourdb.experiment.certify", "fourdb.experiment.settings"),
    ("fourdb.experiment.prepare",),  # a run's task, database, splits, model, inputs and trainer config
    # each starts from prepare_run; none imports another
    ("fourdb.experiment.launch", "fourdb.experiment.run", "fourdb.experiment.plan"),
    ("fourdb.leaderboard",),  # run records: checked, stored, rendered
    ("fourdb.export",),  # a run's predictions (a record checked as the boards check it) and a database, as files
    ("fourdb.cli",),
]


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports() -> dict[str, set[str]]:
    """Every fourdb module each module imports, at its top or inside a function alike."""
    mods = modules()

    def resolve(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges = {}
    for name, path in mods.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {resolve(a.name) for a in node.names if a.name.startswith("fourdb")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fourdb"):
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else resolve(node.module)
                          for a in node.names}
        edges[name] = found - {name}
    return edges


def place(module: str) -> str:
    """The entry of ``LAYERS`` a module belongs to: the longest that names it or a package above it."""
    return max((p for group in LAYERS for p in group if module == p or module.startswith(p + ".")), key=len)


def layer(module: str) -> int:
    return next(i for i, group in enumerate(LAYERS) if place(module) in group)


def test_every_module_has_its_place():
    """A new module or package is named in ``LAYERS``; it does not fall back to the package itself."""
    unplaced = sorted(m for m in modules() if m != "fourdb" and place(m) == "fourdb")
    assert not unplaced, f"add to LAYERS: {unplaced}"


def test_no_import_cycle():
    edges = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


def test_imports_follow_the_data_flow():
    backwards = [f"{m} ({LAYERS[layer(m)][0]}) imports {n} ({LAYERS[layer(n)][0]})"
                 for m, ns in imports().items() for n in ns if layer(n) > layer(m)]
    assert not backwards, "\n".join(backwards)


def test_packages_of_one_layer_do_not_import_each_other():
    """Two packages that share a layer are independent: each imports its own package and earlier layers
    only (features and graph both use the column encoders below them, never each other)."""
    across = [f"{m} imports {n}: {place(m)} and {place(n)} share a layer"
              for m, ns in imports().items() for n in ns if layer(n) == layer(m) and place(n) != place(m)]
    assert not across, "\n".join(across)


def test_a_cycle_is_caught(tmp_path, monkeypatch):
    """The checks above can fail: two modules importing each other are reported."""
    pkg = tmp_path / "fourdb"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from fourdb.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from fourdb.a import y\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", pkg)
    with pytest.raises(pytest.fail.Exception, match="import cycle: fourdb.a -> fourdb.b -> fourdb.a"):
        test_no_import_cycle()


def test_an_import_within_a_layer_is_caught(tmp_path, monkeypatch):
    """Features importing graph (one layer) is reported, and so is a foundation importing a later one."""
    pkg = tmp_path / "fourdb"
    for sub in ("features", "graph"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "features" / "__init__.py").write_text("from fourdb.graph import build\n")
    (pkg / "graph" / "__init__.py").write_text("")
    (pkg / "graph" / "build.py").write_text("")
    (pkg / "errors.py").write_text("from fourdb.utils import x\n")
    (pkg / "utils.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", pkg)
    with pytest.raises(AssertionError, match="fourdb.features imports fourdb.graph.build: fourdb.features and "
                                             "fourdb.graph share a layer"):
        test_packages_of_one_layer_do_not_import_each_other()
    with pytest.raises(AssertionError, match=r"fourdb.errors \(fourdb.errors\) imports fourdb.utils"):
        test_imports_follow_the_data_flow()


CONF = ROOT.parent / "conf"


@pytest.mark.parametrize("group,registry", [("model", "fourdb.models:MODELS"), ("features", "fourdb.features:FEATURES"),
                                            ("dataset", "fourdb.datasets:DATASETS"), ("graph", "fourdb.graph:GRAPHS"),
                                            ("sampler", "fourdb.engine.sampling.sampler:STRATEGIES")])
def test_every_config_choice_is_registered(group, registry):
    """A conf/<group> YAML names its choice with ``name``, and the registry of that kind knows it (the
    folder dataset aside: any database folder)."""
    import importlib

    module, attr = registry.split(":")
    known = getattr(importlib.import_module(module), attr)
    for path in sorted((CONF / group).glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["name"]
        assert name == path.stem, path
        if (group, name) != ("dataset", "folder"):
            assert name in known, f"{path}: '{name}' is not a registered {known.kind}"


INPUT_KINDS_PACKAGE = ROOT / "experiment" / "inputs"


def input_kind_comparisons(root: Path, names: set[str]) -> list[str]:
    """Every place outside the input-kind modules that decides on an input kind's name as a string: a comparison
    (==, !=, in, not in) of a kind (an expression naming ``kind``) with a kind's name, or a table of kind names
    looked up by a kind (``{"table": ...}.get(model.input_kind)``). Code asks the kind object instead."""
    def mentions_kind(node) -> bool:
        return any(isinstance(n, ast.Name) and "kind" in n.id or isinstance(n, ast.Attribute) and "kind" in n.attr
                   for n in ast.walk(node))

    def kind_names(node) -> set[str]:
        return {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in names}

    found = []
    for path in sorted(root.rglob("*.py")):
        if INPUT_KINDS_PACKAGE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            hits = set()
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(mentions_kind(o) for o in operands):
                    hits = set().union(*(kind_names(o) for o in operands))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and isinstance(node.func.value, ast.Dict) and any(mentions_kind(a) for a in node.args):
                hits = set().union(*(kind_names(k) for k in node.func.value.keys if k is not None))
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and mentions_kind(node.slice):
                hits = set().union(*(kind_names(k) for k in node.value.keys if k is not None))
            found += [f"{path.relative_to(root.parent)}:{node.lineno} decides on input kind '{name}'"
                      for name in sorted(hits)]
    return found


def test_no_input_kind_is_compared_as_a_string():
    """An input kind (``fourdb.experiment.inputs``) is an object that builds, names and reports its inputs;
    nothing outside its module compares a kind's name, so a new input kind is one module."""
    from fourdb.experiment.inputs import INPUT_KINDS

    names = set(INPUT_KINDS.names())
    assert {"table", "graph", "pairs", "interactions", "labels"} <= names
    found = input_kind_comparisons(ROOT, names)
    assert not found, "\n".join(found)


def test_a_string_comparison_of_an_input_kind_is_caught(tmp_path):
    """The check above can fail: a kind compared with a name, and a table of names looked up by a kind."""
    (tmp_path / "fourdb").mkdir()
    (tmp_path / "fourdb" / "a.py").write_text('def f(model, group):\n    return model.input_kind in ("graph", "x")\n'
                                              'def g(kind):\n    return {"table": 1}.get(kind), "graph" in {}\n')
    assert input_kind_comparisons(tmp_path / "fourdb", {"graph", "table"}) == [
        "fourdb/a.py:2 decides on input kind 'graph'", "fourdb/a.py:4 decides on input kind 'table'"]


MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def long_functions(root: Path) -> list[str]:
    """Every function or method over ``MAX_FUNCTION_LINES`` lines, decorators left out."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} is {length} lines")
    return found


def private_imports(root: Path) -> list[str]:
    """Every ``from fourdb.x import _name`` (or a relative one): a private name used outside its module."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("fourdb")):
                found += [f"{path.relative_to(root.parent)}:{node.lineno} imports {a.name} from {node.module}"
                          for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_function_over_80_lines():
    """A function a newcomer reads in one screen or two: a longer one is split into named parts."""
    found = long_functions(ROOT)
    assert not found, "\n".join(found)


def test_no_module_over_500_lines():
    """A module is one concern: a longer one is split into a package of its parts."""
    found = [f"{path.relative_to(ROOT.parent)} is {n} lines" for path in sorted(ROOT.rglob("*.py"))
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not found, "\n".join(found)


def test_no_private_name_imported_from_another_module():
    """A name another module needs is public (or lives where it is used): ``_`` means this module's own."""
    found = private_imports(ROOT)
    assert not found, "\n".join(found)


def test_a_long_function_and_a_private_import_are_caught(tmp_path):
    """The checks above can fail: an 81-line function, and a private name imported from a sibling."""
    (tmp_path / "fourdb").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    (tmp_path / "fourdb" / "a.py").write_text(f"def long():\n{body}\n\ndef short():\n    pass\n")
    (tmp_path / "fourdb" / "b.py").write_text("from fourdb.a import _helper, public\nfrom .a import _other\n")
    assert long_functions(tmp_path / "fourdb") == ["fourdb/a.py:1 long is 81 lines"]
    assert private_imports(tmp_path / "fourdb") == ["fourdb/b.py:1 imports _helper from fourdb.a",
                                                    "fourdb/b.py:2 imports _other from a"]
