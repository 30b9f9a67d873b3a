import json

import pytest

from isa import ChipConfig, ConfigError, PRESETS
from isa.table import WORD_BITS, WORD_BYTES, layout


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
    (dict(dram_bytes=1 << 32), "<= 2**31"),
    (dict(clock_mhz=0), "clock_mhz"),
    (dict(name=""), "name"),
])
def test_validation(change, words):
    with pytest.raises(ConfigError) as ei:
        PRESETS["tiny"].replace(**change)
    assert words in str(ei.value)


def test_too_big_for_the_word():
    with pytest.raises(ConfigError, match="more than the 192-bit instruction word"):
        PRESETS["tpu"].replace(spm_rows=1 << 30, dram_bytes=1 << 31, scalar_regs=1 << 10)


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


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), True, -1.0, "fast"])
def test_clock_must_be_a_finite_positive_number(value):
    with pytest.raises(ConfigError, match="clock_mhz must be a finite number > 0"):
        PRESETS["tiny"].replace(clock_mhz=value)


def test_every_integer_field_is_bounded():
    from isa.config import MAX_FIELD
    for field in ("dram_latency", "link_latency", "link_credits"):
        PRESETS["tiny"].replace(**{field: MAX_FIELD})          # the bound itself is accepted
        with pytest.raises(ConfigError, match=f"{field} .* must be <= 2\\*\\*32"):
            PRESETS["tiny"].replace(**{field: MAX_FIELD + 1})


def test_on_chip_memory_is_bounded_before_anything_is_allocated():
    """spm_rows = 2**26 (issue 22) grew the simulator to gigabytes; now one ConfigError, from the sizes alone."""
    from isa.config import MAX_ONCHIP_BYTES
    for c in PRESETS.values():                                  # every preset within the bound
        assert c.spm_bytes + c.acc_bytes + c.imem_words * WORD_BYTES <= MAX_ONCHIP_BYTES
    for name in ("tiny", "base"):
        with pytest.raises(ConfigError, match="SPM \\+ ACC \\+ imem .* must be <="):
            PRESETS[name].replace(spm_rows=1 << 26)
    rows = MAX_ONCHIP_BYTES // PRESETS["base"].cols            # SPM alone at the bound, ACC and imem beyond it
    with pytest.raises(ConfigError, match="SPM \\+ ACC"):
        PRESETS["base"].replace(spm_rows=rows)


@pytest.mark.parametrize("preset", [[], 3, {"a": 1}, None])
def test_preset_must_be_a_name(tmp_path, preset):
    with pytest.raises(ConfigError, match="preset must be a preset name"):
        ChipConfig.from_dict({"preset": preset}, origin="f.toml")
    t = tmp_path / "p.json"
    t.write_text(json.dumps({"preset": preset}))
    with pytest.raises(ConfigError, match=f"{t}: preset must be"):
        ChipConfig.load(t)


def test_a_file_error_names_the_file(tmp_path):
    t = tmp_path / "c.toml"
    t.write_text('preset = "tiny"\nclock_mhz = inf\n')
    with pytest.raises(ConfigError, match=f"^{t}: config 'c': clock_mhz"):
        ChipConfig.load(t)


def test_link_latency_leaves_a_cycle_for_the_row_read():
    from isa.config import MIN_LINK_LATENCY
    PRESETS["tiny"].replace(link_latency=MIN_LINK_LATENCY)
    with pytest.raises(ConfigError, match=f"link_latency \\({MIN_LINK_LATENCY - 1}\\) must be >= {MIN_LINK_LATENCY}"):
        PRESETS["tiny"].replace(link_latency=MIN_LINK_LATENCY - 1)
