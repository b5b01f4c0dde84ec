"""The in-context ladder on a study's yardstick rows, added to its yardsticks.json.

The command `hmm-yardstick-ladder`, run from the clone (`python scripts/yardstick_ladder.py
--help`); its code is `modeling_hmmroformer/experiments/commands/yardstick_ladder.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.yardstick_ladder import main

if __name__ == "__main__":
    sys.exit(main())
