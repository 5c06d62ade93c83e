"""Probe worker: runs one model on one batch inside one release's environment.

A leaf: it imports only onnxruntime, numpy and the standard library, knows
nothing of the harness, and never decides good or bad. It reads a request
(JSON), writes one result (JSON, atomically) and, if asked, the outputs (.npz).
It must run on every onnxruntime release from 1.19 on and Python 3.8 on.

    python worker.py REQUEST.json
    python worker.py --serve          (request paths on stdin, a status line each on stdout)
    python worker.py --serve --import-first   (the same, numpy and onnxruntime imported before the first)

A request with `timing` also times the batch: warm-up runs, then repeated
runs of it on the same session (each run's latency kept), pinned to one CPU
where the OS allows; one with `profile_prefix` runs under onnxruntime's own
profiler and returns its summary per node (the profile file is removed).

Exit status: 0 result written, 3 result written with an error (the model
would not load or run on this release), anything else: no result. Serving,
the status of each request is its answer line, and the process ends at EOF.

A worker never outlives its harness: a watchdog thread ends the process
(5) when its parent changes (the harness died, even by SIGKILL, and the
worker was handed to init), and (6) when a request runs past the
`deadline_s` it carries (the harness's timeout and a grace; in a container,
where the parent is the container's init, that is what ends it).

The module holds one concept, a probe inside a release's process (its timed
runs, profile and fp16 margin included), and is one file because it runs
alone, by path, in every environment and engine; the margin on chosen rows
took it past 500 lines.
"""

import hashlib
import json
import os
import platform
import resource
import sys
import threading
import time
import traceback

EXIT_OK = 0
EXIT_ERROR = 3
EXIT_HELD_ORPHAN = 4  # held at a test's gate when the harness died
EXIT_ORPHAN = 5  # the harness that started it is gone
EXIT_DEADLINE = 6  # its request ran past its own deadline
#: the harness's pid, as the process that starts a worker sets it: a harness killed before the watchdog
#: first looks is seen too (the parent is init by then); absent (a container), the parent at the start
PARENT_ENV = "ORTBISECT_WORKER_PARENT"
WATCH_S = 0.2  # how often the watchdog looks

GRAPH_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",  # only in releases that have it
    "all": "ORT_ENABLE_ALL",
}
EXEC_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
# CPU features that decide which kernels onnxruntime picks.
INTERESTING_FLAGS = (
    "asimdhp", "fphp", "asimd", "sve", "sve2", "sme", "sme2", "i8mm", "bf16", "asimddp",
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_fp16",
    "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_fp16", "avx_vnni",
)

# Linux arm64 hwcap bits (uapi asm/hwcap.h): fp16 arithmetic is asimdhp.
ARM64_HWCAP = {0: "fp", 1: "asimd", 9: "fphp", 10: "asimdhp", 20: "asimddp", 22: "sve", 23: "asimdfhm"}
ARM64_HWCAP2 = {1: "sve2", 13: "i8mm", 14: "bf16", 23: "sme", 37: "sme2"}
AT_HWCAP, AT_HWCAP2 = 16, 26


def arm64_hwcaps():
    """Feature names from getauxval: right under QEMU user mode, where /proc/cpuinfo
    may describe the host rather than the emulated CPU."""
    import ctypes

    getauxval = ctypes.CDLL(None).getauxval
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    names = set()
    for at, table in ((AT_HWCAP, ARM64_HWCAP), (AT_HWCAP2, ARM64_HWCAP2)):
        bits = getauxval(at)
        names.update(name for bit, name in table.items() if bits >> bit & 1)
    return names


def cpu_info():
    """Model name and feature flags the process sees (what onnxruntime's kernel choice sees)."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("flags", "features") and not flags:
                    flags = set(value.split())
                elif key in ("model name", "cpu part") and not model:
                    model = value.strip()
    except OSError:
        pass
    if platform.machine() in ("aarch64", "arm64"):
        try:
            flags = arm64_hwcaps()
        except (OSError, AttributeError):
            pass
    return {"machine": platform.machine(), "model": model, "flags": sorted(f for f in flags if f in INTERESTING_FLAGS)}


NATIVE_MODULE = "onnxruntime.capi.onnxruntime_pybind11_state"  # onnxruntime's compiled core, in every release


def native_library(ort):
    """The file of onnxruntime's compiled core as the import loaded it, whether it is one (a module loaded by the
    extension loader from a file with an extension suffix) and whether `ort.get_build_info` is its own function
    (the commit a build reports is the compiled core's, not a Python layer's); None when the import loaded none:
    a package that runs no native code is no build of onnxruntime, whatever it says of itself."""
    import importlib.machinery

    module = sys.modules.get(NATIVE_MODULE)
    if module is None:
        return None
    path = getattr(module, "__file__", None)
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    own = getattr(module, "get_build_info", None)
    return {"file": path if isinstance(path, str) else None,
            "extension": isinstance(loader, importlib.machinery.ExtensionFileLoader) and isinstance(path, str)
            and path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)),
            "own_build_info": own is not None and getattr(ort, "get_build_info", None) is own}


def session_options(ort, opts):
    so = ort.SessionOptions()
    level = opts.get("graph_optimization_level")
    if level:
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_LEVELS[level])
    mode = opts.get("execution_mode")
    if mode:
        so.execution_mode = getattr(ort.ExecutionMode, EXEC_MODES[mode])
    for threads in ("intra_op_num_threads", "inter_op_num_threads"):
        if opts.get(threads) is not None:
            setattr(so, threads, int(opts[threads]))
    for key, value in sorted((opts.get("config") or {}).items()):
        so.add_session_config_entry(key, str(value))
    if opts.get("optimized_model_filepath"):
        so.optimized_model_filepath = opts["optimized_model_filepath"]
    if opts.get("session_log_path"):
        so.log_severity_level = 0  # verbose: each graph transformer's "modified" line and the node placements
    return so


def new_session(ort, model, so, providers, extra):
    """A session of `model` (a path or the bytes of one) on the providers asked for ([[name, options]]; absent:
    the CPU provider, as in every release); `extra`: keyword arguments such as disabled_optimizers."""
    if providers:
        return ort.InferenceSession(model, sess_options=so, providers=[p[0] for p in providers],
                                    provider_options=[p[1] for p in providers], **extra)
    return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"], **extra)


def stderr_to(path, make):
    """`make()` with file descriptor 2 (where onnxruntime's default logger writes) going to `path`."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 2)
        return make()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def output_stats(np, name, arr):
    """Row-wise health of one output (rows = first axis): what verdicts are made of."""
    a = np.asarray(arr)
    stats = {
        "name": name,
        "dtype": str(a.dtype),
        "shape": list(a.shape),
        "sha256": hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest(),
    }
    if a.dtype.kind not in "biufc":
        return stats  # strings and the like: only the hash says anything
    rows = a.reshape(a.shape[0], int(np.prod(a.shape[1:]))) if a.ndim else a.reshape(1, 1)
    floating = a.dtype.kind in "fc"
    nan = np.isnan(rows) if floating else np.zeros(rows.shape, bool)
    inf = np.isinf(rows) if floating else np.zeros(rows.shape, bool)
    finite = rows[~(nan | inf)].astype(np.float64)
    stats.update(
        rows=int(rows.shape[0]),
        nan_rows=int(nan.any(axis=1).sum()),
        inf_rows=int(inf.any(axis=1).sum()),
        zero_rows=int((rows == 0).all(axis=1).sum()) if rows.shape[1] else 0,
        nan=int(nan.sum()),
        inf=int(inf.sum()),
        max_abs=float(np.abs(finite).max()) if finite.size else None,
        min=float(finite.min()) if finite.size else None,
        max=float(finite.max()) if finite.size else None,
    )
    return stats


def batch_rows(np, feeds, arrays):
    """The batch's row count: the first axis the inputs share, if an output has it; else the
    first axis most outputs share (the larger on a tie). None without a numeric output."""
    firsts = [a.shape[0] for a in arrays if a.ndim and a.dtype.kind in "biufc"]
    if not firsts:
        return None
    inputs = set(int(np.shape(v)[0]) for v in feeds.values() if np.ndim(v))
    if len(inputs) == 1 and list(inputs)[0] in firsts:
        return list(inputs)[0]
    return max(set(firsts), key=lambda n: (firsts.count(n), n))


def rows_summary(np, feeds, names, values):
    """Bad rows of the batch across the outputs with one row per batch row: a row with NaN in
    two outputs is one NaN row. Outputs with another first axis are counted by themselves
    (in `outputs`) and named nowhere here."""
    arrays = [np.asarray(v) for v in values]
    n = batch_rows(np, feeds, arrays)
    if n is None:
        return None
    nan = np.zeros(n, bool)
    inf = np.zeros(n, bool)
    zero = np.zeros(n, bool)
    counted = []
    for name, a in zip(names, arrays):
        if not a.ndim or a.shape[0] != n or a.dtype.kind not in "biufc":
            continue
        counted.append(name)
        rows = a.reshape(n, int(np.prod(a.shape[1:])))
        if a.dtype.kind in "fc":
            nan |= np.isnan(rows).any(axis=1)
            inf |= np.isinf(rows).any(axis=1)
        if rows.shape[1]:
            zero |= (rows == 0).all(axis=1)
    return {
        "rows": int(n),
        "outputs": counted,
        "nan_rows": int(nan.sum()),
        "inf_rows": int(inf.sum()),
        "nonfinite_rows": int((nan | inf).sum()),
        "zero_rows": int(zero.sum()),
    }


def file_identity(path):
    """The key of every memo of a file's content (the harness's too): a copy keeping size and mtime (cp -p, rsync -a,
    touch -r) keeps neither the ctime, which only the kernel sets, nor the inode."""
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def session_key(request):
    """What makes a session: the model file as it is now, its options and providers."""
    return json.dumps([request["model"], file_identity(request["model"]), request.get("session_options") or {},
                       request.get("providers")], sort_keys=True)


def probe(request, result, kept=None):
    """Fill `result` in place, so that a failure keeps what was seen before it.

    `kept` (serving): the last session made, by session_key; a request with
    the same model and options runs on it instead of making it again.
    """
    t0 = time.perf_counter()
    result.update(
        worker=1,
        python=platform.python_version(),
        platform=platform.platform(),
        cpu=cpu_info(),
        stage="import",
    )
    import numpy as np
    import onnxruntime as ort

    result["import_s"] = time.perf_counter() - t0
    result["onnxruntime"] = {
        "native": native_library(ort),
        "version": ort.__version__,
        "device": ort.get_device(),
        "providers": ort.get_available_providers(),
        "build_info": getattr(ort, "get_build_info", lambda: "")(),
    }
    result["numpy"] = np.__version__

    timing = request.get("timing")
    if timing and timing.get("pin_cpu") is not None:
        result["pinned_cpu"] = pin(int(timing["pin_cpu"]))
    result["stage"] = "inputs"
    with np.load(request["inputs"]) as data:
        feeds = {k: data[k] for k in data.files}

    result["stage"] = "session"
    opts = request.get("session_options") or {}
    so = session_options(ort, opts)
    if request.get("profile_prefix"):
        so.enable_profiling = True
        so.profile_file_prefix = request["profile_prefix"]
    margin = request.get("margin")
    if margin and margin.get("optimized_path") and not opts.get("optimized_model_filepath"):
        # the margin counts only tensors this release holds in fp16: its optimized graph says which
        so.optimized_model_filepath = margin["optimized_path"]
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.onnx.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    result["session_options"] = opts
    t = time.perf_counter()
    # a profiled session ends its profile when the request does: it is never kept for another
    key = session_key(request) if kept is not None and not request.get("profile_prefix") else None
    providers = request.get("providers")  # [[name, options]]; absent: the CPU provider, as in every release
    # graph transformers and rewrite rules by name, as onnxruntime spells them (unknown names are ignored by it)
    extra = {"disabled_optimizers": list(opts["disabled_optimizers"])} if opts.get("disabled_optimizers") else {}

    def make():
        return new_session(ort, request["model"], so, providers, extra)

    if key is not None and kept.get("key") == key:
        sess = kept["session"]
        result["session_reused"] = True
    elif opts.get("session_log_path"):
        sess = stderr_to(opts["session_log_path"], make)
    else:
        sess = make()
    if key is not None:
        kept.clear()  # one session at a time: a reduction's candidates must not pile up in memory
        kept.update(key=key, session=sess)
    result["session_s"] = time.perf_counter() - t
    # what really runs the model: onnxruntime falls back to the CPU provider when the one asked for fails
    result["providers_used"] = sess.get_providers()

    result["stage"] = "run"
    names = request.get("outputs") or [o.name for o in sess.get_outputs()]
    if request.get("hold_dir"):
        hold(request["hold_dir"])
    t = time.perf_counter()
    run_options = None
    if opts.get("session_log_path"):
        run_options = ort.RunOptions()
        run_options.log_severity_level = 2  # the session logs verbosely for its log file, not every run
    values = sess.run(names, feeds, run_options)
    result["run_s"] = time.perf_counter() - t
    if timing:
        result["stage"] = "timing"
        # warm-up runs only on a new session: a kept one is warm from the requests before
        result["timing"] = timed_runs(sess, names, feeds, timing, opts, warm=bool(result.get("session_reused")))
    if request.get("profile_prefix"):
        result["profile"] = profile_summary(sess.end_profiling())

    if margin:
        # the verdict's session goes before the margin's is made: the process holds one model's weights at a time.
        # Its outputs are copied first: onnxruntime's arrays keep the session's whole arena alive (0.8 GB of
        # gemma-300m-synthetic's, which put the margin 35 % above the probe's own peak)
        values = [v.copy() if isinstance(v, np.ndarray) else v for v in values]
        if kept is not None and kept.get("session") is sess:
            kept.clear()
        sess = None
        give_back_memory()
        result["margin"] = margin_values(np, ort, margin, opts, providers, extra, feeds, values)
    result["stage"] = "done"
    result["outputs"] = [output_stats(np, n, v) for n, v in zip(names, values)]
    result["rows"] = rows_summary(np, feeds, names, values)
    if request.get("outputs_path"):
        tmp = request["outputs_path"] + ".tmp.npz"
        np.savez(tmp, **dict(zip(names, values)))
        os.replace(tmp, request["outputs_path"])


def pin(cpu):
    """This process on one CPU (where the OS allows it): a run's latency then does not include moving
    between cores; None where it cannot be pinned."""
    try:
        os.sched_setaffinity(0, {cpu})
        return cpu
    except (AttributeError, OSError, ValueError):
        return None


def timed_runs(sess, names, feeds, timing, opts, warm=False):
    """`warmup` runs (unless the session is `warm`), then the batch again and again on the same session: at
    least `runs_min` runs, more while `seconds` last, at most `runs_max`. Each run's latency (seconds) is kept."""
    warmup = 0 if warm else int(timing.get("warmup", 0))
    for _ in range(warmup):
        sess.run(names, feeds)
    runs_min, runs_max = int(timing.get("runs_min", 1)), int(timing.get("runs_max", 1000))
    until = time.perf_counter() + float(timing.get("seconds", 0.0))
    latencies = []
    while len(latencies) < runs_min or (len(latencies) < runs_max and time.perf_counter() < until):
        t = time.perf_counter()
        sess.run(names, feeds)
        latencies.append(time.perf_counter() - t)
    return {"latencies_s": latencies, "warmup": warmup,
            "threads": opts.get("intra_op_num_threads")}


PROFILE_NODES = 400  # the slowest nodes a profile summary keeps


def profile_summary(path):
    """onnxruntime's profile (a Chrome trace of every run) summed up per node: its op type, provider and median
    kernel time in microseconds over the runs (the median leaves the warm-up runs out); the file is removed."""
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        try:
            os.remove(path)
        except OSError:
            pass
    times, ops = {}, {}
    runs = 0
    for ev in events if isinstance(events, list) else []:
        if not isinstance(ev, dict):
            continue
        name, cat = str(ev.get("name", "")), ev.get("cat")
        if cat == "Session" and name == "model_run":
            runs += 1
        elif cat == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            args = ev.get("args") or {}
            times.setdefault(node, []).append(float(ev.get("dur", 0)))
            ops[node] = (str(args.get("op_name", "")), str(args.get("provider", "")))
    nodes = []
    for node, durs in times.items():
        durs.sort()
        nodes.append([node, ops[node][0], ops[node][1], durs[len(durs) // 2]])
    nodes.sort(key=lambda n: -n[3])
    return {"runs": runs, "nodes": nodes[:PROFILE_NODES], "node_count": len(nodes)}


def margin_values(np, ort, margin, opts, providers, extra, feeds, values):
    """Each watched tensor's largest |x|, from a second session of the margin model (the verdict's session ran the
    model as it is); a failure here is said in the result and never fails the probe.

    `rows` (the rows that held the hottest tensors' largest |x| before, decided by the harness): the margin runs
    on those rows and on every row the verdict's outputs show NaN or Inf in, not on the whole batch. `learn_rows`:
    the batch one row at a time (no dearer than the batch at once), which says each tensor's row (`row_of`)."""
    t = time.perf_counter()
    try:
        so = session_options(ort, dict((k, v) for k, v in opts.items()
                                       if k not in ("optimized_model_filepath", "session_log_path")))
        # the copy's external data is the model's own, in the model's directory (releases before 1.22 cannot
        # take a folder for a model given as bytes: said as the margin's error)
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", margin["data_dir"])
        with open(margin["model"], "rb") as f:
            graph = f.read()
        sess = new_session(ort, graph, so, providers, extra)
        outputs = list(margin["outputs"])
        n = feed_rows(np, feeds)
        rows = None
        if n is not None and margin.get("rows") is not None:
            rows = sorted(set(int(r) for r in margin["rows"] if 0 <= int(r) < n) | nonfinite_rows(np, n, values))
        runs = None
        try:
            if n is not None and margin.get("learn_rows"):
                runs = [(r, sess.run(outputs, dict((k, v[r:r + 1]) for k, v in feeds.items()))) for r in range(n)]
            elif rows:
                runs = [(None, sess.run(outputs, dict((k, v[rows]) for k, v in feeds.items())))]
        except Exception:
            runs = None  # a model made for its batch's size alone: read on the batch as it is
        if runs is None:
            n, rows = (None, None) if margin.get("learn_rows") else (n, None)
            runs = [(None, sess.run(outputs, feeds))]
    except Exception as exc:
        return {"error": ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300],
                "seconds": time.perf_counter() - t}
    best, row_of = {}, {}
    for row, arrays in runs:
        for name, a in zip(outputs, arrays):
            a = np.asarray(a, np.float64)
            v = float(a.max()) if a.size else None
            if v is not None and (v != v or v in (float("inf"), float("-inf")) or not np.isfinite(a).all()):
                v = float("inf")
            if v is not None and (name not in best or best[name] is None or v > best[name]):
                best[name], row_of[name] = v, row  # the first row that holds the largest: where it starts
            best.setdefault(name, None)
    nonfinite = [name for name in outputs if best.get(name) == float("inf")]
    doc = {"values": dict((k, None if v == float("inf") else v) for k, v in best.items()), "nonfinite": nonfinite,
           "rows": rows, "batch_rows": n, "seconds": time.perf_counter() - t}
    if margin.get("learn_rows") and n is not None:
        doc["row_of"] = dict((k, r) for k, r in row_of.items() if r is not None)
    return doc


def give_back_memory():
    """What the C allocator holds free goes back to the system (glibc): the verdict's session, gone, leaves
    the margin's session the room it had (0.2 GB of gemma-300m-synthetic's held free otherwise)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # no glibc: nothing to ask


def feed_rows(np, feeds):
    """The batch's rows when every input has them on its first axis (the same count, more than one); else None:
    the margin then runs on the batch as a whole."""
    firsts = set(int(np.shape(v)[0]) if np.ndim(v) else None for v in feeds.values())
    n = firsts.pop() if len(firsts) == 1 else None
    return n if n is not None and n > 1 else None


def nonfinite_rows(np, n, values):
    """Rows of the batch where the verdict's outputs hold NaN or Inf: a margin read on chosen rows reads these too."""
    bad = set()
    for a in values:
        a = np.asarray(a)
        if a.ndim and a.shape[0] == n and a.dtype.kind == "f":
            bad.update(int(r) for r in np.nonzero(~np.isfinite(a.reshape(n, -1)).all(axis=1))[0])
    return bad


def hold(directory):
    """Announce that the model is about to run, then wait to be let go.

    Lets a test land a signal while a worker is known to be at run(), on a
    machine of any speed: the worker writes `running-PID` and waits for
    `go-PID` or `go` to appear in `directory`.
    """
    pid, parent = os.getpid(), os.getppid()
    open(os.path.join(directory, "running-%d" % pid), "w").close()
    gates = (os.path.join(directory, "go-%d" % pid), os.path.join(directory, "go"))
    while not any(os.path.exists(g) for g in gates):
        if os.getppid() != parent:  # the harness is gone (a test gave up on it): nobody will let this one go
            sys.exit(EXIT_HELD_ORPHAN)
        time.sleep(0.01)


class Watchdog(object):
    """Ends the process when its harness is gone or its request's deadline has passed.

    A thread of its own, polling: onnxruntime releases the GIL in run(), so it
    looks while a model spins. os._exit: nothing to clean up that a native call
    in progress could hold up. Not PR_SET_PDEATHSIG: that fires when the
    *thread* that started the worker ends, and the harness starts workers from
    pool threads that come and go."""

    def __init__(self):
        self.parent = expected_parent()
        self.deadline = None  # time.monotonic() past which the request in hand ends the process
        thread = threading.Thread(target=self.watch, name="watchdog")
        thread.daemon = True
        thread.start()

    def start(self, request):
        seconds = request.get("deadline_s")
        self.deadline = time.monotonic() + float(seconds) if seconds else None

    def done(self):
        self.deadline = None

    def watch(self):
        try:  # a worker started at idle priority is put back later, this thread may not be: it must get to look
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):
            pass
        while True:
            if os.getppid() != self.parent:
                end(EXIT_ORPHAN, "its harness (pid %d) is gone" % self.parent)
            deadline = self.deadline
            if deadline is not None and time.monotonic() > deadline:
                end(EXIT_DEADLINE, "its request ran past its deadline")
            time.sleep(WATCH_S)


def expected_parent():
    try:
        pid = int(os.environ.get(PARENT_ENV, ""))
    except ValueError:
        pid = 0
    return pid if pid > 0 else os.getppid()


def end(status, why):
    try:
        os.write(2, ("worker %d ends: %s\n" % (os.getpid(), why)).encode())
    except OSError:
        pass
    os._exit(status)


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def handle(request_path, served=0, kept=None, imported_early_s=None, watchdog=None):
    """One request: its result written; EXIT_OK or EXIT_ERROR. `imported_early_s`: the imports this
    process made before the request came (then its own import_s is near zero)."""
    with open(request_path) as f:
        request = json.load(f)
    if watchdog is not None:
        watchdog.start(request)
    if request.get("memory_limit_mb") and not served:
        # address-space cap, set before onnxruntime is imported: allocations past it fail
        # (a serving process is started for one limit: the harness never sends it another)
        limit = int(request["memory_limit_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    status = EXIT_OK
    result = {}
    t0 = time.perf_counter()
    try:
        probe(request, result, kept)
    except Exception as exc:  # the model fails on this release: that is a result too
        status = EXIT_ERROR
        result.update(error="%s: %s" % (type(exc).__name__, exc), traceback=traceback.format_exc())
    result["wall_s"] = time.perf_counter() - t0
    # serving, this is the process's peak over every request so far
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if imported_early_s is not None:
        result["imported_early_s"] = imported_early_s
    if served:
        result["served"] = served  # requests this process ran before: imports (maybe a session) were made then
    write_json(request["result_path"], result)
    return status


def serve(watchdog, import_first=False):
    """Many requests in one process: the release's import (tens of seconds under emulation) is paid once.

    `import_first`: import numpy and onnxruntime before the first request
    arrives (the harness starts such a worker while other work goes on)."""
    kept = {}
    served = 0
    early = None
    if import_first:
        t0 = time.perf_counter()
        try:
            import numpy  # noqa: F401
            import onnxruntime  # noqa: F401

            early = time.perf_counter() - t0
        except Exception:
            pass  # the request imports again, and its result records the failure as a one-off worker's would
    for line in sys.stdin:
        if not line.strip():
            continue
        status = handle(line.strip(), served, kept, early, watchdog)
        early = None
        served += 1
        sys.stdout.write("%d\n" % status)
        sys.stdout.flush()
        watchdog.done()  # idle until the next request: only its harness's end ends it (or EOF)
    return EXIT_OK


def main(argv):
    watchdog = Watchdog()
    if argv[1:2] == ["--serve"]:
        return serve(watchdog, import_first=argv[2:] == ["--import-first"])
    return handle(argv[1], watchdog=watchdog)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
