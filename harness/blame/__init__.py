"""Below the release: which graph transformer, which kernel, which commits.

`pair` blames a run's boundary pair (`bisect blame RUN`): `transformers` delta-debugs the session option
`disabled_optimizers` over what `session_log` says ran, `kernels` reads how the named nodes ran from the two
optimized graphs, `commits` lists the commits between the two builds that touch their source.
"""
