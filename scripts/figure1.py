"""Figure 1 of the paper against the Bayes-optimal predictor, for a trained checkpoint.

The command `hmm-figure1`, run from the clone (`python scripts/figure1.py --help`); its code is
`modeling_hmmroformer/experiments/commands/figure1.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.figure1 import main

if __name__ == "__main__":
    sys.exit(main())
