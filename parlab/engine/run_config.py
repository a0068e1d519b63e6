"""A run's configuration, validated before any process starts: `make_config` -> `RunConfig`.

`parlab.run(scheme, world_size, model, steps, seed, link, **options)` (`parlab.engine.runner`)
checks everything here first: the scheme, every common option (`COMMON_OPTIONS`) and the
scheme's own (`parlab.core.checks`), the world size, with a ValueError that names the offending
value; and the memory the run needs (`parlab.engine.fits`, a stated estimate compared with what
this machine has free): a config that cannot fit is refused with both numbers instead of waking the
out-of-memory killer. Failing before spawn, not in rank 3 after a minute, is this project's rule;
the estimate and its constants are ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parlab import models
from parlab.core import checks, precision, speeds, topology
from parlab.core import clock as clocks
from parlab.core.launch import START_METHODS
from parlab.engine.fits import check_fits
from parlab.engine.registry import get_scheme, schemes
from parlab.models import data as model_data
from parlab.models import presets

COMMON_OPTIONS = {
    "batch_size": 12,  # global batch: divisible by 1, 2, 3, 4
    "lr": None,  # None: 3e-3 for adamw, 0.1 for sgd
    "optimizer": "adamw",
    "model_config": None,  # dict of GPTConfig / MLPConfig overrides
    "timeout": 300.0,  # seconds, finite, >= MIN_TIMEOUT
    "start_method": "forkserver",
    "checkpoint": False,  # activation checkpointing: recompute each block in backward
    "speeds": None,  # per-rank compute speed, e.g. [1, 1, 0.5, 0.25] (parlab.core.speeds)
    "precision": "fp32",  # "bf16-mixed" | "fp16-mixed": 16-bit compute, fp32 master (core.precision)
    "loss_scale": None,  # fp16-mixed: the initial loss scale (None: 2**16, GradScaler's default)
    "clock": "wall",  # "wall" (this CPU, raw) or paced time: "A100", "H100", "V100" (core.clock)
    "on_nonfinite": "raise",  # a NaN/inf loss or parameter: "raise" (stop the run) or "record"
    "shapes_only": False,  # run on fake tensors: no numbers, a paced timeline (parlab.core.shapes)
}
ON_NONFINITE = ("raise", "record")
OPTIMIZERS = ("adamw", "sgd")
MIXED_MODELS = ("gpt", "mlp")  # models whose loss is taken in fp32 and tested in mixed precision
MAX_WORLD_SIZE = 64  # processes on one machine: gloo rendezvous and memory grow with it
MIN_TIMEOUT = 1.0  # seconds: a rank's first rendezvous alone takes ~0.1-4 s
MAX_LR = 1e36  # float32 holds up to 3.4e38, and AdamW's first step size is 10·lr
MAX_TIMEOUT = 7 * 86400.0  # one week; far beyond it the store's timedelta overflows



# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class RunConfig:
    scheme: str
    world_size: int
    model: str
    model_config: Any  # GPTConfig | MLPConfig
    steps: int
    seed: int
    link: Any  # parlab.core.link.Link | parlab.core.topology.Topology | None
    batch_size: int
    lr: float
    optimizer: str
    timeout: float
    start_method: str
    options: dict  # the scheme's own options, defaults filled in
    checkpoint: bool = False  # activation checkpointing (honoured by parlab.engine.loop.build_model)
    speeds: tuple | None = None  # per-rank compute speed (parlab.core.speeds); None: all 1
    precision: str = "fp32"  # "bf16-mixed" | "fp16-mixed" (parlab.core.precision)
    loss_scale: float | None = None  # fp16-mixed: initial loss scale (None: 2**16)
    clock: Any = clocks.WALL  # parlab.core.clock.Clock: the wall clock or paced time
    on_nonfinite: str = "raise"  # "raise": a NaN/inf stops the run; "record": RunResult.nonfinite
    shapes_only: bool = False  # fake tensors, no numbers, a paced timeline (parlab.core.shapes)
    preset: str | None = None  # the real model's shapes it runs (parlab.models.presets), or None

    @property
    def paced(self) -> bool:
        return self.clock.paced

    def option(self, name: str):
        return self.options[name]


def make_config(scheme: str, world_size: int = 1, model: str = "gpt", steps: int = 5,
                seed: int = 0, link=None, **options) -> RunConfig:
    """Validate everything and build the RunConfig; ValueError names each bad value."""
    import math

    spec = get_scheme(scheme)
    model, overrides, preset = presets.resolve(model, options.get("model_config"))
    if preset is not None:
        options = {**options, "model_config": overrides}
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    if world_size > MAX_WORLD_SIZE:
        raise ValueError(f"world_size={world_size} is above {MAX_WORLD_SIZE}: every rank is a process "
                         "on this machine")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an int >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed={seed!r} must be an int in [0, 2**63) (a torch.Generator seed)")
    if model not in spec.models:
        raise ValueError(f"model={model!r} is not supported by scheme {scheme!r}; "
                         f"choose one of {list(spec.models)}")
    unknown = sorted(set(options) - set(COMMON_OPTIONS) - set(spec.options))
    if unknown:
        raise ValueError(f"options {unknown} are unknown for scheme {scheme!r}; its options: "
                         f"{sorted(spec.options)}; common options: {sorted(COMMON_OPTIONS)}")
    common = {k: options.get(k, v) for k, v in COMMON_OPTIONS.items()}
    batch_size = common["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
    if common["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"optimizer={common['optimizer']!r} must be one of {OPTIMIZERS}")
    lr = common["lr"] if common["lr"] is not None else (
        3e-3 if common["optimizer"] == "adamw" else 0.1)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ValueError(f"lr={lr!r} must be a finite number > 0")
    if lr > MAX_LR:
        raise ValueError(f"lr={lr!r} must be at most {MAX_LR:g}: the optimizer applies it in float32 "
                         "(AdamW as lr/(1-β1^t), up to 10·lr)")
    timeout = common["timeout"]
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not MIN_TIMEOUT <= timeout < math.inf):
        raise ValueError(f"timeout={timeout!r} must be a finite number of seconds >= {MIN_TIMEOUT:g}")
    if timeout > MAX_TIMEOUT:
        raise ValueError(f"timeout={timeout!r} must be at most {MAX_TIMEOUT:g} seconds (one week)")
    if not isinstance(common["start_method"], str) or common["start_method"] not in START_METHODS:
        raise ValueError(f"start_method={common['start_method']!r} must be one of {START_METHODS}")
    if not any(common["on_nonfinite"] == c and type(common["on_nonfinite"]) is str
               for c in ON_NONFINITE):
        raise ValueError(f"on_nonfinite={common['on_nonfinite']!r} must be one of {ON_NONFINITE}")
    if common["model_config"] is not None and not isinstance(common["model_config"], dict):
        raise ValueError(f"model_config={common['model_config']!r} must be a dict of {model} config "
                         "fields (e.g. {'n_layer': 2}) or None")
    if not isinstance(common["checkpoint"], bool):
        raise ValueError(f"checkpoint={common['checkpoint']!r} must be True or False")
    mixed = precision.check(common["precision"])
    if mixed not in spec.precisions:
        raise ValueError(f"precision={mixed!r} is not supported by scheme {scheme!r} (it honours "
                         f"{list(spec.precisions)}" + (": fp16 needs dynamic loss scaling, which "
                         "this scheme cannot apply to its loss; use 'bf16-mixed'"
                         if mixed == "fp16-mixed" else "") + ")")
    if mixed != "fp32" and model not in MIXED_MODELS:
        raise ValueError(f"precision={mixed!r} is not supported for model={model!r} (mixed "
                         f"precision is tested on {list(MIXED_MODELS)})")
    loss_scale = common["loss_scale"]
    if loss_scale is not None and (mixed != "fp16-mixed" or isinstance(loss_scale, bool)
                                   or not isinstance(loss_scale, (int, float))
                                   or not 0 < loss_scale < math.inf):
        raise ValueError(f"loss_scale={loss_scale!r} must be None or a finite number > 0, and only "
                         f"with precision='fp16-mixed' (got precision={mixed!r})")
    if loss_scale is not None:
        precision.check_loss_scale(loss_scale)  # within what fp16 can use
    clock = clocks.resolve(common["clock"], world_size)
    shapes_only = common["shapes_only"]
    if not isinstance(shapes_only, bool):
        raise ValueError(f"shapes_only={shapes_only!r} must be True or False")
    if shapes_only and not clock.paced:
        raise ValueError(f"shapes_only=True needs a paced clock (clock='A100', 'H100', 'V100'), not "
                         f"clock={common['clock']!r}: a shapes-only run computes no numbers, so "
                         "there is no real work to time on this CPU; its time is the virtual clock's")
    if shapes_only and not spec.shapes:
        raise ValueError(f"shapes_only=True is not supported by scheme {scheme!r}: it runs "
                         f"shapes-only once a test holds that run equal to its real paced run "
                         f"(schemes that do: {shapes_schemes()})")
    cfg = RunConfig(
        scheme=scheme, world_size=world_size, model=model,
        model_config=models.model_config(model, common["model_config"]), steps=steps, seed=seed,
        link=clocks.pace_link(topology.resolve(link, world_size), clock), batch_size=batch_size,
        lr=float(lr),
        optimizer=common["optimizer"], timeout=float(timeout),
        start_method=common["start_method"],
        options=checks.check_options(spec.options, options),
        checkpoint=common["checkpoint"], speeds=speeds.check(common["speeds"], world_size),
        precision=mixed, loss_scale=None if loss_scale is None else float(loss_scale),
        clock=clock, on_nonfinite=common["on_nonfinite"], shapes_only=shapes_only, preset=preset,
    )
    if shapes_only:  # after the model config is validated: a bad routing is named as such
        _refuse_what_needs_values(model, precision.check(common["precision"]), options,
                                  getattr(cfg.model_config, "routing", None))
    _refuse_llama_parts(scheme, model, cfg.model_config, options)
    models.check_checkpointing(model, cfg.checkpoint)
    model_data.check_seq_len(model, getattr(cfg.model_config, "block_size", 0))
    if spec.validate is not None:
        spec.validate(cfg)
    if cfg.shapes_only and callable(spec.shapes) and spec.shapes(cfg):
        raise ValueError(f"shapes_only=True cannot run {spec.shapes(cfg)}")
    check_fits(cfg)
    return cfg


def _refuse_what_needs_values(model: str, mixed: str, options: dict, routing: str | None) -> None:
    """Shapes-only refuses, naming why, what decides by the values it computes (there are none).

    gpt-moe's router (routing="topk") sends each token by its scores: rather than route some other
    way than asked, a shapes-only run refuses it and names the routing it can run, "even"
    (`parlab.models.gpt_moe.EvenPlan`), which a real run can take too."""
    why = None
    if mixed == "fp16-mixed":
        why = ("precision='fp16-mixed': its loss scaling skips steps by the gradients' values; use "
               "'bf16-mixed'")
    elif (model == "gpt-moe" or options.get("ep", 1) != 1) and routing != "even":
        why = (f"gpt-moe with routing={routing!r}: its router sends each token by the values of "
               "its scores; pass model_config={'routing': 'even'} (every expert the same number "
               "of tokens, by their places; a real run can route so too)")
    elif options.get("save_dir") is not None:
        why = "save_dir: a shapes-only run has no values to save"
    elif options.get("dcp_dir") is not None:
        why = "dcp_dir: a shapes-only run has no values to save"
    elif options.get("resume_from") is not None:
        why = "resume_from: a shapes-only run has no values to load into"
    if why:
        raise ValueError(f"shapes_only=True cannot run {why}")


LLAMA_SCHEMES = ("single", "ddp-naive", "zero3", "pp-1f1b", "tp", "tp-sp", "nd")  # tested


def _refuse_llama_parts(scheme: str, model: str, model_config, options: dict) -> None:
    """The GPT's Llama-style options (grouped-query attention, SwiGLU, RMSNorm, RoPE, an untied
    head: `parlab.models.llama_parts`) run on the schemes a test holds equal to `single`
    (LLAMA_SCHEMES, test_llama_shapes; `nd` with dp, tp and pp); any other is refused before any
    process starts, naming why: context parallelism (its ranks' positions are not RoPE's), expert
    parallelism, vocabulary parallelism (it cuts the tied head) and the other chapters' schemes,
    not yet tested with them. Tensor parallelism cuts whole groups of query heads with their
    key/value head (nd: tp must divide n_kv_head, `tp_factors`; tp and tp-sp also copy a head past
    tp = n_kv_head, `parlab.tensor_parallel.gqa`; checked by the schemes' validate)."""
    if getattr(model_config, "is_default_shape", True):
        return
    set_ = {f: getattr(model_config, f) for f in ("n_kv_head", "mlp", "d_ff", "norm", "positions",
                                                   "tie_head")}
    why = None
    if model != "gpt":
        why = f"model={model!r} (only the dense 'gpt' takes them)"
    elif scheme not in LLAMA_SCHEMES:
        why = f"scheme {scheme!r} (they run on {list(LLAMA_SCHEMES)})"
    else:
        split = {d: options.get(d, 1) for d in ("cp", "ep")}
        if any(v != 1 for v in split.values()):
            why = (f"nd with {', '.join(f'{d}={v}' for d, v in split.items() if v != 1)} (nd runs "
                   "them with dp, tp and pp)")
        elif options.get("vocab_parallel"):
            why = "vocab_parallel=True (it cuts the tied embedding / head by vocabulary rows)"
    if why:
        raise ValueError(
            f"the GPT's Llama-style options {set_} are not supported by {why}: context "
            "parallelism's positions are not RoPE's, and the other schemes are not yet tested "
            "with them; not implemented yet")


def shapes_schemes() -> list[str]:
    """The schemes that run shapes-only (`shapes_only=True`)."""
    from parlab.engine.registry import _REGISTRY

    schemes()  # every chapter's schemes registered
    return sorted(name for name, s in _REGISTRY.items() if s.shapes)
