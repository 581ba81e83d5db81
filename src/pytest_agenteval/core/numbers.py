"""Numbers for people: reports round them, summary.json keeps them at full precision."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SIGNIFICANT = 4


def rounded(value: float, digits: int = SIGNIFICANT) -> float:
    """`value` to `digits` significant digits, without float noise: 0.7999999999999999 is
    0.8, 2/3 is 0.6667, 0.000123456 is 0.0001235."""
    if not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits}g}")


def rounded_values(values: Mapping[str, float | None]) -> dict[str, float | None]:
    """A k-keyed mapping of rates, each value rounded (None stays None)."""
    return {k: None if v is None else rounded(v) for k, v in values.items()}


def shown(value: Any) -> Any:
    """A property value as a report shows it: floats rounded, anything else as it is."""
    return rounded(value) if isinstance(value, float) else value
