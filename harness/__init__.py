"""ortbisect: release bisection for numerical regressions in onnxruntime.

The package is built in wings, each a layer that imports only from the layers
below it (tests/test_architecture.py builds the import graph from the sources,
imports inside functions included, and fails on an upward import or a circle).
`WINGS` lists them from the bottom up, each as the module prefixes it holds.
"""

__version__ = "0.1.0"

WINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("words", ("harness", "harness.errors", "harness.vocabulary")),  # errors and shared names
    ("judgement", ("harness.metrics", "harness.verdicts", "harness.search")),  # pure: numbers, verdicts, next probe
    ("worker", ("harness.worker",)),  # the probe worker: onnxruntime, numpy and the standard library only
    ("graphs", ("harness.graphs",)),  # pure onnx graph operations
    ("releases", ("harness.releases",)),  # the release index, packages, uv
    ("results", ("harness.results",)),  # the run store, history, locking: the only place run files are named
    ("models", ("harness.models",)),  # model cards, hub, batches, embedded generators
    ("runners", ("harness.runners",)),  # backends: uv, QEMU, Docker; worker processes
    ("executors", ("harness.executors",)),  # where a probe runs: here, or a Ray task on a cluster's node
    ("probe path", ("harness.reference", "harness.probe", "harness.driver", "harness.summary", "harness.request",
                    "harness.plan", "harness.session")),  # request -> plan -> session -> driver -> probe
    ("explain", ("harness.explain",)),  # traces, precision map, diff, the boundary's explanation
    ("triage", ("harness.triage",)),  # options, mitigation, reduction, compare, rows, scout
    ("blame", ("harness.blame",)),  # below the release: transformer, kernel, commits
    ("report", ("harness.report",)),  # upstream report, repro script, drift, overview, dashboard, rendering
    ("nightly", ("harness.nightly",)),  # matrices
    ("commands", ("harness.commands", "harness.cli")),  # the command line: parse, call, render
)
