"""One model, one spec (issue 33): every model name is looked up in `parlab.models.spec.SPECS`,
never branched on.

Each registered spec's parameter count from the config equals the built model's; an unknown name
is a ValueError naming it and the known models in every public function that takes a name; and
`parlab/models/__init__.py` and `parlab/models/data.py` hold no model name at all (so no
`name == "gpt"` branch), which the source checker below is first shown to catch.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest

from parlab import models
from parlab.models import data
from parlab.models.spec import SPECS, ModelSpec, model_spec, register_model

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOOKUP_FILES = ("parlab/models/__init__.py", "parlab/models/data.py")
KNOWN = ["gpt", "gpt-moe", "mlp", "op-graph", "unet3d"]
# a smaller variant of each model beside its defaults (each count path taken: MoE's shared
# expert and dense blocks, the U-Net's fourth level, an odd kernel)
VARIANTS = {"gpt": {"n_layer": 2, "n_embd": 48, "block_size": 20, "vocab_size": 100},
            "gpt-moe": {"shared_expert": True, "moe_every": 2, "expert_hidden": 24, "n_layer": 5},
            "mlp": {"n_layer": 1, "d_hidden": 7}, "unet3d": {"levels": 4, "base": 3},
            "op-graph": {"kernel": 3, "width": 16}}


def model_name_comparisons(source: str, names) -> list[str]:
    """'line N: text' for each string literal in `source` that is one of `names` (a comparison,
    a membership test, a table key), plus any `== "name"` / `!= "name"` written in the text."""
    found = {(node.lineno, repr(node.value)) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Constant) and node.value in names}
    alternatives = "|".join(re.escape(n) for n in names)
    for number, line in enumerate(source.splitlines(), 1):
        for match in re.finditer(rf"""[!=]=\s*["']({alternatives})["']""", line):
            found.add((number, repr(match.group(1))))
    return [f"line {n}: {text}" for n, text in sorted(found)]


def test_every_model_is_registered_once_with_its_config_and_builder():
    assert sorted(SPECS) == KNOWN
    for name, spec in SPECS.items():
        assert isinstance(spec, ModelSpec) and spec.name == name
        assert isinstance(models.model_config(name), spec.config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        SPECS["gpt"].name = "other"
    with pytest.raises(ValueError, match=r"model='gpt' is registered twice"):
        register_model(SPECS["gpt"])


@pytest.mark.parametrize("name", KNOWN)
@pytest.mark.parametrize("variant", [False, True])
def test_the_spec_param_count_equals_the_built_model(name, variant):
    cfg = models.model_config(name, VARIANTS[name] if variant else None)
    built = models.build_model(name, cfg, 0)
    assert models.param_count(name, cfg) == model_spec(name).param_count(cfg) == sum(
        p.numel() for p in built.parameters())
    assert models.activation_count(name, cfg, 2) > 0


def test_the_dataset_facts_come_from_the_spec():
    for name in KNOWN:
        batch = data.global_batch(name, 1, 2, 7, 8)
        assert len(batch) == 2 and batch[0].shape[0] == batch[1].shape[0] == 2
    assert data.max_seq_len("gpt") == data.max_seq_len("gpt-moe") == data.text_tokens().numel() - 2
    assert [data.max_seq_len(n) for n in ("mlp", "unet3d", "op-graph")] == [None, None, None]
    with pytest.raises(ValueError, match="checkpoint=True is not supported by model='gpt-moe' "
                                         r"\(recomputing a block would route its tokens again\)"):
        models.check_checkpointing("gpt-moe", True)
    for name in KNOWN:
        models.check_checkpointing(name, False)
        if SPECS[name].no_checkpointing is None:
            models.check_checkpointing(name, True)


@pytest.mark.parametrize("call", [
    lambda name: models.model_config(name),
    lambda name: models.build_model(name, None, 0),
    lambda name: models.param_count(name, None),
    lambda name: models.activation_count(name, None, 2),
    lambda name: models.check_checkpointing(name, True),
    lambda name: data.global_batch(name, 0, 2, 0),
    lambda name: data.max_seq_len(name),
    lambda name: data.check_seq_len(name, 8),
], ids=["model_config", "build_model", "param_count", "activation_count", "check_checkpointing",
        "global_batch", "max_seq_len", "check_seq_len"])
def test_an_unknown_model_is_a_value_error_naming_it_and_the_known_ones(call):
    with pytest.raises(ValueError, match=re.escape(f"model='gtp' is unknown; choose one of {KNOWN}")):
        call("gtp")


def test_the_source_checker_catches_a_branch_on_a_model_name():
    branchy = ('def count(name, cfg):\n    if name == "mlp":\n        return 1\n'
               '    if name in ("gpt", "gpt-moe"):\n        return 2\n'
               '    return {"unet3d": 3}[name] if name != \'op-graph\' else 4\n')
    assert model_name_comparisons(branchy, KNOWN) == [
        "line 2: 'mlp'", "line 4: 'gpt'", "line 4: 'gpt-moe'", "line 6: 'op-graph'",
        "line 6: 'unet3d'"]
    assert model_name_comparisons('def count(name):\n    return SPECS[name]\n', KNOWN) == []


@pytest.mark.parametrize("path", LOOKUP_FILES)
def test_the_lookup_modules_name_no_model(path):
    assert model_name_comparisons((ROOT / path).read_text(), KNOWN) == []
