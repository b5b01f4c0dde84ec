"""The task-diversity study across K: one report from the studies' own reports.

The command `hmm-diversity-report`, run from the clone (`python scripts/diversity_report.py
--help`); its code is `modeling_hmmroformer/experiments/commands/diversity_report.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.diversity_report import main

if __name__ == "__main__":
    sys.exit(main())
