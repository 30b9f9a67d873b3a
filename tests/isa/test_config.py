import json

import pytest

from isa import ChipConfig, ConfigError, PRESETS
from isa.table import WORD_BITS, layout


def test_presets_sizes():
    assert [(c.rows, c.cols) for c in PRESETS.values()] == [(4, 4), (8, 8), (16, 16), (128, 128), (256, 256)]
    assert list(PRESETS) == ["tiny", "small", "base", "large", "tpu"]
    for c in PRESETS.values():
        assert all(layout(c).used_bits(f) <= WORD_BITS for f in layout(c).formats)


@pytest.mark.parametrize("change,words", [
    (dict(rows=0), "rows must be >= 1"),
    (dict(rows=8, cols=4), "rows (8) must be <= cols (4)"),
    (dict(loop_regs=2), "loop_regs (2) must be >= 3"),
    (dict(dma_beat_bytes=12), "power of two"),
    (dict(spm_rows="many"), "must be an integer"),
    (dict(dram_bytes=1 << 33), "<= 2**32"),
    (dict(clock_mhz=0), "clock_mhz"),
    (dict(name=""), "name"),
])
def test_validation(change, words):
    with pytest.raises(ConfigError) as ei:
        PRESETS["tiny"].replace(**change)
    assert words in str(ei.value)


def test_too_big_for_the_word():
    with pytest.raises(ConfigError, match="more than the 192-bit instruction word"):
        PRESETS["tpu"].replace(spm_rows=1 << 30, dram_bytes=1 << 32, scalar_regs=1 << 10)


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown config 'huge'; presets: tiny, small"):
        ChipConfig.preset("huge")


def test_load_toml_and_json(tmp_path):
    t = tmp_path / "mine.toml"
    t.write_text('preset = "small"\ndram_latency = 3\n')
    c = ChipConfig.load(str(t))
    assert (c.name, c.rows, c.dram_latency) == ("mine", 8, 3)
    j = tmp_path / "j.json"
    j.write_text(json.dumps({"name": "jj", "rows": 2, "cols": 4, "spm_rows": 128}))
    c = ChipConfig.load(j)
    assert (c.name, c.rows, c.cols, c.spm_rows, c.acc_rows) == ("jj", 2, 4, 128, ChipConfig().acc_rows)
    bad = tmp_path / "bad.toml"
    bad.write_text("rowz = 3\n")
    with pytest.raises(ConfigError, match="unknown config field.*rowz"):
        ChipConfig.load(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("rows = [\n")
    with pytest.raises(ConfigError, match="not a valid TOML"):
        ChipConfig.load(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        ChipConfig.load(tmp_path / "none.toml")
