"""Layerwise analyses of HMMRoFormer checkpoints: probes, the shuffle test, attention maps (filled in by the probing issue)."""
