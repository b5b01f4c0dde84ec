"""HMMRoFormer against other architectures: one report from the studies' own reports.

The command `hmm-architectures-report`, run from the clone (`python
scripts/architectures_report.py --help`); its code is
`modeling_hmmroformer/experiments/commands/architectures_report.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.architectures_report import main

if __name__ == "__main__":
    sys.exit(main())
