"""Issue 13 section 3: every shipped model option states the whole architecture, the trainer
builds exactly that model from it, it equals the trainer's preset of the same name and the
published Llama config.json, and the job's record (ConfigMap config.yaml) and config hash
carry every dimension."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from contract.model.args import ARCH_FIELDS, MODEL_PRESETS, ModelArgs, RopeScaling
from contract.model.args import model_args_from_config as trainer_model_args
from contract.model.hf_config import model_args_from_hf
from jobs.compose import CONF_DIR, compose
from jobs.validate import JobConfigError
from testing_support.hf_models import build_llama
from tests.jobs.conftest import CLUSTER, build

MODEL_OPTIONS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml") if p.stem != "hf")
P5 = ["compute=p5.48xlarge", *CLUSTER]

# The architecture keys of Meta's published config.json files (Hugging Face meta-llama/*).
LLAMA3 = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 128256,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
}
LLAMA31_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
PUBLISHED = {
    "llama3_8b": (  # meta-llama/Meta-Llama-3-8B: 8.03B parameters
        {**LLAMA3, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "max_position_embeddings": 8192,
         "tie_word_embeddings": False},
        8_030_261_248,
    ),
    "llama3_70b": (  # meta-llama/Meta-Llama-3-70B: 70.6B parameters
        {**LLAMA3, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
         "num_attention_heads": 64, "max_position_embeddings": 8192,
         "tie_word_embeddings": False},
        70_553_706_496,
    ),
    "llama3_1b": (  # meta-llama/Llama-3.2-1B: 1.24B parameters
        {**LLAMA3, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
         "num_attention_heads": 32, "max_position_embeddings": 131072,
         "tie_word_embeddings": True, "rope_scaling": {**LLAMA31_SCALING, "factor": 32.0}},
        1_235_814_400,
    ),
    "llama3_1_8b": (  # meta-llama/Llama-3.1-8B: 8.03B parameters
        {**LLAMA3, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "max_position_embeddings": 131072,
         "tie_word_embeddings": False, "rope_scaling": LLAMA31_SCALING},
        8_030_261_248,
    ),
}  # fmt: skip


def option_file(option: str) -> dict:
    return yaml.safe_load((CONF_DIR / "model" / f"{option}.yaml").read_text())


def args_from_file(values: dict) -> ModelArgs:
    """ModelArgs made straight from the YAML's values: no preset, no defaults."""
    arch = {k: values[k] for k in ARCH_FIELDS}
    if arch["rope_scaling"] is not None:
        arch["rope_scaling"] = RopeScaling(**arch["rope_scaling"])
    return ModelArgs(**arch)


@pytest.mark.parametrize("option", MODEL_OPTIONS)
def test_each_option_states_every_architecture_key(option: str):
    values = option_file(option)
    assert set(ARCH_FIELDS) <= set(values), set(ARCH_FIELDS) - set(values)
    nullable = ("rope_scaling", "sliding_window")
    assert all(values[k] is not None for k in ARCH_FIELDS if k not in nullable)
    assert values["name"] == option


@pytest.mark.parametrize("option", MODEL_OPTIONS)
def test_the_trainer_builds_exactly_the_stated_model(option: str):
    composed = compose([f"model={option}"]).model
    built = trainer_model_args(composed)
    assert built == args_from_file(option_file(option))
    if option in MODEL_PRESETS:  # the presets remain, for hand-written trainer configs
        assert built == MODEL_PRESETS[option]
    # Nothing is left to a preset: the same section under a name no preset has builds the same.
    assert trainer_model_args({**asdict_of(composed), "name": "renamed"}) == built


def asdict_of(section) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(section)


def test_every_shipped_option_is_checked_against_something():
    assert set(MODEL_PRESETS) | set(PUBLISHED) >= set(MODEL_OPTIONS)
    assert set(PUBLISHED) <= set(MODEL_OPTIONS)


@pytest.mark.parametrize("option", sorted(PUBLISHED))
def test_options_equal_the_published_llama_config(option: str):
    published, params = PUBLISHED[option]
    built = trainer_model_args(compose([f"model={option}"]).model)
    assert built == model_args_from_hf(published, f"meta-llama/{option}")
    assert built.num_params() == params


def test_the_record_and_the_hash_carry_every_dimension():
    job = build(["model=llama3_1b", *P5, "data.seq_len=2048"])
    record = yaml.safe_load(job.manifests[0]["data"]["config.yaml"])["model"]
    assert {k: record[k] for k in ARCH_FIELDS} == {
        k: v for k, v in option_file("llama3_1b").items() if k in ARCH_FIELDS
    }
    hashes = {
        build(["model=llama3_1b", *P5, "data.seq_len=2048", override]).spec.config_hash
        for override in ("seed=0", "model.ffn_hidden_dim=8448", "model.rope_scaling.factor=16")
    }
    assert len(hashes) == 3


def test_a_model_option_missing_a_key_is_named(tmp_path: Path):
    with pytest.raises(JobConfigError, match=r"^model\.n_kv_heads: Missing mandatory value"):
        build(["model=tiny", "model.n_kv_heads=???"])


def test_a_stated_model_without_a_preset_plans_and_renders():
    job = build(["model=llama3_1_8b", *P5, "data.seq_len=8192"])
    assert job.plan.params == PUBLISHED["llama3_1_8b"][1]
    assert job.manifests[1]["metadata"]["annotations"]["trainstack.io/model"] == "llama3_1_8b"


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("hf") / "tiny-llama", tied=True)


def test_init_from_still_takes_the_architecture_from_config_json(hf_dir: Path):
    job = build(["model=hf", f"model.init_from={hf_dir}", "data.tokenizer=byte"])
    expected = model_args_from_hf(yaml.safe_load((hf_dir / "config.json").read_text()), str(hf_dir))
    assert job.plan.params == expected.num_params()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=tiny", "model.name=null"], r"^model\.dim: 256 contradicts .*hidden_size=64"),
        (["model=hf", "model.n_layers=3"], r"^model\.n_layers: 3 contradicts"),
        (["model=llama3_8b"], r"^model\.name: preset 'llama3_8b' has dim=4096"),
    ],
)
def test_stated_keys_contradicting_config_json_are_refused(hf_dir, overrides, message):
    with pytest.raises(JobConfigError, match=message):
        build([*overrides, f"model.init_from={hf_dir}", "data.tokenizer=byte"])


@pytest.mark.parametrize("option", MODEL_OPTIONS)
def test_the_trainer_reads_the_rendered_record_back_to_the_same_model(option, tmp_path: Path):
    from trainer.run_config import load_config

    job = build([f"model={option}", *P5])
    path = tmp_path / "config.yaml"
    path.write_text(job.manifests[0]["data"]["config.yaml"])
    trainer_cfg = load_config(str(path), [])
    assert trainer_model_args(trainer_cfg.model) == args_from_file(option_file(option))
