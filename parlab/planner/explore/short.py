"""Chapter 13's long tables, shortened: a sweep has a row per plan (23 at four ranks), and a reader
needs the best few and the planner's pick, not every row; the full frame stays one call away
(`sweep.frame()`)."""

from __future__ import annotations


def top_and_pick(frame, sort_by: str, keep=(), n: int = 5):
    """The `n` rows of `frame` with the smallest `sort_by`, plus every row whose plan is in `keep`
    (the pick, the best measured), in `sort_by` order; prints how many rows it left out."""
    ordered = frame.sort_values(sort_by)
    shown = ordered[(ordered.reset_index().index < n) | ordered["plan"].isin(list(keep)).to_numpy()]
    left = len(frame) - len(shown)
    if left:
        print(f"{len(shown)} of {len(frame)} plans: the {n} fastest by {sort_by} and the planner's "
              f"pick ({left} more: sweep.frame())")
    return shown
