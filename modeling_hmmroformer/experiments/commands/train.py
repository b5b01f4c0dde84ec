"""Train HMMRoFormer on a mixture-of-HMMs corpus (the `accelerate launch` target).

    accelerate launch --cpu --num_processes 1 scripts/train.py configs/small.yaml
    accelerate launch scripts/train.py --config configs/paper.yaml --training.max_steps 512
    accelerate launch --cpu --num_processes 1 scripts/train.py configs/small.yaml --resume

The run config (YAML or JSON) is the one positional argument, or --config. Any of its values
is overridden with --section.field value (sections: corpus, data, model, training, run; the
fields are listed below and in docs/fields.md). See modeling_hmmroformer/experiments/running/training.py.
"""

from __future__ import annotations

import sys

from ..fields import fields_reference  # the fields --help lists: TrainingArguments' and the corpus's
from . import Parser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        description=__doc__, epilog="run config fields (--section.field value):\n" + fields_reference()
    )
    parser.add_argument(
        "--config", help="run config, e.g. configs/small.yaml (or give it first, without --config)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the run's last complete checkpoint"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    config_file = argv.pop(0) if argv and not argv[0].startswith("-") else None
    args, overrides = parser.parse_known_args(argv)
    if (config_file is None) == (args.config is None):
        parser.error(
            "give the run config once: scripts/train.py configs/small.yaml (or --config configs/small.yaml)"
        )
    import torch
    from accelerate import PartialState

    from ..running.training import train
    from ..settings import load_run_config

    try:
        run = load_run_config(args.config or config_file, overrides)
        metrics = train(run, resume=args.resume)
        if PartialState().is_main_process:  # one summary, not one per process
            print(summary(metrics))
    except ValueError as error:
        return refuse(error)
    finally:  # a gloo group left for the interpreter's exit can abort it (SIGABRT) as its threads die
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


def summary(metrics: dict) -> str:
    """The final numbers against the Bayes-optimal predictor, on the test sequence."""
    lines = [f"trained {metrics.get('train_tokens', 0):,} tokens in {metrics.get('train_runtime', 0):.0f}s"]
    names = {
        "model_accuracy": "model top-1",
        "bayes_accuracy": "Bayes top-1",
        "oracle_accuracy": "oracle top-1",
        "agreement": "model argmax = Bayes argmax",
        "kl_bayes_model": "KL(Bayes || model), nats/token",
        "excess_nll": "model NLL - Bayes NLL, nats/token",
    }
    for key, label in names.items():
        value = metrics.get(f"eval_icl/test_{key}")
        if value is not None:
            lines.append(f"  {label:34} {value:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
