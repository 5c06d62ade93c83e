"""Running a matrix's cells (harness.nightly.matrix): each one searched exactly as `bisect run` or `bisect sweep`
would search it, or, where its provider's device is missing here, skipped with a run document that says why.

`matrix run` checks every cell's whole request (`check_cell`, harness.request.check)
before the first probe of any; `run_cell` plans and searches it (harness.plan.make_plan,
harness.session.run_search, or harness.triage.rows.search for `rows = "fewest"`).
A cell whose provider needs a device this host does not show (CUDA without a
visible NVIDIA GPU: vocabulary.DEVICE_CHECKS, harness.request.device_missing)
is *skipped*, not failed: the rest of its request is checked all the same, and
`skip_cell` keeps its run document, `skipped` and why (harness.session.skipped),
in the run its probes would be in, where the dashboard shows it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.nightly.matrix import Cell, Matrix, resolve_range
from harness.releases.packages import Package


def select(matrix: Matrix, cells: tuple[int, ...]) -> list[Cell]:
    if not cells:
        return list(matrix.cells)
    out = []
    for i in cells:
        if not 0 <= i < len(matrix.cells):
            raise UsageError(f"--cell {i}: {matrix.path} has cells 0..{len(matrix.cells) - 1}")
        out.append(matrix.cells[i])
    return out


@dataclass
class CellOutcome:
    cell: Cell
    run_id: str
    doc: dict
    probed_now: int
    reused: int


def spec_for(cell: Cell, first: str, last: str, cache_dir: Path, results_dir: Path, offline: bool,
             ray_address: str | None = None):
    """The cell's search as `bisect run` would be asked it (harness.commands.common.search_spec)."""
    from harness.request import SearchSpec

    return SearchSpec(
        model=cell.model, from_=first, to=last, inputs=Path(cell.inputs) if cell.inputs else None,
        outputs=cell.outputs, arch=cell.arch, backend=cell.backend, cpu=cell.cpu, python=cell.python,
        cache_dir=cache_dir, offline=offline, results_dir=results_dir, timeout=cell.timeout, bad_if=cell.bad_if,
        reference=cell.reference, reference_release=cell.reference_release, session_options=dict(cell.options),
        package=cell.package_of(), margin=None,  # the dashboard's margin per release, except on an emulated CPU
        time_budget=cell.time_budget, ray_address=ray_address,
    )


def listing_key(cell: Cell) -> tuple:
    """What a cell's release listing depends on: its package, the indexes and links it is listed from, --pre."""
    return (cell.package, tuple(cell.index_urls), tuple(cell.find_links), cell.pre)


def listings(cells: list[Cell], cache_dir: Path, offline: bool = False) -> dict[tuple, list]:
    """The release listing of each package (and its sources) the cells install, by `listing_key`: each package
    ships its own releases, and another index or --pre lists others."""
    from harness.request import release_listing

    out: dict[tuple, list] = {}
    for c in cells:
        if listing_key(c) not in out:
            out[listing_key(c)] = release_listing(cache_dir, offline, Package(
                name=c.package, index_urls=tuple(c.index_urls), find_links=tuple(c.find_links), pre=c.pre))
    return out


def check_cell(cell: Cell, listing: list, cache_dir: Path, results_dir: Path, offline: bool = False,
               refresh: bool = False) -> str | None:
    """Everything `run_cell` would refuse about the cell, refused now: nothing is provisioned or written.

    `listing` is the cell's package's. Returns why the cell is to be skipped here (its provider's device is not
    visible: the rest of its request is checked all the same), or None when it can run."""
    from harness.request import check, device_missing

    if refresh and cell.rows == "fewest":
        raise UsageError(f"--refresh: cell {cell.index} searches on the fewest rows (rows = \"fewest\"), whose "
                         "searches on subsets of rows are reused, never refreshed; leave out --refresh or the cell")
    first, last = resolve_range(cell.releases, listing)
    missing = device_missing(cell.package_of())
    check(spec_for(cell, first, last, cache_dir, results_dir, offline), device=missing is None)
    return missing


def _extra(matrix: Matrix, cell: Cell) -> dict:
    return {"cell": cell.as_json(),
            "matrix": {"name": matrix.name, "path": str(matrix.path), "description": matrix.description}}


def run_cell(matrix: Matrix, cell: Cell, cache_dir: Path, results_dir: Path, offline: bool = False,
             refresh: bool = False, jobs: int = 1, observer=None, listing: list | None = None,
             command: list[str] | None = None, log=lambda msg: None, ray_address: str | None = None) -> CellOutcome:
    """One cell, exactly as `bisect run` / `bisect sweep` would search it; returns its summary."""
    from harness.plan import make_plan
    from harness.request import release_listing
    from harness.session import run_search
    from harness.triage import rows as fewrows

    if listing is None:
        listing = release_listing(cache_dir, offline, cell.package_of())
    first, last = resolve_range(cell.releases, listing)
    spec = spec_for(cell, first, last, cache_dir, results_dir, offline, ray_address)
    plan = make_plan(spec, command or sys.argv, log)
    if cell.rows == "fewest":  # as `bisect run --rows fewest`
        found = fewrows.search(spec, plan, observer=observer, jobs=jobs, log=log, cell_key=cell.key,
                               extra=_extra(matrix, cell))
    else:
        found = run_search(plan, sweep=cell.mode == "sweep", observer=observer, jobs=jobs, refresh=refresh,
                           cell_key=cell.key, extra=_extra(matrix, cell))
    reused = sum(1 for p in found.doc["probes"] if p["reused"])
    return CellOutcome(cell, plan.store.run_id, found.doc, len(found.outcome.probed_now), reused)


def skip_cell(matrix: Matrix, cell: Cell, why: str, cache_dir: Path, results_dir: Path, offline: bool = False,
              listing: list | None = None, command: list[str] | None = None) -> CellOutcome:
    """A cell that cannot run here (`why`, from `check_cell`): its run document says so, nothing is probed or
    provisioned. It is kept in the run the cell's probes would be in, so the dashboard shows the cell, and a
    machine that can run it later (or a merge of its results) replaces the document."""
    from harness.plan import open_store
    from harness.request import check, release_listing
    from harness.session import skipped

    if listing is None:
        listing = release_listing(cache_dir, offline, cell.package_of())
    first, last = resolve_range(cell.releases, listing)
    spec = spec_for(cell, first, last, cache_dir, results_dir, offline)
    req = check(spec, device=False)
    store = open_store(spec, req, command or sys.argv)
    doc = skipped(store, req, why, sweep=cell.mode == "sweep", cell_key=cell.key, extra=_extra(matrix, cell))
    return CellOutcome(cell, store.run_id, doc, 0, 0)
