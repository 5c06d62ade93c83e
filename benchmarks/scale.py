"""Benchmark `scale`: gemma-300m-synthetic (EmbeddingGemma-300M's shapes, 600 MB fp16), natively and emulated.

Measured, side by side in one run (`run.py --only scale`), each part chosen by `--scale-parts`:
  native     a native x86_64 probe of the full repro batch (20 rows x 512 tokens): the bare worker's seconds
             and peak RSS;
  run        the whole native `bisect run` over 1.19.0..1.30.0 (the model is clean there: exit 3);
  trace      `bisect trace --budget-mb 256` against a plain inference: both peaks (on one row of 114 tokens,
             so its passes fit the benchmark; the budget bounds what a pass holds, whatever the batch);
  emu-row    one emulated aarch64 probe (QEMU, neoverse-n1) with one row, and its cost per token;
  emu-run    the whole emulated `bisect run --rows fewest -j 2` over 1.19.0..1.30.0 (19 min on 2 cores of a Zen 5 host;
             its search alone took 67 min on a slower one);
  emu-batch  the full batch in one emulated probe (hours on 2 cores: QEMU runs the GEMMs two orders of
             magnitude slower than the host).
"""

from __future__ import annotations

import numpy as np

PARTS = ("native", "run", "trace", "emu-row", "emu-run", "emu-batch")
DEFAULT_PARTS = ("native", "run", "trace", "emu-row")
NAME = "gemma-300m-synthetic"
VERSION = "1.24.1"
ROW = 7  # a row of 114 tokens holding the trigger word


def run(b, parts: tuple[str, ...], tools) -> None:
    """`tools`: run.py's own module (Row, med, say, spread), so both print one table."""
    from harness.models import inputs
    from harness.models import registry as models

    Row, med, say, spread = tools.Row, tools.med, tools.say, tools.spread

    say(f"scale: materializing {NAME} in {b.cache} (once); parts {', '.join(parts)}")
    resolved = models.resolve(NAME, b.cache)
    batch = inputs.default_batch(resolved, b.cache)
    arrays = inputs.load_npz(batch)
    one = b.fresh("scale-row") / "row.npz"
    np.savez(one, **inputs.take_rows(arrays, [ROW]))
    tokens_full, tokens_one = int(arrays["attention_mask"].size), int(arrays["attention_mask"][ROW].sum())
    size_mb = sum(p.stat().st_size for p in [resolved.path, *resolved.data_files]) / 1e6
    request = {"model": str(resolved.path), "inputs": str(batch), "outputs": ["sentence_embedding"],
               "session_options": {}, "memory_limit_mb": None, "outputs_path": None}
    plain_one = None  # a native inference of the one row: the baseline of trace and of the emulated row

    if "native" in parts:
        walls, peaks, runs = [], [], []
        for rep in range(b.reps):
            p = b.bare_probe(VERSION, request)
            walls.append(p["wall_s"])
            peaks.append(p["result"]["peak_rss_mb"])
            runs.append(p["result"].get("run_s"))
            say(f"scale rep {rep + 1}/{b.reps}: native probe {p['wall_s']:.1f} s, peak RSS {peaks[-1]:.0f} MB")
        b.rows.append(Row("scale", f"native x86_64 probe, {NAME} ({size_mb:.0f} MB), 20x512 batch, {VERSION}",
                          f"{med(walls):.1f} s, peak RSS {med(peaks):.0f} MB", "", "info",
                          note=f"worker wall {spread(walls)}; run() {spread(runs)}; peak {spread(peaks, 'MB', 0)}",
                          data={"walls": walls, "peaks": peaks}))

    if "run" in parts:
        docs, run_walls = [], []
        for rep in range(max(1, b.reps // 2)):
            wall, doc = b.bisect(["run", "--model", NAME, "--from", "1.19.0", "--to", "1.30.0"],
                                 results=b.fresh("scale-run"))
            run_walls.append(wall)
            docs.append(doc)
            say(f"scale: native bisect run {wall:.1f} s, {doc['probe_count']} probes, status {doc['status']}")
        clean = all(d["status"] == "endpoints_agree" and {p["verdict"] for p in d["probes"]} == {"good"}
                    for d in docs)
        b.rows.append(Row("scale", "native `bisect run` 1.19.0..1.30.0 (clean on x86_64: exit 3)",
                          f"{med(run_walls):.1f} s, {docs[0]['probe_count']} probes", "clean",
                          "PASS" if clean else "MISS",
                          note=f"wall {spread(run_walls)}; verdicts " + ", ".join(
                              f"{p['version']} {p['verdict']}" for p in docs[0]["probes"])))

    if "trace" in parts or "emu-row" in parts:
        plain_one = b.bare_probe(VERSION, {**request, "inputs": str(one)})

    if "trace" in parts:
        wall, doc = b.bisect(["trace", "--model", NAME, "--inputs", str(one), "--version", VERSION, "--budget-mb",
                              "256", "--refresh"], results=b.fresh("scale-trace"), ok=(0,))
        passes = doc.get("passes") or []
        tp = max((p.get("peak_rss_mb") or 0) for p in passes) if passes else float("nan")
        pp = plain_one["result"]["peak_rss_mb"]
        b.rows.append(Row("scale", f"`bisect trace --budget-mb 256` peak - plain inference peak (row {ROW}, "
                                   f"{tokens_one} tokens)",
                          f"{tp - pp:+.0f} MB ({tp:.0f} vs {pp:.0f} MB)", "<= 256 MB",
                          "PASS" if tp - pp <= 256 else "MISS",
                          note=f"{len(passes)} passes in {wall:.0f} s; plain inference {plain_one['wall_s']:.1f} s"))

    if "emu-row" in parts:
        emu = _emulated_probe(b, one, say)
        b.rows.append(Row("scale", f"emulated aarch64 probe (QEMU neoverse-n1), 1 row of {tokens_one} tokens, "
                                   f"{VERSION}",
                          f"{emu['wall']:.0f} s ({emu['wall'] / plain_one['wall_s']:.0f}x native)", "", "info",
                          note=f"import {emu['import_s']:.0f} s, session {emu['session_s']:.0f} s, run() "
                               f"{emu['run_s']:.0f} s = {emu['run_s'] / tokens_one:.2f} s a token; the full batch "
                               f"({tokens_full} token slots) would take about "
                               f"{emu['run_s'] / tokens_one * tokens_full / 3600:.1f} h of run()"))

    if "emu-run" in parts:
        wall, doc = b.bisect(["run", "--model", NAME, "--arch", "aarch64", "--backend", "qemu", "--cpu",
                              "neoverse-n1", "--from", "1.19.0", "--to", "1.30.0", "--rows", "fewest", "-j", "2",
                              "--timeout", "14400"], results=b.fresh("scale-emulated"))
        ok = doc["status"] == "found" and doc.get("first_bad") == VERSION
        rows = doc.get("rows") or {}
        verified = rows.get("verified_on_full_batch") or {}
        b.rows.append(Row("scale", "emulated aarch64 `bisect run --rows fewest -j 2` 1.19.0..1.30.0",
                          f"{wall / 60:.0f} min, {doc['probe_count']} probes, first bad {doc.get('first_bad')}",
                          "<= 60 min, 1.24.1", "PASS" if ok and wall <= 3600 else "MISS",
                          note=f"rows searched {[s['rows'] for s in rows.get('searches', [])]}, ranked on "
                               f"{rows.get('ranked_on')}; last good verified on every row: "
                               f"{verified.get('last_good', {}).get('rows', 'no')}"))

    if "emu-batch" in parts:
        full = _emulated_probe(b, batch, say)
        b.rows.append(Row("scale", "emulated aarch64 probe, full 20x512 batch", f"{full['wall']:.0f} s", "", "info"))


def _emulated_probe(b, batch, say) -> dict:
    wall, doc = b.bisect(["sweep", "--model", NAME, "--inputs", str(batch), "--arch", "aarch64", "--backend", "qemu",
                          "--cpu", "neoverse-n1", "--from", VERSION, "--to", VERSION, "--timeout", "14400"],
                         results=(res := b.fresh("scale-emu")))
    rec = b.probe_records(res, doc)[-1]
    r = rec.get("result") or {}
    say(f"scale: emulated probe {wall:.0f} s ({rec['status']}, run() {r.get('run_s', 0):.0f} s)")
    return {"wall": wall, "import_s": r.get("import_s") or 0, "session_s": r.get("session_s") or 0,
            "run_s": r.get("run_s") or 0}
