"""Scale-out: stable keys, spill files, a pool that needs no fork, and real Ray
clusters for taso-gen and taso-verify (their results equal the local ones)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from taso.generator.cli import main as gen_main
from taso.generator.enumerate import Member
from taso.generator.family import GenConfig, Var
from taso.generator.generate import generate
from taso.generator.store import ClassStore, read_bucket
from taso.rules_db import SHIPPED, Rule, RuleSet, load
from taso.rules_db.canonical import canonical
from taso.verifier.cli import main as verify_main
from taso.verifier.run import verify_rules

from taso.executor import LocalExecutor, SerialExecutor
from taso.stablehash import ints_hash, stable_hash

M = tuple(Var(f"m{i}", (3, 3), (5, 5)) for i in range(3))
SMALL = GenConfig(max_ops=2, ops=("ewadd", "matmul", "relu", "concat", "split"), family=M)


def _rules_json(rs):
    return json.loads(json.dumps(rs.to_json()))


def _assert_same_rules(a, b):
    ja, jb = _rules_json(a), _rules_json(b)
    assert len(ja["rules"]) == len(jb["rules"]) > 0
    for x, y in zip(ja["rules"], jb["rules"]):
        assert x == y  # field by field: id, vars, sides, outputs, provenance
    assert {k: v for k, v in ja.items() if k != "rules"} == \
        {k: v for k, v in jb.items() if k != "rules"}


def _ray_or_skip():
    """The ray module, or a skip where it cannot be imported."""
    try:
        import ray
    except ImportError as e:
        pytest.skip(f"Ray cannot be imported ({e}): pip install 'taso[cluster]'")
    return ray


def _run_python(code: str, **env) -> str:
    """Run `code` in a fresh interpreter, from outside the checkout, with a hash
    seed of our choosing; its stdout."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, cwd="/", env={**os.environ, **env}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# ---- stable hashes -----------------------------------------------------------------------
def test_stable_hash_is_the_same_in_every_process():
    values = [("matmul", (("activation", "none"),), (3, 4)), ("<var>", 0), "x", 7, None,
              (1.5, b"k", (True, -3))]
    code = f"""
        from taso.stablehash import stable_hash, ints_hash
        print([stable_hash(v) for v in {values!r}], ints_hash((1, 2, 2**64 - 1)))
    """
    outs = {_run_python(code, PYTHONHASHSEED=str(seed)) for seed in (1, 2, 3)}
    assert len(outs) == 1
    assert outs.pop().strip() == str([stable_hash(v) for v in values]) + " " + \
        str(ints_hash((1, 2, 2**64 - 1)))


def test_stable_hash_follows_equality_and_tells_values_apart():
    assert stable_hash((1, "a")) == stable_hash((True, "a")) == stable_hash((1.0, "a"))
    assert len({stable_hash(v) for v in [(1, 2), (2, 1), ((1,), 2), "1", 1, ("a",), "a",
                                         ("a", ""), ("", "a"), None]}) == 10
    assert ints_hash((1, 2)) != ints_hash((2, 1))
    with pytest.raises(TypeError, match="cannot hash a frozenset"):
        stable_hash((frozenset({1}),))  # its order of iteration is the salted hash's


def test_canonical_keys_agree_across_processes():
    # The pruner compares canonical keys computed by different workers: they must
    # not depend on the interpreter's string-hash seed.
    rules = load(SHIPPED / "taso.json").rules[:40]
    code = """
        from taso.rules_db import SHIPPED, load
        from taso.rules_db.canonical import canonical
        for r in load(SHIPPED / "taso.json").rules[:40]:
            key, order, rev = canonical(r)
            print(repr((key, order, rev)))
    """
    a = _run_python(code, PYTHONHASHSEED="11")
    b = _run_python(code, PYTHONHASHSEED="12")
    assert a == b
    assert a.splitlines() == [repr(canonical(r)) for r in rules]


# ---- spill files ----------------------------------------------------------------------------
def test_spill_files_are_plain_json_and_read_back_exactly(tmp_path):
    store = ClassStore(tmp_path, buckets=4, flush_every=2)
    conv = ("conv2d", (("strides", (1, 1)), ("pads", "same"), ("groups", 2)), (0, 1))
    members = [Member((conv,), (2,), (2**64 - 5,), (2**64 - 5,)),
               Member((("relu", (), (0,)), ("ewadd", (), (3, 1))), (4,), (17,), (99, 17)),
               Member((("split", (("axis", 0), ("sizes", (1, 2))), (0,)),), (1, 2), (5, 6),
                      (5, 6))]
    for m in members:
        store.add(tuple(sorted(m.sink_vals)), m)
    files = store.bucket_files()
    folder = store.spill_folder
    assert json.loads((folder / "format.json").read_text())["format"] == "taso-gen-spill"
    for ref in files:
        for line in Path(ref.path).read_text().splitlines():
            json.loads(line)  # one JSON document per line
    back = {k: ms for ref in files for k, ms in read_bucket(ref).items()}
    assert back == {tuple(sorted(m.sink_vals)): [m] for m in members}
    assert not any(f.suffix == ".pkl" for f in folder.iterdir())
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_spill_file_a_node_cannot_read_is_named(tmp_path):
    from taso.generator.store import SpillBucket, SpillError
    ref = SpillBucket(str(tmp_path / "gone" / "bucket-000.jsonl"), str(tmp_path / "nodes.json"))
    (tmp_path / "nodes.json").write_text("[]")
    with pytest.raises(SpillError, match="bucket-000.jsonl is not readable on this node: "
                                         "--spill-dir must be a folder every node"):
        read_bucket(ref)


def test_spilled_run_equals_in_memory_run_by_canonical_form(tmp_path):
    mem, _ = generate(SMALL, workers=1)
    disk, _ = generate(SMALL, workers=2, spill_dir=str(tmp_path))
    assert sorted(canonical(r)[0] for r in mem) == sorted(canonical(r)[0] for r in disk)
    assert list(tmp_path.iterdir()) == []


# ---- no fork -----------------------------------------------------------------------------------
def test_spawned_pool_gives_the_serial_rules():
    serial, _ = generate(SMALL, executor=SerialExecutor())
    ex = LocalExecutor(2, start_method="spawn")
    try:
        spawned, _ = generate(SMALL, executor=ex)
    finally:
        ex.close()
    _assert_same_rules(serial, spawned)


def test_pool_map_starts_work_before_its_first_result_is_asked_for(tmp_path):
    # A resumed prune reads kept buckets for minutes before it asks for the
    # first fresh one: the workers must be busy meanwhile, not wait for it.
    # The task is shutil.copy(shared, item): a function of this module would not
    # unpickle in a worker where pytest imported it under a name off sys.path.
    src, out = tmp_path / "src", tmp_path / "out"
    src.write_text("done")
    out.mkdir()
    ex = LocalExecutor(2)
    try:
        results = ex.map(shutil.copy, [str(out / "a"), str(out / "b")], str(src))
        for _ in range(600):
            if {p.name for p in out.iterdir()} == {"a", "b"}:
                break
            time.sleep(0.05)
        assert {p.name for p in out.iterdir()} == {"a", "b"}
        assert list(results) == [str(out / "a"), str(out / "b")]
    finally:
        ex.close()


def test_tasks_carry_an_operator_registered_after_import(tmp_path):
    # An operator the parent registers from its own module reaches spawned
    # workers (which start without it) through the task's registry entry.
    (tmp_path / "my_ops.py").write_text(textwrap.dedent("""
        from taso.ops.base import Op, P, register

        @register
        class Double(Op):
            name = "double_it"
            inputs = ("x",)

            def shape(self, a, x):
                return x

            def ref(self, a, x):
                return 2 * x

            def fp(self, a, x):
                return (2 * x) % P
    """))
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        if __name__ == "__main__":
            import my_ops  # noqa: F401  (registers double_it here only)
            from taso.executor import LocalExecutor
            from taso.generator import GenConfig, Var, generate
            from taso.rules_db.canonical import canonical_key
            cfg = GenConfig(max_ops=2, ops=("double_it", "ewadd"),
                            family=tuple(Var(f"m{{i}}", (3, 3), (5, 5)) for i in range(2)))
            ex = LocalExecutor(2, start_method="spawn")
            rules, _ = generate(cfg, executor=ex)
            ex.close()
            serial, _ = generate(cfg, workers=1)
            assert [r.to_json() for r in rules] == [r.to_json() for r in serial]
            print(len(rules), sum(r.src[0].op == "double_it" or r.dst[0].op == "double_it"
                                  for r in rules))
    """
    path = tmp_path / "run.py"
    path.write_text(textwrap.dedent(code))
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd="/",
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    n, with_double = map(int, out.stdout.split())
    assert n > 0 and with_double > 0


# ---- Ray -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray cluster of 2 CPUs, started once for these tests."""
    ray = _ray_or_skip()
    from taso.executor import connect_ray
    assert connect_ray(None, workers=2)  # ray.init(num_cpus=2), from a neutral folder
    assert ray.cluster_resources()["CPU"] == 2
    yield ray
    ray.shutdown()


def test_ray_generator_rules_equal_the_local_pool(ray_cluster):
    local, rep_local = generate(SMALL, workers=2)
    on_ray, rep_ray = generate(SMALL, executor="ray")
    _assert_same_rules(local, on_ray)
    assert [vars(r) | {"seconds": 0} for r in rep_local.rounds] == \
        [vars(r) | {"seconds": 0} for r in rep_ray.rounds]
    assert vars(rep_local.stages) == vars(rep_ray.stages)
    assert ray_cluster.is_initialized()  # an existing connection is left as it was


def test_ray_tasks_read_spilled_buckets(ray_cluster, tmp_path):
    local, _ = generate(SMALL, workers=2, spill_dir=str(tmp_path / "a"))
    on_ray, _ = generate(SMALL, executor="ray", spill_dir=str(tmp_path / "b"))
    _assert_same_rules(local, on_ray)
    assert list((tmp_path / "a").iterdir()) == [] and list((tmp_path / "b").iterdir()) == []


def test_ray_cli_writes_the_local_rule_set(ray_cluster, tmp_path, capsys):
    flags = ["--max-ops", "2", "--ops", "ewadd,relu,matmul", "--quiet"]
    assert gen_main([*flags, "--output", str(tmp_path / "local.json")]) == 0
    assert gen_main([*flags, "--output", str(tmp_path / "ray.json"), "--executor", "ray"]) == 0
    a = json.loads((tmp_path / "local.json").read_text())
    b = json.loads((tmp_path / "ray.json").read_text())
    assert a == b and a["rules"]


FALSE_RULE = Rule.from_json({
    "id": "matmul-comm", "vars": {"a": {"rank": 2}, "b": {"rank": 2}},
    "src": [{"op": "matmul", "inputs": ["a", "b"], "attrs": {}}],
    "dst": [{"op": "matmul", "inputs": ["b", "a"], "attrs": {}}], "outputs": [[[0, 0], [0, 0]]]})


def _sum_of_squares(n: int = 10) -> Rule:
    """relu(x0 x0 + ... + xn xn) = the sum in the other order: true, unprovable
    from the axioms, and Z3 stays busy to its time limit."""
    def squares(names):
        nodes = [{"op": "ewmul", "inputs": [v, v], "attrs": {}} for v in names]
        acc = [0, 0]
        for i in range(1, len(names)):
            nodes.append({"op": "ewadd", "inputs": [acc, [i, 0]], "attrs": {}})
            acc = [len(nodes) - 1, 0]
        return nodes
    names = [f"x{i}" for i in range(n)]
    src = squares(names)
    src.append({"op": "relu", "inputs": [[len(src) - 1, 0]], "attrs": {}})
    dst = squares(names[::-1])
    return Rule.from_json({"id": "sum-of-squares", "src": src, "dst": dst,
                           "outputs": [[[len(src) - 1, 0], [len(dst) - 1, 0]]]})


def _no_time(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "seconds"}


def test_ray_verifier_records_equal_the_local_ones(ray_cluster):
    taso = load(SHIPPED / "taso.json").rules
    rules = [taso[i] for i in (0, 5, 23, 64, 100)] + [FALSE_RULE]
    local = verify_rules(rules, timeout=10, workers=2)
    on_ray = verify_rules(rules, timeout=10, workers=2, executor="ray")
    assert [_no_time(r) for r in local] == [_no_time(r) for r in on_ray]
    assert [r["status"] for r in on_ray] == ["proved"] * 5 + ["refuted"]


def test_ray_verifier_kills_a_rule_past_its_deadline(ray_cluster):
    # The deadline (2 * 1 s - 1.5 s = 0.5 s after a ready actor took the rule) is
    # shorter than the rule needs: its actor is killed, the rule is unknown, and
    # the next rule runs on a fresh actor.
    taso = load(SHIPPED / "taso.json").rules
    recs = verify_rules([_sum_of_squares(), taso[0]], timeout=1.0, workers=1, grace=-1.5,
                        executor="ray")
    assert recs[0]["status"] == "unknown" and recs[0]["reason"].startswith("killed after")
    assert recs[1]["status"] == "proved"


def test_ray_verify_cli(ray_cluster, tmp_path):
    taso = load(SHIPPED / "taso.json").rules
    src = tmp_path / "mini.json"
    RuleSet([taso[0], taso[23], FALSE_RULE], name="mini").save(src)
    assert verify_main([str(src), "--output", str(tmp_path / "l.json"), "--json"]) == 0
    assert verify_main([str(src), "--output", str(tmp_path / "r.json"), "--json",
                        "--executor", "ray"]) == 0
    a = [_no_time(r["verification"]) for r in json.loads((tmp_path / "l.json").read_text())
         ["rules"]]
    b = [_no_time(r["verification"]) for r in json.loads((tmp_path / "r.json").read_text())
         ["rules"]]
    assert a == b and [r["status"] for r in b] == ["proved", "proved", "refuted"]


@pytest.mark.parametrize("prog", ["taso-gen", "taso-verify"])
@pytest.mark.parametrize("address, words", [
    ("127.0.0.1:1", "no Ray cluster answers at '127.0.0.1:1'"),
    ("nonsense", "expected HOST:PORT or 'auto'"),
])
def test_cli_names_an_address_with_no_cluster(tmp_path, prog, address, words):
    # in a process of its own: this one may hold a Ray connection already
    _ray_or_skip()
    exe = str(Path(sys.executable).parent / prog)
    args = ["--output", str(tmp_path / "o.json"), "--executor", "ray", "--address", address]
    args = [str(SHIPPED / "taso.json"), *args] if prog == "taso-verify" else \
        [*args, "--max-ops", "1", "--quiet"]
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.splitlines()) == 1 and words in p.stderr, p.stderr
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("prog, flags, words", [
    (gen_main, ["--address", "localhost:1"], "--address needs --executor ray"),
    (gen_main, ["--executor", "spark"], "invalid choice: 'spark'"),
    (gen_main, ["--executor", "ray", "--address", "127.0.0.1:6379", "--max-ops", "4"],
     "needs --spill-dir"),
    (verify_main, ["--address", "localhost:1"], "--address needs --executor ray"),
])
def test_cli_refuses_bad_executor_flags(tmp_path, capsys, prog, flags, words):
    args = ["--output", str(tmp_path / "o.json"), *flags]
    if prog is verify_main:
        args = [str(SHIPPED / "taso.json"), *args]
    with pytest.raises(SystemExit) as e:
        prog(args)
    assert e.value.code == 2 and words in capsys.readouterr().err
