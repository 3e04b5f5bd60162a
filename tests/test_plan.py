"""test_plan: the plan stage (compiler/plan.c, `--ir plan`) decides what a model's host code runs and the emitter
only prints it. Checked from both printouts, on tiny fixtures and real configs, for the cpu, cuda-emu and cuda
targets: each path of the plan (model_forward, model_forward_batch, decode_step) and the function model.c /
model.cu emits for it hold the same loops over the decoder layers, the same layers printed alone, as many
launches, barriers and per-token loops; the _tokens kernels defined are the variants the plan says the batch
calls. The plan's verifier finds the barriers a faulty plan leaves out (knob debug_plan_barrier). And the
emitted text's shape: no line over 120 columns; an index a kernel's block computes in several statements is
named once (the name_indices stage)."""
import os
import re
import shutil

import pytest

from testlib import LLMCC, model_fixture, run, shared, tmpdir

HEAD = re.compile(r"^(model_forward|model_forward_batch|decode_step): (\d+) steps(.*)$", re.M)


def plan_sections(text):
    """{path: (header's remark, [the section's lines])}"""
    out, heads = {}, list(HEAD.finditer(text))
    for i, m in enumerate(heads):
        end = text.find("\n\n", m.end())
        out[m.group(1)] = (m.group(3), text[m.end():end if end >= 0 else len(text)].splitlines())
    return out


def emitted_function(src, path):
    opener = {"model_forward": "int model_forward(Model *m",
              "model_forward_batch": "int model_forward_batch(Model *m",
              "decode_step": "static void decode_step(Model *m) {"}[path]
    start = src.index(opener)
    return src[start:src.index("\n}\n", start)]


def plan_facts(lines):
    steps = [l for l in lines if "  # " in l]
    return {
        "launches": len(steps),
        "barriers": sum("barrier; " in l for l in steps),
        "per_token": sum("[per_token]" in l for l in steps),
        "loops": [(int(a), int(b) + 1) for a, b in (re.match(r"  for l in (\d+)\.\.(\d+):", l).groups()
                                                    for l in lines if l.startswith("  for l in "))],
        "alone": [int(re.match(r"  layer (\d+) alone:", l).group(1)) for l in lines if l.endswith(" alone:")],
    }


def emitted_facts(body):
    return {
        # a launch: the CPU's call statement, the GPU's <<<grid, block>>> (not LAUNCH_CHECK's "k_..." string)
        "launches": len(re.findall(r"\bk_\w+(?:<<<|\()", body)),
        "barriers": body.count("#pragma omp barrier"),
        "per_token": body.count("/* each token: n = 1"),
        "loops": [(int(a), int(b)) for a, b in re.findall(r"for \(int l = (\d+); l < (\d+); l\+\+\) \{ /\* decoder", body)],
        "alone": [int(x) for x in re.findall(r"/\* layer (\d+): its launches differ", body)],
    }


def check_model(model, target, knobs=()):
    args = [LLMCC, "compile", model] + [a for k in knobs for a in ("--knob", k)]
    tgt = ["--ir", "cuda"] if target == "cuda" else ["--ir", "c", "--target", target]
    plan = run(args + ["--ir", "plan", "--target", target]).stdout
    src = run(args + tgt).stdout
    assert plan.startswith("# plan IR: %s" % target), plan[:80]
    sections = plan_sections(plan)
    want = {"model_forward", "model_forward_batch"} | ({"decode_step"} if target != "cpu" else set())
    assert set(sections) == want, sorted(sections)
    for path, (remark, lines) in sections.items():
        body = emitted_function(src, path)
        facts = plan_facts(lines)
        if "not in this build" in remark:   # the batch's -1: the plan's steps are not printed
            assert path == "model_forward_batch" and "return -1;" in body and not re.search(r"\bk_\w+(<<<|\()", body)
            continue
        assert emitted_facts(body) == facts, (model, target, path)
        assert facts["launches"] > 0 and (target != "cpu" or facts["barriers"] > 0), (path, facts)
    m = re.search(r"^_tokens variants called: (\d+)(.*)$", plan, re.M)
    called = {s.strip() for s in m.group(2).split(",") if s.strip()}
    assert int(m.group(1)) == len(called)
    # a variant takes the tokens' positions (k_embed_tokens, HF's embed_tokens, is no variant)
    variants = re.findall(r"static void (k_\w+_tokens)\(int64_t grid, int64_t n, int64_t pos,\s+const int \*restrict "
                          r"positions", src)
    assert set(variants) == called, (model, target)
    return sections


def real_config(name):
    d = os.path.join(tmpdir("plan"), name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(shared("hf-configs", name + ".config.json"), os.path.join(d, "config.json"))
    return d


@pytest.mark.parametrize("target", ["cpu", "cuda-emu", "cuda"])
def test_a_fixture_is_emitted_as_planned(target):
    check_model(model_fixture("llama-gqa", "bf16"), target)
    check_model(model_fixture("qwen3", "f32"), target, ["gemm_min_n=2"])


@pytest.mark.parametrize("target", ["cpu", "cuda-emu", "cuda"])
def test_a_real_model_is_emitted_as_planned(target):
    sections = check_model(real_config("Qwen2.5-7B"), target)
    # its 28 layers: one loop on every path, all of them in it (the embedding's gather a step before the loop)
    for path, (_, lines) in sections.items():
        facts = plan_facts(lines)
        assert facts["loops"] == [(0, 28)] and not facts["alone"], (path, facts)
        assert not any("where l is" in l for l in lines), (path, [l for l in lines if "where l is" in l])


def test_split_k_builds_have_no_batch():
    # split-K kernels share one workspace: model_forward_batch is -1 in such a build, and the plan says so
    sections = check_model(model_fixture("llama-gqa", "bf16"), "cuda-emu", ["gemv_split_k=4"])
    assert "not in this build" in sections["model_forward_batch"][0]


def test_the_verifier_finds_a_missing_barrier():
    d = model_fixture("llama-gqa", "f32")
    p = run([LLMCC, "compile", d, "--ir", "plan", "--target", "cpu", "--knob", "debug_plan_barrier=1"], check=False)
    assert p.returncode != 0 and "IR verifier after stage plan" in p.stderr, p.stderr
    assert re.search(r"model_forward: step \d+ \(\S+\) and step \d+ \(\S+\) conflict with no barrier", p.stderr)
    # the GPU targets' plans have no team and so no barriers to leave out
    run([LLMCC, "compile", d, "--ir", "plan", "--target", "cuda-emu", "--knob", "debug_plan_barrier=1"])


@pytest.mark.parametrize("target", ["cpu", "cuda-emu", "cuda"])
def test_emitted_lines_fit_120_columns(target):
    tgt = ["--ir", "cuda"] if target == "cuda" else ["--ir", "c", "--target", target]
    for model in (real_config("Qwen2.5-7B"), real_config("Qwen3-8B"), model_fixture("llama-gqa", "bf16")):
        src = run([LLMCC, "compile", model] + tgt).stdout
        long = [l for l in src.splitlines() if len(l) > 120]
        assert not long, (model, target, len(long), long[:2])


def test_indices_are_named_once():
    # Qwen2.5-7B's q projection with RoPE (cpu_rows, a RoPE pair's halves): the row of the pair's first half is
    # ((p / 64) * 128) + (p % 64); before name_indices, each of the 32 statements of the 8-token body wrote it out
    # (the body now a loop over the tokens: the row once per dot product and twice in the loop's statements)
    model = real_config("Qwen2.5-7B")
    src = run([LLMCC, "compile", model, "--ir", "c", "--target", "cpu"]).stdout
    start = src.index("static void k_self_attn_q_proj_rotary_q_tokens(")
    body = src[start:src.index("\n}\n", start)]
    row = re.compile(r"\(\(\(p_(\d+) / 64LL\) \* 128LL\) \+ \(p_\1 % 64LL\)\)")
    loops = re.findall(r"for \(int64_t p_(\d+) = ", body)
    assert len(loops) == 1, loops   # the rows, for eight tokens at a time
    assert len(row.findall(body)) == len(loops), row.findall(body)
    assert len(re.findall(r"const int64_t i_\d+ = \(\(\(p_\d+ / 64LL\) \* 128LL\)", body)) == len(loops)
    # the kernel IR says the same, and the stage is there to print after
    after = run([LLMCC, "compile", model, "--target", "cpu", "--print-after", "name_indices"]).stdout
    assert after.startswith("# kernel IR") and "let i = " in after


def test_gpu_indices_are_named_where_ptxas_said():
    # on the GPU's kernels name_indices names what saved registers on Qwen2.5-7B (scripts/ptxas_report): gemv and
    # flash_decode everywhere, gemm_tc only in its epilogue (after the K loop's last wait; in the loop a name kept
    # registers live) and not where an element has two stores (RoPE's halves)
    src = run([LLMCC, "compile", real_config("Qwen2.5-7B"), "--ir", "cuda"]).stdout

    def named(kernel):
        start = src.index("void __launch_bounds__")   # the kernels' section
        start = src.index(" %s(" % kernel, start)
        body = src[start:src.index("\n}\n", start)]
        wait = body.rfind("cp.async.wait_group 0")
        return body[:wait].count("const int64_t i_"), body[wait:].count("const int64_t i_")
    assert named("k_self_attn_v_proj")[0] > 0
    for tc in ("k_self_attn_o_proj_tc", "k_mlp_gate_proj_up_proj_tc", "k_mlp_down_proj_residual_tc"):
        loop, epilogue = named(tc)
        assert loop == 0 and epilogue > 0, (tc, loop, epilogue)
    assert named("k_self_attn_q_proj_rotary_q_tc") == (0, 0)
