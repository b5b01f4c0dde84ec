"""The phase diagram across task diversity, from `hmm-development` records.

The command `hmm-phase-diagram`, run from the clone (`python scripts/phase_diagram.py --help`);
its code is `modeling_hmmroformer/experiments/commands/phase_diagram.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.phase_diagram import main

if __name__ == "__main__":
    sys.exit(main())
