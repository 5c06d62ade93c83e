"""Numbers for people: the one formatting of a measured value on the dashboard (1.2 GB, 3.1e-7, 0.93, 1.05x)."""

from __future__ import annotations

import math

# what the page's units are measured in, and the steps a memory size is said in (the worker reports MiB)
_MEMORY_STEPS = (("TB", 1024.0 ** 2), ("GB", 1024.0), ("MB", 1.0), ("kB", 1 / 1024.0))


def _mantissa(x: float) -> str:
    """x with two significant digits, scientific: 3.1e-7, 1.2e6 (no '+', no leading zero in the exponent)."""
    mant, exp = f"{x:.1e}".split("e")
    return f"{mant.removesuffix('.0')}e{int(exp)}"


def _plain(x: float) -> str:
    """A number as people write it: small and large ones scientific, the rest with up to three significant
    digits and no trailing zeros (0.93, 12.3, 450), thousands separated (12,345)."""
    if x == 0:
        return "0"
    a = abs(x)
    if a < 1e-3 or a >= 1e6:
        return _mantissa(x)
    if a >= 100:
        return f"{round(x):,}"
    text = f"{x:.3g}"
    return text if "e" not in text else _mantissa(x)


def human(x, unit: str = "") -> str:
    """`x` for a reader of the page: None is 'none'; NaN and infinities are named; a memory size in MB (MiB, as
    the worker measures) moves to the unit that keeps it short (1,250 MB -> '1.2 GB'); a ratio ('x') has two
    decimals ('1.05x'); any other unit follows the number ('12.3 ms')."""
    if x is None:
        return "none"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if unit == "MB":
        name, scale = next(((n, s) for n, s in _MEMORY_STEPS if abs(x) >= s), _MEMORY_STEPS[-1])
        v = x / scale
        return f"{v:.1f}".removesuffix(".0") + f" {name}" if abs(v) < 100 else f"{round(v):,} {name}"
    if unit == "x":
        return f"{x:.2f}x" if 1e-2 <= abs(x) < 1e3 else f"{_plain(x)}x"
    return _plain(x) + (f" {unit}" if unit else "")
