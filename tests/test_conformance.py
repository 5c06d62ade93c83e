"""Conformance: for each mode x question x target, every artifact of a real run agrees with the run.

Each combination runs `bisect run` once (module fixtures, the shared test cache's environments), checks the run
names the boundary measured for it (or truly none), then applies the one assertion of tests/conformance.py to the
report (JSON and markdown), repro.py (reduced and --full), reduce, diff, blame, drift and the dashboard row.

Real models nobody here built, fetched at test time from the package registry with uv (wheels only, no
dependencies, pinned, kept in the test cache under realmodels/):

- silero-vad 6.2.3, `silero_vad/data/silero_vad.onnx`: a recurrent voice-activity model with `If` subgraphs,
  inputs `input` [N, 512], `state` [2, N, 128] (its batch on axis 1) and a scalar `sr`. Measured: its outputs
  are bit-identical on 1.19.0 .. 1.20.1 and change (by 8.3e-6) at 1.21.0, then stay put up to 1.32.0.
- magika 1.0.3, `magika/models/standard_v3_3/model.onnx`: a file-type classifier (int32 bytes [N, 2048] in,
  ai.onnx.ml ops). Measured: bit-identical on 1.19.0 .. 1.20.1, changed from 1.21.0 on.
- onnx 1.19.1, `onnx/backend/test/data/node/test_rotary_embedding/` (model.onnx and its input_*.pb): a
  RotaryEmbedding of opset 23. Measured: releases up to 1.22.1 refuse to load it, 1.23.0 and later run it.
- onnx 1.19.1, `onnx/backend/test/data/node/test_attention_4d_fp16/`: an fp16 Attention of opset 23, asked
  `cosine<0.99999995` against the model in fp32 on the same release (ortbisect's own conversion). Measured: the
  worst row's cosine is 0.99999991 on 1.23.0 .. 1.24.4 and 0.99999996 from 1.25.0 on (up to 1.32.0): a fix.
  (onnxconverter-common 1.16.0's fp16, with keep_io_types=True, of magika, silero-vad and the onnx package's
  light_squeezenet/resnet50/shufflenet fails to load on 1.20.1 and 1.21.0: it leaves fp32 Casts, If branches
  and ConstantOfShape values beside fp16 tensors.)
- Public converters' outputs, made at test time with `uv run` (CONVERTERS):
  - silero_vad.onnx quantized by onnxruntime 1.20.1's `quantize_dynamic` (int8 weights; onnx 1.19.1). Measured:
    bit-identical on 1.19.0 .. 1.20.1, changed from 1.21.0 on (up to 1.32.0).
  - magika's model quantized by onnxruntime 1.20.1's `quantize_static` in QDQ format (int8 activations and
    weights, calibrated on four batches of random bytes). Measured: bit-identical on every release 1.19.0 ..
    1.32.0, while the fp32 model changes at 1.21.0: unchanged, and every artifact must say so.
  - a scikit-learn 1.6.1 GradientBoostingRegressor (50 trees) converted by skl2onnx 1.20.0 (TreeEnsembleRegressor,
    ai.onnx.ml 3). Measured: bit-identical on every release 1.19.0 .. 1.32.0: unchanged.

Beside them, tests/builders.py's residual_norm (NaN from 1.20.0 on, on the wheels and on onnxruntime-node: its
node-binding combination checks repro.mjs on both sides instead of repro.py), slowed_by_nan (a Loop of 3000 trips instead
of 50 where the norm gives NaN: slower from 1.20.0) and, under QEMU, residual_overflow (NaN on aarch64 with fp16
arithmetic from 1.24.1 on). Under QEMU too, silero-vad: on aarch64 its outputs change at 1.23.0 (measured against
1.22.1: 6e-8 on 1.23.0 and 1.23.2, 1.2e-7 on 1.24.3 and 1.28.0).
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import builders
import numpy as np
import pytest
from conformance import Context, check_agrees

pytestmark = pytest.mark.release

FILES = {"silero": ("silero-vad", "silero_vad/data/silero_vad.onnx"),
         "magika": ("magika", "magika/models/standard_v3_3/model.onnx"),
         "rotary": ("onnx", "onnx/backend/test/data/node/test_rotary_embedding/model.onnx"),
         "attention_fp16": ("onnx", "onnx/backend/test/data/node/test_attention_4d_fp16/model.onnx")}


# Public converters, each run at test time in a uv environment of pinned packages; what they write is kept in the
# test cache under realmodels/ (name: (packages, the converter's code: argv[1] the model in or "", argv[2] out)).
CONVERTERS = {
    # onnxruntime's own dynamic int8 quantizer
    "int8": (("onnxruntime==1.20.1", "onnx==1.19.1"),
             "import sys; from onnxruntime.quantization import QuantType, quantize_dynamic; "
             "quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8)"),
    # onnxruntime's own static quantizer in QDQ format, calibrated on four batches of random bytes (magika's input)
    "qdq": (("onnxruntime==1.20.1", "onnx==1.19.1"), """
import sys
import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

class Batches(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.feeds = iter([{"bytes": rng.integers(0, 257, (4, 2048)).astype(np.int32)} for _ in range(4)])

    def get_next(self):
        return next(self.feeds, None)

quantize_static(sys.argv[1], sys.argv[2], Batches(), quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
"""),
    # a scikit-learn gradient-boosted tree ensemble (50 trees of depth 4 over 8 features), converted by skl2onnx
    "gbr": (("scikit-learn==1.6.1", "skl2onnx==1.20.0", "onnx==1.19.1"), """
import sys
import numpy as np
from skl2onnx import to_onnx
from sklearn.ensemble import GradientBoostingRegressor

rng = np.random.default_rng(0)
X = rng.standard_normal((200, 8)).astype(np.float32)
y = (X[:, 0] * 2 + np.sin(X[:, 1] * 3) + X[:, 2] * X[:, 3]).astype(np.float32)
model = GradientBoostingRegressor(n_estimators=50, max_depth=4, random_state=0).fit(X, y)
onx = to_onnx(model, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
open(sys.argv[2], "wb").write(onx.SerializeToString())
"""),
}


def _converted(cache_dir: Path, converter: str, model: Path | None, name: str) -> Path:
    """What CONVERTERS[converter] writes from `model` (None: it makes its own), made once under the test cache."""
    from harness.releases.uvtool import uv
    from harness.results.locking import file_lock

    packages, code = CONVERTERS[converter]
    root = cache_dir / "realmodels"
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"{name}-{converter}-{'-'.join(p.replace('==', '') for p in packages)}.onnx"
    with file_lock(root / f"{out.name}.lock"):
        if not out.exists():
            uv("run", "--quiet", "--no-project", "--python", "3.11", *(a for p in packages for a in ("--with", p)),
               "python", "-c", code, str(model or ""), str(out) + ".tmp", what=f"converting with {packages[0]}")
            Path(str(out) + ".tmp").rename(out)
    return out


@pytest.fixture(scope="module")
def models(cache_dir, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each model's file and a batch for it."""
    d = tmp_path_factory.mktemp("conformance-models")
    rng = np.random.default_rng(0)
    rows = 4
    audio = (rng.standard_normal((rows, 512)) * 0.1).astype(np.float32)
    np.savez(d / "silero.npz", input=audio, state=np.zeros((2, rows, 128), np.float32), sr=np.array(16000, np.int64))
    np.savez(d / "magika.npz", bytes=rng.integers(0, 257, (rows, 2048)).astype(np.int32))
    out = {}
    for name, (package, path) in FILES.items():
        model = builders.real_package(cache_dir, package) / path
        batch = builders.pb_batch(model.parent, d / f"{name}.npz") if package == "onnx" else d / f"{name}.npz"
        out[name] = (model, batch)
    out["silero_int8"] = (_converted(cache_dir, "int8", out["silero"][0], "silero_vad"), out["silero"][1])
    out["magika_qdq"] = (_converted(cache_dir, "qdq", out["magika"][0], "magika"), out["magika"][1])
    out["gbr"] = (_converted(cache_dir, "gbr", None, "sklearn"), d / "gbr.npz")
    np.savez(d / "gbr.npz", X=rng.standard_normal((rows, 8)).astype(np.float32))
    out["residual_norm"] = (builders.save(builders.residual_norm_model(), d / "residual_norm.onnx"), d / "rn.npz")
    np.savez(d / "rn.npz", **builders.residual_norm_inputs())
    out["slowed"] = (builders.save(builders.slowed_by_nan_model(), d / "slowed.onnx"), d / "rn.npz")
    out["residual_overflow"] = (builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx"),
                                d / "rn.npz")
    return out


def _outputs_on(python: Path, model: Path, batch: Path, dest: Path) -> Path:
    """The model's outputs on the release of `python` (a fresh environment), saved as a reference file."""
    code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1], "
            "providers=['CPUExecutionProvider']); f = dict(np.load(sys.argv[2])); "
            "np.savez(sys.argv[3], **dict(zip([o.name for o in s.get_outputs()], s.run(None, f))))")
    subprocess.run([str(python), "-c", code, str(model), str(batch), str(dest)], check=True, capture_output=True)
    return dest


# id: (model, mode, question args, from, to, the boundary measured for it or None)
COMBINATIONS = {
    "silero-regression-abs-diff-vs-release": ("silero", "regression", ("--bad-if", "abs-diff>0",
                                              "--reference-release", "1.20.1"), "1.20.1", "1.21.0", ("1.20.1", "1.21.0")),
    "silero_int8-regression-abs-diff-vs-release": ("silero_int8", "regression", ("--bad-if", "abs-diff>0",
                                                   "--reference-release", "1.20.1"), "1.20.1", "1.21.0",
                                                   ("1.20.1", "1.21.0")),
    "silero-fix-abs-diff-vs-release": ("silero", "fix", ("--bad-if", "abs-diff>0", "--reference-release", "1.21.0"),
                                       "1.20.1", "1.21.0", ("1.20.1", "1.21.0")),
    "magika-regression-abs-diff-vs-file": ("magika", "regression", ("--bad-if", "abs-diff>0", "--reference",
                                           "FILE:1.20.1"), "1.20.1", "1.21.0", ("1.20.1", "1.21.0")),
    "magika-fix-abs-diff-vs-file": ("magika", "fix", ("--bad-if", "abs-diff>0", "--reference", "FILE:1.21.0"),
                                    "1.20.1", "1.21.0", ("1.20.1", "1.21.0")),
    "rotary-fix-error": ("rotary", "fix", ("--bad-if", "error"), "1.22.1", "1.23.0", ("1.22.1", "1.23.0")),
    "rotary-regression-error": ("rotary", "regression", ("--bad-if", "error"), "1.22.1", "1.23.0", None),
    "magika-regression-cosine-vs-release": ("magika", "regression",
                                            ("--bad-if", "cosine<0.999", "--reference-release", "1.20.1"),
                                            "1.20.1", "1.21.0", None),
    "silero-regression-nan-or-inf": ("silero", "regression", ("--bad-if", "nan-or-inf"), "1.20.1", "1.21.0", None),
    "silero-regression-slower": ("silero", "regression", ("--bad-if", "slower>1.5", "--time-budget", "10"), "1.20.1",
                                 "1.21.0", None),
    "slowed-regression-slower": ("slowed", "regression", ("--bad-if", "slower>2", "--time-budget", "20"), "1.19.2",
                                 "1.20.0", ("1.19.2", "1.20.0")),
    "magika_qdq-regression-abs-diff-vs-release": ("magika_qdq", "regression", ("--bad-if", "abs-diff>0",
                                                  "--reference-release", "1.20.1"), "1.20.1", "1.21.0", None),
    "gbr-regression-abs-diff-vs-file": ("gbr", "regression", ("--bad-if", "abs-diff>0", "--reference", "FILE:1.19.2"),
                                        "1.19.2", "1.23.0", None),
    "attention_fp16-fix-cosine-vs-fp32": ("attention_fp16", "fix", ("--bad-if", "cosine<0.99999995", "--reference",
                                          "fp32"), "1.24.4", "1.25.0", ("1.24.4", "1.25.0")),
    "residual_norm-regression-nan-or-inf": ("residual_norm", "regression", ("--bad-if", "nan-or-inf"), "1.19.2",
                                            "1.20.0", ("1.19.2", "1.20.0")),
    "residual_norm-fix-nan-or-inf": ("residual_norm", "fix", ("--bad-if", "nan-or-inf"), "1.19.2", "1.20.0", None),
    # the node binding (onnxruntime-node from npm, run by Node.js): the wheels' boundary, and repro.mjs on both sides
    "residual_norm-regression-nan-or-inf-node": ("residual_norm", "regression", ("--bad-if", "nan-or-inf"), "1.19.2",
                                                 "1.20.0", ("1.19.2", "1.20.0")),
}
BINDING_OF = {"residual_norm-regression-nan-or-inf-node": "node"}  # the combinations of a binding other than python


def _bisect_run(bisect, fresh_python, model, batch, mode, question, first, last, results, extra=()):
    asked = []
    for arg in question:  # a reference file: the model's outputs on that release, made here
        if arg.startswith("FILE:"):
            version = arg.removeprefix("FILE:")
            arg = str(_outputs_on(fresh_python(version), model, batch, results.parent / f"reference-{version}.npz"))
        asked.append(arg)
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", first, "--to", last, "--mode", mode,
               *asked, *extra, "--json", results=results)
    assert r.returncode in (0, 3), r.stderr
    budget = asked.index("--time-budget") if "--time-budget" in asked else len(asked)
    return r, tuple(asked[:budget] + asked[budget + 2:])  # the question alone: diff asks it


def _conform(bisect, fresh_python, model: Path, batch: Path, results: Path, mode: str, question: tuple, first: str,
             last: str, boundary: tuple | None, extra: tuple = (), binding: str | None = None) -> None:
    """One combination: the run, the boundary measured for it, then every artifact checked against the run."""
    bound = ("--binding", binding) if binding else ()
    r, asked = _bisect_run(bisect, fresh_python, model, batch, mode, question, first, last, results, (*extra, *bound))
    doc = r.json()
    older, newer = ("last_good", "first_bad") if mode == "regression" else ("last_bad", "first_good")
    assert doc["mode"] == mode
    assert (doc.get(older), doc.get(newer)) == (boundary or (None, None)), doc["message"]  # measured, see above
    native = not extra
    check_agrees(doc, results, Context(bisect, fresh_python, model, batch, native=native, explain=native,
                                       extra_run_args=(*extra, *bound), question_args=asked, binding=binding),
                 run_rc=r.returncode)


# Under QEMU (aarch64 from x86_64): id: (model, question args, from, to, the boundary measured for it)
EMULATED = {
    "residual_overflow-regression-nan-or-inf": ("residual_overflow", ("--bad-if", "nan-or-inf"), "1.23.2", "1.24.1",
                                                ("1.23.2", "1.24.1")),
    "silero-regression-abs-diff-vs-release": ("silero", ("--bad-if", "abs-diff>0", "--reference-release", "1.22.1"),
                                              "1.22.1", "1.23.0", ("1.22.1", "1.23.0")),
}
ON_QEMU = ("--arch", "aarch64", "--backend", "qemu")
AT_ONCE = 3  # combinations checked at once: their work is subprocesses that mostly wait (probes, installs, startup)
NATIVE_TEST = "test_every_artifact_agrees_with_the_run"
EMULATED_TEST = "test_every_artifact_agrees_with_an_emulated_aarch64_run"


def _timed(combination: str) -> bool:
    return "--time-budget" in COMBINATIONS[combination][2]


@pytest.fixture(scope="module")
def checked(request, models, module_bisect, fresh_python, tmp_path_factory):
    """The selected untimed combinations, native and emulated, run and checked AT_ONCE at a time from the module's
    start: {(test name, combination): its future}. A test reads its own outcome (the assertion re-raised there).
    The timed ones are left to their tests, which run them alone after these: a latency measured beside other
    work is noise."""
    selected = [(item.originalname, item.callspec.params["combination"]) for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    jobs = {}
    for test, combination in selected:
        if combination in BINDING_OF and shutil.which("node") is None:
            continue  # its test says why
        if test == NATIVE_TEST and not _timed(combination):
            name, mode, question, first, last, boundary = COMBINATIONS[combination]
            jobs[(test, combination)] = (*models[name], tmp_path_factory.mktemp(combination) / "results", mode,
                                         question, first, last, boundary, (), BINDING_OF.get(combination))
        elif test == EMULATED_TEST:
            name, question, first, last, boundary = EMULATED[combination]
            jobs[(test, combination)] = (*models[name], tmp_path_factory.mktemp(f"aarch64-{combination}") / "results",
                                         "regression", question, first, last, boundary, ON_QEMU)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        yield {key: pool.submit(_conform, module_bisect, fresh_python, *job) for key, job in jobs.items()}


@pytest.mark.parametrize("combination", list(COMBINATIONS))
def test_every_artifact_agrees_with_the_run(combination, checked, models, module_bisect, fresh_python,
                                            tmp_path_factory):
    if combination in BINDING_OF and (shutil.which("node") is None or shutil.which("npm") is None):
        pytest.skip("Node.js and npm run the node and web bindings (apt-get install nodejs npm)")
    if not _timed(combination):
        checked[(NATIVE_TEST, combination)].result()
        return
    wait(checked.values())
    name, mode, question, first, last, boundary = COMBINATIONS[combination]
    _conform(module_bisect, fresh_python, *models[name], tmp_path_factory.mktemp(combination) / "results", mode,
             question, first, last, boundary)


@pytest.mark.qemu
@pytest.mark.parametrize("combination", list(EMULATED))
def test_every_artifact_agrees_with_an_emulated_aarch64_run(combination, checked):
    """Under QEMU: what can be read without running aarch64 code here (the report, drift, the dashboard)."""
    checked[(EMULATED_TEST, combination)].result()
