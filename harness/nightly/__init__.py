"""The nightly wing: matrices of many searches described in one TOML file, run cell by cell.
"""
