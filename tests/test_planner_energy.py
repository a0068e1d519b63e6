"""Chapter 13, Go et al. (2025): the energy counter reader finds RAPL package zones in a sysfs
tree, undoes a wrap, says why there is no counter when there is none, and measures energy per step
around a run; the characterization table prints which half of the paper is measured here."""

from types import SimpleNamespace

import pytest

from parlab.planner.explore.energy import characterization, print_characterization
from parlab.planner.plan import Plan
from parlab.planner.scaling.energy import (
    EnergyReading,
    counter_status,
    energy_per_step,
    read_energy_counter,
)


def _zone(root, name, energy, span=262143328850, label=None):
    path = root / name
    path.mkdir(parents=True)
    (path / "energy_uj").write_text(f"{energy}\n")
    (path / "max_energy_range_uj").write_text(f"{span}\n")
    (path / "name").write_text((label or name) + "\n")
    return path


def test_no_powercap_class_means_no_counter(tmp_path):
    missing = tmp_path / "powercap"
    assert read_energy_counter(str(missing)) is None
    assert "does not exist" in counter_status(str(missing))
    missing.mkdir()
    assert read_energy_counter(str(missing)) is None
    assert "no RAPL package zone" in counter_status(str(missing))
    assert energy_per_step([Plan()], 2, run=lambda p, s: None, root=str(missing)) is None


def test_package_zones_are_read_and_subzones_left_out(tmp_path):
    _zone(tmp_path, "intel-rapl:0", 1_000_000, label="package-0")
    _zone(tmp_path, "intel-rapl:0:0", 400_000, label="core")  # part of package 0
    _zone(tmp_path, "intel-rapl:1", 2_000_000, label="package-1")
    reading = read_energy_counter(str(tmp_path))
    assert dict(reading.energy_uj) == {"intel-rapl:0": 1_000_000, "intel-rapl:1": 2_000_000}
    status = counter_status(str(tmp_path))
    assert "intel-rapl:0 (package-0)" in status and "core" not in status


def test_joules_undo_one_wrap_per_zone():
    before = EnergyReading((("z", 900),), (("z", 1000),), (("z", "package-0"),), 0.0)
    after = EnergyReading((("z", 100),), (("z", 1000),), (("z", "package-0"),), 1.0)
    assert after.joules_since(before) == pytest.approx(200 / 1e6)
    unknown = EnergyReading((("z", 100),), (("z", 0),), (("z", "package-0"),), 1.0)
    with pytest.raises(ValueError, match="wrap range is unknown"):
        unknown.joules_since(before)


def test_an_unreadable_counter_is_no_counter(tmp_path):
    path = tmp_path / "intel-rapl:0"
    (path / "energy_uj").mkdir(parents=True)  # reading it fails, as a root-only file does
    assert read_energy_counter(str(tmp_path)) is None
    assert "cannot be read" in counter_status(str(tmp_path))


def test_energy_per_step_reads_around_each_run(tmp_path):
    zone = _zone(tmp_path, "intel-rapl:0", 5_000_000)

    def run(plan, steps):  # each step of this fake run costs dp joules
        now = int((zone / "energy_uj").read_text())
        (zone / "energy_uj").write_text(str(now + plan.dp * steps * 1_000_000))

    rows = energy_per_step([Plan(dp=2), Plan(dp=4)], 3, run=run, root=str(tmp_path))
    assert [r["joules_per_step"] for r in rows] == pytest.approx([2.0, 4.0])
    assert all(r["seconds"] > 0 and r["watts"] > 0 for r in rows)
    with pytest.raises(ValueError, match="steps=0"):
        energy_per_step([Plan()], 0, root=str(tmp_path))


def _sweep(plans):
    rows = [{"plan": p.describe(), "measured_ms": 0.1 * (i + 1), "measured_bytes": 1000 * i,
             "exposed_fraction": 0.1 * i} for i, p in enumerate(plans)]
    clock = SimpleNamespace(paced=True)  # virtual time: the step is already the accelerator's
    return SimpleNamespace(predictions=[SimpleNamespace(plan=p) for p in plans], rows=rows,
                           clock=clock, unit="A100 ms")


@pytest.mark.parametrize("with_counter", [False, True])
def test_characterization_says_what_is_and_is_not_measured(tmp_path, capsys, with_counter):
    plans = [Plan(dp=2), Plan(pp=2, microbatches=2)]
    root = str(tmp_path / ("powercap" if with_counter else "none"))
    if with_counter:
        zone = _zone(tmp_path / "powercap", "intel-rapl:0", 0)

        def run(plan, steps):
            now = int((zone / "energy_uj").read_text())
            (zone / "energy_uj").write_text(str(now + steps * 3_000_000))
    else:
        run = None
    result = characterization(_sweep(plans), batch_size=12, steps=2, root=root, run=run)
    rows = result["rows"]
    assert [r["rows_per_microbatch"] for r in rows] == [6, 6]
    assert rows[0]["samples_per_s"] == pytest.approx(12 / 0.1e-3)
    print_characterization(result)
    out = capsys.readouterr().out
    if with_counter:
        assert [r["joules_per_step"] for r in rows] == pytest.approx([3.0, 3.0])
        assert "energy counter: intel-rapl:0" in out and "whole CPU package" in out
    else:
        assert all(r["joules_per_step"] is None for r in rows)
        assert "no energy counter" in out and "not measured" in out
    assert "2.0× across the plans" in out

