"""The report wing: everything made from runs for people: the upstream report and its repro
script, drift, the dashboard and its data, charts, and terminal rendering.
"""
