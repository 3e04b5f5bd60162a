/* cmd_run.c: `llmcc run -c EXPR`: compile one expression, fill its inputs
 * and weights with seeded random values, build the harness (emit_harness.h)
 * in a temporary directory, run it, and check its output against the
 * double-precision reference (interp.h). --bench and --profile time it (and
 * print `bench:` lines for scripts, e.g. scripts/bench_ops.sh); --dump DIR
 * keeps the inputs, weights and output as .npy files. `run MODEL --layer N
 * --pos P` starts the layer's KV cache with P seeded rows (decode at a long
 * context); --no-check skips the reference where it would take minutes.
 * MODEL may be a GGUF file (gguf_model.h). */
#include "driver.h"
#include "emit_harness.h"
#include "gguf_model.h"
#include "interp.h"
#include "pack.h"
#include "quant.h"
#include "torch_expr.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The check: |out - ref| <= RTOL |ref| + ATOL max|ref|. The kernels compute
 * in f32 and the reference in double: a sum of K terms in f32 is off by
 * about sqrt(K) * 2^-24 of the terms' size, well inside these bounds for the
 * sizes a single op has; a wrong index or a missing term is far outside.
 * nvcc contracts acc + a*b into FMAs (one rounding instead of two), gcc here
 * does not: the same bound holds for both, so CPU and GPU builds pass it
 * alike while differing from each other in the last bits (docs/pipeline.md,
 * "Benchmarks", says how that was checked at Qwen2.5-7B sizes). */
#define RTOL 1e-4
#define ATOL 1e-5
/* --pos: the cache of one layer is (P + tokens) x kv_heads x head_dim f32, K and V;
 * 131072 is the longest context of the models llmcc knows (Qwen2.5, Llama 3.1) */
#define MAX_POS 131072

typedef struct {
    const char *expr, *dump, *model;
    bool one_layer;
    int layer, tokens, pos;
    bool bench, profile, target_set, no_check;
    bool cold;                 /* --cold: the caches flushed before each timed call (emit_harness.h) */
    Target target;
    uint64_t seed;
    int iters;
    int64_t perturb;           /* >= 0: (testing) the output value to spoil before the check */
    bool kv_dtype_set; DType kv_dtype;   /* --kv-dtype */
    Knobs knobs;
    const char *ignore_keys[32];  /* --ignore-config-key KEY */
    ConfigOptions config;
} RunOpts;

static const char *g_tmp;
static void cleanup(void) { if (g_tmp) rm_rf(g_tmp); }
/* a run stopped by timeout(1) or ^C still removes its temporary directory (a 7B layer's
 * weights are half a gigabyte there); nftw is not async-signal-safe, but nothing else runs */
static void on_signal(int sig) {
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* v as an integer in lo..hi, else the error "FLAG: expects WHAT, got 'v'" */
static int run_int(const char *flag, const char *v, long lo, long hi, const char *what) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) die_user(NULL, flag, "expects %s, got '%s'", what, v);
    return (int)x;
}

static void parse(int argc, char **argv, RunOpts *o) {
    memset(o, 0, sizeof *o);
    o->iters = -1;
    o->perturb = -1;
    o->tokens = 5;
    knobs_default(&o->knobs);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) die_user(NULL, a, "needs a value"); i++; } while (0)
        if (!strcmp(a, "-c")) { NEED(); o->expr = v; }
        else if (!strcmp(a, "--bench")) o->bench = true;
        else if (!strcmp(a, "--profile")) o->profile = true;
        else if (!strcmp(a, "--cold")) o->cold = true;
        else if (!strcmp(a, "--no-check")) o->no_check = true;
        else if (!strcmp(a, "--dump")) { NEED(); o->dump = v; }
        else if (!strcmp(a, "--knob")) { NEED(); knobs_set(&o->knobs, v); }
        else if (!strcmp(a, "--ignore-config-key")) { NEED(); parse_ignore_key(&o->config, o->ignore_keys, v); }
        else if (!strcmp(a, "--perturb")) {
            NEED();
            char *end;
            long long x = strtoll(v, &end, 10);
            if (!*v || *end || x < 0) die_user(NULL, a, "expects an output index >= 0, got '%s'", v);
            o->perturb = x;
        }
        else if (!strcmp(a, "--seed")) {
            NEED();
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (!*v || *end || errno || v[0] == '-') die_user(NULL, a, "expects a whole number >= 0, got '%s'", v);
        }
        else if (!strcmp(a, "--iters")) { NEED(); o->iters = run_int(a, v, 1, 1000000, "an integer in 1..1000000"); }
        else if (!strcmp(a, "--target")) { NEED(); o->target = parse_target(v); o->target_set = true; }
        else if (!strcmp(a, "--kv-dtype")) {
            NEED();
            o->kv_dtype = parse_kv_dtype(v);
            o->kv_dtype_set = true;
        }
        else if (!strcmp(a, "--layer")) {
            NEED();
            o->one_layer = true;
            o->layer = run_int(a, v, 0, 1 << 20, "a layer index >= 0");
        }
        else if (!strcmp(a, "--tokens")) { NEED(); o->tokens = run_int(a, v, 1, 4096, "an integer in 1..4096"); }
        else if (!strcmp(a, "--pos")) { NEED(); o->pos = run_int(a, v, 0, MAX_POS, "a position in 0..131072"); }
        else if (a[0] == '-')
            die_user(NULL, a, "unknown option for run (-c EXPR | MODEL --layer N [--tokens N] [--pos P], --bench, "
                     "--profile, --cold, --no-check, --seed N, --iters N, --target cpu|cuda-emu|cuda, "
                     "--kv-dtype f32|bf16, --dump DIR, --knob NAME=VALUE, --ignore-config-key KEY)");
        else if (!o->model) o->model = a;
        else die_user(NULL, a, "unexpected argument");
#undef NEED
    }
    if (o->expr && o->model) die_user(NULL, "-c", "give either -c EXPR or MODEL --layer N, not both");
    if (o->model && !o->one_layer)
        die_user(NULL, "--layer", "run MODEL needs --layer N (one decoder layer); "
                 "a whole model is llmcc build MODEL -o DIR, then its executable");
    if (!o->model && o->one_layer) die_user(NULL, "--layer", "needs a MODEL");
    if (o->cold && !o->bench && !o->profile)
        die_user(NULL, "--cold", "goes with --bench or --profile (it times cold calls)");
    if (!o->model && o->kv_dtype_set)
        die_user(NULL, "--kv-dtype", "needs MODEL --layer N (an expression has no KV cache)");
    if (!o->model && o->pos) die_user(NULL, "--pos", "needs MODEL --layer N (an expression has no KV cache)");
    if (!o->expr && !o->model)
        die_user(NULL, "-c", "run needs an expression: llmcc run -c \"F.softmax(torch.randn(4, 64), dim=-1)\"");
}

/* ---- the GPU, when there is one ---- */
typedef struct { char name[128]; char arch[16]; double gbs, f32_tflops, bf16_tflops; } Gpu;

static bool detect_gpu(Gpu *g) {
    memset(g, 0, sizeof *g);
    if (!gpu_present()) return false;
    FILE *f = popen("nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null", "r");
    char line[256] = "";
    if (!f) return false;
    bool ok = fgets(line, sizeof line, f) != NULL;
    pclose(f);
    if (!ok) return false;
    char *comma = strchr(line, ',');
    if (!comma) return false;
    *comma = 0;
    snprintf(g->name, sizeof g->name, "%.127s", line);
    int maj = 0, min = 0;
    if (sscanf(comma + 1, " %d.%d", &maj, &min) != 2) return false;
    if (maj < 1 || maj > 99 || min < 0 || min > 9) return false;
    snprintf(g->arch, sizeof g->arch, "sm_%d%d", maj, min);
    /* published peaks (dense): memory bandwidth, f32 on CUDA cores, bf16 on tensor cores */
    static const struct { const char *key; double gbs, f32, bf16; } peaks[] = {
        {"H200", 4800, 67, 989}, {"H100 PCIe", 2000, 51, 756}, {"H100", 3350, 67, 989}, {"GH200", 4000, 67, 989},
        {"A100-SXM4-80GB", 2039, 19.5, 312}, {"A100", 1555, 19.5, 312}, {"L40S", 864, 91.6, 362},
        {"L4", 300, 30.3, 121}, {"RTX 4090", 1008, 82.6, 165}, {"A10", 600, 31.2, 125},
    };
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
        if (strstr(g->name, peaks[i].key)) {
            g->gbs = peaks[i].gbs; g->f32_tflops = peaks[i].f32; g->bf16_tflops = peaks[i].bf16; break;
        }
    return true;
}

/* ---- leaf values: seeded, then rounded to the leaf's dtype ---- */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float randn(uint64_t *s) {   /* Box-Muller */
    double u1 = uniform01(s), u2 = uniform01(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Fills leaf n; returns its values as the kernels will see them, and writes
 * the bytes the harness reads. Each leaf has its own stream, so adding an op
 * leaves the other leaves' values alone. */
static double *fill_leaf(const GNode *n, uint64_t seed, const char *path, uint8_t **blocks) {
    int64_t N = gnode_elems(n);
    double *v = malloc(sizeof(double) * (size_t)N);
    const bool quant = dtype_is_quant(n->dtype);
    /* a block type: the values drawn as f32, then quantized as llama.cpp does (ggml's reference quantizers) */
    void *raw = malloc(quant ? (size_t)N * 4 : (size_t)dtype_bytes(n->dtype, N));
    CHECK(v && raw, "out of memory (%lld values)", (long long)N);
    uint64_t s = seed * 0x100000001b3ULL + (uint64_t)n->id * 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i < N; i++) {
        float x;
        switch (n->fill) {
        case FILL_RANDN: x = randn(&s); break;
        case FILL_ZEROS: x = 0; break;
        case FILL_ONES: x = 1; break;
        case FILL_UNIFORM: x = (float)(n->fill_lo + (n->fill_hi - n->fill_lo) * uniform01(&s)); break;
        default: UNREACHABLE();
        }
        switch (quant ? DT_F32 : n->dtype) {
        case DT_F32: ((float *)raw)[i] = x; break;
        case DT_BF16: ((uint16_t *)raw)[i] = cvt_f32_to_bf16(x); x = cvt_bf16_to_f32(((uint16_t *)raw)[i]); break;
        case DT_F16: ((uint16_t *)raw)[i] = cvt_f32_to_f16(x); x = cvt_f16_to_f32(((uint16_t *)raw)[i]); break;
        default: UNREACHABLE();
        }
        v[i] = x;
    }
    if (quant) {
        uint8_t *q = malloc((size_t)dtype_bytes(n->dtype, N));
        CHECK(q, "out of memory (%lld values)", (long long)N);
        /* the payload's codes are DType's (main.c). The K-quants, Q5_0 and Q5_1: random blocks, their values within
         * about the fill's bound (every bit of the K-quants' sub-block scales drawn, which a quantizer's blocks
         * would not reach; Q5_K, Q5_0 and Q5_1 have no quantizer) */
        const float bound = n->fill == FILL_UNIFORM ? (float)fmax(fabs(n->fill_lo), fabs(n->fill_hi)) : 1.0f;
        if (n->dtype == DT_Q5_0 || n->dtype == DT_Q5_1)
            pack_random_q5_blocks((uint32_t)n->dtype, s, bound, (size_t)N, q);
        else if (dtype_block[n->dtype] == 32) quant_blocks((uint32_t)n->dtype, raw, (size_t)N, q);
        else pack_random_kquant_blocks((uint32_t)n->dtype, s, bound, (size_t)N, q);
        dequant_blocks((uint32_t)n->dtype, q, (size_t)N, raw);
        for (int64_t i = 0; i < N; i++) v[i] = ((float *)raw)[i];
        free(raw);
        raw = *blocks = q;
    }
    FILE *f = fopen(path, "wb");
    size_t bytes = (size_t)dtype_bytes(n->dtype, N);
    if (!f || fwrite(raw, 1, bytes, f) != bytes || fclose(f)) die_user(path, NULL, "cannot write: %s", strerror(errno));
    if (!quant) free(raw);
    return v;
}

/* --pos: the rows before pos of cache buffer b (f32 or bf16 [ctx, kv_heads, head_dim]) are
 * standard normal (bf16: rounded to it), as a rotated key or a value of unit-scale
 * activations would be in size; the rows from pos on start at zero, the layer writes
 * them. Writes the whole buffer the harness reads; returns the pos rows' values. */
static double *fill_cache(const Buffer *b, int64_t pos, uint64_t seed, const char *path) {
    int64_t row = b->dims[1] * b->dims[2], N = buffer_elems(b);
    const bool bf16 = b->dtype == DT_BF16;
    CHECK((b->dtype == DT_F32 || bf16) && b->ndim == 3 && pos <= b->dims[0], "%s: not a cache of %lld rows",
          b->name, (long long)pos);
    const size_t size = bf16 ? sizeof(uint16_t) : sizeof(float);
    uint8_t *raw = calloc((size_t)N, size);
    double *v = malloc(sizeof(double) * (size_t)(pos * row + 1));
    CHECK(raw && v, "out of memory (%lld values)", (long long)N);
    uint64_t s = seed * 0x100000001b3ULL + (uint64_t)(b->id + 0x10000) * 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i < pos * row; i++) {
        float x = (float)randn(&s);
        if (bf16) {
            uint16_t h = cvt_f32_to_bf16(x);
            memcpy(raw + (size_t)i * size, &h, size);
            v[i] = cvt_bf16_to_f32(h);
        } else {
            memcpy(raw + (size_t)i * size, &x, size);
            v[i] = x;
        }
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(raw, size, (size_t)N, f) != (size_t)N || fclose(f))
        die_user(path, NULL, "cannot write: %s", strerror(errno));
    free(raw);
    return v;
}

/* A checkpoint's tensor, as stored (the kernels read its dtype); row_from (or NULL): its rows in that order, as
 * the payload writer puts them (a GGUF file's llama q/k, gguf_model.h). */
static double *copy_leaf(const GNode *n, const StTensor *t, const int64_t *row_from, const char *path) {
    int64_t N = gnode_elems(n);
    CHECK(t->nbytes == (size_t)dtype_bytes(n->dtype, N), "%s: %zu bytes for %lld values",
          n->name, t->nbytes, (long long)N);
    double *v = malloc(sizeof(double) * (size_t)N);
    uint8_t *rows = row_from ? malloc(t->nbytes) : NULL;
    CHECK(v && (rows || !row_from), "out of memory");
    const uint8_t *data = t->data;
    if (row_from) {
        size_t row = t->nbytes / (size_t)n->dims[0];
        for (int64_t r = 0; r < n->dims[0]; r++) memcpy(rows + (size_t)r * row, data + (size_t)row_from[r] * row, row);
        data = rows;
    }
    if (dtype_is_quant(n->dtype)) {
        float *f = malloc(sizeof(float) * (size_t)N);
        CHECK(f, "out of memory");
        dequant_blocks((uint32_t)n->dtype, data, (size_t)N, f);
        for (int64_t i = 0; i < N; i++) v[i] = f[i];
        free(f);
    }
    for (int64_t i = 0; i < N && !dtype_is_quant(n->dtype); i++) {
        uint16_t h;
        float f;
        switch (n->dtype) {
        case DT_F32: memcpy(&f, data + 4 * i, 4); v[i] = f; break;
        case DT_BF16: memcpy(&h, data + 2 * i, 2); v[i] = cvt_bf16_to_f32(h); break;
        case DT_F16: memcpy(&h, data + 2 * i, 2); v[i] = cvt_f16_to_f32(h); break;
        default: UNREACHABLE();
        }
    }
    write_file_atomic(path, data, t->nbytes);
    free(rows);
    return v;
}

/* ---- .npy (version 1.0) for --dump ---- */
static void write_npy(const char *path, const char *descr, int ndim, const int64_t *dims, const void *data,
                      size_t bytes) {
    char shape[160] = "", hdr[256];
    size_t k = 0;
    for (int i = 0; i < ndim; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld,%s", (long long)dims[i], i + 1 < ndim ? " " : "");
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
    int total = 10 + len + 1, pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) die_user(path, NULL, "cannot write: %s", strerror(errno));
    uint16_t hl = (uint16_t)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hl & 0xff, f); fputc(hl >> 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    if (fwrite(data, 1, bytes, f) != bytes || fclose(f)) die_user(path, NULL, "cannot write: %s", strerror(errno));
}
static void dump_f32(const char *path, const GNode *n, const double *v) {
    int64_t N = gnode_elems(n);
    float *f = malloc(sizeof(float) * (size_t)N);
    CHECK(f, "out of memory");
    for (int64_t i = 0; i < N; i++) f[i] = (float)v[i];
    write_npy(path, "<f4", n->ndim, n->dims, f, sizeof(float) * (size_t)N);
    free(f);
}

static const char *shell_quote(Arena *A, const char *s) {
    Str o = {0};
    str_append(&o, "'", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '\'') str_append(&o, "'\\''", 4);
        else str_append(&o, p, 1);
    }
    str_append(&o, "'", 1);
    char *r = arena_strdup(A, o.s);
    str_free(&o);
    return r;
}

static void format_index(char *buf, size_t len, const GNode *n, int64_t flat) {
    int64_t idx[MAX_DIMS];
    for (int i = n->ndim - 1; i >= 0; i--) { idx[i] = flat % n->dims[i]; flat /= n->dims[i]; }
    shape_format(buf, len, n->ndim, idx);
}

/* bytes every leaf (and the cache rows before pos) is read once and the
 * output written once; FLOPs of the matmul-class ops, counted as
 * torch.utils.flop_counter does */
static void traffic(const Graph *g, int64_t pos, double *bytes, double *flops) {
    *bytes = *flops = 0;
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        if (n->op == G_INPUT || n->op == G_WEIGHT) *bytes += (double)dtype_bytes(n->dtype, gnode_elems(n));
        if (n->op == G_KV_WRITE) *bytes += (double)pos * (double)n->dims[1] * 4;
        if (n->op == G_LINEAR) *flops += 2.0 * (double)gnode_elems(n) * (double)n->in[1]->dims[1];
        if (n->op == G_MATMUL) *flops += 2.0 * (double)gnode_elems(n) * (double)n->in[0]->dims[n->in[0]->ndim - 1];
        if (n->op == G_ATTENTION)   /* this call's tokens over all pos + n positions (the causal mask not subtracted) */
            *flops += 4.0 * (double)n->dims[0] * (double)(pos + n->dims[0]) * n->heads * n->head_dim;
        if (n->op == G_SDPA) {
            const GNode *q = n->in[0], *k = n->in[1];
            double rows = (double)gnode_elems(n) / (double)n->dims[n->ndim - 1];   /* batch x L */
            double S = k->dims[k->ndim - 2], E = q->dims[q->ndim - 1], Ev = n->dims[n->ndim - 1];
            *flops += 2.0 * rows * S * E + 2.0 * rows * S * Ev;
        }
    }
    *bytes += (double)gnode_elems(g->logits) * 4;
}

static void human(char *buf, size_t len, double v, const char *unit) {
    const char *p[] = {"", "K", "M", "G", "T", "P"};
    int i = 0;
    while (v >= 1000 && i < 5) { v /= 1000; i++; }
    snprintf(buf, len, "%.3g %s%s", v, p[i], unit);
}

int cmd_run(int argc, char **argv) {
    RunOpts o;
    parse(argc, argv, &o);
    Gpu gpu = {0};
    bool have_gpu = !(o.target_set && o.target != TARGET_CUDA) && detect_gpu(&gpu);
    Target target = o.target_set ? o.target : have_gpu ? TARGET_CUDA : TARGET_CPU;
    if (target == TARGET_CUDA && !have_gpu)
        die_user(NULL, "--target", "cuda needs an NVIDIA GPU and nvcc (nvidia-smi finds no GPU here): "
                 "use --target cpu (or cuda-emu: the GPU's schedules run on the CPU)");

    Compilation c;
    memset(&c, 0, sizeof c);
    c.expr = o.expr;
    c.knobs = o.knobs;
    c.target = target;
    c.max_batch = c.max_ctx = 1;
    const char *title = o.expr;
    if (o.model) {
        /* one layer over --tokens tokens at position --pos: that many cache rows before them */
        const char *dir = open_model(&c, o.model, &o.config);
        if (c.gguf) {   /* a GGUF file always has its weights */
            gguf_model_tensors(&c.A, c.gguf, &c.cfg, &c.st);
            c.have_weights = true;
        } else if (st_dir_has_weights(dir)) { st_open_dir(&c.A, dir, &c.st); c.have_weights = true; }
        c.one_layer = true; c.layer = o.layer;
        c.kv_dtype = o.kv_dtype_set ? o.kv_dtype : kv_dtype_default(target);
        c.max_batch = o.tokens;
        c.max_ctx = o.tokens + o.pos;
        title = arena_printf(&c.A, "layer %d of %s, %d tokens at position %d (%s weights)", o.layer, dir, o.tokens,
                             o.pos, c.have_weights ? "the checkpoint's" : "random");
    }
    pipeline_run(&c, IR_KERNEL, NULL);
    Arena *A = &c.A;
    Graph *g = &c.g;
    /* the kernels are built: from here on n is this run's token count */
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->rows_n) { g->nodes[i]->dims[0] = o.tokens; g->nodes[i]->rows_n = false; }
    /* a layer's weights without a checkpoint: nn.Linear's init bounds, norms around 1 */
    for (int i = 0; i < g->n; i++) {
        GNode *n = g->nodes[i];
        for (int j = 1; j < n->nin; j++) {
            GNode *w = n->in[j];
            if (w->op != G_WEIGHT || w->fill != FILL_NONE) continue;
            double b = n->op == G_LINEAR ? 1.0 / sqrt((double)n->in[1]->dims[1]) : 0.5;
            w->fill = FILL_UNIFORM;
            w->fill_lo = n->op == G_LINEAR ? -b : 0.5;
            w->fill_hi = n->op == G_LINEAR ? b : 1.5;
        }
    }
    const char *td = getenv("TMPDIR"), *tmpl = arena_printf(A, "%s/llmcc-run-XXXXXX", td && *td ? td : "/tmp");
    char *tmp = arena_strdup(A, tmpl);
    if (!mkdtemp(tmp)) die_user(tmpl, NULL, "cannot create a temporary directory: %s", strerror(errno));
    g_tmp = tmp;
    atexit(cleanup);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    /* inputs and weights */
    double **leaves = calloc((size_t)g->n, sizeof(double *));
    uint8_t **blocks = calloc((size_t)g->n, sizeof(uint8_t *));   /* block-type weights as quantized */
    CHECK(leaves && blocks, "out of memory");
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        if (n->op != G_INPUT && n->op != G_WEIGHT) continue;
        CHECK(n->buf, "leaf %s has no buffer", n->name);
        const char *path = path_join(A, tmp, harness_leaf_file(A, n->buf));
        const StTensor *t = c.have_weights && n->op == G_WEIGHT ? st_find(&c.st, n->name) : NULL;
        const int64_t *row_from = t && c.gguf ? gguf_model_row_order(c.gguf, n->name) : NULL;
        leaves[i] = t ? copy_leaf(n, t, row_from, path) : fill_leaf(n, o.seed, path, &blocks[i]);
    }
    /* --pos: the cache rows before the call */
    double **cache = calloc((size_t)g->n, sizeof(double *));
    CHECK(cache, "out of memory");
    if (o.pos)
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i]->op == G_KV_WRITE)
                cache[i] = fill_cache(g->nodes[i]->buf, o.pos, o.seed,
                                      path_join(A, tmp, harness_leaf_file(A, g->nodes[i]->buf)));

    /* the harness */
    bool cuda = target == TARGET_CUDA;
    Str src = {0};
    HarnessOptions ho = {target, title, o.model ? o.tokens : 1, o.pos, o.pos > 0};
    emit_harness(&src, &c.kp, &ho);
    const char *srcp = path_join(A, tmp, cuda ? "harness.cu" : "harness.c"), *exe = path_join(A, tmp, "harness");
    write_file_atomic(srcp, src.s, src.len);
    str_free(&src);
    const char *log = path_join(A, tmp, "build.log");
    bool timed = o.bench || o.profile;
    /* -O1 builds in half the time of -O2 and is as exact; timing wants -O2 */
    const char *opt = timed ? "-O2" : "-O1";
    const char *qexe = shell_quote(A, exe), *qsrc = shell_quote(A, srcp), *qlog = shell_quote(A, log);
    /* the harness includes runtime/kernels.h from llmcc's folder */
    const char *root = llmcc_root(A);
    if (!root) die_user("/proc/self/exe", NULL, "cannot find llmcc's own directory (runtime/)");
    const char *inc = shell_quote(A, root);
    /* the compilers and flags of the environment, as the emitted Makefiles take them (CC, CFLAGS, NVCC) */
    const char *env_cc = getenv("CC"), *env_nvcc = getenv("NVCC"), *env_cflags = getenv("CFLAGS");
    const char *cc = cuda ? arena_printf(A, "%s -O2 -arch=%s -I%s -o %s %s > %s 2>&1",
                                         env_nvcc && *env_nvcc ? env_nvcc : "nvcc", gpu.arch, inc, qexe, qsrc, qlog)
                          /* compiled, then linked: a compiler cache (ccache as $CC) keeps the object */
                          : arena_printf(A, "%s %s %s %s -fopenmp -std=c11 -I%s -c -o %s.o %s > %s 2>&1 && "
                                         "%s -fopenmp -o %s %s.o -lm >> %s 2>&1",
                                         env_cc && *env_cc ? env_cc : "cc", opt, emit_cflags(target),
                                         env_cflags ? env_cflags : "", inc, qexe, qsrc, qlog,
                                         env_cc && *env_cc ? env_cc : "cc", qexe, qexe, qlog);
    if (system(cc) != 0) {
        char *msg = read_file(log, NULL);
        fprintf(stderr, "%s\n", msg ? msg : "");
        die_internal(__FILE__, __LINE__, "the generated harness does not compile: %s", cc);
    }
    const char *cmd = arena_printf(A, "%s %s %d %d %d %d %d", qexe, shell_quote(A, tmp), timed ? o.iters : 0,
                                   o.profile ? 1 : 0, ho.n, ho.pos, o.cold ? 1 : 0);
    FILE *p = popen(cmd, "r");
    if (!p) die_user(NULL, NULL, "cannot run the harness: %s", strerror(errno));
    double t_iter = 0, *lt = calloc((size_t)c.kp.nl + 1, sizeof(double));
    int iters = 0;
    char line[512];
    while (fgets(line, sizeof line, p)) {
        int li;
        double t;
        if (sscanf(line, "time %lf %d", &t, &iters) == 2) t_iter = t;
        else if (sscanf(line, "launch %d %*s %lf", &li, &t) == 2 && li >= 0 && li < c.kp.nl) lt[li] = t;
    }
    int st = pclose(p);
    if (st != 0)
        die_user(NULL, NULL, "the harness running the compiled kernels failed (exit status %d; its message is above)",
                 WIFEXITED(st) ? WEXITSTATUS(st) : st);

    /* the check */
    const GNode *on = g->logits;
    int64_t N = gnode_elems(on);
    size_t got_len = 0;
    float *got = (float *)read_file(path_join(A, tmp, "out.bin"), &got_len);
    CHECK(got && got_len == (size_t)N * 4, "harness output has %zu bytes, expected %lld", got_len, (long long)N * 4);
    if (o.perturb >= N)
        die_user(NULL, "--perturb", "%lld is past the output's %lld values", (long long)o.perturb, (long long)N);
    /* --perturb: shows what a wrong kernel looks like to this check */
    if (o.perturb >= 0) got[o.perturb] += 1.0f + fabsf(got[o.perturb]);
    /* a model layer's bf16 linears run on tensor cores (gemm_tc) when the call has more than
     * gemm_min_n tokens; tile_ir.c makes the same choice */
    bool tc = o.model && target != TARGET_CPU && c.knobs.gemm_tc && o.tokens > c.knobs.gemm_min_n;
    bool q8 = false;
    for (int i = 0; i < c.tip.n; i++) {
        const TileKernel *t = c.tip.k[i];
        /* whether the call's tokens run t (cpu_gemm is always the first of its pair: run_if 1) */
        bool runs = !t->run_if || !o.model || (t->run_if == 2 ? o.tokens <= t->min_n : o.tokens > t->min_n);
        /* so do the cpu target's bf16 dot products (cpu_gemm with dot) */
        tc |= t->kind == SCHED_CPU_GEMM && t->body.cpug.dot && runs;
        /* and cpu_rows' (dot16: decode, and calls of up to cpu_dot16_max_n tokens) */
        tc |= t->kind == SCHED_CPU_ROWS && t->body.cpu.dot16 && runs;
        /* the cpu target's block-type dot products at decode (cpu_rows qdot) round their activations to 8 bits */
        q8 |= t->kind == SCHED_CPU_ROWS && t->body.cpu.acts_q8 && runs;
    }
    InterpOptions io = {.bf16_linear_x = tc, .q8_linear_x = q8, .pos = o.pos, .cache = cache};
    /* --no-check: no reference (its double loops would take minutes at full size); what is
     * left is that every value is finite, which a random-input run of a sound kernel gives */
    double *ref = o.no_check ? NULL : interp_run(g, leaves, &io);
    double max_ref = 0, max_abs = 0, max_rel = 0;
    int64_t bad = 0, first = -1, nonfinite = 0;
    for (int64_t i = 0; i < N; i++) nonfinite += !isfinite(got[i]);
    for (int64_t i = 0; ref && i < N; i++) if (isfinite(ref[i]) && fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    for (int64_t i = 0; ref && i < N; i++) {
        double r = ref[i], x = got[i], d = fabs(x - r);
        bool ok;
        /* indices (argmax, topk's second half) must be exact: the tolerance, scaled by the largest
         * |value|, would let a neighbouring index pass */
        bool index = on->op == G_ARGMAX || (on->op == G_TOPK && (i / on->topk) % 2 == 1);
        if (isnan(r) || isnan(x)) ok = isnan(r) && isnan(x);
        else if (isinf(r) || isinf(x) || index) ok = r == x;
        else {
            ok = d <= RTOL * fabs(r) + ATOL * max_ref;
            if (d > max_abs) max_abs = d;
            if (fabs(r) > 1e-3 * max_ref && d / fabs(r) > max_rel) max_rel = d / fabs(r);
        }
        if (!ok) { bad++; if (first < 0) first = i; }
    }
    char shp[128];
    shape_format(shp, sizeof shp, on->ndim, on->dims);
    printf("llmcc run: %s\n", title);
    if (cuda) printf("  target: cuda on %s (%s), %d kernels, %d launches\n", gpu.name, gpu.arch, c.kp.nk, c.kp.nl);
    else printf("  target: %s (%s), %d kernels, %d launches\n", target_names[target],
                target == TARGET_CPU ? "the CPU's schedules, C + OpenMP" : "the GPU's schedules run exactly on the CPU",
                c.kp.nk, c.kp.nl);
    printf("  output: f32%s, seed %llu; reference: %s\n", shp, (unsigned long long)o.seed,
           ref ? "the graph evaluated directly in double precision" : "none (--no-check)");
    if (ref) printf("  max abs error %.3g (largest |value| %.3g), max rel error %.3g\n", max_abs, max_ref, max_rel);

    int rc = 0;
    long long nf = nonfinite;
    if (!ref) {
        printf("  not checked against the reference (--no-check); %lld of %lld values are not finite\n", nf,
               (long long)N);
        if (nonfinite) {
            fflush(stdout);
            fprintf(stderr, "llmcc: --no-check: %lld of %lld output values are not finite\n", nf, (long long)N);
            rc = 1;
        }
    } else if (bad) {
        char at[128];
        format_index(at, sizeof at, on, first);
        printf("  DOES NOT MATCH the reference: %lld of %lld values differ; first at %s: got %.9g, expected %.9g\n",
               (long long)bad, (long long)N, at, (double)got[first], ref[first]);
        /* the reference rounds its own (double) linear inputs to bf16: a value next to a rounding boundary
         * can round the other way than the kernels' f32 one, one bf16 ulp (2^-8) apart, far past RTOL */
        if (tc)
            printf("  note: this layer's bf16 linears ran on the tensor cores, which round their inputs to bf16; "
                   "near a rounding\n"
                   "  boundary the double reference can round the other way (one bf16 ulp). "
                   "--knob gemm_tc=0 checks the same\n"
                   "  layer on gemv, whose f32 inputs the bound covers\n");
        fflush(stdout);
        fprintf(stderr, "llmcc: -c: the result does not match the reference "
                "(%lld of %lld values differ, first at %s)\n",
                (long long)bad, (long long)N, at);
        rc = 1;
    } else {
        printf("  matches the reference (|out - ref| <= %g |ref| + %g max|ref|)\n", RTOL, ATOL);
    }
    if (o.dump) {
        mkdir(o.dump, 0755);
        if (!dir_exists(o.dump)) die_user(o.dump, "--dump", "cannot create the directory: %s", strerror(errno));
        for (int i = 0; i < g->n; i++) {
            const char *path = path_join(A, o.dump, arena_printf(A, "%s.npy", g->nodes[i]->name));
            const GNode *n = g->nodes[i];
            /* a block-type weight: its blocks as they are, [rows, bytes per row] of uint8 (gguf-py dequantizes) */
            int64_t qdims[2] = {n->dims[0], n->ndim == 2 ? dtype_bytes(n->dtype, n->dims[1]) : 0};
            if (blocks[i]) write_npy(path, "|u1", 2, qdims, blocks[i], (size_t)(qdims[0] * qdims[1]));
            else if (leaves[i]) dump_f32(path, n, leaves[i]);
            /* --pos: a KV write's cache rows before the call, [pos, kv_heads * head_dim] */
            GNode rows = *g->nodes[i];
            rows.ndim = 2;
            rows.dims[0] = o.pos;
            if (cache[i]) dump_f32(path, &rows, cache[i]);
        }
        write_npy(path_join(A, o.dump, "output.npy"), "<f4", on->ndim, on->dims, got, (size_t)N * 4);
        if (ref) write_npy(path_join(A, o.dump, "reference.npy"), "<f8", on->ndim, on->dims, ref, (size_t)N * 8);
        printf("  dumped inputs, weights%s, output.npy%s to %s\n", o.pos ? ", the cache rows before --pos" : "",
               ref ? " and reference.npy" : "", o.dump);
    }
    if (timed) {
        double bytes, flops;
        traffic(g, o.pos, &bytes, &flops);
        char b1[32], b3[32];
        human(b1, sizeof b1, bytes, "B");
        printf("  time: %.4g ms per call (mean of %d calls, after a warm-up call%s)\n", t_iter * 1e3, iters,
               o.cold ? "; each after the caches were flushed, timed launch by launch" : "");
        printf("  bytes: %s (inputs and weights%s read once, the output written once): %.4g GB/s\n", b1,
               o.pos ? " and the cache rows before --pos" : "", bytes / t_iter * 1e-9);
        if (flops > 0) {
            human(b3, sizeof b3, flops, "FLOP");
            printf("  FLOPs: %s (matmul-class ops, as torch.utils.flop_counter counts them): %.4g TFLOP/s\n", b3,
                   flops / t_iter * 1e-12);
        } else {
            printf("  FLOPs: none of the matmul-class ops torch.utils.flop_counter counts: memory-bound, see GB/s\n");
        }
        if (!cuda) printf("  CPU figures (C backend; no GPU)\n");
        else if (gpu.gbs > 0)
            printf("  of %s's peak: %.1f%% of %.0f GB/s; %.2f%% of %.1f TFLOP/s f32 "
                   "(CUDA cores; %.0f TFLOP/s bf16 on tensor cores)\n", gpu.name,
                   100.0 * bytes / t_iter / (gpu.gbs * 1e9), gpu.gbs, 100.0 * flops / t_iter / (gpu.f32_tflops * 1e12),
                   gpu.f32_tflops, gpu.bf16_tflops);
        else printf("  peak figures of %s are not known to llmcc: no share of peak\n", gpu.name);
        /* one line of NAME=VALUE for scripts (scripts/bench_ops.sh); peaks 0 where unknown */
        printf("bench: name=total ms=%.6g iters=%d bytes=%.6g gbs=%.6g flops=%.6g tflops=%.6g target=%s peak_gbs=%g "
               "peak_bf16_tflops=%g check=%s nonfinite=%lld kernels=%d launches=%d cold=%d\n",
               t_iter * 1e3, iters, bytes, bytes / t_iter * 1e-9, flops, flops / t_iter * 1e-12, target_names[target],
               cuda ? gpu.gbs : 0.0, cuda ? gpu.bf16_tflops : 0.0, !ref ? "skipped" : bad ? "mismatch" : "match", nf,
               c.kp.nk, c.kp.nl, o.cold ? 1 : 0);
    }
    if (o.profile) {
        double total = 0;
        for (int i = 0; i < c.kp.nl; i++) total += lt[i];
        printf("  %-40s %8s %12s %7s\n", "kernel", "launches", "ms per call", "share");
        for (int i = 0; i < c.kp.nk; i++) {
            const KKernel *k = c.kp.kernels[i];
            double t = 0;
            int uses = 0;
            for (int j = 0; j < c.kp.nl; j++) if (c.kp.launches[j].k == k) { t += lt[j]; uses++; }
            printf("  %-40s %8d %12.4g %6.1f%%\n", k->name, uses, t * 1e3, total > 0 ? 100.0 * t / total : 0.0);
        }
        printf("  (per-kernel times are measured launch by launch%s; their sum is %.4g ms)\n",
               cuda ? " with CUDA events" : "", total * 1e3);
        /* per graph op (a linear's gemv, split-K sum and tensor-core kernels together), in launch order */
        for (int i = 0; i < c.kp.nl; i++) {
            const char *m = c.kp.launches[i].module;
            bool seen = false;
            for (int j = 0; j < i && !seen; j++) seen = !strcmp(c.kp.launches[j].module, m);
            if (seen) continue;
            double t = 0;
            int uses = 0;
            for (int j = i; j < c.kp.nl; j++) if (!strcmp(c.kp.launches[j].module, m)) { t += lt[j]; uses++; }
            printf("bench: name=module:%s ms=%.6g launches=%d\n", m, t * 1e3, uses);
        }
    }
    for (int i = 0; i < g->n; i++) { free(leaves[i]); free(cache[i]); free(blocks[i]); }
    free(leaves); free(cache); free(blocks); free(ref); free(got); free(lt);
    cleanup();
    g_tmp = NULL;
    teardown(&c);
    return rc;
}
