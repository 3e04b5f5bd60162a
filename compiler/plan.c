/* plan.c: the plan stage (plan.h): names, each forward path's steps, their barriers and batching, the layer
 * loops, and the _tokens variants of the kernels, decided here so that emit.c only prints them. */
#include "plan.h"
#include "emit_kernel.h"
#include <stdio.h>
#include <string.h>

const char *const fwd_path_names[] = {FWD_PATHS(X_NAME)};
const char *const batch_way_names[] = {BATCH_WAYS(X_NAME)};

/* ---- names ---- */
static const char *ident_a(Arena *A, const Buffer *b, bool upper) {
    Str s = {0};
    emit_ident(&s, b, upper);
    const char *r = arena_strdup(A, s.s);
    str_free(&s);
    return r;
}

/* An activation's ACT name: its buffer's, numbered where another offset has it (a name keeps one offset) */
static void name_act(Arena *A, PlanNames *nm, const Buffer *b, const Buffer **named, int *nnamed, int *nslots) {
    if (b->kind != BUF_ACT || nm->act[b->id]) return;
    const char *base = ident_a(A, b, true), *name = base;
    int j;
    for (int k = 2;; k++) {
        j = 0;
        while (j < *nnamed && strcmp(nm->act[named[j]->id], name)) j++;
        if (j == *nnamed || named[j]->act_offset == b->act_offset) break;
        name = arena_printf(A, "%s_%d", base, k);
    }
    nm->act[b->id] = name;
    nm->act_slot[b->id] = j < *nnamed ? nm->act_slot[named[j]->id] : (*nslots)++;
    nm->act_first[nm->act_slot[b->id]] = name;
    named[(*nnamed)++] = b;
}

static void names_init(Arena *A, PlanNames *nm, const KProgram *kp) {
    const TProgram *tp = kp->tp;
    memset(nm, 0, sizeof *nm);
    for (int i = 0; i < tp->nbufs; i++) nm->nid = tp->bufs[i]->id >= nm->nid ? tp->bufs[i]->id + 1 : nm->nid;
    nm->act = ARENA_ARRAY(A, const char *, nm->nid);
    nm->field = ARENA_ARRAY(A, const char *, nm->nid);
    nm->act_slot = ARENA_ARRAY(A, int, nm->nid);
    nm->act_first = ARENA_ARRAY(A, const char *, nm->nid);
    nm->act_also = ARENA_ARRAY(A, const char *, nm->nid);
    nm->cidx = ARENA_ARRAY(A, int, nm->nid);
    nm->layer = ARENA_ARRAY(A, int, nm->nid);
    nm->lfield_of = ARENA_ARRAY(A, int, nm->nid);
    nm->cfirst = ARENA_ARRAY(A, const Buffer *, tp->nbufs);
    nm->lfield = ARENA_ARRAY(A, const Buffer *, tp->n_weights + 1);
    const Buffer **named = ARENA_ARRAY(A, const Buffer *, tp->nbufs);
    int nnamed = 0;
    for (int i = 0; i < kp->nl; i++)
        for (int j = 0; j < kp->launches[i].k->nparams; j++)
            name_act(A, nm, kp->launches[i].args[j], named, &nnamed, &nm->nact);
    if (tp->next_token) name_act(A, nm, tp->next_token, named, &nnamed, &nm->nact);
    if (tp->top_k) name_act(A, nm, tp->top_k, named, &nnamed, &nm->nact);
    for (int i = 0; i < tp->nbufs; i++) {
        const Buffer *b = tp->bufs[i];
        if (b->kind != BUF_CONST) continue;
        int c = 0;
        while (c < nm->nconst && (nm->cfirst[c]->dims[0] != b->dims[0] ||
                                  memcmp(nm->cfirst[c]->const_data, b->const_data, (size_t)b->dims[0] * 4))) c++;
        if (c == nm->nconst) nm->cfirst[nm->nconst++] = b;
        nm->cidx[b->id] = c;
    }
    for (int i = 0; i < tp->n_weights; i++) {
        const Buffer *b = tp->weights[i];
        int l = b->layer;
        nm->field[b->id] = ident_a(A, b, false);
        int f = 0;
        while (f < nm->nlfield && strcmp(nm->field[nm->lfield[f]->id], nm->field[b->id])) f++;
        /* a field holds one C type and shape in every layer: one dtype, or block types (uint8_t), which mixed
         * files have per layer (llama.cpp's Q4_K_M: some layers' ffn_down and attn_v Q6_K, the rest Q4_K); the
         * kernels that read them are specialised per dtype already (distinct kernel IR) */
        const Buffer *first = f < nm->nlfield ? nm->lfield[f] : NULL;
        if (l >= 0 && first &&
            ((first->dtype != b->dtype && !(dtype_is_quant(b->dtype) && dtype_is_quant(first->dtype))) ||
             first->ndim != b->ndim || memcmp(first->dims, b->dims, sizeof b->dims)))
            l = -1;
        if (l < 0) {   /* a model-level field: the whole name where a layer's would not fit, clear of Model's own */
            Str s = {0};
            emit_ident_str(&s, strncmp(b->name, "model.", 6) ? b->name : b->name + 6, false);
            static const char *const own[] = {"w", "c", "act", "kc", "vc", "logits", "host_logits", "ids", "work",
                                               "ctx", "wbytes", "kvbytes", "actbytes", "wdev", "layers", "slots",
                                               "slot_off", NULL};
            bool clash = false;
            for (int j = 0; own[j]; j++) clash |= !strcmp(s.s, own[j]);
            nm->field[b->id] = arena_printf(A, "%s%s", clash ? "w_" : "", s.s);
            str_free(&s);
        }
        if (l >= 0 && f == nm->nlfield) nm->lfield[nm->nlfield++] = b;
        nm->layer[b->id] = l;
        nm->lfield_of[b->id] = l >= 0 ? f : -1;
        if (l + 1 > nm->nlayers) nm->nlayers = l + 1;
    }
}

/* ---- the _tokens variants: model_forward_batch's tokens in one call, each at its own position and in its own
 * slot's KV cache. Where a kernel reads pos only as pos + x (token x's position in a call of consecutive tokens),
 * its variant reads token_pos(x), and a KV cache's row pos + x as kv_row(x) (the row in the caches of all
 * slots); any other use of pos leaves the kernel without one. ---- */
typedef struct { Arena *A; bool failed; } TokensRewrite;

/* e is pos + x or x + pos, x not reading n (pos + n is past the call's tokens: unfused attention's causal
 * bound): x, else NULL */
static Expr *pos_plus(const Expr *e) {
    if (e->k != EX_ADD) return NULL;
    Expr *x = e->a[0]->k == EX_PARAM && e->a[0]->i == P_POS ? e->a[1]
            : e->a[1]->k == EX_PARAM && e->a[1]->i == P_POS ? e->a[0] : NULL;
    return x && !expr_reads_param(x, P_N) ? x : NULL;
}
static bool is_kv(const Buffer *b) { return b->kind == BUF_KCACHE || b->kind == BUF_VCACHE; }
static Expr *tokens_expr(TokensRewrite *r, Expr *e);
static Expr *token_fn(TokensRewrite *r, ExprKind k, Expr *x) {
    Expr *e = e_un(r->A, k, tokens_expr(r, x));
    e->t = T_I64;
    return e;
}
/* a KV cache's indices: the row through kv_row */
static Expr **tokens_idx(TokensRewrite *r, const Buffer *b, Expr **idx) {
    Expr **out = ARENA_ARRAY(r->A, Expr *, b->ndim);
    for (int d = 0; d < b->ndim; d++) out[d] = tokens_expr(r, idx[d]);
    if (is_kv(b)) {
        Expr *x = pos_plus(idx[0]);
        if (x) out[0] = token_fn(r, EX_KV_ROW, x);
        else r->failed = true;
    }
    return out;
}
static Expr *tokens_expr(TokensRewrite *r, Expr *e) {
    if (!e) return NULL;
    Expr *x = pos_plus(e);
    if (x) return token_fn(r, EX_TOKEN_POS, x);
    if (e->k == EX_PARAM && e->i == P_POS) r->failed = true;
    if (!e->nargs) return e;
    Expr *c = ARENA_NEW(r->A, Expr);
    *c = *e;
    c->a = e->k == EX_LOAD ? tokens_idx(r, e->buf, e->a) : ARENA_ARRAY(r->A, Expr *, e->nargs);
    if (e->k != EX_LOAD) for (int i = 0; i < e->nargs; i++) c->a[i] = tokens_expr(r, e->a[i]);
    return c;
}
static TStmt **tokens_ts(TokensRewrite *r, TStmt *const *b, int n) {
    TStmt **out = ARENA_ARRAY(r->A, TStmt *, n + 1);
    for (int i = 0; i < n; i++) {
        TStmt *s = ARENA_NEW(r->A, TStmt);
        *s = *b[i];
        s->e = tokens_expr(r, s->e); s->lo = tokens_expr(r, s->lo); s->step = tokens_expr(r, s->step);
        s->sidx = tokens_expr(r, s->sidx);
        if (s->buf && s->idx) s->idx = tokens_idx(r, s->buf, s->idx);
        s->body = tokens_ts(r, s->body, s->nbody);
        out[i] = s;
    }
    return out;
}
static KStmt **tokens_ks(TokensRewrite *r, KStmt *const *b, int n) {
    KStmt **out = ARENA_ARRAY(r->A, KStmt *, n + 1);
    for (int i = 0; i < n; i++) {
        KStmt *s = ARENA_NEW(r->A, KStmt);
        *s = *b[i];
        s->body = tokens_ts(r, s->body, s->nbody);
        s->arg = tokens_expr(r, s->arg); s->init = tokens_expr(r, s->init); s->cond = tokens_expr(r, s->cond);
        s->update = tokens_expr(r, s->update); s->laddr = tokens_expr(r, s->laddr);
        s->kbody = tokens_ks(r, s->kbody, s->nk);
        out[i] = s;
    }
    return out;
}
/* cpu_rows only: there pos enters as the graph's pos + t, t the token (cpu_attn's causal bound pos + t + 1 is
 * not a token's position); not with 8-bit activations (cpu_acts_q8 keeps one row per thread, which the token
 * loop in each task would quantize again task after task) */
static const KKernel *tokens_variant(Arena *A, const KKernel *k) {
    if (!k->task || k->sched != SCHED_CPU_ROWS || k->has_acts_q8) return NULL;
    TokensRewrite r = {A, false};
    KKernel *v = ARENA_NEW(A, KKernel);
    *v = *k;
    v->tokens = true;
    v->body = tokens_ks(&r, k->body, k->nbody);
    return r.failed ? NULL : v;
}
static const KKernel *tokens_of(const Plan *p, const KProgram *kp, const KKernel *k) {
    for (int i = 0; i < kp->nk; i++) if (kp->kernels[i] == k) return p->tokens[i];
    UNREACHABLE();
}

/* ---- which launches run per token in model_forward_batch ---- */
bool plan_runs_at_one_token(const KLaunch *l) {
    return !(l->run_if == 1 && l->min_n >= 1) && !(l->run_if == 2 && l->min_n < 1);
}
static bool uses_kind(const KLaunch *l, BufKind kind) {
    for (int j = 0; j < l->k->nparams; j++) if (l->args[j]->kind == kind) return true;
    return false;
}
/* A launch that runs once per token in model_forward_batch (n = 1 at the token's position, its slot's KV cache):
 * one that reads pos (RoPE's angles, the cache rows written, the keys attended) or a KV cache, or takes a split-K
 * workspace (whose partner does). The others run once for all the tokens, as their rows are independent. */
static bool launch_per_token(const KLaunch *l) {
    return !l->tail && (uses_kind(l, BUF_KCACHE) || uses_kind(l, BUF_VCACHE) || uses_kind(l, BUF_WORK) ||
                        expr_reads_param(l->grid, P_POS) || kernel_reads_pos(l->k));
}
/* Whether model_forward_batch can run l: not a split-K kernel (the workspace holds one call's partials: a pair
 * would have to run per token in one loop, which the memory plan does not allow for in general; not built yet),
 * a per-token launch's activations all one row per token (attention's scratch rows are not: flash=0), and a
 * decode schedule where it has a prefill alternative. Where one is not, the build has no batched decoding. */
static bool batchable(const KLaunch *l) {
    if (uses_kind(l, BUF_WORK)) return false;
    if (launch_per_token(l))
        for (int j = 0; j < l->k->nparams; j++)
            if (l->args[j]->kind == BUF_ACT && !l->args[j]->rows_n) return false;
    return !l->run_if || l->min_n >= 1;
}
static BatchWay batch_way(const Plan *p, const KProgram *kp, const KLaunch *l) {
    if (!launch_per_token(l)) return BATCH_ONCE;
    if (l->k->task && !uses_kind(l, BUF_WORK) && !expr_reads_param(l->grid, P_POS) && tokens_of(p, kp, l->k))
        return BATCH_TOKENS;
    return BATCH_PER_TOKEN;
}
/* Whether model_forward_batch runs l: the decode schedules (n <= min_n) for all, so that a token in a batch is
 * computed as it is alone (a launch in a loop over the tokens keeps its guard, for n = 1: it is left out where
 * that never holds) */
static bool in_batch(const Plan *p, const KProgram *kp, const KLaunch *l) {
    return !kernel_is_sampling(l) &&
           !(l->run_if == 1 && (batch_way(p, kp, l) != BATCH_PER_TOKEN || l->min_n >= 1));
}

/* ---- the cpu target's barriers: a kernel's omp for has none of its own (nowait, emit_c.c); the team waits
 * (#pragma omp barrier) before a launch that reads or writes memory a launch since the last barrier wrote, or
 * writes memory one of them read. Independent launches (model_forward_batch's per-token instances of one launch,
 * a layer's q, k and v projections) then run without the team waiting between them. ---- */
static bool mem_overlap(const Buffer *a, const Buffer *b) {
    if (a == b) return true;
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case BUF_ACT: {   /* the arena's bytes (the memory plan reuses them for buffers not live together) */
        int64_t end_a = a->act_offset + dtype_bytes(a->dtype, buffer_elems(a));
        int64_t end_b = b->act_offset + dtype_bytes(b->dtype, buffer_elems(b));
        return a->act_offset < end_b && b->act_offset < end_a;
    }
    case BUF_KCACHE: case BUF_VCACHE: return a->layer == b->layer;
    case BUF_WEIGHT: case BUF_CONST: return false;   /* never written */
    default: return true;   /* the ids, the logits, the split-K workspace: one of each */
    }
}
static bool steps_conflict(const PlanStep *a, const PlanStep *b) {
    /* alternatives: never both run (the same n: the tail has its own) */
    if (a->run_if && b->run_if && a->run_if != b->run_if && a->l->min_n == b->l->min_n && a->l->tail == b->l->tail)
        return false;
    for (int i = 0; i < a->l->k->nparams; i++)
        for (int j = 0; j < b->l->k->nparams; j++)
            if ((a->l->k->param_written[i] || b->l->k->param_written[j]) && mem_overlap(a->l->args[i], b->l->args[j]))
                return true;
    return false;
}

/* ---- layer loops: step a of layer la prints as step b of layer lb does, in a loop over l, when they call one
 * kernel the same way with arguments that are the same relative to their layers ---- */
const char *plan_module_in_layer(const KLaunch *l) {
    if (l->layer < 0) return l->module;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "layers.%d.", l->layer);
    const char *p = strstr(l->module, prefix);
    return p ? p + strlen(prefix) : l->module;
}
static int64_t row_elems(const Buffer *b) {
    int64_t row = 1;
    for (int d = 1; d < b->ndim; d++) row *= b->dims[d];
    return row;
}
static bool arg_same(const PlanNames *nm, const Buffer *a, int la, const Buffer *b, int lb, bool per_token) {
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case BUF_ACT:   /* the same bytes of the arena: one pointer, whatever the buffer's name (names_merge) */
        if (per_token && (a->rows_n != b->rows_n || (a->rows_n && row_elems(a) != row_elems(b)))) return false;
        return a->act_offset == b->act_offset && a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof a->dims);
    case BUF_WEIGHT: {
        int wa = nm->layer[a->id], wb = nm->layer[b->id];
        if (wa < 0 || wb < 0) return a == b;
        return nm->lfield_of[a->id] == nm->lfield_of[b->id] && wa - la == wb - lb;
    }
    case BUF_KCACHE: case BUF_VCACHE: return a->layer - la == b->layer - lb;
    case BUF_CONST: return nm->cidx[a->id] == nm->cidx[b->id];
    default: return true;   /* the ids, the logits, the workspace: one of each */
    }
}
static bool step_same(const PlanNames *nm, const PlanStep *a, int la, const PlanStep *b, int lb) {
    if (a->k != b->k || a->barrier != b->barrier || a->way != b->way || a->run_if != b->run_if) return false;
    if ((a->run_if && a->l->min_n != b->l->min_n) || !expr_equal(a->l->grid, b->l->grid)) return false;
    if (strcmp(plan_module_in_layer(a->l), plan_module_in_layer(b->l))) return false;
    for (int j = 0; j < a->k->nparams; j++)
        if (!arg_same(nm, a->l->args[j], la, b->l->args[j], lb, a->way == BATCH_PER_TOKEN)) return false;
    return true;
}
/* step p of a run's layers g0 .. g0 + ng - 1 (relative to the run): the layer (relative to g0) whose step most
 * of them share, the first such */
static int common_layer(const PlanNames *nm, const PlanPath *pp, const PlanRun *r, int g0, int ng, int p) {
    int best = 0, bestn = 0;
    for (int g = 0; g < ng; g++) {
        const PlanStep *a = &pp->steps[r->first + (g0 + g) * r->per_layer + p];
        int c = 0;
        for (int h = 0; h < ng; h++)
            c += step_same(nm, a, r->layer0 + g0 + g, &pp->steps[r->first + (g0 + h) * r->per_layer + p],
                           r->layer0 + g0 + h);
        if (c > bestn) { best = g; bestn = c; }
    }
    return best;
}

/* The runs of consecutive decoder layers with as many steps each. A layer at either end of a run whose steps
 * differ from the common ones in more than a quarter of the positions (its buffers elsewhere in the arena) is
 * printed on its own; in the loop, the positions where some layers' step
 * differs hold each variant (like). */
static void plan_runs(Arena *A, const PlanNames *nm, PlanPath *pp) {
    pp->runs = ARENA_ARRAY(A, PlanRun, pp->n + 1);
    for (int s = 0; s < pp->n;) {
        const int ly = pp->steps[s].l->layer;
        int e = s;
        while (e < pp->n && pp->steps[e].l->layer == ly) e++;
        int cnt = e - s, nseg = 1;
        while (ly >= 0 && s + (nseg + 1) * cnt <= pp->n) {
            int t = s + nseg * cnt;
            bool same = pp->steps[t].l->layer == ly + nseg &&
                        (t + cnt == pp->n || pp->steps[t + cnt].l->layer != pp->steps[t].l->layer);
            for (int j = t; same && j < t + cnt; j++) same = pp->steps[j].l->layer == pp->steps[t].l->layer;
            if (!same) break;
            nseg++;
        }
        PlanRun *r = &pp->runs[pp->nruns++];
        *r = (PlanRun){.first = s, .per_layer = cnt, .nlayers = nseg, .layer0 = ly};
        int lo = 0, hi = nseg, *diff = ARENA_ARRAY(A, int, nseg);
        for (int p = 0; ly >= 0 && p < cnt; p++) {
            int best = common_layer(nm, pp, r, 0, nseg, p);
            const PlanStep *b = &pp->steps[s + best * cnt + p];
            for (int g = 0; g < nseg; g++) diff[g] += !step_same(nm, &pp->steps[s + g * cnt + p], ly + g, b, ly + best);
        }
        while (hi - lo > 1 && diff[lo] * 4 > cnt) lo++;
        while (hi - lo > 1 && diff[hi - 1] * 4 > cnt) hi--;
        if (ly < 0 || hi - lo < 2) lo = hi = nseg;
        r->loop_lo = lo; r->loop_hi = hi;
        r->like = ARENA_ARRAY(A, int, (size_t)(hi - lo) * cnt + 1);
        r->common = ARENA_ARRAY(A, int, cnt + 1);
        for (int p = 0; hi > lo && p < cnt; p++) {
            r->common[p] = common_layer(nm, pp, r, lo, hi - lo, p);
            for (int g = 0; g < hi - lo; g++) {
                int h = 0;
                while (!step_same(nm, &pp->steps[s + (lo + g) * cnt + p], ly + lo + g,
                                  &pp->steps[s + (lo + h) * cnt + p], ly + lo + h)) h++;
                r->like[g * cnt + p] = h;
            }
            r->common[p] = r->like[r->common[p] * cnt + p];
        }
        s += nseg * cnt;
    }
}

static void plan_path(Arena *A, const KProgram *kp, Plan *p, FwdPath path, bool drop_barriers) {
    PlanPath *pp = &p->path[path];
    pp->steps = ARENA_ARRAY(A, PlanStep, kp->nl + 1);
    pp->ok = true;
    for (int i = 0; i < kp->nl; i++) {
        const KLaunch *l = &kp->launches[i];
        if (kernel_is_sampling(l) || (path == PATH_BATCH && !in_batch(p, kp, l)) ||
            (path == PATH_DECODE_STEP && !plan_runs_at_one_token(l)))
            continue;
        if (path == PATH_BATCH && !batchable(l)) pp->ok = false;
        PlanStep *s = &pp->steps[pp->n++];
        s->l = l;
        /* a kernel with a _tokens variant is called as the variant on both of the team's paths (model_forward's
         * tokens at consecutive positions): one kernel, not two alike */
        const BatchWay way = batch_way(p, kp, l);
        s->way = path == PATH_BATCH || (path == PATH_FORWARD && way == BATCH_TOKENS) ? way : BATCH_ONCE;
        s->k = s->way == BATCH_TOKENS ? tokens_of(p, kp, l->k) : l->k;
        /* model_forward_batch: the decode schedule (a loop's launches keep their guard, for n = 1); the decode step:
         * n = 1, where every guard of a launch it runs holds */
        s->run_if = (path == PATH_BATCH && s->way != BATCH_PER_TOKEN) || path == PATH_DECODE_STEP ? 0 : l->run_if;
    }
    /* the team waits before a step that conflicts with one since its last wait */
    for (int u = 0, since = 0; p->team && path != PATH_DECODE_STEP && u < pp->n; u++) {
        for (int v = since; v < u && !pp->steps[u].barrier; v++)
            pp->steps[u].barrier = steps_conflict(&pp->steps[v], &pp->steps[u]);
        if (pp->steps[u].barrier) since = u;
    }
    for (int u = 0; drop_barriers && u < pp->n; u++) pp->steps[u].barrier = false;
    plan_runs(A, &p->names, pp);
}

/* A loop prints one step for the layers it matched: an activation that some layers' step passes under another
 * name than the most layers' (layer 0 reads the embedding where the others read the previous layer's output,
 * at the same offset) takes that name everywhere, so that one name serves; its ACT macro lists the names it
 * took (also). */
static void merge_slot(Arena *A, PlanNames *nm, int from, int to, const char *name) {
    const char *also = nm->act_also[from] ? arena_printf(A, "%s, %s", nm->act_also[from], nm->act_first[from])
                                          : nm->act_first[from];
    nm->act_also[to] = nm->act_also[to] ? arena_printf(A, "%s, %s", nm->act_also[to], also) : also;
    for (int i = 0; i < nm->nid; i++)
        if (nm->act[i] && nm->act_slot[i] == from) { nm->act_slot[i] = to; nm->act[i] = name; }
    nm->nact--;
}
static void names_merge(Arena *A, PlanNames *nm, const PlanPath *pp) {
    for (int ri = 0; ri < pp->nruns; ri++) {
        const PlanRun *r = &pp->runs[ri];
        const int ng = r->loop_hi - r->loop_lo;
        for (int q = 0; q < r->per_layer && ng > 0; q++)
            for (int j = 0; j < pp->steps[r->first + q].l->k->nparams; j++) {
                const Buffer *most = NULL;
                for (int g = 0, best = 0; g < ng; g++) {   /* the buffer most layers pass */
                    const Buffer *b = pp->steps[r->first + (r->loop_lo + g) * r->per_layer + q].l->args[j];
                    int c = 0;
                    for (int h = 0; h < ng; h++)
                        c += nm->act_slot[pp->steps[r->first + (r->loop_lo + h) * r->per_layer + q].l->args[j]->id] ==
                             nm->act_slot[b->id];
                    if (b->kind == BUF_ACT && c > best) { best = c; most = b; }
                }
                for (int g = 0; most && g < ng; g++) {
                    const PlanStep *s = &pp->steps[r->first + (r->loop_lo + g) * r->per_layer + q];
                    const PlanStep *shown = &pp->steps[r->first + (r->loop_lo + r->like[g * r->per_layer + q]) *
                                                                  r->per_layer + q];
                    const Buffer *a = s->l->args[j];
                    if (nm->act_slot[a->id] != nm->act_slot[most->id] &&
                        arg_same(nm, a, 0, most, 0, s->way == BATCH_PER_TOKEN) && step_same(nm, s, 0, shown, 0))
                        merge_slot(A, nm, nm->act_slot[a->id], nm->act_slot[most->id], nm->act[most->id]);
                }
            }
    }
}

void plan_build(Arena *A, const KProgram *kp, Target t, const Knobs *knobs, Plan *p) {
    memset(p, 0, sizeof *p);
    p->target = t;
    p->team = t == TARGET_CPU;
    p->graph = t != TARGET_CPU;
    names_init(A, &p->names, kp);
    p->tokens = ARENA_ARRAY(A, const KKernel *, kp->nk + 1);
    for (int i = 0; t == TARGET_CPU && i < kp->nk; i++) p->tokens[i] = tokens_variant(A, kp->kernels[i]);
    for (int f = 0; f < PATH_COUNT; f++)
        if (f != PATH_DECODE_STEP || p->graph)
            plan_path(A, kp, p, (FwdPath)f, f == PATH_FORWARD && knobs->debug_plan_barrier);
    for (int f = 0; f < PATH_COUNT; f++) names_merge(A, &p->names, &p->path[f]);
    p->called_tokens = ARENA_ARRAY(A, const KKernel *, kp->nk + 1);
    p->replaced = ARENA_ARRAY(A, bool, kp->nk + 1);
    for (int i = 0; i < kp->nk; i++) {
        bool variant = false, itself = false;
        for (int f = 0; f < PATH_COUNT; f++) {
            const PlanPath *pp = &p->path[f];
            for (int j = 0; j < pp->n && (f != PATH_BATCH || pp->ok); j++) {
                variant |= p->tokens[i] && pp->steps[j].k == p->tokens[i];
                itself |= pp->steps[j].k == kp->kernels[i];
            }
        }
        for (int j = 0; j < kp->nl; j++)   /* model_topk's */
            itself |= kernel_is_sampling(&kp->launches[j]) && kp->launches[j].k == kp->kernels[i];
        if (variant) p->called_tokens[p->ncalled_tokens++] = p->tokens[i];
        p->replaced[i] = variant && !itself;
    }
}

/* ---- printer: each path's runs (a loop's steps once, with the layers whose step differs) ---- */
static void print_step(Str *o, const PlanStep *s, bool batch, const char *indent) {
    str_printf(o, "%s%s%s%s", indent, s->barrier ? "barrier; " : "", s->k->name, s->k->tokens ? "_tokens" : "");
    if (s->run_if) str_printf(o, " if n %s %d", s->run_if == 1 ? ">" : "<=", s->l->min_n);
    if (batch) str_printf(o, " [%s]", batch_way_names[s->way]);
    str_printf(o, "  # %s\n", plan_module_in_layer(s->l));
}
void plan_print(Str *o, const Plan *p) {
    str_printf(o, "# plan IR: %s, %s\n", target_names[p->target],
               p->team ? "one OpenMP team (barriers where a step uses what one since the last wrote)"
                       : "a stream of launches; the decode step a CUDA Graph");
    for (int f = 0; f < PATH_COUNT; f++) {
        const PlanPath *pp = &p->path[f];
        if (!pp->steps) continue;
        str_printf(o, "\n%s: %d steps", fwd_path_names[f], pp->n);
        if (f == PATH_BATCH && !pp->ok) str_printf(o, " (not in this build: a split-K kernel or per-token scratch)");
        str_printf(o, "\n");
        for (int ri = 0; ri < pp->nruns; ri++) {
            const PlanRun *r = &pp->runs[ri];
            if (r->layer0 < 0 && pp->steps[r->first].l->tail) str_printf(o, "  the tail:\n");
            for (int g = 0; g < r->nlayers; g++) {
                if (g == r->loop_lo && r->loop_hi > r->loop_lo) {
                    str_printf(o, "  for l in %d..%d:\n", r->layer0 + r->loop_lo, r->layer0 + r->loop_hi - 1);
                    for (int q = 0; q < r->per_layer; q++) {
                        int c = r->common[q];
                        print_step(o, &pp->steps[r->first + (r->loop_lo + c) * r->per_layer + q], f == PATH_BATCH,
                                   "    ");
                        for (int h = 0; h < r->loop_hi - r->loop_lo; h++) {
                            if (r->like[h * r->per_layer + q] != h || h == c) continue;
                            str_printf(o, "      where l is");
                            for (int u = h; u < r->loop_hi - r->loop_lo; u++)
                                if (r->like[u * r->per_layer + q] == h)
                                    str_printf(o, " %d", r->layer0 + r->loop_lo + u);
                            print_step(o, &pp->steps[r->first + (r->loop_lo + h) * r->per_layer + q], f == PATH_BATCH,
                                       ": ");
                        }
                    }
                }
                if (g >= r->loop_lo && g < r->loop_hi) continue;
                if (r->layer0 >= 0) str_printf(o, "  layer %d alone:\n", r->layer0 + g);
                for (int q = 0; q < r->per_layer; q++)
                    print_step(o, &pp->steps[r->first + g * r->per_layer + q], f == PATH_BATCH,
                               r->layer0 >= 0 ? "    " : "  ");
            }
        }
    }
    str_printf(o, "\n_tokens variants called: %d", p->ncalled_tokens);
    for (int i = 0; i < p->ncalled_tokens; i++) str_printf(o, "%s%s_tokens", i ? ", " : " ", p->called_tokens[i]->name);
    str_printf(o, "\nnames: %d activation macros, %d LayerWeights fields, %d constant arrays\n", p->names.nact,
               p->names.nlfield, p->names.nconst);
}

/* ---- verifier ---- */
const char *plan_verify(Arena *A, const Plan *p) {
    for (int f = 0; f < PATH_COUNT; f++) {
        const PlanPath *pp = &p->path[f];
        int covered = 0;
        for (int u = 0; u < pp->n; u++) {
            const PlanStep *s = &pp->steps[u];
            if ((s->way == BATCH_TOKENS) != s->k->tokens || (!s->k->tokens && s->k != s->l->k))
                return arena_printf(A, "%s: step %d calls %s, not as its way says", fwd_path_names[f], u, s->k->name);
            if (s->k->tokens && kernel_reads_pos(s->k))
                return arena_printf(A, "%s_tokens reads pos", s->k->name);
            if (u && pp->steps[u - 1].l->tail && !s->l->tail)
                return arena_printf(A, "%s: %s after the model's tail", fwd_path_names[f], s->l->module);
            /* no step uses what one since the team's last wait wrote */
            for (int v = u - 1; p->team && !s->barrier && v >= 0; v--) {
                if (steps_conflict(&pp->steps[v], s))
                    return arena_printf(A, "%s: step %d (%s) and step %d (%s) conflict with no barrier between",
                                        fwd_path_names[f], v, pp->steps[v].l->module, u, s->l->module);
                if (pp->steps[v].barrier) break;
            }
        }
        for (int ri = 0; ri < pp->nruns; ri++) {
            const PlanRun *r = &pp->runs[ri];
            if (r->first != covered)
                return arena_printf(A, "%s: run %d starts at step %d", fwd_path_names[f], ri, r->first);
            covered += r->nlayers * r->per_layer;
            for (int g = 0; g < r->nlayers; g++)
                for (int q = 0; q < r->per_layer; q++) {
                    const PlanStep *s = &pp->steps[r->first + g * r->per_layer + q];
                    if (s->l->layer != (r->layer0 < 0 ? -1 : r->layer0 + g))
                        return arena_printf(A, "%s: %s in the run of layer %d", fwd_path_names[f], s->l->module,
                                            r->layer0 + g);
                    if (g < r->loop_lo || g >= r->loop_hi) continue;
                    int h = r->loop_lo + r->like[(g - r->loop_lo) * r->per_layer + q];
                    if (!step_same(&p->names, s, r->layer0 + g, &pp->steps[r->first + h * r->per_layer + q],
                                   r->layer0 + h))
                        return arena_printf(A, "%s: layer %d's %s is not as the loop prints it", fwd_path_names[f],
                                            r->layer0 + g, s->l->module);
                }
        }
        if (covered != pp->n)
            return arena_printf(A, "%s: the runs cover %d of %d steps", fwd_path_names[f], covered, pp->n);
    }
    return NULL;
}
