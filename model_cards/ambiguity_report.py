"""REPORT.md of `scripts/ambiguity.py`: a family of corpora whose emission rows are mixed towards
the uniform (`emission_mixing`), one row per level: how much the token tells about the state
(exactly, from the parameters), how much the exact filter reads from the history, and what the
predictors reach on test rows.
"""

from __future__ import annotations

COLUMNS = (
    ("mixing", lambda r: f"{r['emission_mixing']:g}"),
    ("H(state)", lambda r: f"{r['parameters']['state_entropy']:.3f}"),
    ("H(state \\| token)", lambda r: f"{r['parameters']['state_given_token_entropy']:.3f}"),
    ("H(state \\| history)", lambda r: f"{r['filter']['state_given_history_entropy']:.3f}"),
    ("token's share of the history's information", lambda r: share_text(token_share(r))),
    (
        "state: token rule / filter top-1",
        lambda r: f"{r['filter']['token_rule_accuracy']:.3f} / {r['filter']['filter_accuracy']:.3f}",
    ),
    (
        "filter's variance in a task the token explains (held out)",
        lambda r: f"{r['filter']['token_explained_variance']:.3f}",
    ),
    ("next token: oracle / Bayes / best rung top-1", lambda r: accuracies(r)),
    ("best rung: KL(Bayes ‖ rung)", lambda r: f"{r['predictors']['best_in_context']} {best_kl(r):.3f}"),
)


TOLD_NOTHING = 1e-6  # nats: a history that tells less about the state has no share to give


def token_share(level: dict) -> float | None:
    """I(state; token) / I(state; history): the share of what the history tells about the state
    that the current token alone tells (1: the token says it all; 0: nothing); None where the
    history tells nothing."""
    told = level["parameters"]["state_entropy"] - level["filter"]["state_given_history_entropy"]
    return level["parameters"]["token_information"] / told if told > TOLD_NOTHING else None


def share_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def accuracies(level: dict) -> str:
    accuracy, best = level["predictors"]["accuracy"], level["predictors"]["best_in_context"]
    return f"{accuracy['oracle']:.3f} / {accuracy['bayes']:.3f} / {accuracy[best]:.3f}"


def best_kl(level: dict) -> float:
    return level["predictors"]["kl_bayes"][level["predictors"]["best_in_context"]]


def level_table(levels: list[dict]) -> str:
    """The Markdown table of a family's levels (`COLUMNS`)."""
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(level) for _, cell in COLUMNS) + " |" for level in levels]
    return "\n".join(lines)


def render_ambiguity_report(result: dict) -> str:
    """REPORT.md: the family's base corpus, the rows each measure read, and the level table."""
    rows = result["levels"][0]["rows"]
    return f"""# Corpora where the token hides the state: `{result["base"]}` by emission mixing

`python scripts/ambiguity.py --preset {result["base"]} --levels {" ".join(f"{r['emission_mixing']:g}" for r in result["levels"])} --out FOLDER`
({result["runtime_s"]:.0f} s on {result["machine"]}). Each level keeps the base corpus's HMM draws
and moves the share `emission_mixing` of every emission row to the uniform distribution. Entropies
in nats, averaged over a row's observation positions: H(state) and H(state | token) exactly from
the HMMs (all {result["num_tasks"]} of them); H(state | history) from the exact per-task filter on
{rows["rows_per_task"]} fresh rows of each of the first {rows["probe_tasks"]} tasks, whose first
half fits the token rule (the most frequent state of each (task, token)) and whose second half
measures it, the filter's argmax, and the share of the filter's variance within a task that the
token explains. Next-token top-1 on test tokens 1..T-1 of the first
{rows["test"]} test rows; the best rung is the in-context predictor nearest mixture Bayes.

{level_table(result["levels"])}

Read: where the token's share of the history's information is near 1 and the token rule reads
the state about as well as the filter, a probe's layer 0 (the embeddings) already holds the
state and "the hidden state is decoded before the task" has nothing to decode; the levels below
leave the filter something to gain over the token.
"""
