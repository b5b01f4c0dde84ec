"""Reproduce arXiv 2506.01919 end to end: corpus, training, Figure 1, probes, cards, REPORT.md.

The command `hmm-reproduce`, run from the clone (`python scripts/reproduce.py --help`); its code
is `modeling_hmmroformer/experiments/commands/reproduce.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
