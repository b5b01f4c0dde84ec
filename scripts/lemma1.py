"""Lemma 1 on a family of HMMs built to test it: memory decay against observability.

The command `hmm-lemma1`, run from the clone (`python scripts/lemma1.py --help`); its code is
`modeling_hmmroformer/experiments/commands/lemma1.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.lemma1 import main

if __name__ == "__main__":
    sys.exit(main())
