"""The depth-and-seed study: do the paper's layerwise claims hold at the paper's depth?

The command `hmm-study`, run from the clone (`python scripts/study.py --help`); its code is
`modeling_hmmroformer/experiments/commands/study.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.study import main

if __name__ == "__main__":
    sys.exit(main())
