"""The config tree: sections, validation, JSON (nested and the earlier flat form),
the resume check, and flags generated from the fields."""

import dataclasses
import json

import pytest
from absl import flags

from llp_tf.config_fields import flag_name
from llp_tf.errors import ConfigError
from llp_tf.training import config as config_lib
from llp_tf.training.config import SECTIONS, TrainConfig, settings_fields
from llp_tf.training.methods import DEFAULT_METHOD, METHODS


def _config(tmp_path, **settings):
    return TrainConfig.from_settings(run_dir=str(tmp_path), **settings)


def test_settings_land_in_their_sections(tmp_path):
    config = _config(tmp_path, dataset="digits", width=0.5, epochs=7, method="supervised",
                     k=3, seed=4)
    assert (config.data.dataset, config.model.width, config.optimization.epochs) == \
        ("digits", 0.5, 7)
    assert (config.method.name, config.methods["llp"].k, config.run.seed) == ("supervised", 3, 4)
    assert config.run_dir == str(tmp_path)
    # Every field is in exactly one section, and flag names are unique.
    sections = {**SECTIONS, **config_lib.method_sections()}
    names = [flag_name(f) for cls in sections.values() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)) == len(settings_fields())
    with pytest.raises(ConfigError, match="Unknown training setting"):
        _config(tmp_path, nonsense=1)


def test_method_choices_come_from_the_registry():
    _, field = settings_fields()["method"]
    assert field.metadata["choices"] == tuple(METHODS)
    assert field.default == DEFAULT_METHOD == "llp"  # the paper's method


def test_json_round_trip_keeps_every_field(tmp_path):
    config = _config(tmp_path, blocks_per_stage=(1, 1), lr_drop_epochs=(3, 5), split_seed=4,
                     label_percent=1.0, min_crop_area=0.3, label_subset="1percent")
    text = config.to_json()
    assert set(json.loads(text)) == {*SECTIONS, "methods"}
    assert set(json.loads(text)["methods"]) == set(METHODS)
    assert TrainConfig.from_json(text) == config


def test_a_config_json_of_another_form_is_refused(tmp_path):
    flat = {"run_dir": str(tmp_path), "dataset": "digits", "method": "llp"}
    with pytest.raises(ConfigError, match="not in the form llp-tf writes"):
        TrainConfig.from_json(json.dumps(flat))
    nested = json.loads(_config(tmp_path, k=7).to_json())
    nested["method"]["k"] = 7
    with pytest.raises(ConfigError, match=r"Unknown training setting\(s\) in config.json: "
                                          r"method.k \(written by another version"):
        TrainConfig.from_json(json.dumps(nested))


def test_a_method_section_is_checked_only_when_the_method_is_chosen(tmp_path):
    with pytest.raises(ConfigError, match="--warmup_epochs=4 cannot exceed --epochs=3"):
        _config(tmp_path, epochs=3, warmup_epochs=4)
    assert _config(tmp_path, epochs=3, warmup_epochs=4, method="supervised").method.name == \
        "supervised"


def test_two_settings_with_one_flag_name_are_refused(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Clashing:
        k: int = config_lib.setting(1, "another k")

    sections = config_lib.method_sections()
    monkeypatch.setattr(config_lib, "method_sections", lambda: {**sections, "clash": Clashing})
    with pytest.raises(ValueError, match="llp.k and clash.k share the flag name --k"):
        settings_fields()


def test_learning_rate_scales_with_global_batch(tmp_path):
    assert _config(tmp_path).learning_rate == pytest.approx(0.03)
    assert _config(tmp_path, global_batch_size=256).learning_rate == pytest.approx(0.06)


@pytest.mark.parametrize("changes,problem", [
    (dict(method="semi"),
     f"--method=semi must be one of {', '.join(METHODS)}"),
    (dict(propagation="lp"), "--propagation=lp must be one of local, knn, classifier"),
    (dict(label_percent=0), "--label_percent=0.0 must lie in (0, 100]"),
    (dict(label_percent=20, data_percent=10),
     "--label_percent=20.0 cannot exceed --data_percent=10.0 (the used subset holds the labels)"),
    (dict(epochs=5, warmup_epochs=6),
     "--warmup_epochs=6 cannot exceed --epochs=5: the run would end inside the warm-up "
     "(instance recognition), before LLP; give --epochs=7 or more, or --warmup_epochs=5 or "
     "less (equal: an instance-recognition run only)"),
    (dict(temperature=0), "--temperature=0.0 must be positive"),
    (dict(bank_momentum=1.0), "--bank_momentum=1.0 must lie in [0, 1)"),
    (dict(shard_bank=True, jit_compile=True, image_size=224),
     "--shard_bank exchanges shares between replicas inside the step, which "
     "--jit_compile cannot compile; give one of them"),
    (dict(bank_dtype="float64"), "--bank_dtype=float64 must be one of float32, bfloat16, "
     "float16"),
    (dict(k=0), "--k=0 and --t=25 must be positive"),
    (dict(min_crop_area=0.0), "--min_crop_area=0.0 must lie in (0, 1]"),
    (dict(min_crop_area=1.5), "--min_crop_area=1.5 must lie in (0, 1]"),
    (dict(split_file="s.npz", label_subset="1percent"),
     "give --split_file=s.npz or --label_subset=1percent, not both (each sets the labelled "
     "examples)"),
    (dict(run_dir=None), "give --run_dir"),
    (dict(lr_drop_epochs=(3, 0)), "every epoch of --lr_drop_epochs=3,0 must be positive"),
    (dict(width=0), "--width=0.0 must be positive"),
    (dict(method="fixmatch", global_batch_size=7),
     "--global_batch_size=7 must be at least 1 + mu = 8 (--fixmatch_mu unset; one labelled "
     "example a step)"),
    (dict(method="fixmatch", global_batch_size=5, baseline_preset="imagenet"),
     "--global_batch_size=5 must be at least 1 + mu = 6 (--fixmatch_mu unset; one labelled "
     "example a step)"),
    (dict(method="pseudo_label", pseudo_label_ramp_end=1.2),
     "--pseudo_label_ramp_end=1.2 must lie in [0, 1]"),
    (dict(method="mean_teacher", mean_teacher_ema_horizon=0.0),
     "--mean_teacher_ema_horizon=0.0 must lie in (0, 1]"),
    (dict(method="mean_teacher", mean_teacher_consistency_type="l1"),
     "--mean_teacher_consistency_type=l1 must be one of mse, kl"),
    (dict(jit_compile=True, sync_batch_norm=True),
     "--jit_compile cannot compile the cross-replica statistics of --sync_batch_norm; drop one "
     "of them"),
])
def test_invalid_settings_are_one_error_naming_each_setting_with_its_value(
        tmp_path, changes, problem):
    with pytest.raises(ConfigError) as raised:
        TrainConfig.from_settings(**{"run_dir": str(tmp_path), **changes})
    assert str(raised.value) == f"Invalid training settings: {problem}."


@pytest.mark.parametrize("changes,match", [
    (dict(input_service="127.0.0.1"), "input_service must be a tf.data service dispatcher"),
    (dict(input_service="grpc://h:99999"), "port of input_service"),
])
def test_invalid_settings_are_one_clear_error(tmp_path, changes, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig.from_settings(**{"run_dir": str(tmp_path), **changes})


def test_the_entry_point_names_where_each_value_of_a_problem_came_from(tmp_path):
    with pytest.raises(ConfigError) as raised:
        _config(tmp_path, epochs=3, label_percent=0)
    named = raised.value.with_origins({"epochs": "command line",
                                       "warmup_epochs": "from --regime=demo",
                                       "label_percent": "default"})
    assert type(named) is ConfigError
    assert str(named).startswith(
        "Invalid training settings: --label_percent=0.0 (default) must lie in (0, 100]; "
        "--warmup_epochs=10 (from --regime=demo) cannot exceed --epochs=3 (command line): ")
    # Origins an error names already (a config.json's) stay.
    again = named.with_origins({"epochs": "elsewhere"})
    assert str(again) == str(named)


# ---- flags generated from the fields -------------------------------------------

from llp_tf.training import config_flags  # noqa: E402


def _other_value(name, section, field):
    """A valid value of a setting that differs from its default, and its flag text."""
    kind = config_flags._base_type(config_lib.field_type(section, field))
    choices = field.metadata.get("choices")
    special = {"run_dir": "/tmp/some_run", "label_subset": "10percent",
               "lr_drop_epochs": (3, 5), "blocks_per_stage": (1, 2, 1), "epochs": 31,
               "warmup_epochs": 4, "label_percent": 2.5, "data_percent": 50.0,
               "min_crop_area": 0.35, "width": 0.5, "batch_norm_momentum": 0.8,
               "bank_momentum": 0.25, "lr_drop_factor": 0.5,
               "input_service": "grpc://127.0.0.1:5050"}
    if name in special:
        value = special[name]
    elif choices:
        value = next(c for c in choices if c != field.default)
    elif kind is bool:
        value = not field.default
    elif kind is int:
        value = (field.default or 0) + 3
    elif kind is float:
        value = (field.default or 0.0) * 2 + 0.125
    else:
        value = f"value_of_{name}"
    if isinstance(value, tuple):
        return value, f"--{name}={','.join(str(v) for v in value)}"
    if isinstance(value, bool):
        return value, f"--{name}" if value else f"--no{name}"
    return value, f"--{name}={value}"


def test_every_flag_reaches_its_config_field():
    flag_values = flags.FlagValues()
    config_flags.define_config_flags(flag_values)
    expected, argv = {}, ["train"]
    for name, (section, field) in settings_fields().items():
        value, text = _other_value(name, section, field)
        assert value != field.default, name
        expected[name] = (section, field.name, value)
        argv.append(text)
    flag_values(argv)
    # split_file excludes label_subset, jit_compile sync_batch_norm, and label_subset
    # leaves label_percent unused: checked below.
    config = config_flags.config_from_flags(flag_values, split_file=None, jit_compile=False)
    for name, (section, field_name, value) in expected.items():
        if name in ("split_file", "jit_compile", "label_percent"):
            continue
        values = getattr(config, section) if section in SECTIONS else config.methods[section]
        assert getattr(values, field_name) == value, name
    flag_values2 = flags.FlagValues()
    config_flags.define_config_flags(flag_values2)
    flag_values2(["train", "--run_dir=/r", "--split_file=/s.npz", "--jit_compile"])
    config = config_flags.config_from_flags(flag_values2)
    assert config.data.split_file == "/s.npz" and config.run.jit_compile
    assert config.data.label_percent == 10.0
    flag_values3 = flags.FlagValues()
    config_flags.define_config_flags(flag_values3)
    flag_values3(["train", "--run_dir=/r", "--label_percent=2.5"])
    assert config_flags.config_from_flags(flag_values3).data.label_percent == 2.5


def test_flag_defaults_help_and_choices_are_the_fields():
    flag_values = flags.FlagValues()
    config_flags.define_config_flags(flag_values)
    for name, (section, field) in settings_fields().items():
        flag = flag_values[name]
        assert flag.help.endswith(field.metadata["help"]), name  # enums prefix their choices
        default = flag.default
        if isinstance(default, list):
            default = tuple(int(v) for v in default)
        assert default == field.default, name
        if field.metadata.get("choices"):
            assert tuple(flag.parser.enum_values) == field.metadata["choices"], name


def test_jit_compile_refuses_sync_batch_norm_and_feature_maps_below_4x4():
    assert TrainConfig.from_settings(run_dir="/r", jit_compile=True).run.jit_compile
    with pytest.raises(ConfigError, match="sync_batch_norm"):
        TrainConfig.from_settings(run_dir="/r", jit_compile=True, sync_batch_norm=True)
    # The ImageNet stem strides 4, three more stages 8: 28 px end at 1x1.
    with pytest.raises(ConfigError, match="not 1x1"):
        TrainConfig.from_settings(run_dir="/r", jit_compile=True, image_size=28)
    with pytest.raises(ConfigError, match="not 2x2"):
        TrainConfig.from_settings(run_dir="/r", jit_compile=True, image_size=16,
                                  small_inputs=True)
    assert TrainConfig.from_settings(run_dir="/r", jit_compile=True, image_size=32,
                                     small_inputs=True).run.jit_compile
    assert TrainConfig.from_settings(run_dir="/r", image_size=28).data.image_size == 28
    with pytest.raises(ConfigError, match="--mixed_precision=half must be one of"):
        TrainConfig.from_settings(run_dir="/r", mixed_precision="half")


def test_choices_are_checked_from_the_fields_metadata(tmp_path):
    # Every field with choices refuses a value outside them, with one message each.
    fields = {name: field for name, (_, field) in settings_fields().items()
              if field.metadata["choices"]}
    assert set(fields) == {"augmentation", "augment_on", "architecture", "method", "propagation",
                           "density_normalisation", "cluster", "mixed_precision",
                           "baseline_preset", "baseline_optimizer", "pseudo_label_batch_norm",
                           "bank_dtype"}
    with pytest.raises(ConfigError) as error:
        _config(tmp_path, **{name: "nonsense" for name in fields})
    for name, field in fields.items():
        assert f"--{name}=nonsense must be one of {', '.join(field.metadata['choices'])}" in \
            str(error.value)


def test_state_settings_are_the_fields_marked_as_state():
    assert set(config_lib.state_settings()) == {
        "dataset", "label_percent", "data_percent", "split_seed", "split_file", "label_subset",
        "architecture", "width", "blocks_per_stage", "embedding_dim", "method", "image_size",
        "small_inputs", "global_batch_size"}


