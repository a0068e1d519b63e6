"""The planner's byte count moved to `parlab.planner.cost` (every chapter has a `cost.py`); this
name stays only for `parlab.planner.schemes`, which imports `nd_prediction` from here."""

from parlab.planner.cost import nd_prediction  # noqa: F401
