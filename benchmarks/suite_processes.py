"""Where the test suite's time goes: every Python interpreter it starts, and what each one cost.

    python benchmarks/suite_processes.py                   # the whole suite, as `make test` runs it
    python benchmarks/suite_processes.py tests/probing     # pytest arguments: a part of it
    python benchmarks/suite_processes.py -- -k study tests/modeling_hmmroformer   # options after --

Runs `python -m pytest -q --durations=20` (offline, `MKL_CBWR=AVX2`) with a `sitecustomize`
on PYTHONPATH that every interpreter the suite starts inherits: at its exit each one appends its
command line, its own CPU seconds (user + system, not its children's), its wall seconds and
whether it imported torch to a log. Writes benchmarks/results/suite_processes.json: pytest's
wall time, exit status and 20 slowest tests; the interpreters grouped by command (how many, CPU
seconds), pytest's own process apart; and the CPU seconds a bare `import modeling_hmmroformer`
costs on this machine (the median of three fresh interpreters): the least each interpreter
that loads a model pays before it does anything.

An interpreter that ends without running its exit hooks (killed, or a forked worker leaving by
`os._exit`) is not in the log; the total CPU of the run, children included, is (`os.times`
of this process's children). Say what else ran on the machine beside it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_result

ROOT = Path(__file__).resolve().parents[1]
HOOK = """import atexit, json, os, sys, time
_started = time.time()


def _log():
    times = os.times()
    entry = {"argv": sys.argv[:8], "pid": os.getpid(), "cpu": times.user + times.system,
             "wall": time.time() - _started, "torch": "torch" in sys.modules}
    with open(os.environ["SUITE_PROCESSES_LOG"], "a") as log:
        log.write(json.dumps(entry) + "\\n")


atexit.register(_log)
"""
DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)")


def command_name(argv: list[str]) -> str:
    """A command's group: the script or console script and its first argument, paths cut to names."""
    parts = [Path(part).name if "/" in part else part for part in argv[:2]]
    return " ".join(parts) or "(interactive)"


def children_cpu_seconds(before: os.times_result, after: os.times_result) -> float:
    """User + system CPU seconds of the children this process waited for between two `os.times()`."""
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def import_cpu_seconds(repeats: int = 3) -> float:
    """CPU seconds (user + system, the child's own) of a fresh `import modeling_hmmroformer`."""
    seconds = []
    for _ in range(repeats):
        before = os.times()
        subprocess.run([sys.executable, "-c", "import modeling_hmmroformer"], check=True)
        seconds.append(children_cpu_seconds(before, os.times()))
    return statistics.median(seconds)


def group(entries: list[dict], pytest_pid: int) -> list[dict]:
    """The interpreters but pytest's own, by command, the costliest first (pytest's forked
    workers, which share its command line, apart)."""
    pytest_argv = next((e["argv"] for e in entries if e["pid"] == pytest_pid), None)
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for entry in entries:
        if entry["pid"] == pytest_pid:
            continue
        name = "pytest's forked workers" if entry["argv"] == pytest_argv else command_name(entry["argv"])
        groups[name].append(entry)
    rows = [
        {
            "command": name,
            "interpreters": len(members),
            "cpu_s": round(sum(m["cpu"] for m in members), 1),
            "with_torch": sum(m["torch"] for m in members),
        }
        for name, members in groups.items()
    ]
    return sorted(rows, key=lambda row: -row["cpu_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pytest_args", nargs="*", help="what pytest runs (default: the whole suite)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        hook, log = Path(scratch) / "hook", Path(scratch) / "processes.jsonl"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(HOOK)
        log.touch()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
            "SUITE_PROCESSES_LOG": str(log),
            "HF_HUB_OFFLINE": "1",
            "MKL_CBWR": "AVX2",
        }
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--durations=20",
            "-p",
            "no:cacheprovider",
            *args.pytest_args,
        ]
        before, start = os.times(), time.perf_counter()
        pytest = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        output, _ = pytest.communicate()
        wall, after = time.perf_counter() - start, os.times()
        entries = [json.loads(line) for line in log.read_text().splitlines()]
    lines = output.strip().splitlines()
    summary = lines[-1] if lines else ""
    slowest = [
        {"seconds": float(m.group(1)), "when": m.group(2), "test": m.group(3)}
        for m in map(DURATION.match, lines)
        if m
    ]
    own = [e for e in entries if e["pid"] == pytest.pid]
    children = group(entries, pytest.pid)
    result = {
        "command": " ".join(["python", "-m", "pytest", *command[3:]]),
        "exit_status": pytest.returncode,
        "summary": summary,
        "wall_s": round(wall, 1),
        "cpu_s_all": round(children_cpu_seconds(before, after), 1),
        "pytest_process_cpu_s": round(sum(e["cpu"] for e in own), 1),
        "interpreters_started": sum(row["interpreters"] for row in children),
        "interpreters_cpu_s": round(sum(row["cpu_s"] for row in children), 1),
        "interpreters_with_torch": sum(row["with_torch"] for row in children),
        "import_modeling_hmmroformer_cpu_s": round(import_cpu_seconds(), 2),
        "by_command": children,
        "slowest": slowest,
    }
    path = write_result("suite_processes", result)
    print(
        f"{summary}\nwall {result['wall_s']} s, CPU {result['cpu_s_all']} s (pytest itself "
        f"{result['pytest_process_cpu_s']} s); {result['interpreters_started']} interpreters started, "
        f"{result['interpreters_cpu_s']} s of CPU, {result['interpreters_with_torch']} with torch; a bare "
        f"`import modeling_hmmroformer` {result['import_modeling_hmmroformer_cpu_s']} s of CPU"
    )
    for row in children[:12]:
        print(f"  {row['interpreters']:3d} x {row['cpu_s']:6.1f} s  {row['command']}")
    print(f"wrote {path}")
    return pytest.returncode


if __name__ == "__main__":
    sys.exit(main())
