"""`bisect doctor`: which backends work on this host, and the command that fixes each gap.

The checks are the backends' own (harness.runners: each Runner class declares
its rows); this module adds what is common to all of them.
"""

from __future__ import annotations

import platform
from dataclasses import asdict
from pathlib import Path

from harness.runners import Check, doctor_checks, native_arch


def checks(cache_dir: Path, engines: tuple[str, ...] = ()) -> list[dict]:
    """Rows of what/ok/detail/fix; the fixes keep `cache_dir`, so they act on the cache that was checked; with
    `engines` (addresses), each engine's reachability, arch and CPU flags."""
    rows = [Check("native arch", True, f"{native_arch()} ({platform.platform()})"), *doctor_checks(cache_dir, engines)]
    return [asdict(row) for row in rows]
