"""Each test file's measured time, for the shards of `make unit` (tests/conftest.py).

    python tools/durations.py build/test-unit-0.xml build/test-unit-1.xml > tests/durations.json

Reads pytest's JUnit reports (every test case's `time`) and prints {test file: seconds}, the sum
over its cases, rounded to 0.1 s. Rerun it when a file's cost changes a lot: the shards are only
as even as these numbers.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def file_seconds(reports: list[str]) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            module = case.get("classname", "").split(".")
            name = next((part for part in module if part.startswith("test_")), None)
            if name is not None:
                seconds[f"{name}.py"] += float(case.get("time") or 0.0)
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python tools/durations.py REPORT.xml [REPORT.xml ...] > tests/durations.json")
    print(json.dumps(file_seconds(sys.argv[1:]), indent=1))
