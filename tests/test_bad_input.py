"""Bad input: exit status 2, one line on stderr, no traceback."""

from __future__ import annotations

import numpy as np
import pytest

import builders


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = builders.save(builders.residual_norm_model(), d / "good.onnx")
    np.savez(d / "good.npz", **builders.residual_norm_inputs())
    (d / "corrupt.onnx").write_bytes(b"\x08\x07this is not protobuf" * 10)
    ext = builders.external_data_model(d / "ext.onnx")
    (d / "ext.onnx_data").unlink()
    np.savez(d / "names.npz", y=np.ones((4, 8), np.float16))
    np.savez(d / "dtype.npz", x=np.ones((4, 8), np.float32))
    np.savez(d / "rank.npz", x=np.ones(8, np.float16))
    (d / "corrupt.npz").write_bytes(b"PK not a zip")
    matrix = d / "m.toml"
    matrix.write_text("[bad")
    return {"good": good, "batch": d / "good.npz", "dir": d, "ext": ext}


CASES = [
    ("unknown version", ["--from", "1.24.0", "--to", "1.25.0"], "--from 1.24.0: no such onnxruntime release"),
    ("not a version", ["--from", "one", "--to", "1.25.0"], "is not a version number"),
    ("from after to", ["--from", "1.22.0", "--to", "1.20.0"], "--from 1.22.0 is after --to 1.20.0"),
    ("missing model", ["--model", "{dir}/nope.onnx"], "no such file"),
    ("corrupt model", ["--model", "{dir}/corrupt.onnx"], "not a readable ONNX model"),
    ("missing external data", ["--model", "{dir}/ext.onnx"], "external data file ext.onnx_data is missing"),
    ("input names", ["--inputs", "{dir}/names.npz"], "inputs do not match the model"),
    ("input dtype", ["--inputs", "{dir}/dtype.npz"], "input x: dtype float32, the model expects float16"),
    ("input rank", ["--inputs", "{dir}/rank.npz"], "input x: rank 1, the model expects 2"),
    ("missing inputs", ["--inputs", "{dir}/nope.npz"], "no such file"),
    ("corrupt inputs", ["--inputs", "{dir}/corrupt.npz"], "not a readable .npz file"),
    ("unknown model name", ["--model", "gemma-9000"], "--model gemma-9000: unknown model"),
    ("bad predicate", ["--bad-if", "sometimes"], "--bad-if 'sometimes'"),
    ("rel-diff without reference", ["--bad-if", "rel-diff>1e-3"], "give the reference outputs with --reference"),
    ("no default batch", ["--inputs", ""], "no default batch"),
    ("jobs zero", ["-j", "0"], "Invalid value for '-j'"),
    ("unknown backend", ["--backend", "podman"], "--backend podman: unknown backend"),
    ("unknown flag", ["--frobnicate"], "No such option"),
]


@pytest.mark.parametrize("name, change, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(bisect, files, name, change, message):
    args = {"--model": str(files["good"]), "--inputs": str(files["batch"]), "--from": "1.19.0", "--to": "1.20.0"}
    flags = []
    it = iter(change)
    for flag in it:
        if flag in args:
            args[flag] = next(it).format(dir=files["dir"])
        else:
            flags.append(flag)
    argv = ["run"]
    for flag, value in args.items():
        if value:
            argv += [flag, value]
    r = bisect(*argv, *flags)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert message in lines[0], lines[0]
