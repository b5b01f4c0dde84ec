"""HMMRoFormer: the RoFormer-style causal language model of arXiv 2506.01919 (filled in by the model issue)."""
