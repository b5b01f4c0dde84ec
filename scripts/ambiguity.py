"""Corpora where the token hides the state: a base corpus by levels of emission mixing.

The command `hmm-ambiguity`, run from the clone (`python scripts/ambiguity.py --help`); its code is
`modeling_hmmroformer/experiments/commands/ambiguity.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.ambiguity import main

if __name__ == "__main__":
    sys.exit(main())
