"""The explain wing: why a boundary: trace a release's tensors, the precision each node ran in,
and the diff of two traces in words.
"""
