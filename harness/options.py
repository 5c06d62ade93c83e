"""Command-line options shared by several commands, defined once as composable groups."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import click
from rich.console import Console

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


ARCH_ALIASES = {"arm64": "aarch64", "amd64": "x86_64"}  # docker's names for the same CPUs


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ortbisect"


# -- option groups (composable decorators, one definition each) ---------------------------

def compose(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


model_options = compose(
    click.option("--model", "model", required=True, help="Registered model name (see `bisect models`) or path to an .onnx file."),
    click.option("--inputs", type=click.Path(path_type=Path), help="Batch as .npz (one array per model input). Default: the model's repro batch."),
    click.option("--output", "outputs", multiple=True, help="Output to check (repeatable). Default: the model's registered outputs, else all."),
)
range_options = compose(
    click.option("--from", "from_", required=True, metavar="VERSION", help="First release of the range."),
    click.option("--to", "to", required=True, metavar="VERSION", help="Last release of the range."),
)
target_options = compose(
    click.option("--arch", default=platform.machine(), show_default=True,
                 help="CPU architecture of the probes; several as x86_64,aarch64 (one result each)."),
    click.option("--backend", default="auto", show_default=True,
                 help="Where probes run: uv (native), qemu (aarch64 under QEMU user mode); auto picks."),
    click.option("--cpu", default=None, help="CPU model to emulate with qemu (default neoverse-n1, which has fp16 arithmetic)."),
    click.option("--python", "python", default=f"{sys.version_info.major}.{sys.version_info.minor}", show_default=True,
                 help="Python version of the probe environments."),
)
store_options = compose(
    click.option("--cache-dir", type=click.Path(path_type=Path), default=default_cache_dir, show_default="XDG cache",
                 help="Environments, release listing, generated models."),
    click.option("--offline", is_flag=True, help="Use the cached release listing only."),
)
probe_options = compose(
    click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True),
    click.option("--resume", "resume", default=None, metavar="RUN", help="Run id to continue (the same command continues by itself)."),
    click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds per probe."),
    click.option("--bad-if", "bad_if", default="nan-or-inf", show_default=True,
                 help="nan-or-inf | nan | zero-rows | max-abs>B | rel-diff>B (with --reference)."),
    click.option("--reference", type=click.Path(path_type=Path), help=".npz of reference outputs for rel-diff."),
    click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Probes at once."),
    click.option("--prefetch/--no-prefetch", default=True, show_default=True,
                 help="Install the environments the next round may need while a probe runs."),
    click.option("--graph-opt", type=click.Choice(["disable", "basic", "extended", "layout", "all"]), default=None,
                 help="Session graph optimization level (default: onnxruntime's)."),
    click.option("--threads", type=click.IntRange(min=0), default=None, help="intra_op_num_threads (default: onnxruntime's)."),
    click.option("--memory-limit", "memory_limit_mb", type=click.IntRange(min=64), default=None, metavar="MB",
                 help="Cap each worker's memory (address space); a probe past it fails instead of the machine."),
    click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Identical runs per probe (fresh processes); outputs that differ make it *nondeterministic*."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table."),
)


def search_spec(opts: dict):
    """The search the command line asks for."""
    from harness.plan import SearchSpec

    session_options = {}
    if opts.get("graph_opt"):
        session_options["graph_optimization_level"] = opts["graph_opt"]
    if opts.get("threads") is not None:
        session_options["intra_op_num_threads"] = opts["threads"]
    return SearchSpec(
        model=opts["model"], from_=opts["from_"], to=opts["to"], inputs=opts["inputs"], outputs=tuple(opts["outputs"]),
        arch=opts["arch"], backend=opts["backend"], cpu=opts["cpu"], python=opts["python"],
        cache_dir=opts["cache_dir"], offline=opts["offline"], results_dir=opts["results_dir"], resume=opts["resume"],
        timeout=opts["timeout"], bad_if=opts["bad_if"], reference=opts["reference"], session_options=session_options,
        repeat=opts.get("repeat", 1), memory_limit_mb=opts.get("memory_limit_mb"),
    )


