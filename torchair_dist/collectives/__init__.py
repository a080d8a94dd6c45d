"""Collective-aware capture: op library, remaps, decompositions, p2p, groups, consistency."""
