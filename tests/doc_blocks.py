"""The code blocks of the README and docs/, read and run as the doc test does.

A fenced block's info string is its language and then its tags: ```` ```bash gpu ````.
`python` and `bash` blocks run, in page order, each Python block in a fresh namespace (a
block must hold its own imports, as a reader copies it) and each bash block in `bash -e`;
a block tagged `gpu`, `network` or `long` is skipped and the reason printed. Blocks in `text`,
`yaml`, `json` or `bibtex` are shown, not run. Run at tiny size: the preset names `small`
and `paper` become `tiny` (`--preset small`, `configs/paper.yaml`, `get_preset("small")`,
`runs/reproduce-small/...`) and `scripts/study.py` gets `--study quick`.

    python tests/doc_blocks.py docs/corpus.md            # run a page's blocks in this folder
"""

import re
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # the pages the doc test runs
RUN = ("python", "bash")
SHOWN = ("text", "yaml", "json", "bibtex")
SKIP_TAGS = {
    "gpu": "needs a GPU",
    "network": "needs the network (an install or the Hub)",
    "long": "runs for hours on 2 cores (a study of its own); the quick study runs its code path",
}
FENCE = re.compile(r"^```(\w*)(.*)$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence
    language: str
    tags: tuple[str, ...]
    source: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        reasons = [SKIP_TAGS[tag] for tag in self.tags if tag in SKIP_TAGS]
        return "; ".join(reasons) or None


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def read_blocks(path: str | Path) -> list[Block]:
    """Every fenced block of a Markdown page, with its language and tags."""
    blocks, opened, body = [], None, []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        match = FENCE.match(line)
        if opened is None and match:
            opened, body = (number, match.group(1), tuple(match.group(2).split())), []
        elif opened is not None and line.strip() == "```":
            blocks.append(Block(str(path), opened[0], opened[1], opened[2], "\n".join(body) + "\n"))
            opened = None
        elif opened is not None:
            body.append(line)
    if opened is not None:
        raise ValueError(f"{path}:{opened[0]}: a code block is never closed.")
    return blocks


def block_problems(block: Block) -> list[str]:
    """What makes a block unfit for the doc test: a language it neither runs nor shows, an unknown tag."""
    problems = []
    if block.language not in RUN + SHOWN:
        problems.append(f"{block.where}: language {block.language!r} is neither run {RUN} nor shown {SHOWN}")
    unknown = [tag for tag in block.tags if tag not in SKIP_TAGS]
    if unknown:
        problems.append(f"{block.where}: unknown tags {unknown}; known: {sorted(SKIP_TAGS)}")
    return problems


def at_tiny_size(source: str) -> str:
    """The block as the suite runs it: presets `small` and `paper` become `tiny`, the study quick,
    and a study's records folder under results/ the quick study's own."""
    source = re.sub(r"(?<!\w)(small|paper)(?!\w)", "tiny", source)
    source = re.sub(r"(--records\s+)results/[\w/-]+", r"\1runs/study-quick-records", source)
    return re.sub(r"(scripts/study\.py)(?![\w.])", r"\1 --study quick", source)


def run_block(block: Block) -> None:
    """Run one block here; raise with the page and line when it fails."""
    source = at_tiny_size(block.source)
    if block.language == "bash":
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", source], check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{block.where}: exit status {done.returncode}\n{source}")
        return
    try:
        exec(compile(source, block.where, "exec"), {"__name__": "__main__"})
    except Exception as error:
        raise RuntimeError(f"{block.where}: {type(error).__name__}: {error}\n{source}") from error


def run_page(path: str | Path) -> int:
    """Run a page's blocks in order; 0 when every runnable block ran."""
    for block in read_blocks(path):
        problems = block_problems(block)
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        if block.language not in RUN:
            continue
        if block.skip_reason:
            print(f"skipped {block.where}: {block.skip_reason}", flush=True)
            continue
        print(f"running {block.where} ({block.language})", flush=True)
        try:
            run_block(block)
        except RuntimeError:
            print(textwrap.indent(traceback.format_exc(), "  "), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    # tests/ holds folders named like the packages (tests/hmm_datasets, ...): off the path, so
    # a block imports the installed package, as a reader's would
    here = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    sys.exit(run_page(sys.argv[1]))
