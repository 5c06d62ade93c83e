"""Generated command lines and malformed files against every command, through harness.cli.main.

Whatever is typed, `bisect` ends with a status of 0, 2 or 3 (1 only where a
command reports that the environment failed it: a matrix cell that could not
run), one line on stderr when it refuses (status 2), never a traceback, and a
refusal leaves the results directories as they were. Nothing is probed: the
cache holds only the release listing, --offline keeps the network out, and a
request that passes every check ends where the runner would be provisioned
(tests/inproc.py), which counts as passing.
"""

from __future__ import annotations

import json
import os
import shutil

import builders
import inproc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.releases.versions import ReleaseIndex
from harness.results.store import RunStore

# -- the files thrown at the commands ----------------------------------------------------

MODELS = ["{d}/good.onnx", "gemma-tiny-fused", "{d}/nope.onnx", "{d}/a-dir", "{d}/empty.onnx", "{d}/junk.onnx",
          "{d}/good.npz", "no-such-model", ""]
BATCHES = ["{d}/good.npz", "{d}/zero.npz", "{d}/dtype.npz", "{d}/wide.npz", "{d}/empty.npz", "{d}/truncated.npz",
           "{d}/single.npy", "{d}/a-dir", "{d}/nope.npz", "{d}/good.onnx"]
REFERENCES = ["{d}/ref.npz", "{d}/ref_rows.npz", "{d}/ref_text.npz", "{d}/empty.npz", "{d}/a-dir", "{d}/nope.npz"]
VERSIONS = ["1.19.0", "1.19.2", "1.20.0", "1.20", "9.9.9", "0.1.2", "abc", "", "1.20.0.dev1", "-1"]
FLOATS = ["10", "1", "0", "-1", "nan", "inf", "-inf", "1e999", "abc", ""]
INTS = ["0", "1", "2", "-1", "abc", "99999999999999999999"]
PREDICATES = ["nan-or-inf", "nan", "zero-rows", "max-abs>1e4", "max-abs>-5", "max-abs>1e999", "rel-diff>1e-3",
              "rel-diff", "zero-rows>3", "sometimes", "max-abs>1e", ""]
CACHES = ["{cache}", "{d}/a-file", "{d}/a-file/sub", "{d}/empty-cache"]
RESULTS = ["{results}", "{d}/a-file", "{results}/sub", "{d}/runs"]
RUN_IDS = ["no-such-run", "../x", "", "run-empty-manifest", "run-no-key", "run-key-only", "run-junk-probes",
           "run-no-probes", "run-one-probe", "."]
MATRICES = ["{d}/good.toml", "{d}/cpus.toml", "{d}/nan.toml", "{d}/broken.toml", "{d}/empty.onnx", "{d}/a-dir",
            "{d}/nope.toml"]

TARGET = {"--arch": ["x86_64", "aarch64", "sparc", "x86_64,aarch64", "x86_64,x86_64", "", "arm64"],
          "--backend": ["auto", "uv", "qemu", "docker", "podman", ""],
          "--cpu": ["neoverse-n1", "cortex-a72", "nonsense", ""],
          "--python": ["3.11", "2.7", "3.99", "abc", ""]}
MODEL = {"--model": MODELS, "--inputs": BATCHES, "--output": ["y", "nope", ""]}
STORE = {"--cache-dir": CACHES, "--results-dir": RESULTS}
TRIAGE = {"--timeout": FLOATS, "--bad-if": PREDICATES}
PROBE = {**TRIAGE, "--reference": REFERENCES, "--resume": RUN_IDS, "-j": INTS, "--repeat": INTS,
         "--memory-limit": INTS + ["64"], "--threads": INTS, "--graph-opt": ["all", "disable", "bogus"]}
RANGE = {"--from": VERSIONS, "--to": VERSIONS}

# command -> (positional argument pools, option pools, flags without a value)
COMMANDS = {
    "run": ([], {**MODEL, **RANGE, **TARGET, **STORE, **PROBE, "--mode": ["regression", "fix", "bogus"]},
            ["--explain", "--json", "--no-prefetch"]),
    "sweep": ([], {**MODEL, **RANGE, **TARGET, **STORE, **PROBE}, ["--json"]),
    "trace": ([], {**MODEL, **TARGET, **STORE, "--version": VERSIONS, "--timeout": FLOATS, "--budget-mb": INTS,
                   "--dump": ["y", "nope", ""]}, ["--refresh", "--json", "--all-nodes"]),
    "diff": ([VERSIONS, VERSIONS], {**MODEL, **TARGET, **STORE, "--timeout": FLOATS, "--budget-mb": INTS}, ["--json"]),
    "options": ([], {**MODEL, **TARGET, **STORE, **TRIAGE, "--version": VERSIONS, "--levels": ["all", "bogus", ""],
                     "--modes": ["sequential", "bogus"], "--threads": ["1,all", "x", ""],
                     "--switches": ["auto", "none", "turbo", ""], "-j": INTS}, ["--json"]),
    "repeat": ([], {**MODEL, **TARGET, **STORE, **TRIAGE, "--version": VERSIONS, "-n": INTS, "--threads": INTS,
                    "--graph-opt": ["all", "bogus"]}, ["--json"]),
    "mitigate": ([], {**MODEL, **RANGE, **TARGET, **STORE, **TRIAGE, "--node": ["nope", ""], "--hot": FLOATS + ["0.5"],
                      "--reference-model": MODELS, "-j": INTS}, ["--json"]),
    "report": ([RUN_IDS + [f"{{d}}/runs/{r}" for r in RUN_IDS] + ["{results}", "{d}/a-file"]], {**STORE, "--format": ["markdown", "json", "pdf"],
                                                          "--embed-limit": INTS}, ["--no-probe"]),
    "versions": ([], {**RANGE, "--arch": TARGET["--arch"], "--python": TARGET["--python"], "--cache-dir": CACHES},
                 ["--json"]),
    "models": ([], {"--cache-dir": CACHES}, ["--json"]),
    "matrix cells": ([MATRICES], {}, ["--json"]),
    "matrix run": ([MATRICES], {**STORE, "--cell": INTS, "-j": INTS}, ["--json", "--fail-fast", "--refresh"]),
    "merge": ([["{merged}"], ["{results}", "{d}/runs", "{d}/a-file", "{d}/nope", "{d}/a-dir"]], {}, ["--json"]),
    "dashboard": ([["{results}", "{d}/runs", "{d}/a-file", "{d}/nope"]], {"-o": ["{d}/site", "{d}/a-file", "{d}/a-file/x"],
                                                                          "--title": ["t", ""]}, []),
}
# options every command line starts with (a generated value given later wins): the cache, offline
BASE = {"run": True, "sweep": True, "trace": True, "diff": True, "options": True, "repeat": True, "mitigate": True,
        "report": True, "versions": True, "models": False, "matrix run": True}
EXIT_1_ALLOWED = {"matrix run"}  # "1 cell not run": the environment, not the input
# command lines per command: few and always the same in the suite; ORTBISECT_PROPERTY_EXAMPLES=500 explores
EXPLORE = os.environ.get("ORTBISECT_PROPERTY_EXAMPLES")


@pytest.fixture(scope="module")
def world(tmp_path_factory, cache_dir, listing):
    d = tmp_path_factory.mktemp("world")
    builders.save(builders.residual_norm_model(), d / "good.onnx")
    np.savez(d / "good.npz", **builders.residual_norm_inputs())
    np.savez(d / "zero.npz", x=np.zeros((0, 8), np.float16))
    np.savez(d / "dtype.npz", x=np.ones((4, 8), np.float32))
    np.savez(d / "wide.npz", x=np.ones((4, 9), np.float16))
    np.save(d / "single.npy", np.ones((4, 8), np.float16))
    np.savez(d / "ref.npz", y=np.zeros((4, 8), np.float16))
    np.savez(d / "ref_rows.npz", y=np.zeros((3, 8), np.float16))
    np.savez(d / "ref_text.npz", y=np.array([["a"] * 8] * 4))
    (d / "empty.onnx").write_bytes(b"")
    (d / "junk.onnx").write_bytes(os.urandom(64))
    (d / "empty.npz").write_bytes(b"")
    (d / "truncated.npz").write_bytes((d / "good.npz").read_bytes()[:120])
    (d / "a-file").write_text("a file")
    (d / "a-dir").mkdir()
    (d / "empty-cache").mkdir()
    head = 'releases = { from = "1.19.0", to = "1.20.0" }\n[[models]]\npath = "good.onnx"\ninputs = "good.npz"\n'
    (d / "good.toml").write_text(head + '[[targets]]\narch = "x86_64"\n')
    (d / "cpus.toml").write_text(head + '[[targets]]\narch = "x86_64"\ncpus = ["neoverse-n1"]\n')
    (d / "nan.toml").write_text("timeout = nan\n" + head + '[[targets]]\narch = "x86_64"\n')
    (d / "broken.toml").write_text("[bad")
    runs = d / "runs"  # malformed run directories, for report, merge and dashboard
    for name, manifest, probes in [("run-empty-manifest", "", None), ("run-no-key", "{}", None),
                                   ("run-key-only", '{"key": {}}', '{"version": "1.20.0", "status": "ran"}\n'),
                                   ("run-junk-probes", json.dumps({"key": {"arch": "x86_64", "python": "3.11"}}),
                                    "not json\n{\"version\": 3}\n")]:
        (runs / name).mkdir(parents=True)
        (runs / name / "manifest.json").write_text(manifest)
        if probes is not None:
            (runs / name / "probes.jsonl").write_text(probes)
    cache = d / "cache"  # the release listing and nothing else: no environment, no tools
    shutil.copytree(listing, cache / "index")
    plan = inproc.open_run(d / "good.onnx", d / "good.npz", cache, runs)
    plan.store.dir.rename(runs / "run-no-probes")
    shutil.copytree(runs / "run-no-probes", runs / "run-one-probe")
    RunStore(runs / "run-one-probe").append({"version": "1.20.0", "status": "ran", "provenance": {},
                                             "result": {"outputs": [{"rows": 1}]}})
    return d


@st.composite
def command_lines(draw, command: str):
    positional, options, flags = COMMANDS[command]
    argv = command.split()
    if BASE.get(command):
        argv += ["--cache-dir", "{cache}", "--offline"]
        if "--results-dir" in options:
            argv += ["--results-dir", "{results}"]
    argv += [draw(st.sampled_from(pool)) for pool in positional]
    for flag in draw(st.lists(st.sampled_from(sorted(options)), unique=True, max_size=6)) if options else []:
        argv += [flag, draw(st.sampled_from(options[flag]))]
    argv += draw(st.lists(st.sampled_from(flags), unique=True, max_size=2)) if flags else []
    return argv


def _fill(argv, world, results) -> list[str]:
    names = {"d": world, "cache": world / "cache", "results": results, "merged": world / "merged"}
    return [a.format(**names) for a in argv]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=int(EXPLORE or 8), deadline=None, derandomize=not EXPLORE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_command_line_ends_cleanly(world, command, data):
    argv = data.draw(command_lines(command))
    results = world / "results"
    argv = _fill(argv, world, results)
    watched = [results, world / "merged", world / "runs"]
    before = [inproc.snapshot(p) for p in watched]
    with pytest.MonkeyPatch.context() as mp, inproc.nothing_provisioned(mp):
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(ReleaseIndex, "_fetch", lambda self: pytest.fail(f"fetched the listing: {argv}"))
        r = inproc.run(*argv)
    assert "Traceback" not in r.stderr, (argv, r.stderr)
    allowed = {0, 2, 3, None} | ({1} if command in EXIT_1_ALLOWED else set())
    assert r.returncode in allowed, (argv, r.returncode, r.stderr)
    if r.returncode == 2:
        assert len(r.lines) == 1 and r.lines[0].startswith("error: "), (argv, r.stderr)
        assert [inproc.snapshot(p) for p in watched] == before, (argv, "a refusal changed the results")
