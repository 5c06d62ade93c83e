"""What the commands share: the two consoles, exit statuses, and the option
groups (each defined once, composed by the commands that take them)."""

from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from harness.errors import Terminated
from harness.vocabulary import (
    BINDINGS,
    DEFAULT_BINDING,
    DEFAULT_EP,
    DEFAULT_PACKAGE,
    DEFAULT_RESULTS_DIR,
    GRAPH_LEVELS,
    default_cache_dir,
)

EXIT_FAILURE = 1  # the environment or the harness failed (results cannot be written, ...)
EXIT_USAGE = 2  # bad input, refused before any probe
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT): what finished is saved
EXIT_TERMINATED = 143  # SIGTERM (128 + 15), handled as Ctrl-C is
STOPPED = {EXIT_INTERRUPTED: "interrupted", EXIT_TERMINATED: "terminated"}  # the one-line message of each
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def print_json(doc, schema: str | None = None) -> None:
    """A command's --json document on stdout, indented: coloured by rich on a terminal; elsewhere the same text
    written plainly (rich would highlight every token of it for nobody, a share of a short run's time).
    A document of a schema under docs/schema/ names it first, in "$schema" (the schema's $id)."""
    if schema is not None:
        doc = {"$schema": schema, **doc}
    if out.is_terminal:
        out.print_json(data=doc)
    else:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


def stopped_status(exc: BaseException) -> int:
    """The exit status of a command stopped by Ctrl-C or SIGTERM (click wraps either in its Abort)."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) or isinstance(exc.__cause__, Terminated) else EXIT_INTERRUPTED


def say_stopped(exc: BaseException, saved: str, resume: str | None = None) -> int:
    """A command stopped by Ctrl-C or SIGTERM says what it kept and how to go on, in one line (every command
    that probes records each finished probe and reuses it when run again); its exit status."""
    status = stopped_status(exc)
    also = f" (or {resume})" if resume else ""
    err.print(f"{STOPPED[status]}: {escape(saved)}; run the same command again{escape(also)} to continue")
    return status


# -- parameter types and checks shared by the option groups -------------------------------

class FiniteFloatRange(click.FloatRange):
    """A FloatRange that also refuses nan and inf (click's lets nan through every bound)."""

    name = "finite float range"

    def convert(self, value, param, ctx):
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(rv, param, ctx)


class KeyValue(click.ParamType):
    """KEY=VALUE (--ep-option precision=FP16) as a (key, value) pair."""

    name = "key=value"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        key, eq, val = str(value).partition("=")
        if not eq or not key.strip() or not val.strip():
            self.fail(f"{value!r}: expected KEY=VALUE, e.g. device_type=CPU", param, ctx)
        return key.strip(), val.strip()


def directory_option(ctx, param, value):
    """Callback of a directory option (--cache-dir, --results-dir, ...): refused when it, or a parent on its way, is a file."""
    from harness.request import directory

    return value if value is None else directory(value, max(param.opts, key=len))


def cache_dir_option(ctx, param, value):
    """Callback of --cache-dir: a directory option whose directory, where it exists, is the user's own and
    writable by no one else (what runs comes from it)."""
    from harness.runners.ownership import check_cache_dir

    return check_cache_dir(directory_option(ctx, param, value), "--cache-dir")


class EngineAddress(click.ParamType):
    """A Docker engine: ssh://user@host, tcp://host:port, unix:///path or a docker context's name, optionally =N."""

    name = "engine"

    def convert(self, value, param, ctx):
        from harness.runners import engine_problem

        problem = engine_problem(str(value))
        if problem:
            self.fail(f"{value!r}: {problem}", param, ctx)
        return str(value)


# -- option groups (composable decorators, one definition each) ---------------------------

engines_option = click.option(
    "--docker-host", "engines", type=EngineAddress(), multiple=True, metavar="HOST[=N]",
    help="The Docker engine to run probes on, as ssh://user@host, tcp://host:port or a docker context; =N: at "
         "most N probes on it at once (default: its CPUs). Default: DOCKER_HOST. Several machines: --ray-address.")

ray_option = click.option(
    "--ray-address", "ray_address", envvar="RAY_ADDRESS", default=None, metavar="ADDRESS",
    help="Run each probe as a task on this Ray cluster (host:port, or auto: the cluster this machine belongs "
         "to); -j K tasks in flight. Default: RAY_ADDRESS. Needs the extra: uv sync --extra ray.")


def compose(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


model_options = compose(
    click.option("--model", "model", help="Registered model name (see `bisect models`) or path to an .onnx file."),
    click.option("--inputs", type=click.Path(path_type=Path), help="Batch as .npz (one array per model input). Default: the model's repro batch."),
    click.option("--output", "outputs", multiple=True, help="Output to check (repeatable). Default: the model's registered outputs, else all."),
)
range_options = compose(
    click.option("--from", "from_", required=True, metavar="VERSION", help="First release of the range."),
    click.option("--to", "to", required=True, metavar="VERSION", help="Last release of the range."),
)
source_options = compose(
    click.option("--ep-option", "ep_options", type=KeyValue(), multiple=True, metavar="KEY=VALUE",
                 help="A provider option (repeatable), e.g. --ep-option device_type=CPU."),
    click.option("--index-url", "index_urls", multiple=True, metavar="URL",
                 help="A simple index to take the package's wheels from, before the configured one (repeatable; "
                      "http(s) or file://)."),
    click.option("--find-links", "find_links", multiple=True, metavar="DIR|URL",
                 help="A directory of wheels, or a page of wheel links, to take builds from (repeatable)."),
    click.option("--pre", is_flag=True, help="List pre-releases and development builds (1.25.0.devN) too."),
)
package_options = compose(
    click.option("--binding", type=click.Choice(list(BINDINGS)), default=DEFAULT_BINDING, show_default=True,
                 help="The API the model's users call: python (the wheels, installed by uv), node (onnxruntime-node "
                      "from npm, run by Node.js) or web (onnxruntime-web's WebAssembly from npm, run by Node.js)."),
    click.option("--package", default=None, show_default=DEFAULT_PACKAGE,
                 help="The onnxruntime package to install: onnxruntime, onnxruntime-openvino, onnxruntime-gpu "
                      "(--binding python); the binding's own otherwise."),
    click.option("--ep", default=None, show_default=DEFAULT_EP,
                 help="Execution provider the model must run on: cpu, openvino, cuda (wasm for --binding web). A "
                      "probe that falls back to another provider is a skip."),
    source_options,
)
arch_options = compose(
    click.option("--arch", default=platform.machine(), show_default=True,
                 help="CPU architecture of the probes; several as x86_64,aarch64 (one result each)."),
    click.option("--backend", default="auto", show_default=True,
                 help="Where probes run: uv (native), qemu (aarch64 under QEMU user mode); auto picks (with "
                      "--ray-address: native, on the nodes of the target's arch)."),
    click.option("--cpu", default=None, help="CPU model to emulate with qemu (default neoverse-n1, which has fp16 arithmetic)."),
    click.option("--python", "python", default=f"{sys.version_info.major}.{sys.version_info.minor}", show_default=True,
                 help="Python version of the probe environments."),
    engines_option,
)
target_options = compose(package_options, arch_options)
results_dir_option = click.option("--results-dir", type=click.Path(path_type=Path), default=DEFAULT_RESULTS_DIR,
                                  show_default=True, callback=directory_option, help="Where runs are kept (one directory per run).")
timeout_option = click.option("--timeout", type=FiniteFloatRange(min=1), default=None,
                              help="Seconds per probe [default: 600 for a small model; 10 more minutes per 100 MB "
                                   "of weights, and 20 times that under emulation].")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
jobs_option = click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Probes at once.")
graph_opt_option = click.option("--graph-opt", type=click.Choice(list(GRAPH_LEVELS)), default=None,
                                help="Session graph optimization level (default: onnxruntime's).")

store_options = compose(
    click.option("--cache-dir", type=click.Path(path_type=Path), default=default_cache_dir, show_default="XDG cache",
                 callback=cache_dir_option, help="Environments, release listing, generated models."),
    click.option("--offline", is_flag=True,
                 help="Never fetch the release listing or a hub model: use the cached ones (refused when absent)."),
)
probe_options = compose(
    results_dir_option,
    click.option("--resume", "resume", default=None, metavar="RUN", help="Run id to continue (the same command continues by itself)."),
    timeout_option,
    click.option("--bad-if", "bad_if", multiple=True, default=("nan-or-inf",), show_default=True, metavar="WHEN",
                 help="When a probe is bad; several: bad if any holds. nan-or-inf | nan | zero-rows | max-abs>B | "
                      "headroom>B | error (fails to load or run) | crash | cosine<B | rel-diff>B (with a reference) "
                      "| slower>R | rss>R (median latency or peak memory over the baseline's: the range's good "
                      "end, or --reference-release)."),
    click.option("--reference", metavar="FILE.npz|fp32",
                 help="Compare outputs with: reference outputs in FILE.npz, or fp32 (the model in fp32 on the same "
                      "release)."),
    click.option("--reference-release", metavar="V", help="Compare outputs with those of release V (probed when needed)."),
    jobs_option,
    click.option("--prefetch/--no-prefetch", default=True, show_default=True,
                 help="Install the environments the next round may need while a probe runs."),
    graph_opt_option,
    click.option("--threads", type=click.IntRange(min=0), default=None, help="intra_op_num_threads (default: onnxruntime's)."),
    click.option("--memory-limit", "memory_limit_mb", type=click.IntRange(min=64), default=None, metavar="MB",
                 help="Cap each worker's memory (address space); a probe past it fails instead of the machine."),
    click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Identical runs per probe (fresh processes); outputs that differ make it *nondeterministic*."),
    click.option("--time-budget", "time_budget", type=click.FloatRange(min=1), default=60.0, show_default=True,
                 metavar="SECONDS",
                 help="For slower>B and rss>B: seconds each probe may spend re-measuring against the baseline "
                      "before an interval that straddles the bound is called inconclusive."),
    click.option("--margin/--no-margin", default=None,
                 help="Read the largest |x| of the model's hottest fp16 tensors in each probe, in a second session "
                      "(default: on for sweep, except under QEMU; off for run)."),
    json_option,
)


triage_options = compose(
    results_dir_option,
    timeout_option,
    click.option("--bad-if", "bad_if", multiple=True, default=("nan-or-inf",), show_default=True, metavar="WHEN",
                 help="nan-or-inf | nan | zero-rows | max-abs>B | headroom>B | error | crash; several: bad if any "
                      "holds (comparisons with a reference are `bisect run`'s)."),
    json_option,
)


question_options = compose(
    click.option("--question", "question", metavar="KEY", default=None,
                 help="Which of the run's questions (its run documents, cells/KEY.json) to answer. Default: the "
                      "newest that found its boundary (else the newest): a later `bisect run` or `sweep` that found "
                      "none does not take its place."),
    click.option("--bad-if", "bad_if", multiple=True, metavar="WHEN",
                 help="Ask another predicate over the question's range (and its reference, if the predicate "
                      "compares with one). Default: the question's own."),
)


def bad_if_text(bad_if) -> str | None:
    """--bad-if as given (several: comma-separated), or None when it was not given."""
    return ",".join(bad_if) if bad_if else None


reduced_option = click.option(
    "--reduced", "reduced", metavar="RUN", default=None,
    help="Run on the reduced repro of RUN (`bisect reduce`) instead of --model: its model, inputs and target.")


def run_dir_of(run: str, results_dir: Path) -> Path:
    """RUN as a results/<run-id> directory, or a run id in --results-dir."""
    from harness.errors import UsageError
    from harness.results.store import MANIFEST

    path = Path(run)
    if not (path / MANIFEST).exists():
        path = Path(results_dir) / run
    if not run or not (path / MANIFEST).exists():  # "" is no run, not the current directory
        raise UsageError(f"{run}: no run there (give a results/<run-id> directory or a run id in --results-dir)")
    return path


def on_reduced(opts: dict) -> tuple[dict, str | None]:
    """With --reduced RUN: the options with the reduced model, inputs and the run's target, and a line saying so."""
    from harness.errors import UsageError

    if not opts.get("reduced"):
        if not opts.get("model"):
            raise UsageError("--model: give a model (a registered name or an .onnx file), or --reduced RUN")
        return opts, None
    from harness.results.store import REDUCED, RunStore
    if opts.get("model") or opts.get("inputs"):
        raise UsageError("--reduced RUN brings its own model and inputs: leave out --model and --inputs")
    run_dir = run_dir_of(opts["reduced"], opts.get("results_dir") or DEFAULT_RESULTS_DIR)
    store = RunStore(run_dir / REDUCED)
    doc = store.document("reduce")
    if not doc or not doc["verified"]["flips"]:
        raise UsageError(f"--reduced {opts['reduced']}: no verified reduced model there; run `bisect reduce {opts['reduced']}`")
    manifest = RunStore(run_dir).manifest()
    key = manifest["key"]
    if doc["model"]["file"]:
        model, outputs = str(store.dir / doc["model"]["file"]), ()
    else:  # only the rows were reduced: the run's own model, on its checked outputs
        given = manifest["model"]
        model = given["name"] if given.get("source") in ("generated", "hub") else given["path"]
        outputs = tuple(doc["model"].get("outputs") or ())
    opts = {**opts, "model": model, "inputs": store.dir / doc["inputs"]["file"],
            "outputs": outputs, "arch": key["arch"], "backend": key["backend"], "cpu": key.get("cpu"),
            "python": key.get("python"), **_package_opts(key), **_question_opts(opts, doc, store.dir)}
    note = (f"on the reduced repro of {run_dir.name}: {doc['nodes']['after']} of {doc['nodes']['before']} nodes, "
            f"{doc['rows']['after']} of {doc['rows']['before']} rows ({doc['pair'][0]} good, {doc['pair'][1]} bad)")
    return opts, note


def _question_opts(opts: dict, doc: dict, reduced_dir: Path) -> dict:
    """The question the reduction answered, as options, unless --bad-if asks another: its predicate, and its
    reference for a command that compares (a release: the last good one, whose outputs the reduction was
    compared with; a file or the fp32 model: the reference rows kept beside it, reference.npz)."""
    from harness.errors import UsageError

    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("bad_if") if ctx is not None else None
    if not doc.get("predicate") or source not in (None, click.core.ParameterSource.DEFAULT):
        return {}
    ref = doc.get("reference")
    if not ref:
        return {"bad_if": doc["predicate"]}
    if "reference" not in opts:  # options, repeat, mitigate judge by the outputs alone
        raise UsageError(f"--reduced: the reduction answers --bad-if {doc['predicate']}, which compares with "
                         f"{ref.get('label')}; this command compares with nothing: give --bad-if")
    if opts.get("reference") or opts.get("reference_release"):
        return {"bad_if": doc["predicate"]}
    if ref.get("kind") == "release":
        return {"bad_if": doc["predicate"], "reference_release": doc["pair"][0]}
    if not ref.get("file"):
        raise UsageError(f"--reduced: the reduction kept no reference values ({ref.get('label')}); give --reference")
    return {"bad_if": doc["predicate"], "reference": str(reduced_dir / ref["file"])}


def _package_opts(key: dict) -> dict:
    """The package options of a run's key (harness.releases.packages), as the command line would give them."""
    from harness.releases.packages import of_key

    pkg = of_key(key)
    return {"package": pkg.name, "ep": pkg.ep, "ep_options": pkg.ep_options, "index_urls": pkg.index_urls,
            "find_links": pkg.find_links}


def log_to_stderr(msg) -> None:
    """Progress of a long step (provisioning, tracing) for the user, on stderr."""
    err.print(escape(str(msg)))


def package_of(opts: dict, name: str | None = None, ep: str | None = None):
    """The Package the options name (`name` and `ep` given: a PACKAGE:EP pair of `bisect compare`)."""
    from harness.releases.packages import Package

    from harness.errors import UsageError

    links = tuple(link if "://" in link else str(Path(link).expanduser().resolve()) for link in opts.get("find_links") or ())
    binding = opts.get("binding") or DEFAULT_BINDING
    own, own_ep = BINDINGS[binding]
    if name is None and binding != DEFAULT_BINDING and opts.get("package") not in (None, own):
        raise UsageError(f"--package {opts['package']}: a wheel of the python binding; --binding {binding} installs "
                         f"{own} from npm")
    return Package(name=name or opts.get("package") or own, ep=ep or opts.get("ep") or own_ep,
                   ep_options=tuple(sorted(dict(opts.get("ep_options") or ()).items())),
                   index_urls=tuple(u.rstrip("/") for u in opts.get("index_urls") or ()), find_links=links,
                   pre=bool(opts.get("pre")))


def search_spec(opts: dict):
    """The search the command line asks for; options a command does not take keep their defaults."""
    from harness.errors import UsageError
    from harness.request import SearchSpec
    from harness.verdicts import parse_predicate

    if not opts.get("model"):
        raise UsageError("--model: give a model (a registered name or an .onnx file)")
    session_options = {}
    if opts.get("graph_opt"):
        session_options["graph_optimization_level"] = opts["graph_opt"]
    if opts.get("threads") is not None:
        session_options["intra_op_num_threads"] = opts["threads"]
    given = {k: opts[k] for k in ("model", "inputs", "arch", "backend", "cpu", "python", "cache_dir", "offline",
                                  "results_dir", "resume", "timeout", "reference", "reference_release", "repeat",
                                  "memory_limit_mb", "range_flags", "margin", "mode", "time_budget",
                                  "ray_address")
             if opts.get(k) is not None}
    if given.get("margin") == "native":  # harness.request.SearchSpec.margin None: on where the CPU is not emulated
        given["margin"] = None
    if opts.get("bad_if"):
        bad_if = opts["bad_if"]
        given["bad_if"] = bad_if if isinstance(bad_if, str) else ",".join(bad_if)
        timed = parse_predicate(given["bad_if"]).timed
        if timed and (opts.get("jobs") or 1) > 1:
            raise UsageError(f"--bad-if {timed[0]} measures one probe at a time (two workers pinned to one CPU, "
                             f"in turn): drop -j {opts['jobs']}")
    return SearchSpec(from_=opts["from_"], to=opts["to"], outputs=tuple(opts.get("outputs") or ()),
                      session_options=session_options, package=package_of(opts),
                      engines=tuple(opts.get("engines") or ()), **given)
