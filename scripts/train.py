"""Train HMMRoFormer on a mixture-of-HMMs corpus (the `accelerate launch` target).

The command `hmm-train`, run from the clone (`python scripts/train.py --help`); its code is
`modeling_hmmroformer/experiments/commands/train.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.train import main

if __name__ == "__main__":
    sys.exit(main())
