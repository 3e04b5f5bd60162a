"""conftest: how pytest runs llmcc's suite (`make test`; docs/testing.md says how to run a part of it).

- Tiers: every module is in one of TIERS (unit, ops, models, serve, peers), given to its tests as a marker
  (`pytest -m unit`); `make test-quick` runs unit and ops. A module missing from TIERS fails the collection.
- Sanitizers: `make test-asan` runs the tests marked `asan` (ASAN below) with the sanitized compiler, C test
  programs and executables: the C units, the parsers and the fuzzers' regressions, the compiler over every
  fixture, an executable of each target and the server's bad requests.
- Builds: the C compilers of the emitted projects and of the tests' own programs go through ccache (a cache
  under build/tests/ccache, so a second run on an unchanged tree compiles nothing), and the emitted CPU
  kernels are built as the one clone this CPU's executable would choose when it starts (-DLLMCC_ONE_CLONE=4
  or 3, runtime/cpu_gemm.h: the same code as that clone; -march for the whole file was not: helpers that a
  clone calls stay baseline code, and their rounding moved a bf16 model's greedy ids); LLMCC_TEST_CLONES=1 in
  the environment builds all three as users get them.
- Cores: under pytest-xdist each worker runs on its own share of the cores (sched_setaffinity, inherited by
  what it starts), so an executable's threads never compete with the other worker's; the tests that are about
  threads ask for them (--threads 2: test_e2e's fixture checks, test_cpu_target).
- Order: under `--dist loadfile` a module's tests stay on one worker, in the order they are written (they
  share module-level state: an executable built on first use, a server); the slowest modules are handed out
  first (SLOW_FIRST; pytest-xdist's own reordering off), so that the workers finish together. What two modules
  share (a fixture, an executable, a C program) is made under a lock (testlib.once)."""
import os
import shutil

import pytest

from testlib import ROOT, TMP

TIERS = {
    "unit": ["test_bad_input", "test_config_keys", "test_fuzz_regressions", "test_gguf", "test_gguf_tokenizer",
             "test_loaders", "test_print_after", "test_reference", "test_runtime", "test_tokenizer", "test_chat",
             "test_house", "test_plan", "test_chat_template", "test_grammar"],
    "ops": ["test_argmax", "test_bench_ops", "test_cpu_gemm", "test_cpu_target", "test_epilogues", "test_flash",
            "test_mma", "test_ops", "test_quant", "test_sass_report", "test_topk", "test_torch_expr"],
    "models": ["test_default_model", "test_e2e", "test_families", "test_fullsize", "test_gguf_model"],
    "serve": ["test_serve"],
    "peers": ["test_smollm2", "test_smollm2_gguf"],
}
TIER_OF = {m: t for t, ms in TIERS.items() for m in ms}

# make test-asan: whole modules, or module::test
ASAN = ["test_bad_input", "test_config_keys", "test_grammar::test_compile_errors",
        "test_grammar::test_json_object_grammar_is_json_loads", "test_grammar::test_grammars_against_references",
        "test_grammar::test_json_prefixes_keep_going", "test_fuzz_regressions", "test_gguf", "test_gguf_tokenizer",
        "test_loaders", "test_runtime", "test_cpu_gemm", "test_print_after", "test_plan", "test_chat_template",
        "test_tokenizer::test_qwen2_llamacpp_vectors", "test_tokenizer::test_llama2_spm_llamacpp_vectors",
        "test_tokenizer::test_gpt2_missing_byte_tokens", "test_tokenizer::test_invalid_utf8_and_odd_input",
        "test_tokenizer::test_corrupt_blobs_do_not_crash", "test_tokenizer::test_user_errors",
        "test_e2e::test_compile_every_ir_level", "test_e2e::test_compiler_over_every_fixture",
        "test_e2e::test_real_configs_compile", "test_e2e::test_llama_gqa_f32",
        "test_e2e::test_kv_cache_dtypes", "test_e2e::test_build_refuses_foreign_dir_and_leaves_nothing_on_failure",
        "test_serve::test_bad_requests_named", "test_serve::test_json_strictness", "test_serve::test_protocol_edges",
        "test_serve::test_huge_body_refused", "test_serve::test_api_key", "test_serve::test_tokenize_detokenize",
        "test_serve::test_model_name_and_token_id_prompts", "test_serve::test_cors_and_access_log",
        "test_serve::test_metrics_move_as_requests_queue_and_run", "test_serve::test_json_object_and_grammar_replies",
        "test_serve::test_grammar_on_the_command_line",
        "test_chat::test_chat_from_a_pipe_and_the_prompt_on_stdin",
        "test_chat::test_chat_on_a_terminal_past_the_context_clear_and_bye"]

# the slowest modules first (their seconds in one process before pytest-xdist, AMD EPYC Zen 4, 2 cores:
# 220, 189, 179, 150, 124, 123, 117, 90, 60, 53, 51, 43, 40, 38, 33, 32; the rest less)
SLOW_FIRST = ["test_bench_ops", "test_gguf_model", "test_quant", "test_fullsize", "test_families", "test_mma",
              "test_e2e", "test_cpu_target", "test_smollm2_gguf", "test_serve", "test_sass_report", "test_topk",
              "test_chat", "test_epilogues", "test_torch_expr", "test_default_model"]


def _setup_environment():
    """The environment every test's commands inherit (see the header)."""
    cache = os.path.join(TMP, "ccache")
    os.makedirs(cache, exist_ok=True)
    if shutil.which("ccache"):
        os.environ.setdefault("CC", "ccache gcc")
        os.environ.setdefault("NVCC", "ccache nvcc")
        os.environ.setdefault("CCACHE_DIR", cache)
        os.environ.setdefault("CCACHE_BASEDIR", ROOT)
        os.environ.setdefault("CCACHE_NOHASHDIR", "1")   # every project's copy of runtime/ is one cache entry
        os.environ.setdefault("CCACHE_MAXSIZE", "4G")
    if os.environ.get("LLMCC_TEST_CLONES") != "1" and "CFLAGS" not in os.environ and _isa():
        os.environ["CFLAGS"] = "-DLLMCC_ONE_CLONE=" + _isa()[-1]
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cpus = sorted(os.sched_getaffinity(0))
    if worker and 1 < count <= len(cpus):
        # each worker on its own cores: an executable's OpenMP team (one thread per core it may run on) then
        # never shares a core with the other worker's, which made barrier-bound runs three times slower
        share = len(cpus) // count
        k = int(worker[2:])
        os.sched_setaffinity(0, cpus[k * share:(k + 1) * share])
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def _isa():
    """The x86-64 level target_clones would choose on this CPU (runtime/cpu_gemm.h's CPU_KERNEL), or None"""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return None
    v3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"}
    v4 = v3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    return "x86-64-v4" if v4 <= set(flags) else "x86-64-v3" if v3 <= set(flags) else None


_setup_environment()


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False   # SLOW_FIRST's order, not pytest-xdist's (its most tests first)
    for tier in TIERS:
        config.addinivalue_line("markers", "%s: the %s tier (tests/conftest.py TIERS)" % (tier, tier))
    config.addinivalue_line("markers", "asan: run by make test-asan under the sanitizers (tests/conftest.py ASAN)")


def pytest_collection_modifyitems(config, items):
    missing = sorted({it.module.__name__ for it in items if it.module.__name__ not in TIER_OF})
    if missing:
        raise pytest.UsageError("tests/conftest.py: TIERS: no tier for %s" % ", ".join(missing))
    for it in items:
        mod = it.module.__name__
        it.add_marker(getattr(pytest.mark, TIER_OF[mod]))
        if mod in ASAN or "%s::%s" % (mod, it.name) in ASAN:
            it.add_marker(pytest.mark.asan)
    rank = {m: i for i, m in enumerate(SLOW_FIRST)}
    items.sort(key=lambda it: rank.get(it.module.__name__, len(rank)))
