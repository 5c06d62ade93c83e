"""The blame wing: below the release: which graph transformer, which kernel, which commits."""
