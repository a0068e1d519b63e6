"""`make unit` runs the suite in two shards of whole files (tests/conftest.py): every file lands in
exactly one shard, the split follows Graham's LPT rule on the measured times, the files that share
`run_cached`'s runs stay in one shard, and a bad
PARLAB_UNIT_SHARD is refused naming it."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT, shard_of_files


def test_lpt_puts_each_file_in_one_shard_longest_first():
    seconds = {"a.py": 7.0, "b.py": 5.0, "c.py": 4.0, "d.py": 3.0, "e.py": 1.0}
    where = shard_of_files(seconds, 2)
    assert where == {"a.py": 0, "b.py": 1, "c.py": 1, "d.py": 0, "e.py": 1}
    loads = [sum(s for n, s in seconds.items() if where[n] == k) for k in range(2)]
    assert loads == [10.0, 10.0]  # LPT is within 4/3 of the optimum (Graham 1969); here it is it


def test_the_files_sharing_cached_runs_land_in_one_shard_as_one_unit():
    seconds = {"a.py": 7.0, "b.py": 5.0, "c.py": 4.0, "d.py": 3.0, "e.py": 1.0}
    where = shard_of_files(seconds, 2, together=frozenset({"c.py", "d.py"}))
    assert where["c.py"] == where["d.py"]  # c + d = 7 s: one unit, placed as LPT places 7 s
    assert where == {"a.py": 0, "c.py": 1, "d.py": 1, "b.py": 0, "e.py": 1}
    assert set(where) == set(seconds)


def test_the_measured_times_name_real_test_files():
    measured = json.loads((ROOT / "tests" / "durations.json").read_text())
    present = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert len(set(measured) & present) >= 0.8 * len(measured)


def test_a_bad_shard_is_refused_naming_it():
    env = {**os.environ, "PARLAB_UNIT_SHARD": "3/2"}
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                          "tests/test_unit_shards.py"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "PARLAB_UNIT_SHARD='3/2'" in out.stdout + out.stderr
