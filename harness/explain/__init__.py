"""The explain wing: why a boundary: trace a release's tensors (with the precision each node ran in,
harness.graphs.precision), and the diff of two traces in words.
"""
