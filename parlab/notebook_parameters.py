"""A chapter's parameters, checked in the cell right after its `parameters` cell.

Every chapter opens with a cell of typed literals tagged `parameters` (papermill sweeps them, a
reader edits them). The cell after it calls

    check_parameters("01_data_parallel", globals())

which checks each parameter against `CHAPTERS` (type and range, `parlab.core.checks`) and the
rules that tie several together, raising a ValueError naming the chapter, the parameter, its value
and what it may be, before anything runs. The ranges are what each chapter is written and tested
for. A chapter whose parameters cell gains a parameter must give it a range here
(tests/test_notebook_parameters.py). Why (the late, unnamed errors it replaced): docs/notebooks.md,
`parlab.notebook_parameters`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from parlab.core.checks import Bool, Choice, Float, Int, Option
from parlab.core.link import ACCELERATORS, PRESETS
from parlab.planner.scaling.points import DIMENSIONS


@dataclass(frozen=True)
class Items(Option):
    """A list of `min_len`..`max_len` items, each checked by `item`."""

    item: Option = Option()
    min_len: int = 0
    max_len: int = 8

    def check(self, name, value):
        if not isinstance(value, list) or not self.min_len <= len(value) <= self.max_len:
            raise ValueError(f"{name}={value!r} must be a list of {self.min_len} to "
                             f"{self.max_len} items")
        for i, item in enumerate(value):
            self.item.check(f"{name}[{i}]", item)
        return value


@dataclass(frozen=True)
class Rule:
    """A condition on several parameters: `holds(values)`, else `message` (formatted with them)."""

    holds: Callable[[Mapping], bool]
    message: str


def world_sizes(*sizes: int) -> Choice:
    """The world sizes a chapter runs at."""
    return Choice(sizes[0], sizes)


def steps(default: int, most: int = 200) -> Int:
    """A count of training steps (or iterations): at least 1, at most `most`."""
    return Int(default, min=1, max=most)


CLOCK = Choice("A100", ("wall", *ACCELERATORS))  # paced on an accelerator, or this CPU, raw
LINK = Choice("NVLink", tuple(PRESETS))  # parlab.core.link's presets (each a real link's name)
LINK_10GBE = Choice("10GbE", tuple(PRESETS))  # the same, where the chapter times on the real 10GbE
SCALE_RANKS = (1, 2, 4, 8, 16)  # `python -m parlab bench scale` goes to 16
REAL_RANKS = (1, 2, 4, 8, 16, 32, 64)  # a real preset shapes-only (parlab.planner.scaling.real_scale)
GLOBAL_BATCH = 12  # chapter 01's rows per step (parlab.engine.run_config's default batch_size)

CHAPTERS: dict[str, dict] = {
    "00_collectives": {
        "world_size": Int(2, min=1, max=8),
        # the paced sweep: A100s on one real link (NVLink 3 joins up to 16: two HGX A100 boards)
        "sweep_world_sizes": Items(item=Int(4, min=2, max=16), min_len=1, max_len=4),
        "sweep_link": Choice("NVLink3", ("NVLink3", "HDR-IB")),
        "sweep_max_mb": Int(1024, min=1, max=16 << 10),  # shapes-only above 1 MB: up to 16 GB
        # the appendix: this CPU's loopback, raw
        "loopback_world_sizes": Items(item=Int(4, min=2, max=8), min_len=1, max_len=3),
        "loopback_max_kb": Int(1024, min=4, max=64 << 10),
        "loopback_repeats": Int(5, min=1, max=50),
    },
    "01_data_parallel": {
        "world_size": world_sizes(2, 3, 4), "steps": steps(4),
        "link": Choice("10GbE", tuple(name for name in PRESETS if name != "loopback")),  # §5 times a link
        "accelerator": Choice("A100", tuple(ACCELERATORS)), "clock": CLOCK,
        "accum_steps": Int(2, min=1, max=GLOBAL_BATCH), "real_scale_runs": Bool(False),
        "rules": [Rule(lambda p: GLOBAL_BATCH % (p["world_size"] * p["accum_steps"]) == 0,
                       "world_size × accum_steps = {world_size} × {accum_steps} must divide the "
                       f"global batch of {GLOBAL_BATCH} rows")],
    },
    "02_zero": {"world_size": world_sizes(2, 3, 4), "steps": steps(3),
                "curve_steps": steps(30, 1000), "clock": CLOCK},
    "03_tensor_parallel": {
        "world_size": world_sizes(2, 4), "steps": steps(2),
        # section 9: the real link between the two meshes' nodes, paced (loopback is no link)
        "link": Choice("HDR-IB", tuple(n for n in PRESETS if n != "loopback")), "tp_link": LINK,
        "clock": CLOCK, "reshard_world": Choice(4, (2, 4, 6, 8)),  # two halves: 4 → 2 + 2
        "reshard_repeats": Int(2, min=1, max=20), "show_torch": Bool(True),
    },
    "04_pipeline": {
        "world_size": world_sizes(2, 4), "microbatches": Int(4, min=1, max=32), "steps": steps(2),
        "clock": CLOCK, "unet_steps": steps(60, 2000),
        "unet_side": Choice(32, (32, 64)),  # the U-Net's test volume (64 in the bench)
        "curriculum_steps": steps(60, 1000),
        # the real-scale bubble table: gpt2-xl's blocks kept (>= 2 per rank at p = 4), schedules, m
        "scale_layers": Choice(8, (8, 16, 24, 48)),
        "scale_schedules": Items(item=Choice("1f1b", ("gpipe", "1f1b", "interleaved", "zb", "zbv",
                                                      "looped-bfs", "dualpipe")), min_len=1, max_len=7),
        "scale_microbatches": Items(item=Choice(8, (4, 8, 16, 32)), min_len=1, max_len=4),
    },
    "05_local_learning": {
        "world_size": world_sizes(2, 4), "steps": steps(4), "microbatches": Int(4, min=1, max=32),
        "pp_timing": Choice(4, (2, 4)), "timing_microbatches": Int(4, min=1, max=32),
        "clock": CLOCK,
    },
    "06_context_parallel": {
        "world_size": world_sizes(2, 4), "steps": steps(3),
        "max_seq_len": Int(128, min=32, max=256),  # the sweep's lengths: 32, 64, 128, 256
        "regime_max_tokens": Int(512, min=64, max=2048),
        "scale_max_tokens": Int(65536, min=32768, max=98304),  # the real-scale ring: 32k, 64k, 96k
        "clock": CLOCK,
    },
    "07_expert_parallel": {
        "world_size": world_sizes(2, 4), "steps": steps(3), "balance_steps": steps(120, 2000),
        "balance_top_k": Choice(1, (1, 2)), "link": LINK_10GBE, "clock": CLOCK,
        "timing_batch": Int(256, min=1, max=4096), "timing_top_k": Choice(1, (1, 2)),
        "quality_steps": Int(150, min=40, max=2000),  # ≥ 2·20: the last 20 steps and the 20 before
        "quality_task": Choice("lookup", ("lookup", "text")),  # explore.quality.TASKS
        "at_scale_ranks": Choice(16, (8, 16)),  # one DGX A100 node and two, or only one
        "rules": [Rule(lambda p: p["timing_batch"] % p["world_size"] == 0,
                       "timing_batch={timing_batch} must divide among world_size={world_size} "
                       "ranks")],
    },
    "08_compression": {
        "world_size": world_sizes(2, 4), "steps": steps(4), "link": LINK, "clock": CLOCK,
        "model": Choice("gpt", ("gpt", "mlp")), "lowdim_d": Int(32, min=4, max=200),
        "lowdim_iters": steps(600, 10000), "lowdim_dp_steps": steps(150, 2000),
        "rules": [Rule(lambda p: p["lowdim_iters"] >= 3,
                       "lowdim_iters={lowdim_iters} must be at least 3 (a third of it trains "
                       "the MLP transfer)")],
    },
    "09_asynchrony": {
        "world_size": world_sizes(4, 2, 3), "steps": steps(12),
        "straggler": Float(3.0, min=1, max=100),  # ps-async's own bound
        "dual_steps": steps(12), "clock": CLOCK,
    },
    "10_subnet": {"world_size": world_sizes(2, 4), "steps": steps(3),
                  "curve_steps": steps(12, 1000), "clock": CLOCK},
    "11_heterogeneous": {
        "world_size": world_sizes(2, 4), "steps": steps(4), "batch_size": Int(12, min=1, max=1024),
        "hap_layers": Int(2, min=1, max=48),  # GPT-2 XL's blocks, shapes-only (explore.hap_real)
        "clock": Choice("A100", tuple(ACCELERATORS)),  # paced only: the chapter's one clock
        "rules": [Rule(lambda p: p["batch_size"] >= p["world_size"],
                       "batch_size={batch_size} must give every one of world_size={world_size} "
                       "ranks a row")],
    },
    "12_serving": {"world_size": world_sizes(2, 4), "steps": steps(6), "link": LINK,
                   "clock": CLOCK, "density": Float(0.05, min=0, max=1)},
    "13_planner": {
        "world_size": world_sizes(4, 8), "steps": steps(2),
        "memory_cap_mb": Float(1.4, min=0, strict=True, max=1e6), "clock": CLOCK, "link": LINK,
        "scale_ranks": Items(item=Choice(1, SCALE_RANKS), min_len=1, max_len=len(SCALE_RANKS)),
        "scale_dims": Items(item=Choice("dp", DIMENSIONS), min_len=1, max_len=len(DIMENSIONS)),
        "megatron_ranks": Int(2, min=1, max=64),
        "real_ranks": Items(item=Choice(1, REAL_RANKS), min_len=0, max_len=len(REAL_RANKS)),
        "real_dims": Items(item=Choice("dp", DIMENSIONS), min_len=1, max_len=len(DIMENSIONS)),
        "real_modes": Items(item=Choice("strong", ("strong", "weak")), min_len=1, max_len=2),
        "planner_ranks": Items(item=Choice(4, REAL_RANKS[1:]), min_len=0, max_len=len(REAL_RANKS) - 1),
        "planner_runs": Int(3, min=1, max=16),
        "planner_batch": Int(8, min=1, max=1024),
        # MAD-Max's what-ifs (parlab.planner.whatif): gpt2-xl's blocks, even (its plans hold pp=2)
        "whatif_layers": Choice(2, (2, 4, 8, 16, 24, 48)),
        # She et al. on real layers (parlab.planner.placement.real_layers): seconds per MILP solve
        "placement_time_limit": Float(3.0, min=0.1, strict=True, max=3600),
    },
}


def check_parameters(chapter: str, values: Mapping) -> None:
    """Check `chapter`'s parameters in `values` (a notebook's `globals()`, or a dict): ValueError
    naming the chapter, the parameter, its value and what it may be. Returns nothing (the cell
    shows nothing when all is well)."""
    if chapter not in CHAPTERS:
        raise ValueError(f"chapter={chapter!r} must be one of {sorted(CHAPTERS)}")
    spec = dict(CHAPTERS[chapter])
    rules = spec.pop("rules", [])
    checked = {}
    for name, option in spec.items():
        if name not in values:
            raise ValueError(f"chapter {chapter}: parameter {name!r} is not defined (run the "
                             "parameters cell first)")
        try:
            checked[name] = option.check(name, values[name])
        except ValueError as err:
            raise ValueError(f"chapter {chapter}'s parameters: {err}") from None
    for rule in rules:
        if not rule.holds(checked):
            raise ValueError(f"chapter {chapter}'s parameters: "
                             + rule.message.format(**checked))
