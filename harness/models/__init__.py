"""The models wing: which model and batch a probe runs: the registry of named models (hub or
generated), the user's files, the batches, and the embedded generators.
"""
