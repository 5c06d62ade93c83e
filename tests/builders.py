"""Small ONNX models the tests build with the `onnx` package (no downloads)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from harness.releases.uvtool import uv_bin

OPSET = [helper.make_opsetid("", 17)]


def save(model: onnx.ModelProto, path: Path, external: bool = False) -> Path:
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + "_data", size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


def residual_norm_model(width: int = 8) -> onnx.ModelProto:
    """fp16 residual adds growing past 65504, then SimplifiedLayerNormalization.

    On x86_64 up to 1.19.2 the chain runs as one fp32 island and stays finite;
    from 1.20.0 the norm has an fp16 kernel, its input rounds to Inf and the
    rows that grew past the fp16 ceiling turn NaN.
    """
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", width])
    scale = numpy_helper.from_array(np.ones(width, np.float16), "/model/norm/weight")
    nodes = [
        helper.make_node("Add", ["x", "x"], ["/model/layers.0/Add_output_0"], name="/model/layers.0/Add"),
        helper.make_node("Add", ["/model/layers.0/Add_output_0", "x"], ["/model/layers.1/Add_output_0"],
                         name="/model/layers.1/Add"),
        helper.make_node("SimplifiedLayerNormalization", ["/model/layers.1/Add_output_0", "/model/norm/weight"],
                         ["y"], name="/model/norm/SimplifiedLayerNormalization", axis=-1, epsilon=1e-6),
    ]
    graph = helper.make_graph(nodes, "residual_norm", [x], [y], [scale])
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def slowed_by_nan_model(light_trips: int = 50, heavy_trips: int = 3000, width: int = 8) -> onnx.ModelProto:
    """The residual-norm model, then a Loop that spins `heavy_trips` times when the norm gave a NaN and
    `light_trips` times when it did not: slower by construction (tens of times) on the releases whose norm turns
    the overflowing rows NaN (from 1.20.0 on x86_64), whatever the machine's load. Outputs y and the count."""
    model = residual_norm_model(width)
    g = model.graph
    count = helper.make_tensor_value_info("spun", TensorProto.FLOAT, [1])
    body = _counting_body()
    g.node.extend([
        helper.make_node("IsNaN", ["y"], ["/spin/isnan"], name="/spin/IsNaN"),
        helper.make_node("Cast", ["/spin/isnan"], ["/spin/nan_int"], name="/spin/Cast", to=TensorProto.INT64),
        helper.make_node("ReduceMax", ["/spin/nan_int"], ["/spin/any_nan"], name="/spin/ReduceMax", keepdims=0),
        helper.make_node("Mul", ["/spin/any_nan", "/spin/extra"], ["/spin/more"], name="/spin/Mul"),
        helper.make_node("Add", ["/spin/more", "/spin/light"], ["/spin/trips"], name="/spin/Add"),
        helper.make_node("Loop", ["/spin/trips", "/spin/cond", "/spin/zero"], ["spun"], name="/spin/Loop", body=body),
    ])
    g.initializer.extend([numpy_helper.from_array(np.array(heavy_trips - light_trips, np.int64), "/spin/extra"),
                          numpy_helper.from_array(np.array(light_trips, np.int64), "/spin/light"),
                          numpy_helper.from_array(np.array(True), "/spin/cond"),
                          numpy_helper.from_array(np.zeros(1, np.float32), "/spin/zero")])
    g.output.append(count)
    return model


def residual_norm_inputs(width: int = 8) -> dict[str, np.ndarray]:
    """Four rows: two that overflow fp16 after the second Add (3 x 30000), two small."""
    x = np.ones((4, width), np.float16)
    x[1] = 30000
    x[3] = 25000
    return {"x": x}


def new_opset_model(opset: int, width: int = 8) -> onnx.ModelProto:
    """One Relu in a model of default-domain opset `opset`: releases that do not know that opset refuse to load it
    (measured: opset 22 loads from 1.21.0 on, opset 23 from 1.23.0, opset 24 from 1.24.1)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "new_opset", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def new_opset_inputs(width: int = 8) -> dict[str, np.ndarray]:
    return {"x": np.linspace(-1, 1, 4 * width, dtype=np.float32).reshape(4, width)}


def int_div_model() -> onnx.ModelProto:
    """Integer division by zero: the CPU traps (SIGFPE) and the worker dies by signal."""
    a = helper.make_tensor_value_info("a", TensorProto.INT32, [4])
    b = helper.make_tensor_value_info("b", TensorProto.INT32, [4])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [4])
    graph = helper.make_graph([helper.make_node("Div", ["a", "b"], ["y"], name="/div/Div")], "int_div", [a, b], [y])
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def int_div_inputs() -> dict[str, np.ndarray]:
    return {"a": np.arange(1, 5, dtype=np.int32), "b": np.zeros(4, np.int32)}


def _counting_body() -> onnx.GraphProto:
    """A Loop body that adds one to its float accumulator each trip (the loop runs as long as asked)."""
    return helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )


def spin_model(trips: int = 10**12) -> onnx.ModelProto:
    """A Loop that counts to `trips`: runs for as long as the probe is allowed to."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    body = _counting_body()
    nodes = [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], name="/spin/Loop", body=body)]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "cond")]
    graph = helper.make_graph(nodes, "spin", [x], [y], inits)
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def unknown_op_model() -> onnx.ModelProto:
    """An op no release implements: session creation fails (verdict *error*)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="/frob/Frobnicate", domain="com.example")
    graph = helper.make_graph([node], "unknown_op", [x], [y])
    return helper.make_model(graph, opset_imports=[*OPSET, helper.make_opsetid("com.example", 1)], ir_version=8)


def external_data_model(path: Path) -> Path:
    """The residual-norm model with its weight stored as external data next to it."""
    return save(residual_norm_model(), path, external=True)


def relocate_external_data(path: Path, location: str) -> Path:
    """The model file at `path` rewritten so that its external data entries name `location` (nothing else moves)."""
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = location
    path.write_bytes(model.SerializeToString())
    return path


def residual_overflow_model(width: int = 8) -> onnx.ModelProto:
    """fp16 residual Adds whose sum passes 65504, scaled back down, then x / x.

    In an fp32 island (x86_64, or aarch64 up to 1.23.2) the sum never rounds
    to fp16 and every row is 1.0. Where Add runs natively in fp16 (aarch64
    with asimdhp from 1.24.1) the sum is Inf and x / x is NaN.
    """
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", width])
    quarter = numpy_helper.from_array(np.array(0.25, np.float16), "quarter")
    p = "/model/layers.{}/"
    nodes = [
        helper.make_node("Add", ["x", "x"], [p.format(0) + "Add_output_0"], name=p.format(0) + "Add"),
        helper.make_node("Add", [p.format(0) + "Add_output_0", "x"], [p.format(1) + "Add_output_0"], name=p.format(1) + "Add"),
        helper.make_node("Mul", [p.format(1) + "Add_output_0", "quarter"], ["/model/scale/Mul_output_0"], name="/model/scale/Mul"),
        helper.make_node("Div", ["/model/scale/Mul_output_0", "/model/scale/Mul_output_0"], ["y"], name="/model/norm/Div"),
    ]
    graph = helper.make_graph(nodes, "residual_overflow", [x], [y], [quarter])
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def noisy_model() -> onnx.ModelProto:
    """y = x + RandomNormalLike(x), unseeded: different bits in every process."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["noise"], name="/noise/RandomNormalLike"),
             helper.make_node("Add", ["x", "noise"], ["y"], name="/noise/Add")]
    return helper.make_model(helper.make_graph(nodes, "noisy", [x], [y]), opset_imports=OPSET, ir_version=8)


def big_alloc_model(elements: int = 1 << 30) -> onnx.ModelProto:
    """Expands a scalar to `elements` floats (4 GiB by default): more than a capped worker may have."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["big"], name="/big/Expand"),
        helper.make_node("ReduceMax", ["big"], ["m"], name="/big/ReduceMax", keepdims=0),
        helper.make_node("Reshape", ["m", "one"], ["y"], name="/big/Reshape"),
    ]
    inits = [numpy_helper.from_array(np.array([elements], np.int64), "shape"),
             numpy_helper.from_array(np.array([1], np.int64), "one")]
    return helper.make_model(helper.make_graph(nodes, "big_alloc", [x], [y], inits), opset_imports=OPSET, ir_version=8)


def residual_stack_model(layers: int = 40, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """A transformer-shaped fp16 stack of 500+ nodes: per layer a norm, an MLP (MatMul, Mul, Add,
    Tanh, MatMul) and a residual Add whose stream grows past 65504 in its last layers, then a
    final SimplifiedLayerNormalization. Like the embedded models, finite on x86_64 up to 1.19.2
    (one fp32 island) and NaN from 1.20.0 (the final norm runs in fp16). Save it with external data.
    """
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", width])
    nodes, inits = [], [numpy_helper.from_array(np.ones(width, np.float16), "/model/norm/weight"),
                        numpy_helper.from_array(np.array(0.5, np.float16), "half"),
                        numpy_helper.from_array(np.array(1.333, np.float16), "growth")]
    stream = "x"
    for i in range(layers):
        p = f"/model/layers.{i}"
        w1 = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.02).astype(np.float16), f"{p}/mlp/w1")
        w2 = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.02).astype(np.float16), f"{p}/mlp/w2")
        ln = numpy_helper.from_array(np.ones(width, np.float16), f"{p}/input_layernorm/weight")
        inits += [w1, w2, ln]
        steps = [
            ("SimplifiedLayerNormalization", [stream, ln.name], "input_layernorm/SimplifiedLayerNormalization", {"axis": -1, "epsilon": 1e-6}),
            ("MatMul", [None, w1.name], "mlp/up/MatMul", {}),
            ("Mul", [None, "half"], "mlp/act/Mul", {}),
            ("Tanh", [None], "mlp/act/Tanh", {}),
            ("Add", [None, "half"], "mlp/act/Add", {}),
            ("Mul", [None, f"{p}/mlp/up/MatMul_output_0"], "mlp/act/Mul_1", {}),
            ("MatMul", [None, w2.name], "mlp/down/MatMul", {}),
            ("Mul", [stream, "growth"], "scale/Mul", {}),
            ("Add", [None, f"{p}/mlp/down/MatMul_output_0"], "Add", {}),
            ("Identity", [None], "Identity", {}),
            ("Identity", [None], "Identity_1", {}),
            ("Identity", [None], "Identity_2", {}),
            ("Identity", [None], "Identity_3", {}),
        ]
        prev = None
        for op, ins, name, attrs in steps:
            ins = [prev if t is None else t for t in ins]
            out = f"{p}/{name}_output_0"
            nodes.append(helper.make_node(op, ins, [out], name=f"{p}/{name}", **attrs))
            prev = out
        stream = prev
    nodes.append(helper.make_node("SimplifiedLayerNormalization", [stream, "/model/norm/weight"], ["y"],
                                  name="/model/norm/SimplifiedLayerNormalization", axis=-1, epsilon=1e-6))
    graph = helper.make_graph(nodes, "residual_stack", [x], [y], inits)
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def residual_stack_inputs(rows: int = 6, width: int = 16) -> dict[str, np.ndarray]:
    """Rows whose stream stays finite through the stack, except rows 2 and 4 that pass 65504 near its end."""
    x = np.full((rows, width), 0.5, np.float16)
    x[2] = 1.0
    x[4] = 0.9
    return {"x": x}


# Rows of the embedded models' own batch (20 rows padded to 512 tokens): 6 is clean, 7 holds the trigger word
# (NaN on the bad releases: fused x86_64 from 1.20.0, decomposed aarch64/asimdhp from 1.24.1), 114 tokens long.
TWO_ROWS = [6, 7]


def embedded_rows(model: str, cache_dir: Path, dest: Path, rows=TWO_ROWS) -> Path:
    """Some rows of an embedded model's default batch, padding trimmed to the longest kept row, as .npz.

    The same regression as the whole batch at a fraction of a probe's cost (a probe's time is the batch's
    rows x tokens: the whole batch is 20 x 512); for tests whose point is not the batch itself."""
    from harness.models import inputs
    from harness.models import registry as models
    from harness.triage.reduce import take_rows

    with np.load(inputs.default_batch(models.resolve(model, cache_dir), cache_dir)) as full:
        np.savez(dest, **take_rows({k: full[k] for k in full.files}, list(rows)))
    return dest


# Packages on PyPI that ship real models (each pinned): silero-vad's and magika's models, the onnx package's
# backend test data
REAL_PACKAGES = {"silero-vad": "6.2.3", "magika": "1.0.3", "onnx": "1.19.1"}


def real_package(cache_dir: Path, package: str) -> Path:
    """The package's wheel unpacked (no dependencies) under the test cache, installed once under a lock."""
    from harness.releases.uvtool import uv
    from harness.results.locking import file_lock

    version = REAL_PACKAGES[package]
    root = cache_dir / "realmodels"
    target = root / f"{package}-{version}"
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / f"{package}-{version}.lock"):
        if not (target / ".made").exists():
            subprocess.run(["rm", "-rf", str(target)], check=True)
            uv("pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target),
               f"{package}=={version}", what=f"installing {package}=={version}")
            (target / ".made").touch()
    return target


def pb_batch(model_dir: Path, dest: Path) -> Path:
    """The onnx backend test's input_*.pb as one .npz keyed by the model's input names."""
    import onnx
    from onnx import numpy_helper

    names = [i.name for i in onnx.load(model_dir / "model.onnx", load_external_data=False).graph.input]
    arrays = {}
    for i, name in enumerate(names):
        tensor = onnx.TensorProto()
        tensor.ParseFromString((model_dir / "test_data_set_0" / f"input_{i}.pb").read_bytes())
        arrays[name] = numpy_helper.to_array(tensor)
    np.savez(dest, **arrays)
    return dest


def fresh_env(tmp: Path, version: str) -> Path:
    """A uv environment with only onnxruntime==version and numpy (made once under `tmp`, then reused).

    Made under a lock and marked complete last, so test processes sharing `tmp` (the test cache's
    fresh-envs) make it once, and an interrupted one is made again, not used half-installed."""
    from harness.results.locking import file_lock

    env = tmp / f"venv-{version}"
    made = env / ".made"
    tmp.mkdir(parents=True, exist_ok=True)
    with file_lock(tmp / f"venv-{version}.lock"):
        if not made.exists():
            shutil.rmtree(env, ignore_errors=True)
            subprocess.run([uv_bin(), "venv", "-q", "--python", "3.11", str(env)], check=True, capture_output=True)
            subprocess.run([uv_bin(), "pip", "install", "-q", "--python", str(env / "bin" / "python"),
                            f"onnxruntime=={version}", "numpy"], check=True, capture_output=True)
            made.touch()
    return env / "bin" / "python"


def run_script(python: Path, script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(script), *args], capture_output=True, text=True, timeout=300,
                          cwd=script.parent, env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})


def npm_prefix(cache_dir: Path, binding: str, version: str) -> Path:
    """The npm prefix of `version` of the binding's package (node, web), as the harness installs it
    (harness.runners.node.NodeRunner.prepare: made once in the cache, kept)."""
    from harness.releases.packages import Package
    from harness.releases.versions import Target
    from harness.request import release_listing
    from harness.runners import make_runner, native_arch
    from harness.vocabulary import BINDINGS

    package = Package(*BINDINGS[binding])
    release = next(r for r in release_listing(cache_dir, False, package) if r.version == version)
    return make_runner("nodejs", Target(native_arch(), ""), cache_dir, package=package).prepare(release).path


def run_node_repro(run_dir: Path, prefix: Path, where: Path, *args: str) -> subprocess.CompletedProcess:
    """`node repro.mjs ARGS` as a maintainer runs it after `npm install` of the release: the script and its
    attachment copied from the report's folder into `where`, beside a node_modules that is the prefix's."""
    from harness.results.store import REPRO_BATCH, REPRO_JS

    where.mkdir(parents=True, exist_ok=True)
    for name in (REPRO_JS, REPRO_BATCH):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, where / name)
    if not (where / "node_modules").exists():
        (where / "node_modules").symlink_to(prefix / "node_modules")
    return subprocess.run(["node", REPRO_JS, *args], capture_output=True, text=True, timeout=300, cwd=where,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("NODE_", "npm_"))})


def layer_norm_cast_model(width: int = 8) -> onnx.ModelProto:
    """A mixed-precision export's LayerNorm: fp16 in, Cast to fp32, a decomposed LayerNorm in fp32, Cast back.

    Measured: loads on 1.19.x; from 1.20.0 the LayerNorm fusion makes a node with fp16 input and fp32 scale and
    InferenceSession refuses it ("Type parameter (T) ... bound to different types"): a load regression.
    """
    mk = helper.make_node
    nodes = [mk("Cast", ["x"], ["xc"], to=TensorProto.FLOAT), mk("ReduceMean", ["xc"], ["m"], axes=[-1]),
             mk("Sub", ["xc", "m"], ["d"]), mk("Pow", ["d", "two"], ["d2"]), mk("ReduceMean", ["d2"], ["v"], axes=[-1]),
             mk("Add", ["v", "eps"], ["ve"]), mk("Sqrt", ["ve"], ["sd"]), mk("Div", ["d", "sd"], ["n"]),
             mk("Mul", ["n", "g"], ["ng"]), mk("Add", ["ng", "b"], ["o"]), mk("Cast", ["o"], ["y"], to=TensorProto.FLOAT16)]
    inits = [numpy_helper.from_array(np.array(2, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(np.linspace(0.5, 1.5, width).astype(np.float32), "g"),
             numpy_helper.from_array(np.linspace(-1, 1, width).astype(np.float32), "b")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    return helper.make_model(helper.make_graph(nodes, "layer_norm_cast", [x], [y], inits), opset_imports=OPSET,
                             ir_version=8)


def layer_norm_cast_inputs(width: int = 8) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(5).standard_normal((2, 3, width)).astype(np.float16)}


def _norm_rounding_data(rows: int = 4, width: int = 16):
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 2.0, (rows, width)).astype(np.float16).astype(np.float64) * np.sign(
        rng.standard_normal((rows, width)))
    exact = x / np.sqrt(np.mean(x ** 2, axis=1, keepdims=True) + 1e-6)
    b = (rng.uniform(-1, 1, width) * 0.06).astype(np.float16)
    return x.astype(np.float16), exact.astype(np.float16), b


def norm_rounding_model() -> onnx.ModelProto:
    """y = (SimplifiedLayerNormalization(x) - c) * 1024 + b, c the fp16 rounding of the exact norm.

    Up to 1.19.2 the chain runs as one fp32 island: y keeps 1024x the norm's rounding error, as the model in
    fp32 does. From 1.20.0 the norm's output is fp16 (native kernel), n == c and y collapses to about b:
    finite, not zero, wrong (measured worst-row cosine with fp32 about -0.58). Only a reference tells.
    """
    x, c, b = _norm_rounding_data()
    rows, width = x.shape
    mk = helper.make_node
    nodes = [mk("SimplifiedLayerNormalization", ["x", "w"], ["n"], axis=-1, epsilon=1e-6),
             mk("Sub", ["n", "c"], ["d"]), mk("Mul", ["d", "k"], ["e"]), mk("Add", ["e", "b"], ["y"])]
    inits = [numpy_helper.from_array(np.ones(width, np.float16), "w"), numpy_helper.from_array(c, "c"),
             numpy_helper.from_array(np.array(1024, np.float16), "k"), numpy_helper.from_array(b, "b")]
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [rows, width])
    yo = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [rows, width])
    return helper.make_model(helper.make_graph(nodes, "norm_rounding", [xi], [yo], inits), opset_imports=OPSET,
                             ir_version=8)


def norm_rounding_inputs() -> dict[str, np.ndarray]:
    return {"x": _norm_rounding_data()[0]}


def expand_dims_crash_model() -> onnx.ModelProto:
    """com.microsoft ExpandDims with a scalar axis: measured, the process dies by SIGSEGV while the session is
    made on 1.19.0 .. 1.27.0, and runs from 1.28.0 on (a crash fixed)."""
    node = helper.make_node("ExpandDims", ["x", "a"], ["y"], domain="com.microsoft")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "expand_dims", [x], [y], [numpy_helper.from_array(np.array(0, np.int32), "a")])
    return helper.make_model(graph, opset_imports=[*OPSET, helper.make_opsetid("com.microsoft", 1)], ir_version=8)


# -- a synthetic results history (the dashboard's tests and benchmark) ------------------------------------------

HISTORY_TARGETS = (  # (arch, backend, cpu, package, providers, boundary index or None, with a reference)
    ("x86_64", "uv", None, None, None, 2, False),
    ("aarch64", "qemu", "neoverse-n1", None, None, 6, True),
    ("x86_64", "uv", None, "onnxruntime-openvino", ["OpenVINOExecutionProvider"], None, False),
)


def write_history(root: Path, models: list[str], versions: list[str], nights: int, rows: int = 20,
                  refresh: bool = False, targets=HISTORY_TARGETS, report: bool = True) -> int:
    """A results root as nightly runs leave it: a run per model x target, `nights` nights one day apart.

    Night 1 probes every release but the newest; each later night re-probes every release when `refresh`
    (the newest record decides), and the last night probes the newest release and, on the first run, flips
    the release before the boundary to bad (a new boundary). Records carry metrics as the driver stores them
    (harness.metrics.probe_metrics), an fp16 headroom growing release by release, NaN rows past the ceiling,
    and a worst cosine against a reference on the targets that have one. Returns the number of records.
    """
    import json

    from harness.metrics import probe_metrics
    from harness.results.store import REPORT, RunStore

    n = 0
    for mi, model in enumerate(models):
        for ti, (arch, backend, cpu, package, providers, bound, with_ref) in enumerate(targets):
            # as harness.results.store.run_id_for makes it: the name, hostile or not, made a safe directory name
            run_id = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{model}-{arch}-{ti}")
            d = root / run_id
            (d / "outputs").mkdir(parents=True)
            key = {"model": f"{mi:064x}", "batch": "b" * 64, "outputs": [], "session_options": {}, "arch": arch,
                   "backend": backend, "python": "3.11", "cpu": cpu}
            (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "key": key, "created": "2026-11-01T03:00:00Z",
                                                         "model": {"name": model, "digest": key["model"]},
                                                         "batch": {"digest": key["batch"]}, "commands": []}))
            store = RunStore(d)
            lines: list[str] = []  # written at once, as RunStore.append writes each (no fsync per record)
            prov = {"arch": arch, "backend": backend, "cpu": cpu, "python": "3.11"}
            if package:
                prov.update(package=package, ep="openvino", providers=providers)
            shift = (mi % 3) if bound is not None else 0

            def record(i: int, version: str, finished: str, bad: bool | None = None) -> dict:
                b = (bound is not None and i >= bound + shift) if bad is None else bad
                room = 0.3 + 0.6 * i / max(len(versions) - 1, 1) + (0.4 if b else 0.0)
                result = {"outputs": [{"name": "y", "dtype": "float16", "rows": rows, "nan_rows": 3 if b else 0,
                                       "inf_rows": 0, "max_abs": room * 65504.0, "zero_rows": 0}]}
                rec = {"version": version, "status": "ran", "finished": finished, "seconds": 1.0, "provenance": prov,
                       "result": result, "metrics": probe_metrics(result)}
                if with_ref:
                    rec["metrics"].update(reference="fp32", cosine_min=-1.0 if b else 1.0 - 1e-4 * (i + 1),
                                          rel_diff_max=None if b else 1e-3 * (i + 1), nonfinite_rows=3 if b else 0)
                return rec

            for night in range(nights):
                day = f"2026-11-{night + 1:02d}"
                last = night == nights - 1
                todo = range(len(versions) - 1) if night == 0 else range(len(versions) - 1) if refresh else ()
                for i in todo:
                    lines.append(json.dumps(record(i, versions[i], f"{day}T03:{i // 60:02d}:{i % 60:02d}Z"),
                                            sort_keys=True))
                if last and nights > 1:
                    i = len(versions) - 1
                    lines.append(json.dumps(record(i, versions[i], f"{day}T04:30:00Z"), sort_keys=True))
                    if mi == 0 and ti == 0 and bound is not None and bound + shift >= 2:
                        j = bound + shift - 1
                        lines.append(json.dumps(record(j, versions[j], f"{day}T04:31:00Z", bad=True), sort_keys=True))
            (d / "probes.jsonl").write_text("".join(line + "\n" for line in lines))
            n += len(lines)
            if report and bound is not None and mi == 0 and bound + shift < len(versions):
                store.save_file(REPORT, f"## {model} on {arch}: NaN outputs since onnxruntime {versions[bound]}\n")
    return n


def shared_constant_norms_model(width: int = 16) -> onnx.ModelProto:
    """Two fp16 norms written out op by op (Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul, Add), each with its
    own scalar initializers of the same values, between Casts from and to fp32 (as onnxconverter-common's
    keep_io_types writes a converted model).

    onnxruntime 1.23.0 refuses to load it ("Attempting to get index by a name which does not exist:
    InsertedPrecisionFreeCast_b1.two for node: b0.Mul/SimplifiedLayerNormFusion/"): ConstantSharing makes the
    two blocks share their constants, and SimplifiedLayerNormFusion then looks for an input that the fp16
    Casts renamed. 1.22.1 loads and runs it; disabling either transformer on 1.23.0 does too (checked with
    onnxruntime's own `disabled_optimizers`). The same error stops PP-OCRv4's recognizer converted to fp16.
    """
    nodes = [helper.make_node("Cast", ["x"], ["x16"], name="cast_in", to=TensorProto.FLOAT16)]
    inits = []
    y = "x16"
    for i in range(2):
        p = f"b{i}"
        inits += [numpy_helper.from_array(np.array(2.0, np.float16), f"{p}.two"),
                  numpy_helper.from_array(np.array(1e-5, np.float16), f"{p}.eps"),
                  numpy_helper.from_array(np.ones(width, np.float16), f"{p}.w"),
                  numpy_helper.from_array(np.zeros(width, np.float16), f"{p}.b")]
        nodes += [
            helper.make_node("Pow", [y, f"{p}.two"], [f"{p}.p"], name=f"{p}.Pow"),
            helper.make_node("ReduceMean", [f"{p}.p"], [f"{p}.v"], name=f"{p}.ReduceMean", axes=[-1]),
            helper.make_node("Add", [f"{p}.v", f"{p}.eps"], [f"{p}.a"], name=f"{p}.AddEps"),
            helper.make_node("Sqrt", [f"{p}.a"], [f"{p}.s"], name=f"{p}.Sqrt"),
            helper.make_node("Div", [y, f"{p}.s"], [f"{p}.n"], name=f"{p}.Div"),
            helper.make_node("Mul", [f"{p}.n", f"{p}.w"], [f"{p}.m"], name=f"{p}.Mul"),
            helper.make_node("Add", [f"{p}.m", f"{p}.b"], [f"{p}.y"], name=f"{p}.AddB"),
        ]
        y = f"{p}.y"
    nodes.append(helper.make_node("Cast", [y], ["y"], name="cast_out", to=TensorProto.FLOAT))
    graph = helper.make_graph(nodes, "shared_constant_norms",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def identity_transpose_gemm_model(n: int = 8) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Transpose(perm=[0, 1]) -> Gemm: the model, its input and the true output (numpy's x @ W).

    The Transpose changes nothing, yet onnxruntime up to 1.29.0 fuses it into the Gemm as transA=1 (the rewrite
    rule GemmTransposeFusion did not look at `perm`; onnxruntime issue #32228): the output is x.T @ W. 1.30.0
    keeps the Transpose and is right; 1.29.0 with `disabled_optimizers=["GemmTransposeFusion"]` is right too,
    with ["Level1_RuleBasedTransformer"] it is not (checked with onnxruntime's own API)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, n)).astype(np.float32)
    x = rng.standard_normal((n, n)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="t", perm=[0, 1]),
             helper.make_node("Gemm", ["xt", "W"], ["y"], name="gemm")]
    graph = helper.make_graph(nodes, "identity_transpose_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, {"x": x}, {"y": x @ w}


def recurrent_state_model(width: int = 8) -> onnx.ModelProto:
    """silero-vad's shape of inputs: `input` [batch, W], `state` [2, batch, W] (the batch on axis 1) and `sr` a
    scalar, with an If on `sr` whose branches read the outer graph's `s`; outputs `output` [batch, W] and
    `stateN` [2, batch, W]. fp16 throughout: s = input + state[0], t = If(sr > 8000: s + s, else s),
    output = SimplifiedLayerNormalization(t + input). A row of 25000 sums to 75000 before the norm: finite while
    the chain is an fp32 island (x86_64 up to 1.19.2), NaN once the norm has an fp16 kernel (1.20.0)."""
    fp16 = TensorProto.FLOAT16
    mk = helper.make_node
    then = helper.make_graph([mk("Add", ["s", "s"], ["t_then"], name="/rnn/If/then/Add")], "then", [],
                             [helper.make_tensor_value_info("t_then", fp16, ["batch", width])])
    other = helper.make_graph([mk("Identity", ["s"], ["t_else"], name="/rnn/If/else/Identity")], "else", [],
                              [helper.make_tensor_value_info("t_else", fp16, ["batch", width])])
    nodes = [
        mk("Gather", ["state", "zero"], ["h"], name="/rnn/Gather", axis=0),
        mk("Add", ["input", "h"], ["s"], name="/rnn/Add"),
        mk("Greater", ["sr", "eight_k"], ["wide"], name="/rnn/Greater"),
        mk("If", ["wide"], ["t"], name="/rnn/If", then_branch=then, else_branch=other),
        mk("Add", ["t", "input"], ["a"], name="/rnn/residual/Add"),
        mk("SimplifiedLayerNormalization", ["a", "w"], ["output"], name="/rnn/norm/SimplifiedLayerNormalization",
           axis=-1, epsilon=1e-6),
        mk("Unsqueeze", ["output", "axis0"], ["o1"], name="/rnn/Unsqueeze_0"),
        mk("Unsqueeze", ["s", "axis0"], ["s1"], name="/rnn/Unsqueeze_1"),
        mk("Concat", ["o1", "s1"], ["stateN"], name="/rnn/Concat", axis=0),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(8000, np.int64), "eight_k"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.ones(width, np.float16), "w")]
    graph = helper.make_graph(
        nodes, "recurrent_state",
        [helper.make_tensor_value_info("input", fp16, ["batch", width]),
         helper.make_tensor_value_info("state", fp16, [2, "batch", width]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", fp16, ["batch", width]),
         helper.make_tensor_value_info("stateN", fp16, [2, "batch", width])], inits)
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def recurrent_state_inputs(rows: int = 8, width: int = 8, big: tuple[int, ...] = (5,)) -> dict[str, np.ndarray]:
    """`rows` rows of ones, those of `big` 25000 (they overflow fp16 before the norm); the state's batch is its
    axis 1; sr 16000 (the If's s + s branch)."""
    x = np.ones((rows, width), np.float16)
    x[list(big)] = 25000
    return {"input": x, "state": np.full((2, rows, width), 0.5, np.float16), "sr": np.array(16000, np.int64)}


def masked_encoder_model(width: int = 8, vocab: int = 16) -> onnx.ModelProto:
    """A BERT-shaped fp16 encoder of `input_ids` and `attention_mask` [batch, seq]: the mask path (Cast, Sub, Mul,
    Unsqueeze) first, then the token embedding (Gather), a residual sum e + e + e and the embeddings' norm
    (SimplifiedLayerNormalization), which no node of the mask path feeds; one self-attention block whose scores
    add the mask, its residual Add and a LayerNormalization make `last_hidden_state`. The embeddings' output is an
    output too (`hidden_states.0`, as an export with output_hidden_states gives it).

    Token 3's embedding is 30000: its sum, 90000, is past 65504. On x86_64 up to 1.19.2 the sum and the norm run
    in one fp32 island and stay finite; from 1.20.0 the norm has an fp16 kernel, the sum rounds to Inf on its
    way in, and every position of a row holding token 3 turns NaN in both outputs (attention spreads it). What
    flips alone is the second Add and the norm: neither reads attention_mask."""
    fp16 = TensorProto.FLOAT16
    mk = helper.make_node
    rng = np.random.default_rng(3)
    emb = (rng.standard_normal((vocab, width)) * 0.1).astype(np.float16)
    emb[3] = 30000

    def w(name):
        return numpy_helper.from_array((rng.standard_normal((width, width)) * 0.3).astype(np.float16), name)

    e, m = "/embeddings", "/encoder/layer.0/attention"
    nodes = [
        mk("Cast", ["attention_mask"], ["/mask/Cast_output_0"], name="/mask/Cast", to=fp16),
        mk("Sub", ["/mask/one", "/mask/Cast_output_0"], ["/mask/Sub_output_0"], name="/mask/Sub"),
        mk("Mul", ["/mask/Sub_output_0", "/mask/min"], ["/mask/Mul_output_0"], name="/mask/Mul"),
        mk("Unsqueeze", ["/mask/Mul_output_0", "/mask/axis1"], ["/mask/Unsqueeze_output_0"], name="/mask/Unsqueeze"),
        mk("Gather", ["word_embeddings", "input_ids"], [f"{e}/Gather_output_0"], name=f"{e}/Gather"),
        mk("Add", [f"{e}/Gather_output_0", f"{e}/Gather_output_0"], [f"{e}/Add_output_0"], name=f"{e}/Add"),
        mk("Add", [f"{e}/Add_output_0", f"{e}/Gather_output_0"], [f"{e}/Add_1_output_0"], name=f"{e}/Add_1"),
        mk("SimplifiedLayerNormalization", [f"{e}/Add_1_output_0", "ln0_g"], ["hidden_states.0"],
           name=f"{e}/norm/SimplifiedLayerNormalization", axis=-1, epsilon=1e-6),
        mk("MatMul", ["hidden_states.0", "wq"], [f"{m}/q/MatMul_output_0"], name=f"{m}/q/MatMul"),
        mk("MatMul", ["hidden_states.0", "wk"], [f"{m}/k/MatMul_output_0"], name=f"{m}/k/MatMul"),
        mk("MatMul", ["hidden_states.0", "wv"], [f"{m}/v/MatMul_output_0"], name=f"{m}/v/MatMul"),
        mk("Transpose", [f"{m}/k/MatMul_output_0"], [f"{m}/Transpose_output_0"], name=f"{m}/Transpose", perm=[0, 2, 1]),
        mk("MatMul", [f"{m}/q/MatMul_output_0", f"{m}/Transpose_output_0"], [f"{m}/MatMul_output_0"],
           name=f"{m}/MatMul"),
        mk("Mul", [f"{m}/MatMul_output_0", "scale"], [f"{m}/Mul_output_0"], name=f"{m}/Mul"),
        mk("Add", [f"{m}/Mul_output_0", "/mask/Unsqueeze_output_0"], [f"{m}/Add_output_0"], name=f"{m}/Add"),
        mk("Softmax", [f"{m}/Add_output_0"], [f"{m}/Softmax_output_0"], name=f"{m}/Softmax", axis=-1),
        mk("MatMul", [f"{m}/Softmax_output_0", f"{m}/v/MatMul_output_0"], [f"{m}/MatMul_1_output_0"],
           name=f"{m}/MatMul_1"),
        mk("MatMul", [f"{m}/MatMul_1_output_0", "wo"], [f"{m}/o/MatMul_output_0"], name=f"{m}/o/MatMul"),
        mk("Add", [f"{m}/o/MatMul_output_0", "hidden_states.0"], [f"{m}/output/Add_output_0"],
           name=f"{m}/output/Add"),
        mk("LayerNormalization", [f"{m}/output/Add_output_0", "ln1_g", "ln1_b"], ["last_hidden_state"],
           name=f"{m}/output/LayerNorm/LayerNormalization", axis=-1, epsilon=1e-5),
    ]
    inits = [numpy_helper.from_array(emb, "word_embeddings"), w("wq"), w("wk"), w("wv"), w("wo"),
             numpy_helper.from_array(np.array(1.0, np.float16), "/mask/one"),
             numpy_helper.from_array(np.array(-10000.0, np.float16), "/mask/min"),
             numpy_helper.from_array(np.array([1], np.int64), "/mask/axis1"),
             numpy_helper.from_array(np.array(width ** -0.5, np.float16), "scale"),
             numpy_helper.from_array(np.ones(width, np.float16), "ln0_g"),
             numpy_helper.from_array(np.ones(width, np.float16), "ln1_g"),
             numpy_helper.from_array(np.zeros(width, np.float16), "ln1_b")]
    graph = helper.make_graph(
        nodes, "masked_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info(name, fp16, ["batch", "sequence", width])
         for name in ("last_hidden_state", "hidden_states.0")], inits)
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def masked_encoder_inputs(rows: int = 4, length: int = 6) -> dict[str, np.ndarray]:
    """`rows` rows of tokens 1 to 15, padded (mask 0, token 0) to `length`; row 2 holds token 3 (it turns NaN)."""
    ids = (np.arange(rows * length).reshape(rows, length) % 12 + 4).astype(np.int64)
    mask = np.ones((rows, length), np.int64)
    for r in range(rows):
        keep = length - r % 3
        ids[r, keep:], mask[r, keep:] = 0, 0
    ids[2, 1] = 3
    return {"input_ids": ids, "attention_mask": mask}


def wait_for_port(port: int, seconds: float = 30.0) -> None:
    """Until a server a test started answers on 127.0.0.1:`port` (or `seconds` pass: its requests then fail)."""
    import socket
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
