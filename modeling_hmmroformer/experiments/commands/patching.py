"""Activation patching on a causal LM checkpoint: at which layer the network carries what the
task and the state do to its next-token prediction, against the mixture's exact Bayes predictive.

    python scripts/patching.py --model runs/small/model
    python scripts/patching.py --model org/hmm-roformer-small --data org/hmm_mixture_small --out patching

--model: a checkpoint folder or a Hub model id; --data: a corpus preset name, an exported corpus
folder or a Hub dataset id (default: the corpus the checkpoint was trained on). On fresh rows of
--num_tasks tasks of the mixture, each row is patched at every site (the embeddings, each
layer's output) and one test position with the residual stream of a task donor (another task,
the same token there), a state donor (the same task, another token) and itself (the control that
moves nothing); each site's share of the donor's move towards its exact Bayes predictive is
printed and drawn, for the model and for its untrained twin (its training seed; --no-control
skips it). Writes patching.json and patching.png (default: into <model>/patching). See
docs/patching.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from probing.config import PatchingConfig  # its fields are options: a module of dataclasses alone

from . import Parser, add_checkpoint_options, open_checkpoint, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(PatchingConfig, description=__doc__)
    add_checkpoint_options(parser, "output folder (default: <model>/patching)")
    try:
        config, args = parser.parse_args_into_dataclasses(argv)
    except ValueError as error:  # a setting PatchingConfig refuses
        return refuse(error)
    from probing.patching import run_patching
    from probing.plots import write_patching_results

    try:
        folder, model, corpus, control = open_checkpoint(args, device="cpu")
        result = run_patching(model, corpus.config, corpus.params, config, untrained_model=control)
    except (ValueError, OSError) as error:
        return refuse(error)
    paths = write_patching_results(result, Path(args.out) if args.out else folder / "patching")
    print(patching_table(result.to_dict()))
    print(f"\nwrote {', '.join(str(path) for path in paths.values())}")
    print(f"total time {result.seconds:.1f} s")
    return 0


def patching_table(result: dict) -> str:
    """Each site's shares of the task and the state donor's effect, for the model and its twin."""
    readings = [("model", result["model"]), ("twin", result["control"])]
    readings = [(name, reading) for name, reading in readings if reading is not None]
    header = (
        "| site | "
        + " | ".join(f"{name} {kind}" for name, _ in readings for kind in ("task", "state"))
        + " |"
    )
    lines = [header, "|" + " --- |" * (1 + 2 * len(readings))]
    for site, site_name in enumerate(result["model"]["site_names"]):
        cells = []
        for _, reading in readings:
            for kind in ("task", "state"):
                shares = reading["donors"][kind]["shares"]
                cells.append("-" if not shares or shares[site] is None else f"{shares[site]:+.3f}")
        lines.append(f"| {site_name} | " + " | ".join(cells) + " |")
    for name, reading in readings:
        task, state, lower = (
            reading["donors"]["task"],
            reading["donors"]["state"],
            reading["state_carried_lower"],
        )
        lines.append(
            f"{name}: {task['pairs']} task pairs ({nats(task['effect_nats'])}), {state['pairs']} state pairs "
            f"({nats(state['effect_nats'])}); state carried lower by {'-' if lower is None else f'{lower:+.3f}'}; "
            f"same-donor control moves at most {reading['same_donor_max_nats']:.1e} nats"
        )
    return "\n".join(lines)


def nats(value: float | None) -> str:
    return "no effect" if value is None else f"{value:.3f} nats"


if __name__ == "__main__":
    sys.exit(main())
