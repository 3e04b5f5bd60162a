/* emit.c: the host side of a model's source (emit.h): the prelude, the kernels each printed once by its dialect
 * (emit_kernel.h), the Model struct, model_init, and the launch plan (model_forward, model_forward_batch, the
 * decode step's CUDA Graph). */
#include "emit.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a piece of host code is printed for: the plan and its names; CUDA source or C; a GPU target's model code
 * (every launch followed by LAUNCH_CHECK: CUDA's LLMCC_CUDA_CHECK check; cuda-emu's count of launches, so that a
 * capture of the decode step counts its kernels as CUDA's does); the decode step's CUDA Graph (its grids read
 * grid_pos, the longest context's, for pos). */
typedef struct {
    const Plan *plan;
    const PlanNames *nm;
    bool cuda, gpu, graph_grids;
} Host;

static void host_expr(Str *o, const Expr *e, bool graph_grids);

/* ---- host side ---- */
void emit_launch_guard(Str *o, const KLaunch *l) {
    if (l->run_if == 1) str_printf(o, "if ((int64_t)n > %dLL) ", l->min_n);
    else if (l->run_if == 2) str_printf(o, "if ((int64_t)n <= %dLL) ", l->min_n);
}

static const char *pdt(DType d) {
    /* the payload's code of d (runtime/payload.h: DType's value is the same code) */
#define DTYPE_PDT_NAME(id, name, bytes, block, ggml) "PDT_" #id,
    static const char *const n[DT_COUNT] = {ALL_DTYPES(DTYPE_PDT_NAME)};
#undef DTYPE_PDT_NAME
    return n[d];
}

/* How a launch's arguments are passed: to a call of its n tokens (model_forward's, or model_forward_batch's of
 * tokens whose rows are independent); in model_forward_batch's loop over the tokens (t): the token's rows of the
 * activations and ids, its slot's KV cache; to a _tokens kernel: the KV caches from slot 0's (kv_rows). */
typedef enum { ARGS_CALL, ARGS_PER_TOKEN, ARGS_TOKENS } ArgsMode;

/* Layer layer as host code in the body of decoder layer seg (l, l - 1, ..), else literal */
static void layer_index(Str *o, int layer, int seg) {
    if (layer == seg) str_printf(o, "l");
    else if (seg >= 0) str_printf(o, "l %c %d", layer < seg ? '-' : '+', abs(layer - seg));
    else str_printf(o, "%d", layer);
}

static void host_arg(Str *o, const PlanNames *nm, const Buffer *b, int seg, ArgsMode mode) {
    const bool per_token = mode == ARGS_PER_TOKEN;
    if (per_token && b->kind == BUF_ACT && b->rows_n) {
        int64_t row = 1;
        for (int d = 1; d < b->ndim; d++) row *= b->dims[d];
        str_printf(o, "ACT(%s) + (size_t)t * %lld", nm->act[b->id], (long long)row);
        return;
    }
    if (per_token && b->kind == BUF_INPUT) { str_printf(o, "m->ids + t"); return; }
    switch (b->kind) {
    case BUF_WEIGHT: {
        int wl = nm->layer[b->id];
        if (wl < 0) str_printf(o, "m->%s", nm->field[b->id]);
        else if (wl == seg) str_printf(o, "L->%s", nm->field[b->id]);
        else {
            str_printf(o, "m->layers[");
            layer_index(o, wl, seg);
            str_printf(o, "].%s", nm->field[b->id]);
        }
        return;
    }
    case BUF_KCACHE: case BUF_VCACHE:   /* a call's: the slot in use; else slot t's (per token) or 0's */
        str_printf(o, "%s(%s, ", mode == ARGS_CALL ? "LAYER_KV" : "SLOT_KV", b->kind == BUF_KCACHE ? "kc" : "vc");
        layer_index(o, b->layer, seg);
        str_printf(o, mode == ARGS_CALL ? ")" : per_token ? ", slots[t])" : ", 0)");
        return;
    case BUF_INPUT: str_printf(o, "m->ids"); return;
    case BUF_OUTPUT: str_printf(o, "m->logits"); return;
    case BUF_ACT: str_printf(o, "ACT(%s)", nm->act[b->id]); return;
    case BUF_CONST: str_printf(o, "m->c[%d]", nm->cidx[b->id]); return;
    case BUF_WORK: str_printf(o, "m->work"); return;
    case BUF_KIND_COUNT: break;
    }
    UNREACHABLE();
}

/* A launch of k (l's kernel or its _tokens variant) at indent d up to its arguments */
static void launch_open(Str *o, const KLaunch *l, int run_if, const KKernel *k, const char *mod, bool cuda, bool team,
                        int d, bool graph_grids) {
    emit_indent(o, d);
    KLaunch guard = *l;
    guard.run_if = run_if;
    emit_launch_guard(o, &guard);
    str_printf(o, "{ /* %s */\n", mod);
    emit_indent(o, d + 1); str_printf(o, "int64_t grid = "); host_expr(o, l->grid, graph_grids); str_printf(o, ";\n");
    if (team) { emit_indent(o, d + 1); str_printf(o, "#pragma omp parallel\n"); }
    emit_indent(o, d + 1);
    if (cuda) str_printf(o, "%s<<<(unsigned)grid, %d, 0, STREAM>>>(n, pos", k->name, k->block);
    else if (k->tokens) str_printf(o, "%s_tokens(grid, n, pos, positions, kv_rows", k->name);
    else str_printf(o, "%s(grid, n, pos", k->name);
}
void emit_launch_open(Str *o, const KLaunch *l, const char *mod, bool cuda, bool team, int d) {
    launch_open(o, l, l->run_if, l->k, mod, cuda, team, d, false);
}

/* One step at indent d; seg >= 0: it runs in the body of decoder layer seg (l, L), else literal. Arguments
 * wrap at 120 columns. */
/* The model's CPU code (no launch check) calls a kernel as a statement, its grid the first argument, under its
 * guard; the module in a comment where the kernel's name does not say it. */
static void call_open(Str *o, const PlanStep *s, const char *mod, int d) {
    Str name = {0};
    emit_ident_str(&name, strncmp(mod, "model.", 6) ? mod : mod + 6, false);
    if (!strstr(s->k->name, name.s)) { emit_indent(o, d); str_printf(o, "/* %s */\n", mod); }
    str_free(&name);
    emit_indent(o, d);
    KLaunch guard = *s->l;
    guard.run_if = s->run_if;
    emit_launch_guard(o, &guard);
    str_printf(o, "%s%s(", s->k->name, s->k->tokens ? "_tokens" : "");
    host_expr(o, s->l->grid, false);
    str_printf(o, ", n, pos%s", s->k->tokens ? ", positions, kv_rows" : "");
}
static void emit_launch(Str *o, const Host *h, const PlanStep *s, int seg, int d, ArgsMode mode) {
    const KLaunch *l = s->l;
    const char *mod = seg >= 0 ? plan_module_in_layer(l) : l->module;
    const bool call = !h->cuda && !h->gpu;
    if (call) call_open(o, s, mod, d);
    else launch_open(o, l, s->run_if, s->k, mod, h->cuda, false, d, h->graph_grids);
    size_t line = o->len;   /* where the call's line starts (a step's text may begin with it) */
    while (line > 0 && o->s[line - 1] != '\n') line--;
    for (int j = 0; j < l->k->nparams; j++) {
        Str a = {0};
        host_arg(&a, h->nm, l->args[j], seg, mode);
        /* a call's line is wrapped with the others (wrap_long_lines) */
        if (!call && o->len - line + a.len + 4 > 120) { str_printf(o, ",\n"); line = o->len; emit_indent(o, d + 3); }
        else str_printf(o, ", ");
        str_printf(o, "%s", a.s);
        str_free(&a);
    }
    str_printf(o, ");\n");
    if (h->cuda || h->gpu) {   /* LLMCC_CUDA_CHECK=1: the kernel and its graph op named where it fails (model_host.h) */
        emit_indent(o, d + 1);
        str_printf(o, "LAUNCH_CHECK(\"%s\", \"%s\", %s);\n", l->k->name, mod, seg >= 0 ? "l" : "-1");
    }
    if (!call) { emit_indent(o, d); str_printf(o, "}\n"); }
}

static void put_indented(Str *o, const char *text, int d) {
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        emit_indent(o, d);
        str_append(o, p, (size_t)(e - p + 1));
        p = e + 1;
    }
}

/* One step of a path at indent 0, in model_forward_batch in a loop over the tokens where it runs per token.
 * In model_forward_batch every launch takes the schedule for decode (n <= min_n: gemv, cpu_rows; the plan
 * leaves the others out), so each token's row is computed as a call with it alone computes it. */
static void emit_step(Str *o, const Host *h, const PlanStep *s, int seg) {
    str_append(o, "", 0);
    if (s->barrier)
        str_printf(o, "#pragma omp barrier /* the launches since the last one wrote what this one uses */\n");
    bool per_token = s->way == BATCH_PER_TOKEN;
    if (per_token)
        str_printf(o, "for (int t = 0; t < n; t++) { /* each token: n = 1 at its position, its slot's KV cache */\n"
                      "    const int n = 1, pos = positions[t];\n");
    emit_launch(o, h, s, seg, per_token, per_token ? ARGS_PER_TOKEN : s->way == BATCH_TOKENS ? ARGS_TOKENS : ARGS_CALL);
    if (per_token) str_printf(o, "}\n");
}

/* Layers lo .. hi - 1 of run r as one loop over l: a position where some layers' step differs holds each
 * variant under if (l == ...), the common one under else. */
static void emit_layer_loop(Str *o, const Host *h, const PlanPath *pp, const PlanRun *r) {
    const int lo = r->layer0 + r->loop_lo, hi = r->layer0 + r->loop_hi, cnt = r->per_layer, ng = hi - lo;
    str_printf(o, "    for (int l = %d; l < %d; l++) { /* decoder layers %d..%d */\n", lo, hi, lo, hi - 1);
    Str *txt = calloc((size_t)ng * (size_t)cnt, sizeof(Str));
    bool usesL = false;
    for (int g = 0; g < ng; g++)
        for (int p = 0; p < cnt; p++) {
            if (r->like[g * cnt + p] != g) continue;   /* printed as an earlier layer's */
            emit_step(&txt[g * cnt + p], h, &pp->steps[r->first + (r->loop_lo + g) * cnt + p], lo + g);
            usesL |= strstr(txt[g * cnt + p].s, "L->") != NULL;
        }
    if (usesL) str_printf(o, "        const LayerWeights *L = &m->layers[l];\n");
    for (int p = 0; p < cnt; p++) {
        const int common = r->common[p];
        int opened = 0;
        for (int g = 0; g < ng; g++) {
            if (r->like[g * cnt + p] != g || g == common) continue;
            str_printf(o, "        %sif (", opened++ ? "} else " : "");
            for (int u = g, first = 1; u < ng; u++)
                if (r->like[u * cnt + p] == g) {
                    str_printf(o, "%sl == %d", first ? "" : " || ", lo + u);
                    first = 0;
                }
            str_printf(o, ") { /* this layer's launch differs */\n");
            put_indented(o, txt[g * cnt + p].s, 3);
        }
        if (!opened) { put_indented(o, txt[common * cnt + p].s, 2); continue; }
        str_printf(o, "        } else {\n");
        put_indented(o, txt[common * cnt + p].s, 3);
        str_printf(o, "        }\n");
    }
    str_printf(o, "    }\n");
    for (int i = 0; i < ng * cnt; i++) str_free(&txt[i]);
    free(txt);
}

/* A path's steps as the plan lays them out: its loops over the decoder layers, the layers printed alone, the
 * model's own steps. The tail (graph.h) runs with its own n and pos: the last row (model_forward) or every row
 * (batch). */
static void emit_forward(Str *o, const Host *h, FwdPath path) {
    const PlanPath *pp = &h->plan->path[path];
    bool in_tail = false;
    for (int ri = 0; ri < pp->nruns; ri++) {
        const PlanRun *r = &pp->runs[ri];
        for (int g = 0; g < r->nlayers; g++) {
            if (g == r->loop_lo && r->loop_hi > r->loop_lo) emit_layer_loop(o, h, pp, r);
            if (g >= r->loop_lo && g < r->loop_hi) continue;
            if (r->layer0 >= 0)
                str_printf(o, "    /* layer %d: its launches differ from the loop's */\n", r->layer0 + g);
            for (int p = 0; p < r->per_layer; p++) {
                const PlanStep *s = &pp->steps[r->first + g * r->per_layer + p];
                if (s->l->tail && !in_tail) {
                    in_tail = true;
                    if (path != PATH_BATCH)
                        str_printf(o, "    { /* the tail: the last token's logits, n = 1 row from row pos = n - 1 */\n"
                                      "    const int tail_row = n - 1;\n    const int n = 1, pos = tail_row;\n%s",
                                   h->graph_grids ? "    const int grid_pos = pos;\n    (void)grid_pos;\n" : "");
                    else str_printf(o, "    { /* the tail: every token's logits, n rows from row pos = 0 */\n");
                }
                Str lit = {0};
                emit_step(&lit, h, s, -1);
                put_indented(o, lit.s, 1);
                str_free(&lit);
            }
        }
    }
    if (in_tail) str_printf(o, "    }\n");
}

void emit_host_expr(Str *o, const Expr *e) { host_expr(o, e, false); }
static void host_expr(Str *o, const Expr *e, bool graph_grids) {
    /* grids use only n, pos and integer arithmetic */
    switch (e->k) {
    case EX_ICONST: str_printf(o, "%lldLL", (long long)e->i); return;
    case EX_PARAM: str_printf(o, "(int64_t)%s", graph_grids && e->i == P_POS ? "grid_pos" : param_names[e->i]); return;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MOD:
        str_printf(o, "("); host_expr(o, e->a[0], graph_grids); str_printf(o, " %s ", expr_names[e->k]);
        host_expr(o, e->a[1], graph_grids); str_printf(o, ")");
        return;
    case EX_MIN: case EX_MAX:
        str_printf(o, "(("); host_expr(o, e->a[0], graph_grids); str_printf(o, ") %s (", e->k == EX_MIN ? "<" : ">");
        host_expr(o, e->a[1], graph_grids); str_printf(o, ") ? (");
        host_expr(o, e->a[0], graph_grids); str_printf(o, ") : (");
        host_expr(o, e->a[1], graph_grids); str_printf(o, "))");
        return;
    default: CHECK(0, "grid expression uses %s", expr_names[e->k]);
    }
}

/* What the kernels call beyond C is in runtime/kernels.h; a model's host side (api_header: runtime/model_api.h)
 * in runtime/model_host.h (llmcc run's harness includes runtime/harness.h after) */
void emit_prelude(Str *o, const KProgram *kp, Target t, const char *api_header) {
    (void)kp;
    if (api_header)
        str_printf(o, t == TARGET_CUDA ? "extern \"C\" {\n#include \"%s\"\n}\n" : "#include \"%s\"\n", api_header);
    str_printf(o, "#include \"runtime/kernels.h\"\n%s", api_header ? "#include \"runtime/model_host.h\"\n" : "");
    if (t == TARGET_CPU) str_printf(o, "#include \"runtime/cpu_gemm.h\"  /* cpu_gemm's register-tile kernel */\n"
                                    "#include \"runtime/cpu_quant.h\"  /* block-type weights' dot products */\n"
                                    "#include \"runtime/cpu_dot16.h\"  /* decode's bf16 dot products */\n");
}

/* Short statements (a register's zero, a vector element moved to a register) run to hundreds of lines in an
 * unrolled kernel: consecutive ones at one indentation share a line up to 120 columns. */
static bool packable(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && s[i] == ' ') i++;
    return n - i <= 40 && n > i && s[n - 1] == ';' && !memchr(s, '{', n) && !memchr(s, '}', n) && !memchr(s, '/', n) &&
           strncmp(s + i, "for ", 4) && strncmp(s + i, "if ", 3);
}
static void pack_lines(Str *o, const char *s) {
    size_t prev = (size_t)-1, ind_prev = 0;   /* the line being packed: its start in o, its indentation */
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p), in = strspn(p, " ");
        if (packable(p, n) && prev != (size_t)-1 && in == ind_prev && o->len - prev + 1 + n - in <= 120) {
            str_printf(o, " ");
            str_append(o, p + in, n - in);
        } else {
            if (o->len && o->s[o->len - 1] != '\n') str_printf(o, "\n");
            prev = packable(p, n) ? o->len : (size_t)-1;
            ind_prev = in;
            str_append(o, p, n);
        }
        p += n + (e != NULL);
        if (!e) break;
    }
    if (o->len && o->s[o->len - 1] != '\n') str_printf(o, "\n");
}


/* every kernel as its dialect prints it, a model's (plan) in place of its original the _tokens variant that the
 * plan calls; decode_pos: a GPU model's (KernelText) */
static void emit_kernels_as(Str *o, const KProgram *kp, const Plan *plan, Target t, bool decode_pos) {
    str_printf(o, "\n/* ---- kernels ---- */\n");
    for (int i = 0; i < kp->nk; i++) {
        Str k = {0};
        KernelText x = {.target = t, .decode_pos = decode_pos};
        const KKernel *v = plan ? plan->tokens[i] : NULL;
        bool called = false;
        for (int j = 0; v && j < plan->ncalled_tokens; j++) called |= plan->called_tokens[j] == v;
        if (!plan || !plan->replaced[i]) {
            if (t == TARGET_CUDA) emit_kernel_cuda(&k, kp->kernels[i], &x);
            else emit_kernel_c(&k, kp->kernels[i], &x);
        }
        if (called) {
            str_printf(&k, "/* the tokens each at its own position (positions) and KV-cache row (kv_rows): "
                           "model_forward's in a row,\n * model_forward_batch's each in its own slot */\n");
            emit_kernel_c(&k, v, &x);
        }
        pack_lines(o, k.s);
        str_free(&k);
    }
}

void emit_kernels(Str *o, const KProgram *kp, Target t) { emit_kernels_as(o, kp, NULL, t, false); }

/* struct Model: the payload's tensors (w), the constants' device copies (c), the buffers; each weight also
 * as a typed field, a decoder layer's in LayerWeights (one per layer) */
static void emit_model_struct(Str *o, const PlanNames *nm, const TProgram *tp) {
    if (nm->nlfield) {
        str_printf(o, "typedef struct { /* a decoder layer's weights */\n");
        for (int f = 0; f < nm->nlfield; f++) {
            const Buffer *b = nm->lfield[f];
            str_printf(o, "    const %s *%s; /* ", ctype_of(b->dtype), nm->field[b->id]);
            /* the field's dtypes, in the order the layers first have them (block types may differ by layer) */
            bool seen[DT_COUNT] = {false};
            for (int i = 0; i < tp->n_weights; i++) {
                const Buffer *w = tp->weights[i];
                if (nm->lfield_of[w->id] != f || seen[w->dtype]) continue;
                str_printf(o, "%s%s", o->s[o->len - 1] == ' ' ? "" : "/", dtype_names[w->dtype]);
                seen[w->dtype] = true;
            }
            str_printf(o, "[%lld", (long long)b->dims[0]);
            for (int d = 1; d < b->ndim; d++) str_printf(o, ", %lld", (long long)b->dims[d]);
            str_printf(o, "] */\n");
        }
        str_printf(o, "} LayerWeights;\n\n");
    }
    str_printf(o, "struct Model {\n    const void *w[%d]; /* the payload's tensors, in tensor_names order */\n",
               tp->n_weights ? tp->n_weights : 1);
    for (int i = 0; i < tp->n_weights; i++) {
        const Buffer *b = tp->weights[i];
        if (nm->layer[b->id] >= 0) continue;
        str_printf(o, "    const %s *%s; /* %s */\n", ctype_of(b->dtype), nm->field[b->id], b->name);
    }
    if (nm->nlfield) str_printf(o, "    LayerWeights layers[%d];\n", nm->nlayers);
    str_printf(o, "    const float *c[%d];\n    uint8_t *act;\n    %s *kc, *vc; /* the KV cache (%s) */\n"
                  "    float *logits, *host_logits;\n"
                  "    int32_t *ids;\n    float *work;\n    int ctx;\n    size_t wbytes, kvbytes, actbytes;\n"
                  "    int slots;       /* KV caches, one per conversation (model_init_slots) */\n"
                  "    size_t slot_off; /* elements from kc / vc to the cache model_use_slot chose */\n"
                  "    int slot;        /* that cache */\n"
                  "    void *wdev;\n"
                  "    void *stream;    /* the kernels' (CUDA; NULL on the CPU) */\n"
                  "    int graph;       /* model_use_graph: the decode step as one CUDA Graph launch */\n"
                  "    void **graphs;   /* [slots] the step's graph for each cache slot, once captured */\n"
                  "    int graph_kernels; /* the kernels the last capture holds */\n"
                  "    int32_t *pen_ids; float *pen_sub; /* [vocab] model_penalize's ids and amounts */\n};\n\n",
               nm->nconst ? nm->nconst : 1, ctype_of(tp->g->kv_dtype), dtype_names[tp->g->kv_dtype]);
}

/* model_init: the typed fields from w. A field at the same stride in every layer fills in one loop. */
static void emit_weight_fields(Str *o, const PlanNames *nm, const TProgram *tp) {
    for (int i = 0; i < tp->n_weights; i++) {
        const Buffer *b = tp->weights[i];
        if (nm->layer[b->id] < 0)
            str_printf(o, "    m->%s = (const %s *)m->w[%d];\n", nm->field[b->id], ctype_of(b->dtype), i);
    }
    if (!nm->nlfield) return;
    int *first = calloc((size_t)nm->nlfield * (size_t)nm->nlayers, sizeof(int)), stride = 0;
    bool regular = true;
    for (int i = 0; i < nm->nlfield * nm->nlayers; i++) first[i] = -1;
    for (int i = 0; i < tp->n_weights; i++) {
        const Buffer *b = tp->weights[i];
        int l = nm->layer[b->id];
        if (l >= 0) first[l * nm->nlfield + nm->lfield_of[b->id]] = i;
    }
    if (nm->nlayers > 1) stride = first[nm->nlfield] - first[0];
    for (int l = 0; l < nm->nlayers; l++)
        for (int f = 0; f < nm->nlfield; f++)
            regular &= first[l * nm->nlfield + f] == first[f] + l * stride && first[f] >= 0;
    if (regular) str_printf(o, "    for (int l = 0; l < %d; l++) {\n", nm->nlayers);
    for (int l = 0; l < (regular ? 1 : nm->nlayers); l++)
        for (int f = 0; f < nm->nlfield; f++) {
            const Buffer *b = nm->lfield[f];
            int w = first[l * nm->nlfield + f];
            if (regular) str_printf(o, "        m->layers[l].%s = (const %s *)m->w[%d + %d * l];\n", nm->field[b->id],
                                    ctype_of(b->dtype), w, stride);
            else if (w >= 0) str_printf(o, "    m->layers[%d].%s = (const %s *)m->w[%d];\n", l, nm->field[b->id],
                                        ctype_of(b->dtype), w);
        }
    if (regular) str_printf(o, "    }\n");
    free(first);
}

/* The activation arena: each buffer's byte offset (the memory plan gives buffers whose lifetimes do not
 * overlap the same bytes), and the per-layer KV cache */
static void emit_act_macros(Str *o, const PlanNames *nm, const KProgram *kp, int n_layers) {
    const TProgram *tp = kp->tp;
    str_printf(o, "/* the activation arena (f32): byte offsets, reused by buffers that are not live together */\n");
    for (int i = 0; i < tp->nbufs; i++) {
        const Buffer *b = tp->bufs[i];
        if (b->kind != BUF_ACT || !nm->act[b->id]) continue;
        int j = 0;   /* each name once */
        while (j < i && !(tp->bufs[j]->kind == BUF_ACT && nm->act[tp->bufs[j]->id] &&
                          nm->act_slot[tp->bufs[j]->id] == nm->act_slot[b->id])) j++;
        if (j < i) continue;
        str_printf(o, "#define ACT_%s %lld /* [%lld", nm->act[b->id], (long long)b->act_offset, (long long)b->dims[0]);
        for (int d = 1; d < b->ndim; d++) str_printf(o, ", %lld", (long long)b->dims[d]);
        const char *also = nm->act_also[nm->act_slot[b->id]];
        str_printf(o, "]%s%s */\n", also ? "; also " : "", also ? also : "");
    }
    str_printf(o, "#define ACT(name) ((float *)(m->act + ACT_##name))\n"
                  "/* layer l's rows of the KV cache in use (kc, vc; the slot's): ctx positions of %lld elements */\n"
                  "#define LAYER_KV(cache, l) (m->cache + m->slot_off + (size_t)(l) * m->ctx * %lld)\n"
                  "/* model_forward_batch: layer l's rows of slot s's KV cache */\n"
                  "#define SLOT_KV(cache, l, s) (m->cache + ((size_t)(s) * %d + (size_t)(l)) * m->ctx * %lld)\n"
                  "/* the _tokens kernels: a token's row in a layer's KV cache from SLOT_KV(cache, l, 0) on */\n"
                  "#define KV_ROW(s, p) ((int64_t)(s) * %d * m->ctx + (p))\n\n",
               (long long)tp->kv_layer_elems, (long long)tp->kv_layer_elems, n_layers,
               (long long)tp->kv_layer_elems, n_layers);
}

/* model_init: the payload checked against the compiled table, the buffers allocated (runtime/model_host.h's
 * mem_*: device memory for CUDA, host memory for C), the typed weight fields filled */
static void emit_model_init(Str *o, const PlanNames *nm, const KProgram *kp, const ModelInfo *mi, bool graph) {
    const TProgram *tp = kp->tp;
    str_printf(o, "const char *model_init_slots(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx,\n"
                  "                             int slots) {\n"
                  "    static char err[256];\n    if (ctx < 1 || ctx > model_info.max_ctx) {\n"
                  "        snprintf(err, sizeof err, \"context %%d is outside 1..%%d\", ctx, model_info.max_ctx);\n"
                  "        return err;\n    }\n"
                  "    if (slots < 1 || slots > 4096) return \"the KV-cache slots are not in 1..4096\";\n"
                  "    for (int i = 0; i < %d; i++) {\n"
                  "        if (strcmp(t[i].name, tensor_names[i]) || t[i].dtype != tensor_shapes[i].dtype ||\n"
                  "            t[i].ndim != tensor_shapes[i].ndim || t[i].shape[0] != tensor_shapes[i].shape[0] ||\n"
                  "            (t[i].ndim > 1 && t[i].shape[1] != tensor_shapes[i].shape[1])) {\n"
                  "            snprintf(err, sizeof err, \"payload tensor %%d is %%.100s, expected %%s with its \"\n"
                  "                     \"compiled shape\", i, t[i].name, tensor_names[i]);\n"
                  "            return err;\n        }\n    }\n"
                  "    Model *m = (Model *)calloc(1, sizeof *m);\n    if (!m) return \"out of memory\";\n"
                  "    m->ctx = ctx;\n    m->slots = slots;\n    size_t kv = (size_t)slots * %d * ctx * %lld;\n"
                  "    m->kvbytes = 2 * kv * sizeof *m->kc;\n    m->actbytes = %lld;\n"
                  "    const char *e = mem_device();\n"
                  "    if (!e) e = mem_weights(m->w, &m->wdev, &m->wbytes, t, data, %d);\n",
               tp->n_weights, mi->n_layers, (long long)tp->kv_layer_elems, (long long)tp->act_bytes, tp->n_weights);
    for (int i = 0; i < nm->nconst; i++)
        str_printf(o, "    if (!e) e = mem_const(&m->c[%d], c_%d, sizeof c_%d);\n", i, i, i);
    str_printf(o, "    if (!e) e = mem_zalloc(&m->act, m->actbytes + 1);\n"
                  "    if (!e) e = mem_zalloc(&m->kc, kv * sizeof *m->kc);\n"
                  "    if (!e) e = mem_zalloc(&m->vc, kv * sizeof *m->vc);\n"
                  "    if (!e) e = mem_zalloc(&m->logits, (size_t)%d * %lld * sizeof(float)); /* a row per token */\n"
                  "    if (!e) e = mem_zalloc(&m->ids, %d * sizeof(int32_t));\n"
                  "    if (!e) e = mem_zalloc(&m->work, %lld); /* split-K partials */\n"
                  "    if (!e) e = mem_stream(&m->stream);\n"
                  "    if (!e) e = mem_zalloc(&m->pen_ids, %lld * sizeof(int32_t)); /* model_penalize's */\n"
                  "    if (!e) e = mem_zalloc(&m->pen_sub, %lld * sizeof(float));\n"
                  "    if (!e && !(m->graphs = (void **)calloc((size_t)slots, sizeof *m->graphs)))\n"
                  "        e = \"out of memory\";\n"
                  "    if (e) { snprintf(err, sizeof err, \"%%s\", e); model_free(m); return err; }\n",
               mi->max_batch, (long long)mi->vocab_size, mi->max_batch, (long long)kernel_work_bytes(kp) + 16,
               (long long)mi->vocab_size, (long long)mi->vocab_size);
    emit_weight_fields(o, nm, tp);
    str_printf(o, "    m->graph = %s;\n    *out = m;\n    return NULL;\n}\n\n"
                  "const char *model_init(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx) {\n"
                  "    return model_init_slots(out, t, data, ctx, 1);\n}\n\n"
                  "int model_use_slot(Model *m, int slot) {\n"
                  "    if (slot < 0 || slot >= m->slots) return -1;\n"
                  "    m->slot = slot;\n"
                  "    m->slot_off = (size_t)slot * %d * m->ctx * %lld;\n    return 0;\n}\n\n"
                  "int model_use_graph(Model *m, int on) {\n    m->graph = on && %s;\n    return m->graph;\n}\n\n"
                  "int model_graph_kernels(const Model *m) { return m->graph_kernels; }\n\n",
               graph ? "graph_default()" : "0", mi->n_layers, (long long)tp->kv_layer_elems,
               graph ? "graph_default()" : "0");
}

/* The weight bytes one decode step (n = 1) reads: every weight its launches take, whole, but one taken by a launch
 * that also takes the token ids (a gather: the embedding) one row; each buffer once, at its largest read (a tied
 * embedding is also the lm_head: whole). Launches only for more tokens (prefill alternatives) are left out. */
static long long decode_weight_bytes(const KProgram *kp) {
    int n = kp->tp->n_weights;
    long long *bytes = calloc((size_t)n + 1, sizeof(long long)), total = 0;
    CHECK(bytes, "out of memory");
    for (int l = 0; l < kp->nl; l++) {
        const KLaunch *L = &kp->launches[l];
        if (!plan_runs_at_one_token(L)) continue;   /* runs only for more tokens */
        bool gather = false;
        for (int i = 0; i < L->k->nparams; i++) gather |= L->args[i]->kind == BUF_INPUT;
        for (int i = 0; i < L->k->nparams; i++) {
            const Buffer *b = L->args[i];
            if (b->kind != BUF_WEIGHT) continue;
            int64_t row = b->dims[b->ndim - 1], rows = 1;
            for (int d = 0; d < b->ndim - 1; d++) rows *= b->dims[d];
            long long read = (long long)dtype_bytes(b->dtype, row) * (gather && b->ndim == 2 ? 1 : rows);
            CHECK(b->weight_index >= 0 && b->weight_index < n, "weight %s without a payload index", b->name);
            if (read > bytes[b->weight_index]) bytes[b->weight_index] = read;
        }
    }
    for (int i = 0; i < n; i++) total += bytes[i];
    free(bytes);
    return total;
}

/* The launches of a one-token model_forward call: all but those only for more tokens (prefill alternatives) and
 * the sampler's (model_topk's) */
static int decode_launches(const KProgram *kp) {
    int count = 0;
    for (int l = 0; l < kp->nl; l++)
        count += plan_runs_at_one_token(&kp->launches[l]) && !kernel_is_sampling(&kp->launches[l]);
    return count;
}

/* model_info, from the caller's ModelInfo and the program's tensors */
static void emit_model_info(Str *o, const KProgram *kp, const ModelInfo *mi, Target t) {
    const TProgram *tp = kp->tp;
    str_printf(o, "const ModelInfo model_info = {\n    \"%s\", \"%s\", \"%s\",\n    %d, %d, %d, %d,\n    %d, %d, %d,\n"
                  "    %d, %d,\n    %d,\n    %d, {", mi->name, mi->architecture, target_names[t], mi->vocab_size,
               mi->hidden_size, mi->intermediate_size, mi->n_layers, mi->n_heads, mi->n_kv_heads, mi->head_dim,
               mi->max_ctx, mi->max_batch, mi->bos_id, mi->n_eos);
    for (int i = 0; i < mi->n_eos; i++) str_printf(o, "%s%d", i ? ", " : "", mi->eos_ids[i]);
    str_printf(o, "%s},\n    ", mi->n_eos ? "" : "0");
    const float f[4] = {mi->temperature, mi->top_p, mi->min_p, mi->repetition_penalty};
    for (int i = 0; i < 4; i++) { emit_float_lit(o, f[i]); str_printf(o, i < 3 ? ", " : ""); }
    str_printf(o, ",\n    %d,\n    %d, tensor_names,\n    %lld,\n    %lldLL,\n    %d,\n    \"%s\",\n    {", mi->top_k,
               tp->n_weights, tp->top_k ? (long long)tp->top_k->dims[2] : 0LL, decode_weight_bytes(kp),
               decode_launches(kp), dtype_names[tp->g->kv_dtype]);
    for (int i = 0; i < MODEL_SAMPLING_SETTINGS; i++)
        str_printf(o, "%s\"%s\"", i ? ", " : "", mi->sampling_from[i] ? mi->sampling_from[i] : "");
    str_printf(o, "},\n};\n");
}

/* One row of the payload's table: name (a string literal, or pieces of one), dtype, rank, shape */
static void tensor_row(Str *o, const char *name, const Buffer *b, bool more) {
    str_printf(o, "    X(%s, %s, %d, %lld, %lld)%s\n", name, pdt(b->dtype), b->ndim, (long long)b->dims[0],
               (long long)(b->ndim > 1 ? b->dims[1] : 0), more ? " \\" : "");
}
/* the decoder layers' tensors, where every layer has the same ones in the same order (names, dtypes, shapes) and
 * they follow each other in the payload: weights first .. first + per * layers - 1 as layer 0's, 1's, ... */
static bool regular_layers(const TProgram *tp, int *first, int *per, int *layers) {
    int i = 0;
    while (i < tp->n_weights && tp->weights[i]->layer < 0) i++;
    *first = i; *per = 0; *layers = 0;
    while (i + *per < tp->n_weights && tp->weights[i + *per]->layer == 0) (*per)++;
    for (int j = i; *per && j < tp->n_weights && tp->weights[j]->layer >= 0; j++) {
        const Buffer *b = tp->weights[j], *z = tp->weights[i + (j - i) % *per];
        char pb[32], pz[32];
        int nb = snprintf(pb, sizeof pb, "model.layers.%d.", b->layer), nz = snprintf(pz, sizeof pz, "model.layers.0.");
        if (b->layer != (j - i) / *per || strncmp(b->name, pb, (size_t)nb) || strncmp(z->name, pz, (size_t)nz) ||
            strcmp(b->name + nb, z->name + nz) || b->dtype != z->dtype || b->ndim != z->ndim ||
            memcmp(b->dims, z->dims, sizeof b->dims))
            return false;
        if ((j - i) % *per == 0) (*layers)++;
    }
    for (int j = i + *per * *layers; j < tp->n_weights; j++) if (tp->weights[j]->layer >= 0) return false;
    return *layers > 1;
}

/* TENSORS(X): the payload's tensors, in order (name, dtype, rank, shape); a decoder layer's as LAYER_TENSORS(X, l)
 * where every layer has the same */
static void emit_tensor_table(Str *o, const TProgram *tp) {
    int first, per, layers;
    bool regular = regular_layers(tp, &first, &per, &layers);
    if (regular) {
        str_printf(o, "/* a decoder layer's tensors (l: its index, a literal) */\n#define LAYER_TENSORS(X, l) \\\n");
        for (int j = first; j < first + per; j++) {
            Str name = {0};
            str_printf(&name, "\"model.layers.\" #l \".%s\"", tp->weights[j]->name + strlen("model.layers.0."));
            tensor_row(o, name.s, tp->weights[j], j + 1 < first + per);
            str_free(&name);
        }
    }
    str_printf(o, "#define TENSORS(X) \\\n");
    for (int i = 0; i < tp->n_weights; i++) {
        if (regular && i == first) {
            size_t line = o->len;
            str_printf(o, "   ");
            for (int l = 0; l < layers; l++) {
                if (o->len - line > 96) { str_printf(o, " \\\n   "); line = o->len - 4; }
                str_printf(o, " LAYER_TENSORS(X, %d)", l);
            }
            str_printf(o, "%s\n", first + per * layers < tp->n_weights ? " \\" : "");
            i += per * layers - 1;
            continue;
        }
        Str name = {0};
        str_printf(&name, "\"%s\"", tp->weights[i]->name);
        tensor_row(o, name.s, tp->weights[i], i + 1 < tp->n_weights);
        str_free(&name);
    }
}

/* whether a statement in b takes bf16 dot products (a gemm's: runtime/cpu_gemm.h's cpu_gemm_dot) or, with
 * qdot, block-type dot products (runtime/cpu_quant.h) */
static bool has_dot(TStmt *const *b, int n, bool qdot) {
    for (int i = 0; i < n; i++)
        if ((qdot ? b[i]->k == TS_QDOT : b[i]->k == TS_GEMM && b[i]->dot) || has_dot(b[i]->body, b[i]->nbody, qdot))
            return true;
    return false;
}
static bool program_has_dot(const KProgram *kp, bool qdot) {
    for (int i = 0; i < kp->nk; i++)
        for (int j = 0; j < kp->kernels[i]->nbody; j++) {
            const KStmt *s = kp->kernels[i]->body[j];
            if (s->k == KS_PHASE && has_dot(s->body, s->nbody, qdot)) return true;
        }
    return false;
}

/* Where line s (n bytes, printed from column col) breaks to fit 120 columns: of the spaces that leave at least 80
 * columns on the line, the one inside the fewest parentheses and brackets, after a comma rather than before an
 * operator rather than elsewhere, the rightmost of those; else the rightmost space after a comma, before an
 * operator, anywhere. Not inside a string or character literal. 0: nowhere. */
static size_t wrap_point(const char *s, size_t n, size_t col) {
    size_t best[3] = {0, 0, 0}, pick = 0;
    int depth = 0, pick_key = 1 << 30;
    char quote = 0;
    for (size_t i = 1; i < n && col + i <= 120; i++) {
        if (quote) { if (s[i] == '\\') i++; else if (s[i] == quote) quote = 0; continue; }
        if (s[i] == '"' || s[i] == '\'') { quote = s[i]; continue; }
        if (s[i] == '(' || s[i] == '[') depth++;
        if ((s[i] == ')' || s[i] == ']') && depth > 0) depth--;
        if (s[i] != ' ' || s[i - 1] == ' ' || i + 1 >= n) continue;
        int kind = s[i - 1] == ',' ? 0 : strchr("+-*/%<>=&|?:", s[i + 1]) ? 1 : 2, key = depth * 3 + kind;
        best[kind] = i;
        if (col + i >= 80 && key <= pick_key) { pick = i; pick_key = key; }
    }
    if (pick) return pick;
    return best[0] ? best[0] : best[1] ? best[1] : best[2];
}
/* Lines over 120 columns (unrolled kernel statements) broken where wrap_point says, the rest 8 columns in;
 * preprocessor lines and a macro's continued lines are left whole */
static void wrap_long_lines(Str *o, size_t from) {
    Str out = {0};
    for (size_t at = from; at < o->len;) {
        const char *line = o->s + at, *nl = memchr(line, '\n', o->len - at);
        size_t n = nl ? (size_t)(nl - line) : o->len - at, ind = strspn(line, " ");
        at += n + (nl != NULL);
        if (n <= 120 || line[ind] == '#' || line[n - 1] == '\\') {
            str_append(&out, line, n);
            if (nl) str_printf(&out, "\n");
            continue;
        }
        size_t col = 0, cut;
        while (col + n > 120 && (cut = wrap_point(line, n, col)) != 0) {
            size_t keep = cut;
            while (keep > 0 && line[keep - 1] == ' ') keep--;
            str_append(&out, line, keep);
            str_printf(&out, "\n");
            col = ind + 8;
            emit_indent(&out, (int)col / 4);
            line += cut + 1; n -= cut + 1;
        }
        str_append(&out, line, n);
        if (nl) str_printf(&out, "\n");
    }
    o->len = from;
    str_append(o, out.s ? out.s : "", out.len);
    str_free(&out);
}

void emit_program(Str *o, const KProgram *kp, const Plan *plan, const EmitOptions *eo) {
    const size_t from = o->len;
    const TProgram *tp = kp->tp;
    const ModelInfo *mi = &eo->info;
    bool cuda = eo->target == TARGET_CUDA;
    long long V = mi->vocab_size;
    str_printf(o, "/* %s: generated by llmcc from %s (%s). Do not edit: rebuild with llmcc.\n"
                  " * %d distinct kernels, %d launches per forward call. */\n", cuda ? "model.cu" : "model.c",
               eo->source, mi->architecture, kp->nk, kp->nl - kernel_sampling_launches(kp));
    emit_prelude(o, kp, eo->target, "runtime/model_api.h");
    const PlanNames nm = plan->names;
    CHECK(plan->target == eo->target, "a plan for %s emitted for %s", target_names[plan->target],
          target_names[eo->target]);
    /* constants, each distinct array once */
    for (int c = 0; c < nm.nconst; c++) {
        const Buffer *b = nm.cfirst[c];
        int uses = 0;
        for (int i = 0; i < tp->nbufs; i++) uses += tp->bufs[i]->kind == BUF_CONST && nm.cidx[tp->bufs[i]->id] == c;
        str_printf(o, "static const float c_%d[%lld] = { /* %s", c, (long long)b->dims[0], b->name);
        if (uses > 1) str_printf(o, " and %d more of the same values", uses - 1);
        str_printf(o, " */");
        for (int64_t j = 0; j < b->dims[0]; j++)
            str_printf(o, "%s%.9ef,", j % 6 ? " " : "\n    ", (double)b->const_data[j]);
        str_printf(o, "\n};\n");
    }
    /* the GPU's builds: the decode step runs as one CUDA Graph (decode_step below), its kernels reading the
     * position from device memory */
    if (eo->target != TARGET_CPU)
        /* CUDA: constant memory, read through the constant cache as one broadcast value (a global load of it
         * came first among a gemv's loads and delayed its weights' by a memory latency) */
        str_printf(o, "\n/* the position of the decode step a CUDA Graph replays (model_forward sets it) */\n"
                      "static %sint decode_pos;\n", cuda ? "__constant__ " : "");
    Host host = {plan, &plan->names, cuda, eo->target != TARGET_CPU, false};
    emit_kernels_as(o, kp, plan, eo->target, eo->target != TARGET_CPU);
    bool forward_tokens = false;   /* model_forward calls a _tokens variant */
    const PlanPath *fwd = &plan->path[PATH_FORWARD];
    for (int j = 0; j < fwd->n; j++) forward_tokens |= fwd->steps[j].k->tokens;
    str_printf(o, "\n/* ---- host ---- */\n%s", cuda ? "extern \"C\" {\n" : "");
    emit_tensor_table(o, tp);
    str_printf(o, "#define NAME_OF(name, dtype, ndim, d0, d1) name,\n"
                  "static const char *const tensor_names[%d] = {TENSORS(NAME_OF)};\n", tp->n_weights);
    emit_model_info(o, kp, mi, eo->target);
    str_printf(o, "#define SHAPE_OF(name, dtype, ndim, d0, d1) {dtype, ndim, {d0, d1}},\n"
                  "static const struct { uint32_t dtype, ndim; uint64_t shape[2]; } tensor_shapes[%d] = "
                  "{TENSORS(SHAPE_OF)};\n\n", tp->n_weights);
    emit_model_struct(o, &nm, tp);
    const bool graph = eo->target != TARGET_CPU;   /* the decode step as one CUDA Graph launch (decode_step) */
    emit_model_init(o, &nm, kp, mi, graph);
    emit_act_macros(o, &nm, kp, mi->n_layers);
    /* model_forward: the launch plan; the argmax kernel's result (an index held exactly in an f32) sits in
     * the activation arena */
    const Buffer *nt = tp->next_token, *tk = tp->top_k;
    CHECK(nt && nt->kind == BUF_ACT && nt->act_offset >= 0, "the model has no argmax of its logits");
    CHECK(tk && tk->kind == BUF_ACT && tk->act_offset >= 0 && tk->ndim == 3, "the model has no topk of its logits");
    if (cuda) str_printf(o, "#undef STREAM\n#define STREAM ((cudaStream_t)m->stream) /* the model's launches */\n\n");
    if (graph) {
        str_printf(o, "/* The decode step (n = 1) as its CUDA Graph holds it: every launch with pos = -1, so that the "
                      "kernels read\n * the position from decode_pos, and the grids of the longest context (grid_pos; "
                      "flash_decode's slices\n * past the position's find no keys): one capture serves every step of "
                      "a KV-cache slot. */\n"
                      "static void decode_step(Model *m) {\n    const int n = 1, pos = -1, grid_pos = m->ctx - 1;\n"
                      "    (void)pos; (void)grid_pos;\n");
        Host step = host;
        step.graph_grids = true;
        emit_forward(o, &step, PATH_DECODE_STEP);
        str_printf(o, "}\n\n");
    }
    str_printf(o, "int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits) {\n"
                  "    mem_put(m->ids, ids, (size_t)n * sizeof(int32_t));\n");
    if (forward_tokens)
        str_printf(o, "    int positions[%d]; int64_t kv_rows[%d]; /* the _tokens kernels': pos, pos + 1, ... */\n"
                      "    for (int t = 0; t < n; t++) {\n"
                      "        positions[t] = pos + t;\n        kv_rows[t] = KV_ROW(m->slot, pos + t);\n    }\n",
                   mi->max_batch, mi->max_batch);
    if (graph)
        str_printf(o, "    if (n == 1 && m->graph) { /* decode: one launch of the step's graph, at position pos */\n"
                      "        const int at = pos;\n%s"
                      "        graph_replay(&m->graphs[m->slot], &m->graph_kernels, decode_step, m, m->stream);\n"
                      "    } else {\n",
                   cuda ? "        cudaMemcpyToSymbolAsync(decode_pos, &at, sizeof at, 0, cudaMemcpyHostToDevice,"
                          " STREAM);\n"
                        : "        decode_pos = at;\n");
    /* cpu: one team for the whole plan; each kernel shares its blocks among the team (omp for, nowait), and
     * the team waits where a launch uses what the ones before wrote (emit_forward's barriers) */
    const char *team = eo->target == TARGET_CPU ? "    #pragma omp parallel\n    {\n" : "";
    str_printf(o, "%s", team);
    emit_forward(o, &host, PATH_FORWARD);
    if (*team) str_printf(o, "    }\n");
    if (graph) str_printf(o, "    }\n");
    str_printf(o, "    float next;\n    mem_get(&next, ACT(%s), sizeof next, model_info.name);\n"
                  "    if (logits) mem_get(logits, m->logits, %lld * sizeof(float), model_info.name);\n"
                  "    return (int)next;\n}\n\n", nm.act[nt->id], V);
    /* model_forward_batch: one token for each of n sequences (runtime/model_api.h) */
    str_printf(o, "int model_forward_batch(Model *m, const int32_t *ids, const int *slots, const int *positions,\n"
                  "                        int n, float *logits, int32_t *next) {\n"
                  "    if (n < 1 || n > %d) return -1;\n"
                  "    for (int t = 0; t < n; t++)\n"
                  "        if (slots[t] < 0 || slots[t] >= m->slots || positions[t] < 0 || positions[t] >= m->ctx)\n"
                  "            return -1;\n"
                  "    for (int t = 0; t < n; t++) /* one token per sequence */\n"
                  "        for (int u = 0; u < t; u++)\n"
                  "            if (slots[u] == slots[t]) return -1;\n"
                  "    mem_put(m->ids, ids, (size_t)n * sizeof(int32_t));\n", mi->max_batch);
    if (plan->ncalled_tokens)
        str_printf(o, "    int64_t kv_rows[%d]; /* the _tokens kernels' KV rows */\n"
                      "    for (int t = 0; t < n; t++) kv_rows[t] = KV_ROW(slots[t], positions[t]);\n", mi->max_batch);
    str_printf(o, "    const int pos = 0; /* unread but by the per-token launches (each its token's) and the tail */\n"
                  "    (void)pos;\n%s", team);
    const bool batch_ok = plan->path[PATH_BATCH].ok;
    if (batch_ok) emit_forward(o, &host, PATH_BATCH);
    else str_printf(o, "    /* not in this build: a split-K kernel or per-token scratch rows (plan.c, batchable) */\n");
    if (*team) str_printf(o, "    }\n");
    if (batch_ok)
        str_printf(o, "    float best[%d];\n    mem_get(best, ACT(%s), (size_t)n * sizeof(float), model_info.name);\n"
                      "    for (int t = 0; t < n; t++) next[t] = (int32_t)best[t];\n"
                      "    if (logits) mem_get(logits, m->logits, (size_t)n * %lld * sizeof(float), model_info.name);\n"
                      "    return 0;\n}\n\n", mi->max_batch, nm.act[nt->id], V);
    else str_printf(o, "    (void)logits; (void)next;\n    return -1;\n}\n\n");
    /* model_topk: the sampler's kernels, with n = k */
    long long KM = tk->dims[2];
    str_printf(o, "int model_topk(Model *m, int k, float *vals, int32_t *ids) {\n"
                  "    if (k < 1 || k > %lld) return -1;\n    const int n = k, pos = 0;\n    (void)pos;\n%s", KM, team);
    for (int i = 0, first = 1; i < kp->nl; i++)
        if (kernel_is_sampling(&kp->launches[i])) {
            if (*team && !first) str_printf(o, "    #pragma omp barrier\n");
            const PlanStep sampler = {&kp->launches[i], kp->launches[i].k, kp->launches[i].run_if, BATCH_ONCE, false};
            emit_launch(o, &host, &sampler, -1, 1, ARGS_CALL);
            first = 0;
        }
    if (*team) str_printf(o, "    }\n");
    str_printf(o, "    float out[%lld];\n    mem_get(out, ACT(%s), sizeof out, model_info.name);\n"
                  "    for (int i = 0; i < k; i++) { vals[i] = out[i]; ids[i] = (int32_t)out[%lld + i]; }\n"
                  "    return 0;\n}\n\n", 2 * KM, nm.act[tk->id], KM);
    str_printf(o, "int model_threads(int n, char *desc, size_t size) {\n");
    if (cuda) str_printf(o, "    (void)n;\n    gpu_describe(desc, size);\n    return 0;\n}\n\n");
    else {
        /* --info names how the prompt's bf16 linears and the block-type weights multiply on this CPU */
        str_printf(o, "    int threads = cpu_threads(n, desc, size);\n    size_t len = strlen(desc);\n");
        if (program_has_dot(kp, false))
            str_printf(o, "    len += (size_t)snprintf(desc + len, size - len, \"; a prompt's bf16 linears: %%s\",\n"
                          "        !cpu_gemm_dot16_ok() ? \"f32 FMAs on bf16-rounded activations\"\n"
                          "        : cpu_gemm_amx_ok() ? \"bf16 tile products (AMX)\"\n"
                          "        : \"bf16 dot products (AVX512_BF16)\");\n");
        bool acts_q8 = false;   /* knob cpu_qdot_q8: runtime/cpu_quant_q8.h's integer products */
        for (int i = 0; i < kp->nk; i++) acts_q8 |= kp->kernels[i]->has_acts_q8;
        if (program_has_dot(kp, true))
            str_printf(o, "    if (len < size)\n        snprintf(desc + len, size - len, "
                          "\"; block-type weights: dot products (%s%%s)\", %s);\n",
                       acts_q8 ? "8-bit activations, " : "",
                       acts_q8 ? "cpu_quant_q8_isa_name()" : "cpu_quant_isa_name()");
        str_printf(o, "    (void)len;\n    return threads;\n}\n\n");
    }
    /* model_penalize: the ids and amounts copied to the device, one kernel (runtime/model_host.h) */
    str_printf(o, "int model_penalize(Model *m, const int32_t *ids, const float *sub, int n, float rep) {\n"
                  "    if (n < 0 || n > %lld) return -1;\n"
                  "    for (int j = 0; j < n; j++) if (ids[j] < 0 || ids[j] >= %lld) return -1;\n"
                  "    mem_put(m->pen_ids, ids, (size_t)n * sizeof *ids);\n"
                  "    mem_put(m->pen_sub, sub, (size_t)n * sizeof *sub);\n"
                  "    penalize_launch(m->logits, m->pen_ids, m->pen_sub, n, rep, m->stream);\n"
                  "    return 0;\n}\n\n", V, V);
    str_printf(o, "void model_logits(Model *m, float *logits) {\n"
                  "    mem_get(logits, m->logits, %lld * sizeof(float), model_info.name);\n}\n\n", V);
    str_printf(o, "size_t model_memory_bytes(const Model *m, size_t *weights, size_t *kv, size_t *act) {\n"
                  "    if (weights) *weights = m->wbytes;\n    if (kv) *kv = m->kvbytes;\n"
                  "    if (act) *act = m->actbytes;\n"
                  "    return m->wbytes + m->kvbytes + m->actbytes;\n}\n\n");
    str_printf(o, "void model_free(Model *m) {\n    if (!m) return;\n"
                  "    mem_free(m->wdev); mem_free(m->act); mem_free(m->kc); mem_free(m->vc);\n"
                  "    mem_free(m->logits); mem_free(m->ids); mem_free(m->work);\n"
                  "    mem_free(m->pen_ids); mem_free(m->pen_sub);\n"
                  "    for (int i = 0; m->graphs && i < m->slots; i++) graph_free(m->graphs[i]);\n"
                  "    free(m->graphs);\n    mem_stream_free(m->stream);\n");
    if (nm.nconst) str_printf(o, "    for (int i = 0; i < %d; i++) mem_free_const(m->c[i]);\n", nm.nconst);
    str_printf(o, "    free(m);\n}\n%s", cuda ? "} /* extern \"C\" */\n" : "");
    wrap_long_lines(o, from);
}
