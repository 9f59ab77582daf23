"""The DeepSpeed config the learner builds from conf/deepspeed/*.json (no DeepSpeed needed)."""

import json
from pathlib import Path

import pytest

from spade_ray.learner.engines import deepspeed_config

SHIPPED = Path(__file__).resolve().parents[2] / "conf" / "deepspeed" / "zero2.json"
ARGS = dict(lr=2e-5, weight_decay=0.01, max_grad_norm=0.5, micro_batch_size=3, grad_accum=4,
            bf16=False)


def test_the_learner_writes_its_own_keys_over_the_file():
    config = deepspeed_config(SHIPPED, **ARGS)
    assert (config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"],
            config["gradient_clipping"], config["bf16"]["enabled"]) == (3, 4, 0.5, False)
    assert config["optimizer"]["params"]["lr"] == 2e-5
    assert config["optimizer"]["params"]["weight_decay"] == 0.01
    assert config["zero_optimization"]["stage"] == 2  # the file's own choice survives


@pytest.mark.parametrize("extra, match", [
    ({"scheduler": {"type": "WarmupLR"}}, "scheduler"),
    ({"zero_optimization": {"stage": 3}}, "ZeRO stage 3"),
])
def test_configs_the_learner_cannot_honour_are_refused(tmp_path, extra, match):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**json.loads(SHIPPED.read_text()), **extra}))
    with pytest.raises(ValueError, match=match):
        deepspeed_config(path, **ARGS)


def test_a_repository_relative_path_works_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert deepspeed_config("conf/deepspeed/zero2.json", **ARGS)["zero_optimization"]
    with pytest.raises(FileNotFoundError, match="missing.json"):
        deepspeed_config("conf/deepspeed/missing.json", **ARGS)
