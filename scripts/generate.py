"""Generate a mixture-of-HMMs corpus, export it as a Hub-ready folder, print its Bayes-optimal
table.

The command `hmm-generate`, run from the clone (`python scripts/generate.py --help`); its code
is `modeling_hmmroformer/experiments/commands/generate.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.generate import main

if __name__ == "__main__":
    sys.exit(main())
