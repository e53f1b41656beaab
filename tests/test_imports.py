"""Imports point one way: every module imports in a fresh interpreter, and no module reaches
itself again through oodsim imports, whether written at module level or inside a function
(a function-level import hides a cycle without removing it)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "oodsim"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] != "__main__":
            found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The oodsim modules ``module`` imports anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    targets.add(full)
                elif base in modules:
                    targets.add(base)
    targets.discard(module)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
    return found


def test_no_import_cycles_even_through_function_level_imports() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def folder_graph(modules: dict[str, Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Folder → the other folders its modules import, folders named relative to ``root``
    (``oodsim/store``); the package's face ``oodsim/__init__.py``, which only hands names on
    lazily, is left out."""
    folder = {name: path.parent.relative_to(root).as_posix() for name, path in modules.items()}
    graph: dict[str, set[str]] = {place: set() for place in folder.values()}
    for name, path in modules.items():
        if name != "oodsim":
            targets = _imports(name, path, modules) - {"oodsim"}
            graph[folder[name]] |= {folder[t] for t in targets} - {folder[name]}
    return graph


def test_no_folder_loops() -> None:
    """Folders import one way too: top-level modules import no folder, store/ and results/
    nothing above them, data/ and models/ no spec (specs look names up in their registries;
    the code that reads spec parts is in simulation/ and zoo/, above specs)."""
    assert _cycles(folder_graph(_modules())) == []


def test_the_folder_graph_sees_a_loop_through_top_level_modules(tmp_path: Path) -> None:
    """A top-level module that imports a folder importing it back is a loop (the case that
    ``plugin_sources.py`` and ``store/`` made)."""
    files = {
        "pkg.errors": ("errors.py", ""),
        "pkg.plugin": ("plugin.py", "from pkg.store.fs import read_json\n"),
        "pkg.store.fs": ("store/fs.py", "from pkg.errors import OodsimError\n"),
        "pkg.store.layout": ("store/layout.py", ""),
    }
    modules = {}
    for name, (relative, text) in files.items():
        path = tmp_path / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[name] = path
    assert _cycles(folder_graph(modules, tmp_path)) == [["pkg", "pkg/store"]]
    modules.pop("pkg.plugin")
    assert _cycles(folder_graph(modules, tmp_path)) == []


#: The most lines a module of the package may have: a longer one holds several concerns.
MAX_MODULE_LINES = 450


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.slow  # imports every module in a fresh interpreter
def test_every_module_imports_in_a_fresh_interpreter() -> None:
    names = sorted(_modules())
    script = (
        "import importlib, json, sys\n"
        f"names = {names!r}\n"
        "failed = {}\n"
        "for name in names:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed[name] = f'{type(error).__name__}: {error}'\n"
        "print(json.dumps(failed))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {}


def _unexplained_function_imports(path: Path) -> list[int]:
    """Lines of imports inside functions with no reason: no comment on the import group or on
    the line right above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    missing = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Import | ast.ImportFrom):
                continue
            row = inner.lineno - 1
            explained = "#" in lines[row]
            while not explained and row > 0:
                row -= 1
                text = lines[row].strip()
                if text.startswith("#"):
                    explained = True
                elif not (text == "" or text.startswith(("import ", "from ", ")")) or "," in text):
                    break
                explained = explained or "#" in text
            if not explained:
                missing.append(inner.lineno)
    return missing


def test_every_function_level_import_says_why() -> None:
    """An import inside a function keeps start-up cheap or breaks a real cycle; it says which."""
    missing = {
        str(path.relative_to(ROOT)): lines
        for path in _modules().values()
        if (lines := _unexplained_function_imports(path))
    }
    assert missing == {}


DRIVER_SCRIPT = """
import sys
import oodsim
from oodsim.protocols import bind, load
from oodsim.store import Store
spec = load("specs/digits.toml")
protocol = bind(spec)
protocol.preflight(Store(sys.argv[1]))
keys = [protocol.plan(seed) for seed in spec.seeds.all()[:3]]
heavy = ("torch", "torchvision", "sklearn")
print(sorted(name for name in sys.modules if name.split(".")[0] in heavy))
"""


def test_a_driver_validates_preflights_and_plans_the_main_job_without_torch(
    tmp_path: Path,
) -> None:
    """torch costs a driver ~1 s and 600 MB: the workers need it, the driver does not. Nor
    does it import scikit-learn to read the digits it checks (about 1 s more)."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER_SCRIPT, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == "[]"


def test_protocols_never_import_each_other() -> None:
    """What two protocols share (the open set entries the severity protocol reads for its
    ``trained`` models) is :mod:`oodsim.artifacts`, not the other protocol's package."""
    modules = _modules()
    builtins = ("open_set", "severity", "imagenet_o")
    crossings = []
    for name, path in modules.items():
        own = next((p for p in builtins if name.startswith(f"oodsim.protocols.{p}")), None)
        if own is None:
            continue
        for target in _imports(name, path, modules):
            other = next((p for p in builtins if target.startswith(f"oodsim.protocols.{p}")), own)
            if other != own:
                crossings.append((name, target))
    assert crossings == []


def test_a_worker_that_only_unpickles_a_task_knows_the_built_in_registries(
    tmp_path: Path,
) -> None:
    """A worker started with the dask CLI or by a batch job imports nothing of oodsim until it
    unpickles a task; the simulation task's module must bring the built-in architectures and
    datasets with it (it once lost ``small_cnn`` when the task moved out of the open set
    package, whose import used to register them by chance)."""
    import pickle

    from oodsim.artifacts.compute import simulation_task
    from oodsim.specs import load_spec

    task = simulation_task(load_spec(ROOT / "specs" / "digits.toml"), 0)
    (tmp_path / "task.pkl").write_bytes(pickle.dumps(task.compute))
    script = (
        "import pickle, sys\n"
        f"compute = pickle.loads(open({str(tmp_path / 'task.pkl')!r}, 'rb').read())\n"
        "from oodsim.artifacts.keys import entries\n"
        "from oodsim.data.registry import dataset_info\n"
        "spec, seed = compute.args\n"
        "print(len(entries(spec, seed)), dataset_info(spec.dataset.name).name)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(len(task.entries)), "digits"]


def test_artifacts_sit_below_the_protocols() -> None:
    """The protocols plan and read artifacts; artifacts (the tasks that fill entries, the
    trained classifiers' entries) import no protocol, so the shared part has no way back up."""
    modules = _modules()
    upward = [
        (name, target)
        for name, path in modules.items()
        if name.startswith("oodsim.artifacts")
        for target in _imports(name, path, modules)
        if target.startswith("oodsim.protocols")
    ]
    assert upward == []


def test_no_private_name_of_distributed_or_dask_jobqueue_outside_the_compat_module() -> None:
    """distributed's and dask-jobqueue's internals (names that start with one ``_``: the
    private methods of the classes oodsim uses, overridden or called, and private imports)
    are used in :mod:`oodsim.clusters.dask_compat` alone, which says the versions it was
    tested with."""
    distributed = pytest.importorskip("distributed")
    jobqueue = pytest.importorskip("dask_jobqueue")
    from dask_jobqueue.local import LocalJob
    from distributed.deploy.spec import ProcessInterface
    from distributed.nanny import WorkerProcess

    classes = (
        distributed.SpecCluster,
        distributed.LocalCluster,
        distributed.Nanny,
        distributed.Client,
        distributed.Worker,
        distributed.Scheduler,
        distributed.Future,
        ProcessInterface,
        WorkerProcess,
        jobqueue.core.Job,
        jobqueue.core.JobQueueCluster,
        LocalJob,
    )
    private = {
        name
        for cls in classes
        for name in dir(cls)
        if name.startswith("_") and not name.startswith("__")
    }
    # the classes oodsim subclasses: a method of theirs defined again is an override
    subclassed = {
        name
        for cls in (distributed.Nanny, jobqueue.core.Job, LocalJob)
        for name in dir(cls)
        if name.startswith("_") and not name.startswith("__")
    }
    found = []
    for path in sorted((ROOT / "oodsim").rglob("*.py")):
        if path.name == "dask_compat.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            found += [
                f"{path.relative_to(ROOT)}:{item.lineno} defines {item.name}"
                for item in cls.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and item.name in subclassed
            ]
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "distributed",
                "dask_jobqueue",
            ):
                found += [f"{where} imports {a.name}" for a in node.names if a.name[0] == "_"]
            elif isinstance(node, ast.Attribute) and node.attr in private:
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    found.append(f"{where} uses .{node.attr}")
    assert not found, found


def test_no_private_name_is_imported_from_another_module_of_the_package() -> None:
    """A name with a leading underscore stays in its module: what another module needs is
    public there (``from oodsim.x import _name`` couples a module to another's insides)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("oodsim"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                private = [name for name in private if not name.startswith("__")]
                if private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {private}")
    assert not found, found
