"""Publish a checkpoint or a corpus to the Hugging Face Hub, with its card.

The command `hmm-push-to-hub`, run from the clone (`python scripts/push_to_hub.py --help`); its
code is `modeling_hmmroformer/experiments/commands/push_to_hub.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.push_to_hub import main

if __name__ == "__main__":
    sys.exit(main())
