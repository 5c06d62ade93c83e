"""The triage wing: what happens after a boundary is found: the options matrix and repeats, the
fp32 mitigation, the reduction to a small repro, package/provider comparisons, and the fewest-rows search.
"""
