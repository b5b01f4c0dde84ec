"""The packages form a stack: each imports only those below it (docs/layout.md), and the model
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
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from .module import x
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append((node.lineno, ".".join([*base, node.module] if node.module else base)))
            else:
                found.append((node.lineno, node.module))
    return found


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
