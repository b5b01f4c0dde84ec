"""The packages form a stack: each imports only those below it (docs/layers.md), and the model
package's root holds only what travels with a checkpoint.

Every import of every module is read with `ast`, those inside functions too, so an import
that goes up the stack cannot hide in a function body.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"model_cards": 1, "hmm_datasets": 2, "probing": 3, "modeling_hmmroformer": 4}
TRAVELLING = ("configuration_hmm_roformer.py", "modeling_hmm_roformer.py")  # copied next to the weights


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file; relative ones resolved."""
    package = package_of(path, root)
    return [
        (node.lineno, name)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in import_names(node, package)
    ]


def package_of(path: Path, root: Path = ROOT) -> str:
    """The package a file's relative imports start from."""
    return ".".join(path.relative_to(root).with_suffix("").parts[:-1])


def import_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The absolute names of the modules an import statement imports from (relative ones resolved
    against `package`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:  # from module import x
        return [node.module]
    parts = package.split(".")  # from . import x / from .m import x: `level` packages up
    base = parts[: len(parts) - node.level + 1]
    return [".".join([*base, node.module] if node.module else base)]


def package_modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_no_package_imports_one_above_it(package):
    upward = []
    for path in package_modules(package):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top in FLOORS and top != package and FLOORS[top] >= FLOORS[package]:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not upward, f"{package} (floor {FLOORS[package]}) imports upwards:\n" + "\n".join(upward)


def test_only_the_top_package_imports_probing():
    importers = {
        package
        for package in FLOORS
        for path in package_modules(package)
        for _, module in imported_modules(path)
        if module.split(".")[0] == "probing" and package != "probing"
    }
    assert importers <= {"modeling_hmmroformer"}


def test_the_travelling_model_files_import_only_torch_transformers_and_each_other():
    # the standard library, torch, transformers and huggingface_hub (which transformers requires)
    allowed_roots = {"torch", "transformers", "huggingface_hub", *sys.stdlib_module_names}
    siblings = {f"modeling_hmmroformer.{Path(name).stem}" for name in TRAVELLING}
    for name in TRAVELLING:
        for line, module in imported_modules(ROOT / "modeling_hmmroformer" / name):
            assert module.split(".")[0] in allowed_roots or module in siblings, (
                f"{name}:{line} imports {module}"
            )


NAMES = {  # the modules of names: what every file and folder is called
    "hmm_datasets/names.py",
    "probing/names.py",
    "modeling_hmmroformer/experiments/names.py",
}
WRITER = "hmm_datasets/files.py"  # the one atomic writer: every floor writes through it
JSON_FORM = "hmm_datasets/json_form.py"  # the one check of a typed value's JSON: every floor reads through it


@pytest.mark.parametrize("path", sorted(NAMES | {WRITER, JSON_FORM}))
def test_modules_of_names_the_writer_and_the_json_check_import_only_the_standard_library(path):
    names = {name.removesuffix(".py").replace("/", ".") for name in NAMES}
    for line, module in imported_modules(ROOT / path):
        assert module.split(".")[0] in sys.stdlib_module_names or module in names, (
            f"{path}:{line} imports {module}"
        )


def test_the_model_package_root_holds_only_the_travelling_files_and_the_registration():
    root = ROOT / "modeling_hmmroformer"
    assert sorted(path.name for path in root.glob("*.py")) == sorted(["__init__.py", *TRAVELLING])
    subpackages = sorted(path.parent.name for path in root.glob("*/__init__.py"))
    assert subpackages == ["experiments"]
    # importing the model registers it and nothing else: the experiment is not pulled in
    for line, module in imported_modules(root / "__init__.py"):
        assert module.split(".")[0] in {"transformers"} or module in {
            f"modeling_hmmroformer.{Path(name).stem}" for name in TRAVELLING
        }, f"__init__.py:{line} imports {module}"


def test_the_import_reader_sees_imports_inside_functions(tmp_path):
    """The reader itself: a nested import and a relative one are found and resolved."""
    module = tmp_path / "probing" / "deep.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from modeling_hmmroformer import training\n\nfrom .capture import x\n")
    assert sorted(imported_modules(module, root=tmp_path)) == [
        (2, "modeling_hmmroformer"),
        (4, "probing.capture"),
    ]


STUDY_ONLY = {  # a study's plan, records, reports and figures, and the reports across studies
    "model_cards.study_reports",
    *(
        f"modeling_hmmroformer.experiments.{name}"
        for name in (
            "running.study_plan",
            "decisions.aggregate",
            "decisions.diversity",
            "decisions.architectures",
            "reports",
            "figures.study",
            "figures.across",
        )
    ),
}


def module_file(name: str) -> Path | None:
    """The file of one of our modules (a package's `__init__.py`), None for anything else."""
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def module_level_imports(path: Path) -> list[str]:
    """The modules a file imports when it is imported: its imports outside function and class
    bodies (under `if` and `try` too), `from package import module` as the module too."""
    package, found, pending = package_of(path), [], list(ast.parse(path.read_text()).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.If, ast.Try)):
            pending += [
                *node.body,
                *node.orelse,
                *getattr(node, "handlers", []),
                *getattr(node, "finalbody", []),
            ]
        elif isinstance(node, ast.ExceptHandler):
            pending += node.body
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = import_names(node, package)
            found += names
            if isinstance(node, ast.ImportFrom):
                found += [f"{names[0]}.{alias.name}" for alias in node.names]
    return found


def loaded_at_import(module: str) -> set[str]:
    """Our modules that importing `module` loads (its parent packages' imports too)."""
    loaded, pending = set(), [module]
    while pending:
        name = pending.pop()
        path = module_file(name)
        if name in loaded or path is None:
            continue
        loaded.add(name)
        pending += [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        pending += module_level_imports(path)
    return loaded


def loaded_when_run(command: str) -> set[str]:
    """Our modules that running the command module `command` loads: each module it imports, in
    its functions too (a command imports what it runs once its arguments are parsed), with
    what that one loads at import."""
    imported = [
        name
        for node in ast.walk(ast.parse(module_file(command).read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for module in import_names(node, package_of(module_file(command)))
        for name in (module, *(f"{module}.{a.name}" for a in node.names if isinstance(node, ast.ImportFrom)))
    ]
    return set().union(loaded_at_import(command), *map(loaded_at_import, imported))


def test_a_reproduction_imports_no_study_only_module():
    """`hmm-reproduce` runs the reproduction's plan: a study's plan, records, report and figures
    stay out of its imports (`hmm-study` passes the study's plan to the same runner)."""
    reproduction = loaded_when_run("modeling_hmmroformer.experiments.commands.reproduce")
    assert {
        "modeling_hmmroformer.experiments.running.pipeline",
        "probing.run",
        "model_cards.render",
    } <= reproduction
    assert reproduction & STUDY_ONLY == set()
    # the reader sees a study module's imports where they are made at import
    assert {
        "modeling_hmmroformer.experiments.decisions.aggregate",
        "model_cards.study_reports",
    } <= loaded_at_import("modeling_hmmroformer.experiments.running.study_plan")


@pytest.mark.parametrize("folder", ["", "running", "analyses", "decisions", "figures"])
def test_the_experiment_packages_map_names_every_module_of_its_folder_once(folder):
    """`experiments/__init__.py` maps its modules and folders, each folder's `__init__.py` its
    modules: every one once, none that is not there."""
    import importlib
    import re

    package = importlib.import_module(".".join(["modeling_hmmroformer.experiments", folder]).rstrip("."))
    here = Path(package.__file__).parent
    on_disk = {p.stem for p in here.glob("*.py") if p.stem != "__init__"} | {
        p.parent.name for p in here.glob("*/__init__.py")
    }
    mapped = re.findall(r"^    (\w+)  ", package.__doc__, flags=re.MULTILINE)
    assert sorted(mapped) == sorted(on_disk) and len(mapped) == len(set(mapped))


def test_no_two_of_our_modules_import_each_other():
    """The modules' import graph, imports in function bodies included, has no cycle: a module
    that needs another's names is below it, never beside it behind a lazy import."""
    graph = {}
    for package in FLOORS:
        for path in package_modules(package):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            graph[name.removesuffix(".__init__")] = {
                module for _, module in imported_modules(path) if module_file(module) is not None
            }
    cycles = []

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append(" -> ".join([*trail[trail.index(name) :], name]))
            return
        if name in done:
            return
        for imported in sorted(graph.get(name, ())):
            if not name.startswith(imported + "."):  # a package's own modules import their package
                visit(imported, [*trail, name])
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(sorted(set(cycles)))


def test_the_stage_engine_knows_no_domain():
    """`experiments.running.engine` (state file, stages, lock) imports neither torch nor transformers and,
    of ours, only the atomic file writer."""
    imports = {
        module
        for _, module in imported_modules(
            ROOT / "modeling_hmmroformer" / "experiments" / "running" / "engine.py"
        )
    }
    ours = {module for module in imports if module.split(".")[0] in FLOORS}
    assert ours == {"hmm_datasets.files"}
    assert not {module.split(".")[0] for module in imports} & {"torch", "transformers", "numpy"}


EXPERIMENTS = ROOT / "modeling_hmmroformer" / "experiments"
FILE_MODULES = {
    "pathlib",
    "os",
    "json",
    "yaml",
    "safetensors.torch",
    "hmm_datasets.files",
    "hmm_datasets.export",
}


COMPUTING = sorted([*(EXPERIMENTS / "analyses").glob("*.py"), *(EXPERIMENTS / "decisions").glob("*.py")])


@pytest.mark.parametrize("path", COMPUTING, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_analyses_and_the_decisions_name_no_files(path):
    """Values in, values out: no analysis or decision reads or writes a file (`running.folders`,
    the plans and `reports` do)."""
    names = "modeling_hmmroformer.experiments.names"
    assert not {module for _, module in imported_modules(path)} & {*FILE_MODULES, names}


@pytest.mark.parametrize("path", sorted((EXPERIMENTS / "figures").glob("*.py")), ids=lambda p: p.name)
def test_the_figures_compute_nothing(path):
    """A figure draws its results' plain data: no torch, no analysis."""
    for line, module in imported_modules(path):
        assert module.split(".")[0] != "torch" and ".analyses" not in module, (
            f"{path.name}:{line} imports {module}"
        )
