"""The paper's layerwise analyses (Figures 2, 3(a), 3(b), 7) on a causal LM checkpoint: an
HMMRoFormer, or any transformers causal LM trained on the corpus (Llama, Qwen2 and GPT-2 are
tested; the shuffle test needs rotary positions and is skipped, saying why, without them).

The command `hmm-probe`, run from the clone (`python scripts/probe.py --help`); its code is
`modeling_hmmroformer/experiments/commands/probe.py`.
"""

import sys

from modeling_hmmroformer.experiments.commands.probe import main

if __name__ == "__main__":
    sys.exit(main())
