"""Offline, isolated test runs: no network, private caches, one torch thread.

The suite runs as two streams of one core each: the tests, and beside them the doc test's
pages (`page_runs`). One thread per process, here and in every process a test starts
(OMP_NUM_THREADS), keeps the streams from oversubscribing the cores: torch's threads wait
for each other at every operation, and a thread that shares its core makes the others wait."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["OMP_NUM_THREADS"] = "1"

# Every cache a test, or a process it starts, could fill (datasets' corpora and Parquet
# entries, the Hub's, remote code, matplotlib's fonts) lives in one folder per session, never
# in the user's ~/.cache. Set before datasets, huggingface_hub or matplotlib is imported:
# they read these once, at import.
SESSION_CACHE = Path(tempfile.mkdtemp(prefix="hmm-roformer-tests-"))
CACHE_OVERRIDES = ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_MODULES_CACHE")
for name in CACHE_OVERRIDES:  # each would take its cache out of HF_HOME
    os.environ.pop(name, None)
os.environ["HF_HOME"] = str(SESSION_CACHE / "huggingface")
os.environ["XDG_CACHE_HOME"] = str(SESSION_CACHE / "xdg")
os.environ["MPLCONFIGDIR"] = str(SESSION_CACHE / "matplotlib")
assert "datasets" not in sys.modules, "datasets was imported before tests/conftest.py chose its cache"

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.processes import StartedRun  # noqa: E402

torch.set_num_threads(1)


def pytest_unconfigure(config):
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def session_cache() -> Path:
    """The session's folder of caches (HF_HOME, XDG_CACHE_HOME and MPLCONFIGDIR are in it)."""
    return SESSION_CACHE


@pytest.fixture(autouse=True)
def _readings_of_this_test_only():
    """Each test computes its own probe readings (`probing.reuse` keeps them per process)."""
    from probing import reuse

    reuse.clear()


@pytest.fixture(autouse=True, scope="session")
def _quiet_datasets():
    import datasets

    datasets.disable_progress_bars()


PLUGIN_MODULES = ("hmm_datasets", "modeling_hmmroformer", "probing", "model_cards")
ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc_blocks)
# a clone's folders that a page's scratch folder links to
LINKED_FOLDERS = ("scripts", "configs", "benchmarks", "tests", "model_cards")


@pytest.fixture
def run_without_plugin(tmp_path):
    """Run Python source in a fresh process where no module of this package can be imported."""
    import textwrap

    def run(source: str) -> str:
        blocker = f"import sys\nfor name in {PLUGIN_MODULES!r}:\n    sys.modules[name] = None\n"
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp_path / "datasets_cache"),
            "HF_MODULES_CACHE": str(tmp_path / "modules"),
        }
        done = subprocess.run(
            [sys.executable, "-c", blocker + textwrap.dedent(source)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    return run


@dataclass(frozen=True)
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_script(capsys):
    """`run_script("scripts/study.py", *arguments, cwd=None)`: the script's `main(arguments)` in
    this process (no interpreter start, no second import of torch), with its exit status and
    printed output. The doc test runs every script as a reader does, in a fresh shell."""
    import runpy

    def run(script: str, *arguments, cwd: Path | None = None) -> ScriptRun:
        path, here = ROOT / script, Path.cwd()
        sys.path.insert(0, str(path.parent))  # as `python <script>` does: its folder's modules import
        try:
            main = runpy.run_path(str(path), run_name=path.stem)["main"]
            capsys.readouterr()
            os.chdir(cwd or here)
            returncode = main([str(argument) for argument in arguments])
        except SystemExit as stopped:  # argparse's own errors
            returncode = stopped.code
        finally:
            os.chdir(here)
            sys.path.remove(str(path.parent))
        printed = capsys.readouterr()
        return ScriptRun(returncode, printed.out, printed.err)

    return run


# ---- the package as a user installs it: a wheel in a fresh virtual environment --------------
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "configs", *PLUGIN_MODULES)


def run_checked(command: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, **kwargs
    )
    assert done.returncode == 0, f"{' '.join(map(str, command))}: {done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def wheel_environment(tmp_path_factory) -> Path:
    """A fresh virtual environment holding the package installed from a wheel, as a user gets it:
    the wheel built offline from a copy of the clone's sources (the build writes nothing into the
    clone), the dependencies this environment's own (a .pth file names its site-packages; the
    .pth files inside, the editable install's among them, are not read). Its bin/ has the hmm-*
    commands."""
    import site
    import sysconfig

    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    # --ignore-installed: pip, run from this environment, sees its editable install of the package
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    run_checked(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", root / "dist", source]
    )
    [wheel] = (root / "dist").glob("*.whl")
    venv = root / "venv"
    run_checked([sys.executable, "-m", "venv", "--without-pip", venv])
    run_checked(
        [
            *pip,
            "--python",
            venv / "bin" / "python",
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            wheel,
        ]
    )
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


@pytest.fixture(scope="session")
def reproduced_tiny(tmp_path_factory, wheel_environment):
    """`hmm-reproduce --preset tiny` as installed from the wheel (the same `main` as
    `scripts/reproduce.py`), run from an empty folder, end to end, once per session: (folder,
    its stdout)."""
    workdir = tmp_path_factory.mktemp("reproduce")
    out = workdir / "tiny"
    command = [wheel_environment / "bin" / "hmm-reproduce", "--preset", "tiny", "--out", out, "--quiet"]
    env = {**os.environ, "HF_DATASETS_CACHE": str(workdir / "datasets_cache")}
    env.pop("PYTHONPATH", None)  # the wheel's package, never a clone's
    done = run_checked(command, cwd=workdir, env=env, timeout=600)
    return out, done.stdout


@pytest.fixture(scope="session")
def quick_study_started(tmp_path_factory) -> tuple[Path, StartedRun]:
    """`scripts/study.py --study quick`, started once per session (its records in the study
    folder's sibling `records/`): (folder, the run). The doc test starts it before building the
    wheel, so that the two overlap."""
    out = tmp_path_factory.mktemp("study") / "quick"
    command = [sys.executable, ROOT / "scripts" / "study.py", "--study", "quick", "--out", out]
    command += ["--records", out.parent / "records", "--quiet"]
    return out, StartedRun(command, out.parent / "study", cwd=ROOT)


@pytest.fixture(scope="session")
def quick_studied(quick_study_started):
    """The quick study of `quick_study_started`, end to end: (folder, its stdout)."""
    out, run = quick_study_started
    return out, run.finished().stdout


@pytest.fixture(scope="session")
def gpt2_studied(tmp_path_factory) -> Path:
    """The quick study's models at 2 layers, one seed, as GPT-2 (learned positions: no shuffle
    test, no knock-out), in this process, once per session: its study folder."""
    from modeling_hmmroformer.experiments.running.pipeline import run_pipeline
    from modeling_hmmroformer.experiments.running.plan import make_pipeline
    from modeling_hmmroformer.experiments.running.study_plan import STUDY
    from modeling_hmmroformer.experiments.settings import get_settings

    settings = get_settings("quick", depths=(2,), seeds=(0,), overrides={"model": {"model_type": "gpt2"}})
    out = tmp_path_factory.mktemp("study") / "gpt2"
    run_pipeline(make_pipeline(settings, out, plan=STUDY, progress=False), log=lambda line: None)
    return out


# ---- the doc test's pages (tests/test_docs.py) ---------------------------------------------
def page_workdir(root: Path, reproduced: Path, studied: Path) -> Path:
    """A scratch folder laid out like a clone, where `scripts/reproduce.py --preset tiny` and
    `scripts/study.py --study quick` have run (the suite's own runs, copied: a page's command
    resumes them, as it would a reader's)."""
    root.mkdir(parents=True)
    for name in LINKED_FOLDERS:
        (root / name).symlink_to(ROOT / name)
    (root / ".venv").symlink_to(sys.prefix)  # what `make install` made: the README activates it
    shutil.copytree(
        ROOT / "results", root / "results"
    )  # a copy: a page's command never writes into the clone
    shutil.copytree(reproduced, root / "runs" / "reproduce-tiny", symlinks=True)
    shutil.copytree(studied, root / "runs" / "study-quick", symlinks=True)
    return root


def shell_path(page: Path) -> str:
    """PATH for a page's commands: the README's run in a fresh shell, where only what its install
    command made is there (`.venv`, activated by the page itself); docs/ pages assume it active."""
    others = [
        entry for entry in os.environ["PATH"].split(os.pathsep) if Path(entry) != Path(sys.executable).parent
    ]
    if page == ROOT / "README.md":
        return os.pathsep.join(others)
    return os.pathsep.join([str(Path(sys.executable).parent), *others])


def run_page(page: Path, workdir: Path) -> subprocess.CompletedProcess:
    """Every block of `page`, in page order, in a fresh process working in `workdir`."""
    env = {
        **{key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"},
        "PATH": shell_path(page),
        "HF_HOME": str(workdir / "hf_home"),
        "HF_DATASETS_CACHE": str(workdir / "datasets_cache"),
        "MPLBACKEND": "Agg",
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "doc_blocks.py"), str(page)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def commands_on(page: Path) -> int:
    """Shell command lines a page runs (each starts an interpreter): the costly part of a page."""
    blocks = [
        block for block in doc_blocks.read_blocks(page) if block.language == "bash" and not block.skip_reason
    ]
    return sum(bool(line.strip()) for block in blocks for line in block.source.splitlines())


PAGE_TEST = "tests/test_docs.py::test_every_block_of_the_page_runs"


def selected_pages(session) -> list[Path]:
    """The pages whose doc test this session runs."""
    return [item.callspec.params["page"] for item in session.items if item.nodeid.startswith(PAGE_TEST)]


@pytest.fixture(scope="session")
def page_runs(request, tmp_path_factory, quick_study_started, reproduced_tiny, quick_studied):
    """The selected pages of the doc test (tests/test_docs.py), one after another in a thread
    beside the rest of the suite, each in its own scratch folder (`page_workdir`): a page is
    mostly interpreters starting up, which use one core of two. The pages with the most
    commands go first. page -> future of its finished process."""
    work = tmp_path_factory.mktemp("docs")
    pool = ThreadPoolExecutor(max_workers=1)
    futures = {}
    for page in sorted(selected_pages(request.session), key=commands_on, reverse=True):
        workdir = page_workdir(
            work / doc_blocks.page_id(page).replace("/", "_"), reproduced_tiny[0], quick_studied[0]
        )
        futures[page] = pool.submit(run_page, page, workdir)
    yield futures
    pool.shutdown(cancel_futures=True)


@pytest.fixture(autouse=True, scope="session")
def _pages_start_with_the_suite(request):
    """When the doc test is selected, its pages start at the first test, not at the last."""
    if selected_pages(request.session):
        request.getfixturevalue("page_runs")


TINY_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}  # configs/tiny.yaml's model


@pytest.fixture
def tiny_model():
    """`tiny_model(**config_overrides)`: a seeded, untrained tiny HMMRoFormer over 7 tokens, in eval mode."""

    from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM

    def make(**overrides) -> "HMMRoFormerForCausalLM":
        torch.manual_seed(0)
        config = HMMRoFormerConfig(**{**TINY_SIZES, "vocab_size": 7, **overrides})
        return HMMRoFormerForCausalLM(config).eval()

    return make
