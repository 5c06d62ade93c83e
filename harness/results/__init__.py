"""The results wing: every file of a run (one place names them), the history across nights and
machines, the locks that let many writers share a run, and the evidence's types.
"""
