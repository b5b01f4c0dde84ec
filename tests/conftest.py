"""Offline, isolated test runs: no network, a private datasets cache, two torch threads."""

import os
from dataclasses import dataclass
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True, scope="session")
def _private_datasets_cache(tmp_path_factory):
    """Keep generated corpora out of the user's ~/.cache."""
    import datasets.config

    cache = tmp_path_factory.mktemp("hf_datasets_cache")
    previous = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = cache
    datasets.disable_progress_bars()
    yield cache
    datasets.config.HF_DATASETS_CACHE = previous


PLUGIN_MODULES = ("hmm_datasets", "modeling_hmmroformer", "probing", "model_cards")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_without_plugin(tmp_path):
    """Run Python source in a fresh process where no module of this package can be imported."""
    import subprocess
    import sys
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
    import sys

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


@pytest.fixture(scope="session")
def reproduced_tiny(tmp_path_factory):
    """`scripts/reproduce.py --preset tiny`, end to end, once per session: (folder, its stdout)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("reproduce") / "tiny"
    command = [sys.executable, str(ROOT / "scripts" / "reproduce.py"), "--preset", "tiny", "--out", str(out)]
    env = {**os.environ, "HF_DATASETS_CACHE": str(out.parent / "datasets_cache")}
    done = subprocess.run(
        [*command, "--quiet"], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


@pytest.fixture(scope="session")
def quick_studied(tmp_path_factory):
    """`scripts/study.py --study quick`, end to end, once per session: (folder, its stdout)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("study") / "quick"
    command = [sys.executable, str(ROOT / "scripts" / "study.py"), "--study", "quick", "--out", str(out)]
    done = subprocess.run(
        [*command, "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout
