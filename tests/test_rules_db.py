"""Rule-set schema: JSON round trip, TASO's file, instantiation."""

import json

import numpy as np
import pytest
from taso.rules_db import TASO_REFERENCE, RuleSet, instantiate, load


def _taso():
    return load(TASO_REFERENCE)


def test_taso_reader_decodes_all_rules():
    rs = _taso()
    assert len(rs) == 133
    counts = {}
    for r in rs:
        for n in r.src + r.dst:
            counts[n.op] = counts.get(n.op, 0) + 1
    # Op occurrences stated in the reference README.
    assert counts == {"concat": 182, "matmul": 144, "ewadd": 140, "ewmul": 134,
                      "conv2d": 106, "relu": 39, "split": 10}
    assert sum(len(r.outputs) == 2 for r in rs) == 13


def test_a_truncated_taso_file_is_named_not_a_traceback(tmp_path):
    data = TASO_REFERENCE.read_bytes()
    for cut in (1, 7, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.pb").write_bytes(data[:cut])
        with pytest.raises(ValueError, match=r"cut\.pb is not a taso rule set"):
            load(tmp_path / "cut.pb")


def test_json_round_trip(tmp_path):
    rs = _taso()
    rs.save(tmp_path / "t.json")
    back = load(tmp_path / "t.json")
    assert json.dumps(back.to_json()) == json.dumps(rs.to_json())
    assert isinstance(back, RuleSet)


def test_gzip_round_trip_and_a_damaged_one_is_named(tmp_path):
    rs = _taso()
    rs.save(tmp_path / "t.json.gz")
    data = (tmp_path / "t.json.gz").read_bytes()
    assert data[:2] == b"\x1f\x8b" and len(data) < len(json.dumps(rs.to_json())) / 4
    rs.save(tmp_path / "again.json.gz")  # the same bytes each time (no timestamp)
    assert (tmp_path / "again.json.gz").read_bytes() == data
    assert json.dumps(load(tmp_path / "t.json.gz").to_json()) == json.dumps(rs.to_json())
    for cut in (2, 10, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.json.gz").write_bytes(data[:cut])
        with pytest.raises(ValueError, match=r"cut\.json\.gz is not a taso rule set"):
            load(tmp_path / "cut.json.gz")
    (tmp_path / "bad.json.gz").write_bytes(data[:20] + bytes(64) + data[84:])
    with pytest.raises(ValueError, match=r"bad\.json\.gz is not a taso rule set"):
        load(tmp_path / "bad.json.gz")


def test_instantiated_sides_agree_numerically():
    rs = _taso()
    r = rs.by_id("taso-077")  # two matmuls sharing x1 = one matmul of a concat, split
    shapes = {"x1": (3, 4), "x4": (4, 5), "x5": (4, 2)}
    src, _ = instantiate(r, "src", shapes)
    dst, _ = instantiate(r, "dst", shapes)
    feeds = src.random_inputs(0)
    for a, b in zip(src.evaluate(feeds), dst.evaluate(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_group_merges_get_groups_and_equal_kernel_counts():
    # TASO leaves conv groups implicit (kernel channels < input channels); its four
    # merges of two convs into one grouped conv hold only when both kernels have
    # as many output channels.
    rs = _taso()
    for rid in ("taso-099", "taso-100", "taso-130", "taso-131"):
        r = rs.by_id(rid)
        groups = [n.attrs.get("groups", 1) for n in r.dst if n.op == "conv2d"]
        assert groups == [2], rid
        kernels = {n.inputs[1] for n in r.src if n.op == "conv2d"}
        (v, a, u, b), = r.same_dims()
        assert {v, u} == kernels and a == b == 0, rid
    ungrouped = [r for r in rs if r.id not in ("taso-099", "taso-100", "taso-130", "taso-131")]
    assert all(n.attrs.get("groups", 1) == 1 for r in ungrouped for n in r.src + r.dst)


def test_same_dim_round_trips_and_binds_instantiation(tmp_path):
    rs = RuleSet([_taso().by_id("taso-099")])
    rs.save(tmp_path / "g.json")
    back = load(tmp_path / "g.json").by_id("taso-099")
    assert back.same_dims() == rs.by_id("taso-099").same_dims()
    # Two kernels of 3 output channels each, 2 input channels per group.
    shapes = {"x7": (1, 2, 5, 5), "x8": (1, 2, 5, 5), "x10": (3, 2, 3, 3),
              "x11": (3, 2, 3, 3)}
    src, _ = instantiate(back, "src", shapes)
    dst, _ = instantiate(back, "dst", shapes)
    feeds = src.random_inputs(1)
    for a, b in zip(src.evaluate(feeds), dst.evaluate(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
