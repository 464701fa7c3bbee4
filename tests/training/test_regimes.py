import os
import sys

import pytest

from llp_tf.training import regimes
from llp_tf.errors import ConfigError
from tests.cli.tool_main import ROOT, load_tool


def test_the_known_regimes_are_the_flagfiles_of_flags():
    names = sorted(n[:-len(".flags")] for n in os.listdir(os.path.join(ROOT, "flags"))
                   if n.endswith(".flags"))
    assert regimes.known_regimes() == names and "demo" in names


def test_a_regime_with_overrides_is_the_train_tools_config():
    tool = load_tool("train.py")
    values = tool.make_flags()
    values(tool.expand_regime(["train", "--regime=demo", "--epochs=3", "--warmup_epochs=1",
                               "--lr_drop_epochs=2"], sys.stderr))
    want = tool.config_from_flags(values)
    got = regimes.regime_config("demo", epochs=3, warmup_epochs=1, lr_drop_epochs=(2,))
    assert got == want
    assert (got.optimization.epochs, got.optimization.base_learning_rate) == (3, 0.03)
    assert got.data.dataset == "mnist5k" and got.run_dir == "runs/demo"  # the flagfile's
    assert regimes.regime_config("demo", run_dir="elsewhere").run_dir == "elsewhere"


def test_an_unknown_regime_or_setting_is_a_config_error():
    with pytest.raises(ConfigError, match="Unknown regime 'nope'. Known regimes: demo, r18_"):
        regimes.regime_config("nope")
    with pytest.raises(ConfigError, match=r"Unknown training setting\(s\): epoch\."):
        regimes.regime_config("demo", epoch=3)
    with pytest.raises(ConfigError, match="cannot exceed --epochs=3"):
        regimes.regime_config("demo", epochs=3)  # the regime's 10 warm-up epochs
