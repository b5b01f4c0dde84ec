"""A model over training: every kept network placed on its corpus's yardsticks.

The command `hmm-development`, run from the clone (`python scripts/development.py --help`); its
code is `modeling_hmmroformer/experiments/commands/development.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.development import main

if __name__ == "__main__":
    sys.exit(main())
