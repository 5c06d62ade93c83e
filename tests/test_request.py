"""The request step (harness/request.py) through every command that makes a plan: refusals that name
what the user typed, come before anything is provisioned or fetched, and leave the results as they were.

The `bisect run` flags are in tests/test_bad_input.py; here: the other commands, the results
directory of an existing run, the network, and the predicate's own cell document.
"""

from __future__ import annotations

import json
import platform
import shutil
import time

import builders
import inproc
import numpy as np
import pytest

from harness import request
from harness.errors import UsageError
from harness.explain import boundary as explain
from harness.releases.versions import ReleaseIndex
from harness.results.store import MANIFEST

NATIVE = platform.machine()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("request")
    path = builders.save(builders.residual_norm_model(), d / "m.onnx")
    np.savez(d / "m.npz", **builders.residual_norm_inputs())
    np.savez(d / "ref.npz", y=np.zeros((4, 8), np.float16))
    builders.save(builders.residual_overflow_model(), d / "other.onnx")
    return path, d / "m.npz", d


@pytest.fixture
def listing_only(listing, tmp_path):
    """A cache that holds the release listing and nothing else (no environments, no tools)."""
    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    return cache


@pytest.fixture
def no_network(monkeypatch):
    """Fetching the release listing fails the test."""
    def fetch(self):
        raise AssertionError("the release listing was fetched")
    monkeypatch.setattr(ReleaseIndex, "_fetch", fetch)


@pytest.fixture
def cli(monkeypatch, no_network):
    with inproc.nothing_provisioned(monkeypatch):
        yield inproc.run


def refused(r: inproc.Result) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.lines) == 1 and r.lines[0].startswith("error: "), r.stderr
    return r.lines[0].removeprefix("error: ")


def common(model, cache, results) -> list[str]:
    path, batch, _ = model
    return ["--model", path, "--inputs", batch, "--cache-dir", cache, "--results-dir", results, "--offline"]


def existing_run(model, cache, results):
    return inproc.open_run(model[0], model[1], cache, results)


def test_the_good_command_line_gets_as_far_as_provisioning(cli, model, listing_only, tmp_path):
    """The base of every refusal here and in test_bad_input.py passes every check."""
    r = cli("run", "--from", "1.19.0", "--to", "1.20.0", *common(model, listing_only, tmp_path / "res"))
    assert r.returncode is None, r.stderr
    r = cli("run", "--from", "1.19.0", "--to", "1.20.0", "--bad-if", "rel-diff>1e-3", "--reference",
            model[2] / "ref.npz", *common(model, listing_only, tmp_path / "res"))
    assert r.returncode is None, r.stderr
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("argv, message", [
    (["trace", "--version", "0.1.0"], "--version 0.1.0: no such onnxruntime release (nearest: 0.1.2"),
    (["trace", "--version", "soon"], "--version: 'soon' is not a version number"),
    (["diff", "1.19.2", "9.9.9"], "BAD 9.9.9: no such onnxruntime release"),
    (["diff", "0.0.1", "1.20.0"], "GOOD 0.0.1: no such onnxruntime release"),
    (["diff", "abc", "1.20.0"], "GOOD: 'abc' is not a version number"),
    (["diff", "1.20.0", "1.20.0"], "GOOD 1.20.0 and BAD 1.20.0 are the same release"),
    (["diff", "1.20", "1.20.0"], "GOOD 1.20 and BAD 1.20.0 are the same release"),
    (["trace", "--version", "1.20.0", "--dump", "nope"], "--dump nope: the model has no tensor of that name"),
    (["trace", "--version", "1.20.0", "--timeout", "nan"], "Invalid value for '--timeout': 'nan' is not a finite number"),
    (["options", "--version", "1.20.0", "--switches", "turbo"], "--switches turbo: unknown"),
    (["options", "--version", "1.20.0", "--bad-if", "max-abs>-5"], "--bad-if 'max-abs>-5': the bound must be"),
    (["options", "--version", "1.20.7"], "--version 1.20.7: no such onnxruntime release"),
    (["repeat", "--version", "1.20.0", "--python", "2.7"], "--python 2.7: no onnxruntime release of 1.20.0 has a wheel"),
    (["mitigate", "--from", "1.19.0", "--to", "1.20.0", "--node", "nope"], "--node nope: the model has no node"),
    (["mitigate", "--from", "1.19.0", "--to", "1.20.0", "--hot", "nan"], "Invalid value for '--hot': 'nan'"),
    (["sweep", "--from", "1.19.0", "--to", "1.20.0", "--output", "z"], "--output z: the model has no such output"),
    (["run", "--from", "0.1.2", "--to", "0.1.4", "--arch", "aarch64"],
     "--from 0.1.2 --to 0.1.4: no onnxruntime release of 0.1.2..0.1.4 has a Linux wheel for aarch64"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_every_command_refuses_before_the_plan(cli, model, listing_only, tmp_path, argv, message):
    r = cli(*argv, *common(model, listing_only, tmp_path / "res"))
    line = refused(r)
    assert message in line, line
    assert "--from" not in line or argv[0] in ("run", "mitigate"), line  # trace and diff never had a --from
    assert not (tmp_path / "res").exists()


def test_every_arch_of_a_run_is_checked_before_the_first_probe(cli, model, listing_only, tmp_path):
    """x86_64,aarch64 --python 3.12: the second arch's refusal comes before the first arch's probes."""
    if NATIVE != "x86_64":
        pytest.skip("aarch64 under emulation from an x86_64 host")
    line = refused(cli("run", "--from", "1.19.0", "--to", "1.20.0", "--arch", "x86_64,aarch64", "--python", "3.12",
                       *common(model, listing_only, tmp_path / "res")))
    assert line.startswith("--python 3.12: aarch64 probes under QEMU run the sysroot's CPython 3.11"), line


def test_mitigate_refuses_a_reference_model_that_is_not_one(cli, model, listing_only, tmp_path):
    (tmp_path / "ref.onnx").write_bytes(b"\x00\x01 not protobuf")
    r = cli("mitigate", "--from", "1.19.0", "--to", "1.20.0", "--reference-model", tmp_path / "ref.onnx",
            *common(model, listing_only, tmp_path / "res"))
    assert "--reference-model" in refused(r) and "not a readable ONNX model" in r.stderr


def test_an_unknown_arch_blames_only_the_arch(cli, model, listing_only, tmp_path):
    for argv in (["run", "--from", "1.19.0", "--to", "1.20.0"], ["trace", "--version", "1.20.0"]):
        line = refused(cli(*argv, "--arch", "sparc", *common(model, listing_only, tmp_path / "res")))
        assert line.startswith("--arch sparc: no backend runs sparc probes"), line
        assert "--backend" not in line, line
    line = refused(cli("versions", "--from", "1.19.0", "--to", "1.20.0", "--arch", "sparc",
                       "--cache-dir", listing_only, "--offline"))
    assert line.startswith("--arch sparc: no backend runs sparc probes"), line


def test_an_unknown_cpu_is_refused_before_qemu_or_a_sysroot_is_fetched(cli, model, listing_only, tmp_path):
    line = refused(cli("run", "--from", "1.19.0", "--to", "1.20.0", "--arch", "aarch64", "--cpu", "nonsense",
                       *common(model, listing_only, tmp_path / "res")))
    assert line.startswith("--cpu nonsense: not a CPU model of qemu-aarch64"), line
    assert sorted(p.name for p in listing_only.iterdir()) == ["index"]  # no tools, no sysroot, no environment


def test_offline_never_fetches_and_says_what_is_missing(cli, model, tmp_path):
    empty = tmp_path / "empty-cache"
    for argv in (["run", "--from", "1.19.0", "--to", "1.20.0", *common(model, empty, tmp_path / "res")],
                 ["versions", "--from", "1.19.0", "--to", "1.20.0", "--cache-dir", empty, "--offline"]):
        line = refused(cli(*argv))
        assert line.startswith(f"--offline: no cached onnxruntime release listing in {empty}/index/onnxruntime.json")
    assert not (tmp_path / "res").exists()


def test_a_failed_trace_leaves_the_run_manifest_as_it_was(cli, model, listing_only, tmp_path):
    results = tmp_path / "res"
    plan = existing_run(model, listing_only, results)
    before = inproc.snapshot(results)
    line = refused(cli("trace", "--version", "1.20.5", *common(model, listing_only, results)))
    assert line.startswith("--version 1.20.5: no such onnxruntime release"), line
    assert inproc.snapshot(results) == before
    assert len(json.loads((plan.store.dir / MANIFEST).read_text())["commands"]) == 1
    assert explain.release_of(plan, "1.20").version == "1.20.0"  # 1.20 is 1.20.0, as pip and --from read it


def test_resume_must_name_a_run_made_for_this_request(cli, model, listing_only, tmp_path):
    results = tmp_path / "res"
    run_id = existing_run(model, listing_only, results).store.run_id
    before = inproc.snapshot(results)
    _, batch, d = model
    line = refused(cli("run", "--from", "1.19.0", "--to", "1.20.0", "--resume", run_id, "--model", d / "other.onnx",
                       "--inputs", batch, "--cache-dir", listing_only, "--results-dir", results, "--offline"))
    assert line.startswith(f"--resume {run_id}: that run was made for another model"), line
    (results / "not-a-run").mkdir()
    line = refused(cli("run", "--from", "1.19.0", "--to", "1.20.0", "--resume", "not-a-run",
                       *common(model, listing_only, results)))
    assert line == f"--resume not-a-run: is not a run (no readable manifest) in {results}"
    assert {k: v for k, v in inproc.snapshot(results).items() if "not-a-run" not in k} == before
    r = cli("run", "--from", "1.19.0", "--to", "1.20.0", "--resume", run_id, *common(model, listing_only, results))
    assert r.returncode is None, r.stderr  # the right run: on to provisioning


@pytest.mark.parametrize("argv", [["models"], ["versions", "--from", "1.19.0", "--to", "1.20.0"],
                                  ["report", "some-run"], ["matrix", "run", "m.toml"]])
def test_a_cache_dir_that_is_a_file_is_refused_by_every_command(cli, tmp_path, argv):
    (tmp_path / "a-file").write_text("")
    line = refused(cli(*argv, "--cache-dir", tmp_path / "a-file"))
    assert line == f"--cache-dir {tmp_path / 'a-file'}: is a file, not a directory"


# -- matrices: the same rules as run -------------------------------------------------------

def matrix_file(d, name, body: str, target: str = f'arch = "{NATIVE}"') -> str:
    path = d / f"{name}.toml"
    path.write_text(f'releases = {{ from = "1.19.0", to = "1.20.0" }}\n{body}[[models]]\npath = "m.onnx"\n'
                    f'inputs = "m.npz"\n[[targets]]\n{target}\n')
    return path


@pytest.mark.skipif(NATIVE != "x86_64", reason="cpus on a native x86_64 target")
def test_matrix_cpus_on_a_native_target_are_refused_as_run_refuses_cpu(cli, model, listing_only, tmp_path):
    path = matrix_file(model[2], "cpus", "", 'arch = "x86_64"\ncpus = ["neoverse-n1"]')
    want = "x86_64 probes run on this host's own CPU"
    assert want in refused(cli("matrix", "cells", path))
    results = tmp_path / "res"
    assert want in refused(cli("matrix", "run", path, "--cache-dir", listing_only, "--results-dir", results, "--offline"))
    assert not results.exists()
    line = refused(cli("run", "--from", "1.19.0", "--to", "1.20.0", "--arch", "x86_64", "--cpu", "neoverse-n1",
                       *common(model, listing_only, results)))
    assert want in line  # the same rule, spelt as flags


@pytest.mark.parametrize("body, message", [
    ("timeout = nan\n", "timeout nan: give a finite number of seconds >= 1"),
    ('bad_if = "max-abs>-1"\n', "bad_if 'max-abs>-1': the bound must be a finite number >= 0"),
    ("bad_if = 3\n", "bad_if 3: expected a string"),
])
def test_matrix_values_follow_the_flags_rules(cli, model, body, message):
    path = matrix_file(model[2], f"v{abs(hash(body))}", body)
    line = refused(cli("matrix", "cells", path))
    assert line.startswith(f"{path}: ") and message in line, line


def test_matrix_checks_every_cell_before_the_first_probe(cli, model, listing_only, tmp_path):
    d = model[2]
    np.savez(d / "wide.npz", x=np.ones((4, 9), np.float16))
    path = d / "two.toml"
    path.write_text('releases = { from = "1.19.0", to = "1.20.0" }\n'
                    '[[models]]\npath = "m.onnx"\ninputs = "m.npz"\n[[models]]\npath = "m.onnx"\ninputs = "wide.npz"\n'
                    f'[[targets]]\narch = "{NATIVE}"\n')
    results = tmp_path / "res"
    line = refused(cli("matrix", "run", path, "--fail-fast", "--cache-dir", listing_only, "--results-dir", results,
                       "--offline"))
    assert "input x: shape (4, 9), the model expects (batch, 8)" in line
    assert not results.exists()
    r = cli("matrix", "run", path, "--cache-dir", listing_only, "--results-dir", results, "--offline")
    assert r.returncode is None  # --keep-going: cell 1 is reported, then cell 0 goes on to provisioning
    assert r.stderr.index("cell 1 not run") < r.stderr.index("cell 0")


# -- the pieces, directly ------------------------------------------------------------------

def test_single_values():
    assert request.predicate("max-abs>0").conditions[0].bound == 0
    for text in ("max-abs>-5", "rel-diff>-1e-3", "max-abs>1e999"):
        with pytest.raises(UsageError, match="the bound must be a finite number >= 0"):
            request.predicate(text)
    assert request.seconds(1) == 1.0
    for value in (float("nan"), float("inf"), 0.5, True, "10"):
        with pytest.raises(UsageError, match="give a finite number of seconds >= 1"):
            request.seconds(value)


def test_directory(tmp_path):
    (tmp_path / "f").write_text("")
    assert request.directory(tmp_path / "new" / "deeper", "--x") == tmp_path / "new" / "deeper"
    with pytest.raises(UsageError, match=r"^--x .*/f/g: .*/f is a file, not a directory$"):
        request.directory(tmp_path / "f" / "g", "--x")


def test_a_models_facts_are_read_once_and_again_when_the_file_changes(tmp_path, monkeypatch):
    """A warm run reads the graph's facts from the cache (no onnx); a rewritten model is read anew, and a
    damaged memo is read past, never trusted."""
    import os

    from harness.models import registry as models

    path = builders.save(builders.residual_norm_model(width=8), tmp_path / "m.onnx")
    cache = tmp_path / "cache"
    while models.settled_identity(path) is None:  # a file changed this very tick keys no memo yet
        time.sleep(0.02)
    first = models.model_facts(path, cache)
    assert [(p.name, p.dtype, p.dims) for p in first.inputs] == [("x", "float16", ("batch", 8))]
    assert first.fp16 and "y" in first.tensors and first.data_files == ()

    reads = []
    real = models.load_onnx
    monkeypatch.setattr(models, "load_onnx", lambda *a, **k: reads.append(a) or real(*a, **k))
    assert models.model_facts(path, cache) == first and reads == []  # from the memo

    st = path.stat()
    builders.save(builders.residual_norm_model(width=16), path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a rewrite, even in the same tick
    assert models.model_facts(path, cache).inputs[0].dims == ("batch", 16) and len(reads) == 1

    for memo in (cache / "model-facts").glob("*.json"):
        memo.write_text("{not json")
    assert models.model_facts(path, cache).inputs[0].dims == ("batch", 16) and len(reads) == 2


def _image_model(x_dims, s_dims):
    """Two inputs, as exporters write them: x an image, s a second input sharing some of its dim names."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, s_dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], "g", [x, s], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)  # 1.19 reads 10 at most


def test_a_question_mark_or_blank_dim_name_binds_no_size_between_inputs(tmp_path):
    from harness.models.inputs import check_inputs
    from harness.models.registry import facts_of

    # paddle2onnx names H and W of an image both `?`; a blank name says nothing either
    facts = facts_of(_image_model(["batch", 3, "?", "?"], ["batch", " ", "?"]))
    arrays = {"x": np.zeros((2, 3, 192, 48), np.float32), "s": np.zeros((2, 7, 5), np.float32)}
    warned: list[str] = []
    assert check_inputs(facts, arrays, "--inputs b.npz", warned) == {"batch": 2}
    assert warned == []
    # the ordinary run of such a model gets as far as its probes inputs
    path = builders.save(_image_model(["batch", 3, "?", "?"], ["batch", " ", "?"]), tmp_path / "ocr.onnx")
    np.savez(tmp_path / "b.npz", **arrays)
    spec = request.SearchSpec(model=str(path), from_="1.19.0", to="1.19.0", inputs=tmp_path / "b.npz",
                              cache_dir=tmp_path / "cache", offline=True)
    assert request._model_and_batch(spec).warnings == ()


def test_a_shared_symbolic_name_of_two_sizes_warns_as_onnxruntime_runs_it():
    """onnxruntime 1.19.0 and 1.30.0 run this model on this batch (h=192 in x, h=96 in s) without a word."""
    from harness.models.inputs import check_inputs
    from harness.models.registry import facts_of

    facts = facts_of(_image_model(["batch", 3, "h", "w"], ["batch", "h", 4]))
    arrays = {"x": np.zeros((2, 3, 192, 48), np.float32), "s": np.zeros((2, 96, 4), np.float32)}
    warned: list[str] = []
    assert check_inputs(facts, arrays, "--inputs b.npz", warned) == {"batch": 2, "w": 48}  # h has no one size
    assert warned == ["--inputs b.npz: input s has h=96 but input x has h=192: onnxruntime runs such a batch, "
                      "so it is run as it is"]
    with pytest.raises(UsageError, match="input x: shape"):  # a static dim is still held
        check_inputs(facts_of(_image_model([2, 3, "h", "w"], ["batch", "h", 4])),
                     {**arrays, "x": np.zeros((3, 3, 192, 48), np.float32)})
