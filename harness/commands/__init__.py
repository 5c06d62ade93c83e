"""Commands beyond the core search, one module each; `harness.cli` registers them."""
