"""Activation patching on a causal LM checkpoint: at which layer the network carries what the
task and the state do to its next-token prediction (docs/patching.md).

The command `hmm-patching`, run from the clone (`python scripts/patching.py --help`); its code is
`modeling_hmmroformer/experiments/commands/patching.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.patching import main

if __name__ == "__main__":
    sys.exit(main())
