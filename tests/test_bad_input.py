"""Bad input: exit status 2, one line on stderr, no traceback, nothing written.

Every row changes one thing in a good `bisect run` command line. The rows run
in this process (tests/inproc.py) with provisioning refused, so a row that
wrongly passed every check would end as "got as far as provisioning" rather
than probe; one row also runs as a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import zipfile

import builders
import inproc
import numpy as np
import pytest


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = builders.save(builders.residual_norm_model(), d / "good.onnx")
    np.savez(d / "good.npz", **builders.residual_norm_inputs())
    (d / "corrupt.onnx").write_bytes(b"\x08\x07this is not protobuf" * 10)
    (d / "empty.onnx").write_bytes(b"")
    ext = builders.external_data_model(d / "ext.onnx")
    (d / "ext.onnx_data").unlink()
    # external data onnxruntime would read short, or from outside the model's directory (each file is there)
    builders.external_data_model(d / "trunc.onnx")
    (d / "trunc.onnx_data").write_bytes((d / "trunc.onnx_data").read_bytes()[:10])
    (d / "deep" / "er").mkdir(parents=True)
    builders.external_data_model(d / "deep" / "er" / "up.onnx")
    (d / "deep" / "er" / "up.onnx_data").rename(d / "elsewhere.data")
    builders.relocate_external_data(d / "deep" / "er" / "up.onnx", "../../elsewhere.data")
    builders.external_data_model(d / "abs.onnx")
    builders.relocate_external_data(d / "abs.onnx", str(d / "elsewhere.data"))
    # inside the model's directory as written, outside it by a link: of the file, and of a folder on the way
    (d / "linked").mkdir()
    builders.external_data_model(d / "linked" / "fl.onnx")
    (d / "linked" / "fl.onnx_data").rename(d / "fl-elsewhere.data")
    (d / "linked" / "fl.onnx_data").symlink_to(d / "fl-elsewhere.data")
    builders.external_data_model(d / "linked" / "dl.onnx")
    (d / "outside").mkdir()
    (d / "linked" / "dl.onnx_data").rename(d / "outside" / "dl.onnx_data")
    (d / "linked" / "sub").symlink_to(d / "outside")
    builders.relocate_external_data(d / "linked" / "dl.onnx", "sub/dl.onnx_data")
    # a name with a byte that is not UTF-8 (Python holds it as the lone surrogate \udcff)
    builders.save(builders.residual_norm_model(), d / "m\udcff.onnx")
    np.savez(d / "b\udcff.npz", **builders.residual_norm_inputs())
    np.savez(d / "names.npz", y=np.ones((4, 8), np.float16))
    np.savez(d / "dtype.npz", x=np.ones((4, 8), np.float32))
    np.savez(d / "rank.npz", x=np.ones(8, np.float16))
    np.savez(d / "width.npz", x=np.ones((4, 9), np.float16))
    np.savez(d / "zero.npz", x=np.zeros((0, 8), np.float16))
    np.save(d / "single.npy", np.ones((4, 8), np.float16))
    (d / "corrupt.npz").write_bytes(b"PK not a zip")
    (d / "empty.npz").write_bytes(b"")
    (d / "truncated.npz").write_bytes((d / "good.npz").read_bytes()[:150])
    np.savez(d / "ref_width.npz", y=np.zeros((4, 9), np.float16))
    np.savez(d / "ref_rows.npz", y=np.zeros((3, 8), np.float16))
    np.savez(d / "ref_names.npz", z=np.zeros((4, 8), np.float16))
    np.savez(d / "ref_text.npz", y=np.array([["a"] * 8] * 4))
    for name, members in (("twice", ("x.npy", "x.npy")), ("twice-spelt", ("x", "x.npy"))):
        with zipfile.ZipFile(d / f"{name}.npz", "w") as zf, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it writes
            for member, value in zip(members, (0.0, 1.0)):
                with zf.open(member, "w") as f:
                    np.lib.format.write_array(f, np.full((4, 8), value, np.float16))
    np.savez(d / "objects.npz", x=np.array([1, "a"], dtype=object))
    (d / "a-file").write_text("not a directory")
    (d / "a-dir").mkdir()
    (d / "empty-cache").mkdir()
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
    ("truncated external data", ["--model", "{dir}/trunc.onnx"], "--model {dir}/trunc.onnx: tensor /model/norm/weight: "
     "external data file trunc.onnx_data holds 10 bytes, the tensor's are bytes 0..16"),
    ("external data out of the model's directory", ["--model", "{dir}/deep/er/up.onnx"],
     "tensor /model/norm/weight: external data location '../../elsewhere.data' leaves the model's directory"),
    ("external data at an absolute path", ["--model", "{dir}/abs.onnx"],
     "tensor /model/norm/weight: external data location '{dir}/elsewhere.data' is an absolute path"),
    ("external data linked out of the model's directory", ["--model", "{dir}/linked/fl.onnx"],
     "--model {dir}/linked/fl.onnx: external data file fl.onnx_data is a link to {dir}/fl-elsewhere.data, outside the "
     "model's directory"),
    ("external data through a folder linked out", ["--model", "{dir}/linked/dl.onnx"],
     "external data file sub/dl.onnx_data is a link to {dir}/outside/dl.onnx_data, outside the model's directory"),
    ("model name not UTF-8", ["--model", "{dir}/m\udcff.onnx"], "--model {dir}/m\\xff.onnx: the name is not UTF-8 text"),
    ("inputs name not UTF-8", ["--inputs", "{dir}/b\udcff.npz"], "--inputs {dir}/b\\xff.npz: the name is not UTF-8 text"),
    ("results dir name not UTF-8", ["--results-dir", "{dir}/r\udcff"], "--results-dir {dir}/r\\xff: the name is not UTF-8"),
    ("input names", ["--inputs", "{dir}/names.npz"], "inputs do not match the model"),
    ("input dtype", ["--inputs", "{dir}/dtype.npz"], "input x: dtype float32, the model expects float16"),
    ("input rank", ["--inputs", "{dir}/rank.npz"], "input x: rank 1, the model expects 2"),
    ("missing inputs", ["--inputs", "{dir}/nope.npz"], "no such file"),
    ("corrupt inputs", ["--inputs", "{dir}/corrupt.npz"], "not a readable .npz file"),
    ("unknown model name", ["--model", "gemma-9000"], "--model gemma-9000: unknown model"),
    ("bad predicate", ["--bad-if", "sometimes"], "--bad-if 'sometimes'"),
    ("rel-diff without reference", ["--bad-if", "rel-diff>1e-3"], "compares with a reference; give --reference fp32"),
    ("cosine without reference", ["--bad-if", "nan", "--bad-if", "cosine<0.999"], "--bad-if nan,cosine<0.999: compares"),
    ("cosine above 1", ["--bad-if", "cosine<1.5"], "--bad-if cosine<1.5: a cosine is at most 1"),
    ("cosine the wrong way", ["--bad-if", "cosine>0.9"], "cosine is bad below its bound: cosine<0.9"),
    ("two references", ["--bad-if", "cosine<0.9", "--reference", "fp32", "--reference-release", "1.19.0"],
     "give one reference"),
    ("reference release unknown", ["--reference-release", "1.19.1"], "--reference-release 1.19.1: no such onnxruntime"),
    ("reference release too old", ["--reference-release", "1.18.0"],
     "--reference-release 1.18.0: older than the releases probes run on (1.19.0 and later)"),
    ("reference release without a wheel", ["--python", "3.13", "--from", "1.20.0", "--to", "1.20.0",
                                           "--reference-release", "1.19.0"],
     "--reference-release 1.19.0: no wheel for x86_64 / Python 3.13"),
    ("slower by nothing", ["--bad-if", "slower>0"], "--bad-if slower>0: the bound is a ratio to the baseline's and must "
     "be above 1"),
    ("slower at 1", ["--bad-if", "slower>1"], "--bad-if slower>1: the bound is a ratio to the baseline's"),
    ("rss below 1", ["--bad-if", "rss>0.9"], "--bad-if rss>0.9: the bound is a ratio to the baseline's"),
    ("error takes no bound", ["--bad-if", "error>1"], "--bad-if error takes no bound"),
    ("no default batch", ["--inputs", ""], "no default batch"),
    ("jobs zero", ["-j", "0"], "Invalid value for '-j'"),
    ("unknown backend", ["--backend", "podman"], "--backend podman: unknown backend"),
    ("unknown flag", ["--frobnicate"], "No such option"),
    # every part of the request is checked before the first probe (harness/request.py)
    ("zero rows", ["--inputs", "{dir}/zero.npz"], "--inputs {dir}/zero.npz: the batch has zero rows (input x has shape (0, 8))"),
    ("input static dim", ["--inputs", "{dir}/width.npz"], "input x: shape (4, 9), the model expects (batch, 8)"),
    ("inputs is a directory", ["--inputs", "{dir}/a-dir"], "--inputs {dir}/a-dir: is a directory, not an .npz file"),
    ("inputs empty file", ["--inputs", "{dir}/empty.npz"], "--inputs {dir}/empty.npz: not a readable .npz file"),
    ("inputs truncated", ["--inputs", "{dir}/truncated.npz"], "--inputs {dir}/truncated.npz: not a readable .npz file"),
    ("inputs .npy", ["--inputs", "{dir}/single.npy"], "a single array (.npy), not an .npz archive"),
    ("model is a directory", ["--model", "{dir}/a-dir"], "--model {dir}/a-dir: is a directory, not an .onnx file"),
    ("model empty file", ["--model", "{dir}/empty.onnx"], "--model {dir}/empty.onnx: the graph has no nodes"),
    ("inputs with a name twice", ["--inputs", "{dir}/twice.npz"],
     "--inputs {dir}/twice.npz: holds two arrays named 'x': which one is the batch's is not clear"),
    ("inputs with a name twice, spelt two ways", ["--inputs", "{dir}/twice-spelt.npz"], "holds two arrays named 'x'"),
    ("reference with a name twice", ["--bad-if", "rel-diff>1e-3", "--reference", "{dir}/twice.npz"],
     "--reference {dir}/twice.npz: holds two arrays named 'x'"),
    ("inputs of python objects", ["--inputs", "{dir}/objects.npz"],
     "--inputs {dir}/objects.npz: 'x' holds Python objects (a pickle), not numbers"),
    ("unknown output", ["--output", "nope"], "--output nope: the model has no such output (its outputs: y)"),
    ("reference width", ["--bad-if", "rel-diff>1e-3", "--reference", "{dir}/ref_width.npz"],
     "--reference {dir}/ref_width.npz: y has shape (4, 9), the model's output y with this batch is (batch=4, 8)"),
    ("reference rows", ["--bad-if", "rel-diff>1e-3", "--reference", "{dir}/ref_rows.npz"],
     "--reference {dir}/ref_rows.npz: y has shape (3, 8), the model's output y with this batch is (batch=4, 8)"),
    ("reference names", ["--bad-if", "rel-diff>1e-3", "--reference", "{dir}/ref_names.npz"],
     "do not match the outputs checked (y): missing ['y'], unexpected ['z']"),
    ("reference not numbers", ["--bad-if", "rel-diff>1e-3", "--reference", "{dir}/ref_text.npz"], "y holds <U1 values"),
    ("reference is a directory", ["--bad-if", "rel-diff>1e-3", "--reference", "{dir}/a-dir"],
     "--reference {dir}/a-dir: is a directory, not an .npz file"),
    ("python not a version", ["--python", "3.11/../.."], "--python '3.11/../..': not a Python version"),
    ("python without wheels", ["--python", "2.7"],
     "--python 2.7: no onnxruntime release of 1.19.0..1.20.0 has a wheel for x86_64 / Python 2.7"),
    ("resume unknown run", ["--resume", "no-such-run"], "--resume no-such-run: no such run in "),
    ("resume not a run id", ["--resume", "../elsewhere"], "--resume '../elsewhere': not a run id"),
    ("resume two archs", ["--arch", "x86_64,aarch64", "--resume", "r"], "--resume r: a run has one arch"),
    ("unknown cpu", ["--arch", "aarch64", "--cpu", "nonsense"], "--cpu nonsense: not a CPU model of qemu-aarch64"),
    ("cache dir is a file", ["--cache-dir", "{dir}/a-file"], "--cache-dir {dir}/a-file: is a file, not a directory"),
    ("cache dir under a file", ["--cache-dir", "{dir}/a-file/sub"], "{dir}/a-file is a file, not a directory"),
    ("results dir is a file", ["--results-dir", "{dir}/a-file"], "--results-dir {dir}/a-file: is a file, not a directory"),
    ("negative bound", ["--bad-if", "max-abs>-5"], "--bad-if 'max-abs>-5': the bound must be a finite number >= 0"),
    ("infinite bound", ["--bad-if", "max-abs>1e999"], "the bound must be a finite number >= 0"),
    ("timeout nan", ["--timeout", "nan"], "Invalid value for '--timeout': 'nan' is not a finite number"),
    ("timeout inf", ["--timeout", "inf"], "Invalid value for '--timeout': 'inf' is not a finite number"),
    ("timeout below 1", ["--timeout", "0.5"], "Invalid value for '--timeout'"),
    ("unknown arch", ["--arch", "sparc"], "--arch sparc: no backend runs sparc probes"),
    ("offline without a listing", ["--cache-dir", "{dir}/empty-cache"], "--offline: no cached onnxruntime release listing"),
]


def argv_for(files, change: list[str], cache_dir, results) -> list[str]:
    """A good `run` command line (offline: the test cache has the listing) with `change` applied."""
    args = {"--model": str(files["good"]), "--inputs": str(files["batch"]), "--from": "1.19.0", "--to": "1.20.0",
            "--cache-dir": str(cache_dir), "--results-dir": str(results)}
    flags = []
    it = iter(change)
    for flag in it:
        if flag in args:
            args[flag] = next(it).format(dir=files["dir"])
        else:
            flags.append(flag)
    argv = ["run", "--offline"]
    for flag, value in args.items():
        if value:
            argv += [flag, value]
    return [*argv, *(f.format(dir=files["dir"]) for f in flags)]


@pytest.mark.parametrize("name, change, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(files, cache_dir, tmp_path, monkeypatch, name, change, message):
    results = tmp_path / "results"
    with inproc.nothing_provisioned(monkeypatch):
        r = inproc.run(*argv_for(files, change, cache_dir, results))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert message.format(dir=files["dir"]) in r.lines[0], r.lines[0]
    assert not results.exists() or inproc.snapshot(results) == {}, "a refused request left files behind"


def test_a_name_that_is_not_utf8_is_one_line_from_a_real_process(bisect, files, tmp_path):
    """The byte reaches the process as a byte of argv (not text the test made): refused in one line, exit 2."""
    model = files["dir"] / "m\udcff.onnx"
    r = bisect("run", "--model", str(model), "--inputs", str(files["batch"]), "--from", "1.19.0", "--to", "1.20.0",
               "--offline")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: --model {files['dir']}/m\\xff.onnx: the name is not UTF-8 text; "
                                             "rename it"]
    assert not (tmp_path / "results").exists()


def test_a_real_process_exits_2_with_one_line(bisect, files, tmp_path):
    """The same contract seen from outside: the exit status and stderr of `python -m harness.cli`."""
    r = bisect("run", "--model", str(files["dir"] / "a-dir"), "--inputs", str(files["batch"]),
               "--from", "1.19.0", "--to", "1.20.0", "--offline")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: --model {files['dir'] / 'a-dir'}: is a directory, not an .onnx file"]
    assert not (tmp_path / "results").exists()


def zip_bomb(path, name: str, shape: tuple[int, ...], dtype=np.float16):
    """An .npz whose one array of zeros declares `shape` (GiBs), deflated to a few MB: written through zipfile in
    chunks, so making it takes no more memory than a chunk."""
    chunk = bytes(1 << 24)
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(
                np.empty((0,) * len(shape), dtype)) | {"shape": shape})
            for _ in range(size // len(chunk)):
                f.write(chunk)
            f.write(bytes(size % len(chunk)))
    return path


def peak_rss_mb(argv: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    """`argv` run by a fresh Python, and the peak resident size of the process it ran (its own children's
    maximum: no other child of this test process is counted)."""
    probe = ("import resource, subprocess, sys, json; p = subprocess.run(sys.argv[1:], capture_output=True, "
             "text=True); print(json.dumps([p.returncode, p.stderr, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=600, check=True)
    code, stderr, kb = json.loads(out.stdout)
    return subprocess.CompletedProcess(argv, code, "", stderr), kb / 1024


@pytest.mark.parametrize("flag", ["--inputs", "--reference"])
def test_an_npz_declaring_gigabytes_is_refused_before_its_data_is_read(files, cache_dir, tmp_path, flag):
    """A 2 GiB array of zeros (about 9 MB on disk): its member's .npy header says so, and the archive is
    refused in one line on reading that, not after decompressing it (which cost 2.1 GB of memory)."""
    bomb = zip_bomb(tmp_path / "bomb.npz", "x", (1 << 28, 4))
    assert bomb.stat().st_size < 32 << 20
    extra = ["--bad-if", "rel-diff>1e-3", "--reference", str(bomb)] if flag == "--reference" else []
    argv = [sys.executable, "-m", "harness.cli", "run", "--offline", "--model", str(files["good"]),
            "--inputs", str(bomb if flag == "--inputs" else files["batch"]), *extra, "--from", "1.19.0",
            "--to", "1.20.0", "--cache-dir", str(cache_dir), "--results-dir", str(tmp_path / "results")]
    r, peak = peak_rss_mb(argv)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {flag} {bomb}: its arrays come to 2.0 GiB with 'x' (float16 (268435456, 4)), over the 1 GiB an "
        ".npz may hold (refused before reading them)"]
    assert peak < 512, f"{peak:.0f} MB at its peak"
    assert not (tmp_path / "results").exists()
