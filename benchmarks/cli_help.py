"""How long `--help` of every console script takes, before and after the commands import what
they run only once their arguments are parsed.

    python benchmarks/cli_help.py                          # every console script, 5 runs of each side
    python benchmarks/cli_help.py --runs 9 hmm-train hmm-probe --beside "nothing else"

Each run is a fresh interpreter (`python -c`, calling the command's `main()` as its console
script does, `sys.argv = [name, "--help"]`), timed from start to exit; per command three sides:

    eager         before: every import statement of the command's module and of
                  `commands/__init__.py`, those in function bodies too, run first (where they stood
                  before the imports moved into `main()`), then `--help`
    lazy          after: the command as it is
    unregistered  after, with `modeling_hmmroformer/__init__.py` (the Auto registration, which
                  imports torch and transformers' model classes) not run: a package module that
                  only finds the subpackages. Not a configuration that ships: it measures what the
                  registration costs `--help`

and two floors: the interpreter alone (`python -c pass`) and `import modeling_hmmroformer`. The
rounds interleave (each runs every side of every command once), so a change of the load on a
shared machine falls on every side alike; each number is the median of `--runs` rounds. Writes
benchmarks/results/cli_help.json, with the load average before and after and `--beside` (say
what else ran on the machine).
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tomllib
from common import write_result

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "modeling_hmmroformer" / "experiments" / "commands"
STAND_IN = """import importlib.util, sys
spec = importlib.util.find_spec("modeling_hmmroformer")
sys.modules["modeling_hmmroformer"] = importlib.util.module_from_spec(spec)  # its __init__ not run
"""
CALL = """import sys
from {module} import {function} as main
sys.argv = [{name!r}, "--help"]
sys.exit(main())
"""


def console_scripts() -> dict[str, str]:
    """`[project.scripts]` of pyproject.toml: name -> `module:function`."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def eager_imports(module: str) -> str:
    """Every import statement of `module`'s file and of the commands' `__init__.py`, at any depth,
    made absolute: what the command imported at its top before its imports moved into `main()`."""
    package = module.rpartition(".")[0]
    lines = []
    for path in (COMMANDS / "__init__.py", COMMANDS / f"{module.rpartition('.')[2]}.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:  # both files are in `package`
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                node = ast.ImportFrom(
                    ".".join([*base, *([node.module] if node.module else [])]), node.names, 0
                )
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                lines.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(line for line in lines if "__future__" not in line))


def sides(name: str, target: str) -> dict[str, str]:
    """The source of each side's interpreter for the console script `name` (`module:function`)."""
    module, _, function = target.partition(":")
    call = CALL.format(module=module, function=function, name=name)
    return {"eager": eager_imports(module) + "\n" + call, "lazy": call, "unregistered": STAND_IN + call}


def wall_seconds(source: str) -> float:
    """A fresh interpreter running `source`, timed from start to exit; it must exit 0."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", source], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{source.splitlines()[-3]}: exit status {done.returncode}\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="console scripts (default: every one of pyproject.toml)")
    parser.add_argument("--runs", type=int, default=5, help="rounds; each number is their median")
    parser.add_argument("--beside", default="", help="what else ran on the machine, for the record")
    args = parser.parse_args()
    scripts = console_scripts()
    names = args.names or sorted(scripts)
    runs = {"floor": {"python": [], "import modeling_hmmroformer": []}}
    runs |= {name: {side: [] for side in sides(name, scripts[name])} for name in names}
    floors = {"python": "pass", "import modeling_hmmroformer": "import modeling_hmmroformer"}
    load_before = os.getloadavg()
    for round_ in range(args.runs):
        for what, source in floors.items():
            runs["floor"][what].append(wall_seconds(source))
        for name in names:
            for side, source in sides(name, scripts[name]).items():
                runs[name][side].append(wall_seconds(source))
        print(f"round {round_ + 1}/{args.runs} done", file=sys.stderr, flush=True)
    medians = {
        name: {side: statistics.median(times) for side, times in by_side.items()}
        for name, by_side in runs.items()
    }
    print(f"{'--help of':28} {'eager':>7} {'lazy':>7} {'unregistered':>13}   (median of {args.runs}, s)")
    for name in names:
        m = medians[name]
        print(f"{name:28} {m['eager']:7.2f} {m['lazy']:7.2f} {m['unregistered']:13.2f}")
    for what, median in medians["floor"].items():
        print(f"{what:28} {median:7.2f}")
    path = write_result(
        "cli_help",
        {
            "runs": args.runs,
            "statistic": "median of the runs' subprocess wall seconds",
            "beside": args.beside,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "median_s": {name: {k: round(v, 3) for k, v in m.items()} for name, m in medians.items()},
            "runs_s": {name: {k: [round(t, 3) for t in v] for k, v in s.items()} for name, s in runs.items()},
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
