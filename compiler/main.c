/* main.c: the llmcc command line.
 *   llmcc compile MODEL --ir LEVEL      print one IR level (config.json only)
 *   llmcc build MODEL -o DIR            write a self-contained project
 *   llmcc inspect MODEL                 config and tensors of a checkpoint
 *   llmcc inspect FILE.gguf             header, metadata and tensors of a GGUF file (--config-only: the config)
 *   llmcc tokenize DIR [TEXT] / detokenize DIR ID...   (DIR or FILE.gguf)
 * MODEL is a Hugging Face directory or a GGUF file (gguf_model.h) wherever a model is taken.
 */
#include "driver.h"
#include "emit_harness.h"
#include "gguf_model.h"
#include "pack.h"
#include "quant.h"
#include "tokenizer_pack.h"
#include "../runtime/payload.h"
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);

#define INSPECT_GGUF_USAGE "usage: llmcc inspect FILE.gguf [--config-only] [--config-keys] [--ignore-config-key KEY]..."

/* inspect's MODEL argument (NULL when none): the first that is no option or option value */
static const char *inspect_model(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ignore-config-key")) i++;
        else if (argv[i][0] != '-') return argv[i];
    }
    return NULL;
}

/* `llmcc inspect FILE.gguf`: the file as it is (gguf_print); --config-only: the config llmcc reads from it, as
 * `llmcc inspect DIR` prints a directory's; --config-keys: that, then how each metadata key is treated. Here, not
 * in cmd_inspect.c, which tests/c/st_dump.c links without the GGUF reader. argv[0] is "inspect". */
static int cmd_inspect_gguf(int argc, char **argv) {
    bool config_only = false, config_keys = false;
    const char *ignore[32];
    ConfigOptions co = {ignore, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config-only")) config_only = true;
        else if (!strcmp(argv[i], "--config-keys")) config_keys = true;
        else if (!strcmp(argv[i], "--ignore-config-key")) {
            if (i + 1 == argc) die_user(NULL, argv[i], "needs a value");
            parse_ignore_key(&co, ignore, argv[++i]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf(INSPECT_GGUF_USAGE "\nPrints the file's header, metadata and tensors; --config-only: the config "
                   "llmcc reads from it;\n--config-keys: and how each metadata key is treated (read, inert, "
                   "ignored).\n");
            return 0;
        } else if (argv[i][0] == '-') die_user(NULL, argv[i], "unknown option (" INSPECT_GGUF_USAGE ")");
        else if (argv[i] != inspect_model(argc - 1, argv + 1)) die_user(NULL, argv[i], "unexpected argument");
    }
    Arena a = {0};
    const char *path = inspect_model(argc - 1, argv + 1);
    if (config_only || config_keys) {
        GgufModel m;
        ModelConfig cfg;
        gguf_model_open(&a, path, &co, &m, &cfg);
        model_config_print(&cfg);
        for (int k = 0; config_keys && k < m.file.n_kv; k++) {
            const char *key = m.file.kv[k].key, *cls = gguf_key_class(m.arch_name, key);
            printf("config_key: %s %s\n", key, cls ? cls : "ignored");
        }
        gguf_model_close(&m);
    } else {
        GgufFile g;
        gguf_open(&a, path, &g);
        gguf_print(&g, stdout);
        gguf_close(&g);
    }
    arena_free(&a);
    return 0;
}

#define LLMCC_VERSION "0.1.0"
#ifndef LLMCC_COMMIT
#define LLMCC_COMMIT ""   /* the Makefile's: git rev-parse --short HEAD */
#endif
/* "llmcc 0.1.0 (commit 1b5a5f5)": what made a project, in its marker and its executable's --version */
static const char *made_by(Arena *a) {
    return arena_printf(a, "llmcc %s%s%s%s", LLMCC_VERSION, *LLMCC_COMMIT ? " (commit " : "", LLMCC_COMMIT,
                        *LLMCC_COMMIT ? ")" : "");
}
#define PROJECT_MARKER ".llmcc-project"

static const char USAGE[] =
    "usage: llmcc COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  compile MODEL --ir LEVEL   print the model at one IR level: graph, tensor, loop, tile,\n"
    "                             kernel, plan (the host code's steps, loops and barriers), cuda, c\n"
    "                             (needs only MODEL/config.json)\n"
    "  compile -c EXPR --ir LEVEL the same for one PyTorch expression, e.g.\n"
    "                             -c \"nn.RMSNorm(2048)(torch.randn(1, 32, 2048))\" (see below)\n"
    "  compile MODEL --layer N --ir LEVEL   decoder layer N alone (input: hidden states [n, hidden])\n"
    "  run -c EXPR [--bench] [--profile]    compile EXPR, run it on random inputs, check it against a\n"
    "                             plain double-precision reference; --bench: time, GB/s, FLOP/s;\n"
    "                             --profile: time per kernel; both add `bench: name=... ms=...` lines;\n"
    "                             --cold: each timed call after a flush of the caches (GPU: twice its L2),\n"
    "                             so that the weights come from memory as in a whole model's step;\n"
    "                             --no-check: skip the reference (only checks the output is finite),\n"
    "                             for shapes where it would take minutes; --seed N, --iters N, --dump DIR\n"
    "                             (inputs, weights and output as .npy), --target cpu|cuda-emu|cuda\n"
    "                             (default: cuda when nvidia-smi finds a GPU, else cpu), --knob NAME=VALUE\n"
    "  run MODEL --layer N [--tokens N] [--pos P]   the same for decoder layer N over N tokens\n"
    "                             (default 5) at position P (default 0; the KV cache rows before P are\n"
    "                             seeded random values, the reference reads the same), with the\n"
    "                             checkpoint's weights (random without them); --kv-dtype f32|bf16 (the\n"
    "                             target's default, below): the cache's dtype, which the reference rounds to\n"
    "  build MODEL -o DIR         write a self-contained project to DIR; `make -C DIR` builds it\n"
    "  inspect MODEL              print the parsed config and the checkpoint's tensors\n"
    "  inspect FILE.gguf          print a GGUF file's header, metadata and tensors (--config-only: the\n"
    "                             config llmcc reads from it; --config-keys: and how each key is treated)\n"
    "  tokenize DIR [TEXT]        print the ids of TEXT (or of standard input); DIR may be FILE.gguf\n"
    "                             (--chat [--system S], --chat-messages F.json: after the chat template)\n"
    "  detokenize DIR ID...       print the text of the ids (DIR or FILE.gguf)\n"
    "  chat-template SOURCE --messages F.json [--add-generation-prompt] [--tools F.json] [--kwargs JSON]\n"
    "                             print what the chat template of SOURCE (a model directory, GGUF file or\n"
    "                             .jinja file) renders for the conversation (see chat-template --help)\n"
    "\n"
    "EXPR: torch.randn/zeros/ones(*size, dtype=torch.float32|bfloat16|float16), nn.Linear(in, out,\n"
    "  bias=True), nn.RMSNorm(dim, eps=None), nn.Softmax(dim=-1), nn.SiLU(), F.silu, F.softmax(x, dim=-1),\n"
    "  F.scaled_dot_product_attention(q, k, v, is_causal=False, scale=None), torch.matmul, + - * / @,\n"
    "  numbers, parentheses, variables (NAME = EXPR; ... EXPR: a tensor or module bound once and used again);\n"
    "  torch.nn.functional. may be written F., torch.nn. nn.; nn.Linear(..., dtype=llmcc.q8_0|q4_0|q4_1|q5_0|\n"
    "  q5_1|q4_k|q5_k|q6_k): the weight in GGUF's blocks of 32 (llama.cpp's Q8_0, Q4_0, Q4_1; Q5_0, Q5_1: random\n"
    "  blocks) or super-blocks of 256 (Q4_K, Q5_K, Q6_K: random blocks)\n"
    "\n"
    "MODEL is a directory with config.json, a name under models/, ORG/NAME in the Hugging Face\n"
    "cache ($HF_HOME/hub or ~/.cache/huggingface/hub), or a GGUF file (architectures llama, qwen2,\n"
    "qwen3; tensors F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).\n"
    "\n"
    "compile / build options:\n"
    "  --target cpu|cuda-emu|cuda code for the CPU (its own schedules, C + OpenMP), the GPU's schedules run\n"
    "                             exactly on the CPU (C; the tool that checks them without a GPU), or NVIDIA\n"
    "                             GPUs (CUDA) (default: cuda; --ir c: cpu; build: cuda where nvidia-smi finds a\n"
    "                             GPU, else cpu)\n"
    "  --name NAME                executable name (default: the family: llama, qwen, qwen3, mistral)\n"
    "  --arch SM                  CUDA architecture (default: sm_90)\n"
    "  --ctx N                    KV-cache positions (default: min(max_position_embeddings, 8192))\n"
    "  --max-batch N              most tokens per forward call, i.e. the prefill chunk (default: 64)\n"
    "  --kv-dtype f32|bf16        the KV cache's elements (default: bf16 for cuda and cuda-emu, f32 for cpu);\n"
    "                             bf16 stores each key and value rounded to nearest even (half the traffic)\n"
    "  --print-after STAGE        print the IR right after pipeline stage STAGE ran and was verified, on\n"
    "                             stdout (with its level's printer): frontend, select_layer, decompose,\n"
    "                             plan_memory, lift_loops, flash_attention, fuse, fuse_epilogues, schedule,\n"
    "                             materialise, cleanup, name_indices, plan; `all`: after every stage, each under\n"
    "                             a line naming it\n"
    "                             (compile: then --ir is optional; build: the project is written as usual)\n"
    "  --knob NAME=VALUE          pin a schedule parameter (flat_block, reduce_block_max, gemv_*, gemm_*,\n"
    "                             flash (0: plain attention), flash_split, flash_tokens, flash_min_n, fuse\n"
    "                             (0: no fusion at all), cpu_* (cpu_qdot_q8=0: block-type weights' decode\n"
    "                             with f32 activations, not 8-bit; cpu_rows_bf16=0 and cpu_gemm_bf16=0: bf16\n"
    "                             weights with f32 activations; cpu_prefetch=BYTES: how far ahead of their\n"
    "                             loads the decode dot products prefetch the weights, 0: not), debug_*;\n"
    "                             --ir tile prints them all)\n"
    "  --dtype f32|f16|bf16       convert every weight to this dtype (default: as stored; with no\n"
    "                             weights, torch_dtype)\n"
    "  --quant TYPE               quantize the weights as the payload is written, with llama.cpp's reference\n"
    "                             quantizers (as llama-quantize without an importance matrix). llama-quantize's\n"
    "                             names, as it writes them: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K (that type, the\n"
    "                             output matrix in Q6_K), Q4_K_S, Q4_K_M (or Q4_K), Q5_K_M (or Q5_K) (more bits\n"
    "                             for some layers' v_proj and down_proj), each with its fallbacks where rows\n"
    "                             are not whole blocks (q5_0, q5_1, q8_0, f16). ggml's block types in lower\n"
    "                             case: q8_0, q4_0, q4_1, q5_0, q5_1 (blocks of 32), q4_k, q5_k, q6_k (256):\n"
    "                             that type for the linears alone, where rows are whole blocks; the embedding,\n"
    "                             lm_head, norms and biases keep their dtype\n"
    "  --quant-all                with --quant in lower case: the embedding and lm_head too\n"
    "  --random-weights SEED      (build) ignore any weights: pack deterministic random ones (MODEL\n"
    "                             needs only config.json; for benchmarks and shape tests)\n"
    "  --timings                  (build) print the time of each phase and the peak memory on stderr\n"
    "  --no-chat                  (build) leave the checkpoint's chat template out (the executable then\n"
    "                             has no chat)\n"
    "  --chat-template FILE       (build) this Jinja chat template instead of the checkpoint's\n"
    "  --compress[=LEVEL]         (build) zstd-compress the payload (default level 3): smaller\n"
    "                             executable, decoded on every core at start instead of mmapped\n"
    "  -o DIR                     (build) the output project directory\n"
    "  --ignore-config-key KEY    accept config.json's KEY although llmcc does not know it (or, for keys\n"
    "                             whose other values llmcc does not implement, use the default); only for\n"
    "                             a key you know does not change the model (docs/errors.md); repeatable\n";

typedef struct {
    const char *model, *ir, *out, *name, *arch;
    int print_after;           /* --print-after STAGE (pipeline.h) */
    Target target;
    bool target_given;         /* --target (build's default: cuda where a GPU is, else cpu) */
    int ctx, max_batch;
    Knobs knobs;
    bool force_dtype, random_weights, timings, no_chat;
    const char *chat_template;   /* --chat-template FILE */
    DType quant;                 /* --quant: a block type, or DT_F32 for none */
    bool quant_all;              /* --quant-all */
    int quant_mix;               /* --quant Q4_K_S, Q4_K_M, Q5_K_M (pipeline.h) */
    int compress;
    DType dtype;
    bool kv_dtype_set; DType kv_dtype;   /* --kv-dtype */
    uint64_t seed;
    const char *expr;          /* -c EXPR */
    bool one_layer; int layer; /* --layer N */
    const char *ignore_keys[32]; /* --ignore-config-key KEY */
    ConfigOptions config;
} Opts;


static int parse_int(const char *flag, const char *v, int lo, int hi) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || errno || x < lo || x > hi)
        die_user(NULL, flag, "expects an integer in %d..%d, got '%s'", lo, hi, v ? v : "");
    return (int)x;
}

static void parse_opts(int argc, char **argv, Opts *o, bool build) {
    memset(o, 0, sizeof *o);
    o->target = TARGET_CUDA;
    o->arch = "sm_90";
    o->max_batch = 64;
    knobs_default(&o->knobs);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) die_user(NULL, a, "needs a value"); i++; } while (0)
        if (!strcmp(a, "--ir")) { NEED(); o->ir = v; }
        else if (!strcmp(a, "--print-after")) { NEED(); o->print_after = pipeline_print_after_parse(v); }
        else if (!strcmp(a, "--target")) { NEED(); o->target = parse_target(v); o->target_given = true; }
        else if (!strcmp(a, "-o")) { NEED(); o->out = v; }
        else if (!strcmp(a, "--name")) {
            NEED();
            for (const char *p = v; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      *p == '_' || *p == '-' || *p == '.'))
                    die_user(NULL, "--name", "'%s': use letters, digits, '_', '-', '.'", v);
            if (!*v) die_user(NULL, "--name", "is empty");
            o->name = v;
        }
        else if (!strcmp(a, "--arch")) {
            NEED();
            if (strncmp(v, "sm_", 3)) die_user(NULL, "--arch", "'%s' is not sm_NN", v);
            o->arch = v;
        }
        else if (!strcmp(a, "--ctx")) { NEED(); o->ctx = parse_int(a, v, 1, 1 << 20); }
        else if (!strcmp(a, "--max-batch")) { NEED(); o->max_batch = parse_int(a, v, 1, 4096); }
        else if (!strcmp(a, "--knob")) { NEED(); knobs_set(&o->knobs, v); }
        else if (!strcmp(a, "--no-chat")) o->no_chat = true;
        else if (!strcmp(a, "--chat-template")) { NEED(); o->chat_template = v; }
        else if (!strcmp(a, "--ignore-config-key")) { NEED(); parse_ignore_key(&o->config, o->ignore_keys, v); }
        else if (!strcmp(a, "--dtype")) {
            NEED();
            o->dtype = DT_F32;
            while (o->dtype < DT_I32 && strcmp(v, dtype_names[o->dtype])) o->dtype++;
            if (o->dtype == DT_I32) die_user(NULL, "--dtype", "'%s' is not a weight dtype (f32, f16, bf16)", v);
            o->force_dtype = true;
        }
        else if (!strcmp(a, "--quant")) {
            NEED();
            int d = DT_Q8_0;   /* the block types quant.c has a quantizer for */
            /* llama-quantize's names (Q4_0, Q4_K_M): its mix; ggml's (q4_0, q4_k): that block type, linears only */
            o->quant_mix = quant_mix_of_name(v);
            if (o->quant_mix) v = dtype_names[quant_mix_base[o->quant_mix]];
            while (d < DT_COUNT && (!quant_has_quantizer((uint32_t)d) || strcasecmp(v, dtype_names[d]))) d++;
            if (d == DT_COUNT) {
                Str names = {0};
                for (int q = DT_Q8_0; q < DT_COUNT; q++)
                    if (quant_has_quantizer((uint32_t)q))
                        str_printf(&names, "%s%s", names.len ? ", " : "", dtype_names[q]);
                die_user(NULL, "--quant", "'%s' is not a block type llmcc quantizes into (%s) or one of "
                         "llama-quantize's types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K, Q4_K_S, Q4_K_M, Q5_K_M)",
                         v, names.s);
            }
            o->quant = (DType)d;
        }
        else if (!strcmp(a, "--quant-all")) o->quant_all = true;
        else if (!strcmp(a, "--kv-dtype")) { NEED(); o->kv_dtype = parse_kv_dtype(v); o->kv_dtype_set = true; }
        else if (!strcmp(a, "--random-weights")) {
            NEED();
            char *end;
            errno = 0;
            unsigned long long x = strtoull(v, &end, 10);
            if (!*v || *end || errno || v[0] == '-')
                die_user(NULL, "--random-weights", "expects a seed (a whole number >= 0), got '%s'", v);
            o->random_weights = true;
            o->seed = x;
        }
        else if (!strcmp(a, "--timings")) o->timings = true;
        else if (!strcmp(a, "--compress")) o->compress = 3;
        else if (!strncmp(a, "--compress=", 11)) o->compress = parse_int("--compress", a + 11, 1, 19);
        else if (!strcmp(a, "-c")) {
            NEED();
            if (build) die_user(NULL, "-c", "build takes a MODEL; an expression runs with llmcc run -c EXPR");
            o->expr = v;
        }
        else if (!strcmp(a, "--layer")) {
            NEED();
            if (build)
                die_user(NULL, "--layer",
                         "one decoder layer is not an executable: use llmcc compile MODEL --layer N --ir LEVEL");
            o->one_layer = true; o->layer = parse_int(a, v, 0, 1 << 20);
        }
        else if (a[0] == '-') die_user(NULL, a, "unknown option (see llmcc --help)");
        else if (!o->model) o->model = a;
        else die_user(NULL, a, "unexpected argument");
#undef NEED
    }
    if (o->model && o->expr) die_user(NULL, "-c", "give either MODEL or -c EXPR, not both");
    if (o->expr && o->one_layer) die_user(NULL, "--layer", "needs a MODEL, not -c EXPR");
    if (!o->model && !o->expr) die_user(NULL, NULL, "no MODEL given (see llmcc --help)");
    if (build && !o->out) die_user(NULL, "-o", "build needs an output directory: -o DIR");
    /* build: the executable runs here, as make's default model does: cuda where a GPU is, else cpu (said) */
    if (build && !o->target_given && !gpu_present()) o->target = TARGET_CPU;
    if (!build && !o->ir && !o->print_after)
        die_user(NULL, "--ir", "compile needs a level: --ir graph|tensor|loop|tile|kernel|cuda|c "
                 "(or --print-after STAGE)");
}


static void setup(Compilation *c, const Opts *o, bool weights) {
    memset(c, 0, sizeof *c);
    c->expr = o->expr; c->one_layer = o->one_layer; c->layer = o->layer;
    c->print_after = o->print_after;
    c->knobs = o->knobs;
    c->target = o->target;
    if (o->expr) { c->max_batch = c->max_ctx = 1; return; }
    const char *dir = open_model(c, o->model, &o->config);
    c->max_batch = o->max_batch;
    c->kv_dtype = o->kv_dtype_set ? o->kv_dtype : kv_dtype_default(o->target);
    c->max_ctx = o->ctx ? o->ctx : (c->cfg.max_position_embeddings < 8192 ? c->cfg.max_position_embeddings : 8192);
    model_config_check_context(&c->cfg, c->max_ctx);
    c->force_dtype = o->force_dtype;
    c->weight_dtype = o->dtype;
    if (o->quant_all && (o->quant_mix || !dtype_is_quant(o->quant)))
        die_user(NULL, "--quant-all", "goes with a block type in lower case (--quant q4_0); %s",
                 o->quant_mix ? "llama-quantize's mixes choose the embedding's and output's types themselves"
                              : "there is no --quant");
    c->quant = o->quant;
    c->quant_all = o->quant_all;
    c->quant_mix = o->quant_mix;
    /* a GGUF file's tensors come with its metadata: compile reads their dtypes too */
    if (c->gguf && !(weights && o->random_weights)) {
        gguf_model_tensors(&c->A, c->gguf, &c->cfg, &c->st);
        c->have_weights = true;
    } else if (!c->gguf && weights && !o->random_weights) {
        st_open_dir(&c->A, dir, &c->st);
        c->have_weights = true;
        check_layers_held(&c->A, &c->cfg, &c->st);
    }
}


/* what emit_program says of the model beyond its kernels */
static EmitOptions emit_options(const Compilation *c, Target t, const char *name) {
    const ModelConfig *m = &c->cfg;
    EmitOptions eo = {t, m->dir, {name, m->architecture, NULL, m->vocab_size, m->hidden_size,
                                  m->intermediate_size, m->num_hidden_layers, m->num_attention_heads,
                                  m->num_key_value_heads, m->head_dim, c->max_ctx, c->max_batch, m->bos_token_id,
                                  m->n_eos, {0}, (float)m->temperature, (float)m->top_p, (float)m->min_p,
                                  (float)m->repetition_penalty, m->top_k, 0, NULL, 0, 0, 0, NULL, {NULL}}};
    CHECK(m->n_eos <= MODEL_MAX_EOS, "%d eos ids", m->n_eos);
    memcpy(eo.info.sampling_from, m->sampling_from, sizeof eo.info.sampling_from);
    memcpy(eo.info.eos_ids, m->eos_token_ids, sizeof(int) * (size_t)m->n_eos);
    return eo;
}

static int cmd_compile(int argc, char **argv) {
    Opts o;
    parse_opts(argc, argv, &o, false);
    /* --print-after alone: the stages up to that one (all of them for `all`), no --ir printout */
    IrLevel level = o.ir ? ir_level_parse(o.ir) : pipeline_print_after_level(o.print_after);
    /* --ir c prints C for the CPU (cpu, or cuda-emu when asked), --ir cuda for the GPU */
    if (level == IR_C && o.target == TARGET_CUDA) o.target = TARGET_CPU;
    if (level == IR_CUDA) o.target = TARGET_CUDA;
    Compilation c;
    setup(&c, &o, false);
    Str out = {0}, after = {0};
    c.print_out = &after;
    pipeline_run(&c, level, o.ir ? &out : NULL);
    /* (without --ir, level is at most IR_PLAN: nothing else to print) */
    if (level >= IR_CUDA && (c.expr || c.one_layer)) {
        /* not a model: the program llmcc run would build around the kernels */
        const char *title = c.expr ? c.expr : arena_printf(&c.A, "layer %d of %s", c.layer, c.cfg.dir);
        HarnessOptions ho = {o.target, title, c.max_batch, 0, false};
        emit_harness(&out, &c.kp, &ho);
    } else if (level >= IR_CUDA) {
        EmitOptions eo = emit_options(&c, o.target, o.name ? o.name : c.cfg.family);
        emit_program(&out, &c.kp, &c.plan, &eo);
    }
    /* --print-after's stages come first: they ran before --ir's level was printed, or were the last ones run */
    if (after.len) fwrite(after.s, 1, after.len, stdout);
    if (out.len) fwrite(out.s, 1, out.len, stdout);
    str_free(&after);
    str_free(&out);
    teardown(&c);
    return 0;
}

/* ---- build: everything goes into DIR.tmp-PID, renamed into place at the end ---- */
static const char *g_tmpdir;
static void cleanup_tmp(void) { if (g_tmpdir) rm_rf(g_tmpdir); }

/* OUT.tmp-PID directories that a build which did not finish left (killed: SIGKILL, the OOM killer), their process
 * gone, go before this build makes its own; one line says so. A live PID's is another build's. */
static void sweep_stale(Arena *A, const char *out) {
    const char *slash = strrchr(out, '/');
    const char *parent = slash ? (slash == out ? "/" : arena_strndup(A, out, (size_t)(slash - out))) : ".";
    const char *base = slash ? slash + 1 : out;
    size_t bl = strlen(base);
    DIR *d = opendir(parent);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) || strncmp(n + bl, ".tmp-", 5)) continue;
        char *end;
        long pid = strtol(n + bl + 5, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        const char *path = path_join(A, parent, n);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        rm_rf(path);
        fprintf(stderr, "llmcc: removed %s (left by a build that did not finish)\n", path);
    }
    closedir(d);
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *data = read_file(from, &n);
    if (!data) die_user(from, NULL, "cannot read: %s", strerror(errno));
    write_file_atomic(to, data, n);
    free(data);
}

static char *replace_all(const char *s, const char *key, const char *val) {
    Str o = {0};
    size_t kl = strlen(key);
    for (const char *p = s; *p;) {
        const char *q = strstr(p, key);
        if (!q) { str_append(&o, p, strlen(p)); break; }
        str_append(&o, p, (size_t)(q - p));
        str_append(&o, val, strlen(val));
        p = q + kl;
    }
    if (!o.s) str_append(&o, "", 0);
    return o.s;
}

/* This process's peak resident memory in MiB (Linux's VmHWM), or -1 where it
 * cannot be read. Not getrusage: its ru_maxrss also counts the pages of the
 * process that exec'd us (a test runner's Python), VmHWM belongs to our own
 * address space only. */
static double peak_memory_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

static int cmd_build(int argc, char **argv) {
    Opts o;
    parse_opts(argc, argv, &o, true);
    Compilation c;
    setup(&c, &o, true);
    Arena *A = &c.A;
    const char *root = llmcc_root(A);
    if (!root) die_user("/proc/self/exe", NULL, "cannot find llmcc's own directory (runtime/, templates/)");
    const char *name = o.name ? o.name : c.cfg.family;

    /* refuse to replace a directory llmcc did not make */
    const char *out = o.out;
    size_t ol = strlen(out);
    while (ol > 1 && out[ol - 1] == '/') ol--;
    out = arena_strndup(A, out, ol);
    if (dir_exists(out) && !file_exists(path_join(A, out, PROJECT_MARKER)))
        die_user(out, NULL, "exists and was not made by llmcc build (no %s): refusing to replace it", PROJECT_MARKER);
    if (!dir_exists(out) && file_exists(out)) die_user(out, NULL, "exists and is not a directory");

    double t_start = now_s();
    Str after = {0};
    c.print_out = &after;
    pipeline_run(&c, IR_PLAN, NULL);
    if (c.quant_mix) {   /* what the mix gave each matrix, by dtype */
        fprintf(stderr, "llmcc: --quant %s:", quant_mix_names[c.quant_mix]);
        for (int d = 0, first = 1; d < DT_COUNT; d++)
            if (c.n_of_dtype[d]) {
                fprintf(stderr, "%s %d %s", first ? "" : ",", c.n_of_dtype[d], dtype_names[d]);
                first = 0;
            }
        fprintf(stderr, " (llama-quantize's mix)\n");
    } else if (dtype_is_quant(c.quant)) {   /* what --quant did, so that no matrix is left out without a word */
        fprintf(stderr, "llmcc: --quant %s: %d matrices quantized", dtype_names[c.quant], c.n_quantized);
        if (c.n_unquantized)
            fprintf(stderr, "; %d keep their dtype (their rows, as %lld values, are not whole blocks of %d)",
                    c.n_unquantized, (long long)c.unquantized_row, dtype_block[c.quant]);
        fprintf(stderr, "%s\n", c.quant_all ? "" : "; the embedding and lm_head keep theirs (--quant-all)");
    }
    /* --print-after: the stage's IR on stdout (the build's own messages go to stderr) */
    if (after.len) fwrite(after.s, 1, after.len, stdout);
    fflush(stdout);
    str_free(&after);
    double t_ir = now_s() - t_start, t_cg0 = now_s();

    const char *tmp = arena_printf(A, "%s.tmp-%d", out, (int)getpid());
    sweep_stale(A, out);
    rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) die_user(tmp, NULL, "cannot create: %s", strerror(errno));
    g_tmpdir = tmp;
    atexit(cleanup_tmp);
    if (mkdir(path_join(A, tmp, "runtime"), 0755) != 0) die_user(tmp, "runtime", "cannot create: %s", strerror(errno));

    /* the kernels and the launch plan */
    Str src = {0};
    EmitOptions eo = emit_options(&c, o.target, name);
    emit_program(&src, &c.kp, &c.plan, &eo);
    write_file_atomic(path_join(A, tmp, o.target == TARGET_CUDA ? "model.cu" : "model.c"), src.s, src.len);
    str_free(&src);

    /* the runtime, copied */
    const char *rtdir = path_join(A, root, "runtime");
    DIR *d = opendir(rtdir);
    if (!d) die_user(rtdir, NULL, "cannot open: %s", strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 3 || (strcmp(e->d_name + l - 2, ".c") && strcmp(e->d_name + l - 2, ".h"))) continue;
        copy_file(path_join(A, rtdir, e->d_name), path_join(A, path_join(A, tmp, "runtime"), e->d_name));
    }
    closedir(d);

    /* the Makefile */
    const char *tpl_path =
        path_join(A, root, o.target == TARGET_CUDA ? "templates/Makefile.cuda" : "templates/Makefile.cpu");
    char *tpl = read_file(tpl_path, NULL);
    if (!tpl) die_user(tpl_path, NULL, "cannot read: %s", strerror(errno));
    const char *model_cflags = emit_cflags(o.target);
    char *m1 = replace_all(tpl, "@NAME@", name), *m2 = replace_all(m1, "@ARCH@", o.arch);
    char *m3 = replace_all(m2, "@TARGET@", target_names[o.target]);
    char *m4 = replace_all(m3, "@MODEL_CFLAGS@", model_cflags), *m5 = replace_all(m4, "@MADE_BY@", made_by(A));
    write_file_atomic(path_join(A, tmp, "Makefile"), m5, strlen(m5));
    if (o.compress) {
        const char *mk = arena_printf(A, "# written by llmcc build --compress\nCOMPRESS ?= %d\n", o.compress);
        write_file_atomic(path_join(A, tmp, "options.mk"), mk, strlen(mk));
    }
    free(tpl); free(m1); free(m2); free(m3); free(m4); free(m5);

    double t_codegen = now_s() - t_cg0;
    /* the payload: weights in the order the generated code expects, and the tokenizer */
    size_t tok_size = 0;
    if (o.no_chat && o.chat_template) die_user(NULL, "--chat-template", "and --no-chat: give one");
    TokPackOpts tpo = { .no_chat = o.no_chat, .chat_template = o.chat_template };
    uint8_t *tok = c.gguf ? tokenizer_pack_gguf(A, &c.gguf->file, c.cfg.dir, &tpo, &tok_size)
                          : tokenizer_pack_opts(A, c.cfg.dir, &tpo, &tok_size);
    PackTensor *pt = ARENA_ARRAY(A, PackTensor, c.tp.n_weights ? c.tp.n_weights : 1);
    PackSource *ps = ARENA_ARRAY(A, PackSource, c.tp.n_weights ? c.tp.n_weights : 1);
    uint64_t pack_bytes = 0;
    for (int i = 0; i < c.tp.n_weights; i++) {
        const Buffer *b = c.tp.weights[i];
        pt[i].name = b->name; pt[i].dtype = (uint32_t)b->dtype; pt[i].ndim = b->ndim;
        for (int k = 0; k < b->ndim; k++) pt[i].shape[k] = b->dims[k];
        pack_bytes += (uint64_t)dtype_bytes(b->dtype, buffer_elems(b));
        if (strlen(b->name) >= sizeof(((PayloadTensor *)0)->name))
            die_user(c.cfg.dir, b->name, "tensor name too long for the payload");
        if (o.random_weights) {
            size_t nl = strlen(b->name);
            bool norm = b->ndim == 1 && nl > 11 && !strcmp(b->name + nl - 11, "norm.weight");
            ps[i].fill = norm ? PACK_RANDOM_NORM : PACK_RANDOM;
            ps[i].seed = o.seed;
            continue;
        }
        const StTensor *t = st_find(&c.st, b->name);
        CHECK(t, "weight %s vanished", b->name);
        pt[i].data = t->data; pt[i].nbytes = t->nbytes;
#define ST_BLOCK_PDT(id, name, bytes, block, ggml) [ST_##id] = PDT_##id,
        static const uint32_t pdt[] = {[ST_F32] = PDT_F32, [ST_F16] = PDT_F16, [ST_BF16] = PDT_BF16,
                                       BLOCK_DTYPES(ST_BLOCK_PDT)};
#undef ST_BLOCK_PDT
        CHECK(t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16 || st_is_block(t->dtype),
              "weight %s dtype", b->name);
        uint32_t sdt = pdt[t->dtype];
        if (sdt != pt[i].dtype) { ps[i].convert = true; ps[i].src_dtype = sdt; }
        for (int f = 0; f < c.st.nfiles; f++)
            if (!strcmp(c.st.files[f].path, t->file)) {
                ps[i].src_path = t->file;
                ps[i].src_off = (uint64_t)(t->data - (const uint8_t *)c.st.files[f].base);
            }
        /* a GGUF file: where the bytes lie in it, and llama's q/k rows back in Hugging Face's order */
        if (c.gguf) gguf_model_pack_source(c.gguf, b->name, &ps[i]);
    }
    double t_pack0 = now_s();
    pack_payload_ex(path_join(A, tmp, "payload.bin"), pt, ps, c.tp.n_weights, tok, tok ? tok_size : 0);
    double t_pack = now_s() - t_pack0;
    const char *marker = arena_printf(A, "made by %s from %s\n", made_by(A), c.cfg.dir);
    write_file_atomic(path_join(A, tmp, PROJECT_MARKER), marker, strlen(marker));

    /* into place */
    if (dir_exists(out)) {
        const char *old = arena_printf(A, "%s.old-%d", out, (int)getpid());
        if (rename(out, old) != 0) die_user(out, NULL, "cannot move the old project aside: %s", strerror(errno));
        if (rename(tmp, out) != 0) {
            rename(old, out);
            die_user(out, NULL, "cannot rename into place: %s", strerror(errno));
        }
        rm_rf(old);
    } else if (rename(tmp, out) != 0) {
        die_user(out, NULL, "cannot rename into place: %s", strerror(errno));
    }
    g_tmpdir = NULL;
    if (o.timings) {
        fprintf(stderr, "llmcc: timings: ir %.3f s, codegen %.3f s, packing %.3f s (%.1f MiB of weights, %.0f MiB/s)",
                t_ir, t_codegen, t_pack, pack_bytes / 1048576.0, t_pack > 0 ? pack_bytes / 1048576.0 / t_pack : 0.0);
        double peak = peak_memory_mib();
        if (peak >= 0) fprintf(stderr, ", peak memory %.0f MiB", peak);
        fputc('\n', stderr);
    }
    fprintf(stderr, "llmcc: wrote %s (%s, %d kernels, %d launches per step, %d tensors); build it with: make -C %s%s\n",
            out, target_names[o.target], c.kp.nk, c.kp.nl - kernel_sampling_launches(&c.kp), c.tp.n_weights, out,
            o.target_given ? ""
            : o.target == TARGET_CPU ? " (for the CPU: no NVIDIA GPU here; --target cuda builds for one)"
                                     : " (for the GPU here; --target cpu builds for the CPU)");
    teardown(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        Arena a = {0};
        printf("%s\n", made_by(&a));
        arena_free(&a);
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2);
    if (!strcmp(cmd, "build")) return cmd_build(argc - 2, argv + 2);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "inspect")) {
        const char *model = inspect_model(argc - 2, argv + 2);
        return model && gguf_is_gguf_path(model) ? cmd_inspect_gguf(argc - 1, argv + 1)
                                                 : cmd_inspect(argc - 1, argv + 1);
    }
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat-template")) return cmd_chat_template(argc - 1, argv + 1);
    die_user(NULL, cmd, "unknown command (compile, build, run, inspect, tokenize, detokenize, chat-template; see "
             "llmcc --help)");
}
