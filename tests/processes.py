"""Commands the suite starts in the background and reads later (conftest.py, test modules)."""

import subprocess
from pathlib import Path


class StartedRun:
    """A command started now, in the background, and read when a test needs its outcome: the
    suite's long end-to-end runs overlap on the two cores instead of following each other.
    Its output goes to files beside `log_prefix` (a pipe would fill and stop it)."""

    def __init__(self, command: list, log_prefix: Path, **kwargs):
        self.command = [str(part) for part in command]
        self.stdout_path, self.stderr_path = (log_prefix.with_suffix(ext) for ext in (".out", ".err"))
        with self.stdout_path.open("w") as stdout, self.stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(self.command, stdout=stdout, stderr=stderr, text=True, **kwargs)

    def finished(self, timeout: float = 600) -> subprocess.CompletedProcess:
        """Wait for it; its exit status and output, asserted successful."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        done = subprocess.CompletedProcess(
            self.command, self.process.returncode, self.stdout_path.read_text(), self.stderr_path.read_text()
        )
        assert done.returncode == 0, f"{' '.join(self.command)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done
