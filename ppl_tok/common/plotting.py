"""The one headless pyplot set-up: every figure of ppl-tok is drawn with :func:`pyplot`."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed; figures go to files).

    matplotlib is imported here, on first use, so that a command that draws nothing never loads it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
