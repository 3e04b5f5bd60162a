"""`--print-after STAGE`: the IR right after one pipeline stage (compiler/pipeline.c's STAGES) ran and
was verified. Checked against what existed before it: a level's last stage must print exactly what
`--ir LEVEL` prints, an earlier stage the same level's header; `fuse` and `fuse_epilogues` must differ
where the epilogue pass changes the model; `all` names every stage in order; an unknown stage is a
one-line error listing the valid names."""
import os
import re

from testlib import LLMCC, ROOT, run, tmpdir

# the pipeline as docs/pipeline.md describes it: (stage, the IR level it produces), in order
STAGES = [("frontend", "graph"), ("select_layer", "graph"), ("decompose", "tensor"), ("plan_memory", "tensor"),
          ("lift_loops", "loop"), ("flash_attention", "loop"), ("fuse", "loop"), ("fuse_epilogues", "loop"),
          ("schedule", "tile"), ("materialise", "kernel"), ("cleanup", "kernel"),
          ("name_indices", "kernel"), ("plan", "plan")]
EXPR = "x = torch.randn(3, 40); F.silu(nn.Linear(40, 24, bias=False)(x)) * nn.Linear(40, 24, bias=False)(x)"


def fixture():
    d = os.path.join(tmpdir("print_after"), "fx-llama-gqa")
    if not os.path.exists(os.path.join(d, "config.json")):
        run(["python3", os.path.join(ROOT, "scripts", "make_fixture.py"), "llama-gqa", d, "--seed", "7"])
    return d


def compile_(src, *args):
    return run([LLMCC, "compile"] + (["-c", src] if src == EXPR else [src]) + list(args))


def last_of_level(i):
    return i + 1 == len(STAGES) or STAGES[i + 1][1] != STAGES[i][1]


def check_every_stage(src):
    for i, (stage, level) in enumerate(STAGES):
        out = compile_(src, "--print-after", stage).stdout
        assert out.startswith("# %s IR" % level), (stage, out[:200])
        if last_of_level(i):
            assert out == compile_(src, "--ir", level).stdout, "--print-after %s differs from --ir %s" % (stage, level)
    # with --ir too: the stage's IR, then the level's
    out = compile_(src, "--print-after", "decompose", "--ir", "loop").stdout
    assert out == compile_(src, "--print-after", "decompose").stdout + compile_(src, "--ir", "loop").stdout


def test_every_stage_on_a_model():
    check_every_stage(fixture())


def test_every_stage_on_an_expression():
    check_every_stage(EXPR)


def test_decompose_is_before_memory_planning():
    # decompose has no printer of its own: the tensor printer, before plan_memory gave activations offsets
    d = fixture()
    before = compile_(d, "--print-after", "decompose").stdout.splitlines()[0]
    after = compile_(d, "--print-after", "plan_memory").stdout.splitlines()[0]
    assert before.endswith("activation arena 0 bytes") and not after.endswith("activation arena 0 bytes"), (before, after)


def test_fuse_epilogues_changes_the_model():
    d = fixture()
    fuse = compile_(d, "--print-after", "fuse").stdout
    epi = compile_(d, "--print-after", "fuse_epilogues").stdout
    assert fuse != epi
    nests = lambda s: int(re.match(r"# loop IR: (\d+) loop nests", s).group(1))
    assert nests(epi) < nests(fuse), (fuse.splitlines()[0], epi.splitlines()[0])
    # gate_proj and up_proj read the same input: fuse_epilogues makes them one pair nest
    assert "nest mlp_gate_proj_up_proj " not in fuse and "nest mlp_gate_proj_up_proj " in epi
    assert "0 pairs" in fuse.splitlines()[0] and "0 pairs" not in epi.splitlines()[0]


def test_all_names_every_stage_in_order():
    for src in (fixture(), EXPR):
        out = compile_(src, "--print-after", "all").stdout
        heads = [l for l in out.splitlines() if l.startswith("=== after stage ")]
        want = ["=== after stage %d/%d %s (%s IR) ===" % (i + 1, len(STAGES), s, lv) for i, (s, lv) in enumerate(STAGES)]
        assert heads == want, heads
        # each header is followed by that stage's IR
        parts = re.split(r"^=== after stage .*===\n", out, flags=re.M)[1:]
        for (stage, level), body in zip(STAGES, parts):
            assert body == compile_(src, "--print-after", stage).stdout, stage


def test_build_prints_after_a_stage():
    d = fixture()
    out = os.path.join(tmpdir("print_after"), "proj")
    p = run([LLMCC, "build", d, "-o", out, "--target", "cpu", "--print-after", "schedule"])
    assert p.stdout == compile_(d, "--ir", "tile", "--target", "cpu").stdout
    assert os.path.exists(os.path.join(out, "model.c")) and "llmcc: wrote" in p.stderr


def test_unknown_stage_is_a_user_error():
    for args in (["compile", fixture(), "--print-after", "fusion"], ["compile", "-c", EXPR, "--print-after", "fusion"],
                 ["build", fixture(), "-o", os.path.join(tmpdir("print_after"), "bad"), "--print-after", "fusion"]):
        p = run([LLMCC] + args, check=False)
        assert p.returncode != 0 and p.stdout == "", (p.returncode, p.stdout)
        names = ", ".join(s for s, _ in STAGES)
        assert p.stderr == "llmcc: --print-after: unknown stage 'fusion' (%s, all)\n" % names, p.stderr
    p = run([LLMCC, "compile", fixture(), "--print-after"], check=False)
    assert p.returncode != 0 and "--print-after" in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_help_names_every_stage():
    h = run([LLMCC, "--help"]).stdout
    para = h[h.index("--print-after STAGE"):]
    para = " ".join(para[:para.index("\n  --", 1)].split())
    for stage, _ in STAGES:
        assert stage in para, (stage, para)
