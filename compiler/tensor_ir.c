/* tensor_ir.c: graph IR -> tensor IR (decomposition), the memory plan,
 * printer and verifier. */
#include "tensor_ir.h"
#include <math.h>
#include <string.h>

const char *const top_kind_names[] = {TOP_KINDS(X_NAME)};
const char *const red_op_names[] = {RED_OPS(X_NAME)};

Var *new_var(Arena *A, int *counter, const char *name) {
    Var *v = ARENA_NEW(A, Var);
    v->id = (*counter)++;
    v->name = name;
    return v;
}
int64_t buffer_elems(const Buffer *b) { return dims_elems(b->dims, b->ndim); }

typedef struct { Arena *A; TProgram *tp; } TL;

static Buffer *new_buf_nd(TL *L, const char *name, BufKind kind, DType dt, int ndim, const int64_t *dims) {
    TProgram *tp = L->tp;
    arena_grow(L->A, (void **)&tp->bufs, tp->nbufs, &tp->capb, sizeof(Buffer *));
    Buffer *b = ARENA_NEW(L->A, Buffer);
    b->id = tp->nbufs; b->name = name; b->kind = kind; b->dtype = dt; b->ndim = ndim;
    for (int i = 0; i < ndim; i++) b->dims[i] = dims[i];
    b->layer = -1; b->weight_index = -1; b->act_offset = -1;
    tp->bufs[tp->nbufs++] = b;
    return b;
}
static Buffer *new_buf(TL *L, const char *name, BufKind kind, DType dt, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    int64_t d[3] = {d0, d1, d2};
    return new_buf_nd(L, name, kind, dt, ndim, d);
}

/* suffix names the part of a decomposed op (scores, softmax, ...) in its kernel's name */
static TOp *new_op_part(TL *L, TOpKind kind, const GNode *n, Buffer *out, const char *suffix) {
    TProgram *tp = L->tp;
    arena_grow(L->A, (void **)&tp->ops, tp->n, &tp->cap, sizeof(TOp *));
    TOp *op = ARENA_NEW(L->A, TOp);
    op->kind = kind; op->module = n->name; op->layer = n->layer; op->out = out;
    op->kname = kernel_base_name(L->A, n->name);
    op->picks_token = n->picks_token;
    op->tail = n->tail;
    if (suffix) op->kname = arena_printf(L->A, "%s_%s", op->kname, suffix);
    tp->ops[tp->n++] = op;
    return op;
}
static TOp *new_op(TL *L, TOpKind kind, const GNode *n, Buffer *out) { return new_op_part(L, kind, n, out, NULL); }
static Expr *add_axis(TL *L, Axis *ax, int *n, const char *name, Expr *extent) {
    Var *v = new_var(L->A, &L->tp->nvars, name);
    ax[(*n)++] = (Axis){v, extent};
    return e_var(L->A, v);
}
static Expr *axis(TL *L, TOp *op, const char *name, Expr *e) { return add_axis(L, op->axes, &op->naxes, name, e); }
static Expr *raxis(TL *L, TOp *op, const char *name, Expr *e) { return add_axis(L, op->raxes, &op->nraxes, name, e); }
/* dim d of n: the runtime row count n where it is that */
static Expr *ext(TL *L, const GNode *n, int d) {
    return d == 0 && n->rows_n ? e_param(L->A, P_N) : e_i(L->A, n->dims[d]);
}
/* An op over the rows t of n and its heads h (its first two axes and store indices): a per-head op of a model */
static TOp *head_op(TL *L, TOpKind k, const GNode *n, Buffer *out, const char *suffix, Expr **t, Expr **h) {
    TOp *op = new_op_part(L, k, n, out, suffix);
    *t = op->out_idx[0] = axis(L, op, "t", ext(L, n, 0));
    *h = op->out_idx[1] = axis(L, op, "h", e_i(L->A, n->heads));
    return op;
}
/* A buffer for the first nd dims of n (rows sized for max_batch); [1] when nd is 0. */
static Buffer *lead_buf(TL *L, const GNode *n, const char *suffix, int nd, BufKind kind, DType dt) {
    int64_t d[MAX_DIMS] = {1};
    for (int i = 0; i < nd; i++) d[i] = i == 0 && n->rows_n ? L->tp->g->max_batch : n->dims[i];
    const char *name = suffix ? arena_printf(L->A, "%s.%s", n->name, suffix) : n->name;
    Buffer *b = new_buf_nd(L, name, kind, dt, nd ? nd : 1, d);
    b->rows_n = nd && n->rows_n;
    return b;
}

/* ---- N-dimensional ops (expressions, and the model's elementwise ops, norms
 * and linears: for a model's [n, width] activations they give the same
 * tensor IR as a 2-D special case would) ---- */
static const char *ax_name(TL *L, int nd, int d) {
    if (L->tp->g->cfg && nd == 2) return d == 0 ? "t" : "c";
    return arena_printf(L->A, "i%d", d);
}
/* An op over the first nd dims of n; ax receives the axes. A scalar result
 * (nd 0) gets one axis of extent 1, since every loop nest needs one. */
static TOp *over(TL *L, TOpKind k, const GNode *n, Buffer *out, const char *suffix, int nd, Expr **ax) {
    TOp *op = new_op_part(L, k, n, out, suffix);
    for (int d = 0; d < nd; d++) ax[d] = op->out_idx[d] = axis(L, op, ax_name(L, n->ndim, d), ext(L, n, d));
    if (!nd) op->out_idx[0] = axis(L, op, "u", e_i(L->A, 1));
    return op;
}
/* A reduction red of n's dim lead (extent len, its variable named j) into out, over n's first lead dims:
 * ax gets those axes, idx them and the reduced one. */
static TOp *reduce_last(TL *L, const GNode *n, Buffer *out, const char *suffix, int lead, RedOp red, const char *j,
                        Expr *len, Expr **ax, Expr **idx) {
    TOp *op = over(L, TOP_REDUCE, n, out, suffix, lead, ax);
    memcpy(idx, ax, sizeof(Expr *) * (size_t)lead);
    idx[lead] = raxis(L, op, j, len);
    op->red = red;
    return op;
}
static Expr *lead_load(TL *L, Buffer *b, int nd, Expr **ax) {
    if (!nd) return e_load1(L->A, b, e_i(L->A, 0));
    return e_load(L->A, b, nd, ax);
}
/* idx for the first xl dims of x, broadcast against out axes ax[0..ol)
 * (aligned at the right; a dim of extent 1 reads index 0). */
static void bcast_idx(TL *L, const GNode *x, int xl, int ol, Expr **ax, Expr **idx) {
    for (int i = 0; i < xl; i++) {
        bool one = !(i == 0 && x->rows_n) && x->dims[i] == 1;
        idx[i] = one ? e_i(L->A, 0) : ax[i + ol - xl];
    }
}
static Expr *bload(TL *L, const GNode *x, int ol, Expr **ax) {
    if (x->op == G_CONST) return e_f(L->A, x->value);
    Expr *idx[MAX_DIMS];
    bcast_idx(L, x, x->ndim, ol, ax, idx);
    return e_load(L->A, x->buf, x->ndim, idx);
}

/* silu (x / (1 + exp(-x))) and the binary ops, operands broadcast */
static void lower_elementwise(TL *L, GNode *n) {
    static const ExprKind k[G_COUNT] = {[G_ADD] = EX_ADD, [G_SUB] = EX_SUB, [G_MUL] = EX_MUL, [G_DIV] = EX_DIV};
    Arena *A = L->A;
    Expr *ax[MAX_DIMS];
    n->buf = lead_buf(L, n, NULL, n->ndim, BUF_ACT, DT_F32);
    TOp *op = over(L, TOP_ELEMWISE, n, n->buf, NULL, n->ndim, ax);
    Expr *x = bload(L, n->in[0], n->ndim, ax);
    if (n->op == G_SILU) op->body = E_DIV(A, x, E_ADD(A, e_f(A, 1.0), e_un(A, EX_EXP, e_un(A, EX_NEG, x))));
    else op->body = e_bin(A, k[n->op], x, bload(L, n->in[1], n->ndim, ax));
}

/* Qwen3's q_norm / k_norm: the RMSNorm of each head of a [n, heads * head_dim] activation, one weight
 * [head_dim] for all heads: inv_rms[t, h] over e, then out[t, h * head_dim + e] */
static void lower_head_rmsnorm(TL *L, GNode *n) {
    Arena *A = L->A;
    const GNode *x = n->in[0];
    int hd = n->head_dim;
    Buffer *inv = new_buf(L, arena_printf(A, "%s.inv_rms", n->name), BUF_ACT, DT_F32, 2, L->tp->g->max_batch,
                          n->heads, 0);
    Expr *t, *h;
    TOp *r = head_op(L, TOP_REDUCE, n, inv, "inv_rms", &t, &h);
    Expr *e = raxis(L, r, "e", e_i(A, hd));
    r->red = RED_SUM;
    Expr *xv = e_load2(A, x->buf, t, E_ADD(A, E_MUL(A, h, e_i(A, hd)), e));
    r->body = E_MUL(A, xv, xv);
    r->epilogue = e_un(A, EX_RSQRT, E_ADD(A, E_DIV(A, e_acc(A), e_f(A, (double)hd)), e_f(A, (float)n->eps)));
    n->buf = lead_buf(L, n, NULL, 2, BUF_ACT, DT_F32);
    TOp *op = head_op(L, TOP_ELEMWISE, n, n->buf, NULL, &t, &h);
    e = axis(L, op, "e", e_i(A, hd));
    Expr *c = op->out_idx[1] = E_ADD(A, E_MUL(A, h, e_i(A, hd)), e);
    op->body = E_MUL(A, E_MUL(A, e_load2(A, x->buf, t, c), e_load2(A, inv, t, h)), e_load1(A, n->in[1]->buf, e));
}

/* x * rsqrt(mean(x^2) + eps) * weight, over the last dim */
static void lower_rmsnorm(TL *L, GNode *n) {
    Arena *A = L->A;
    if (n->head_dim) { lower_head_rmsnorm(L, n); return; }
    const GNode *x = n->in[0];
    int nd = n->ndim, lead = nd - 1;
    int64_t D = n->dims[lead];
    Expr *ax[MAX_DIMS], *idx[MAX_DIMS];
    Buffer *inv = lead_buf(L, n, "inv_rms", lead, BUF_ACT, DT_F32);
    TOp *r = reduce_last(L, n, inv, "inv_rms", lead, RED_SUM, "d", e_i(A, D), ax, idx);
    Expr *xv = e_load(A, x->buf, nd, idx);
    r->body = E_MUL(A, xv, xv);
    r->epilogue = e_un(A, EX_RSQRT, E_ADD(A, E_DIV(A, e_acc(A), e_f(A, (double)D)), e_f(A, (float)n->eps)));
    n->buf = lead_buf(L, n, NULL, nd, BUF_ACT, DT_F32);
    TOp *op = over(L, TOP_ELEMWISE, n, n->buf, NULL, nd, ax);
    op->body = E_MUL(A, e_load(A, x->buf, nd, ax), lead_load(L, inv, lead, ax));
    if (n->nin > 1) op->body = E_MUL(A, op->body, e_load1(A, n->in[1]->buf, ax[lead]));
}

/* out[..., o] = sum_i x[..., i] w[o, i] (+ bias[o]) */
static void lower_linear(TL *L, GNode *n) {
    Arena *A = L->A;
    const GNode *x = n->in[0];
    Buffer *w = n->in[1]->buf;
    int nd = n->ndim, lead = nd - 1;
    Expr *ax[MAX_DIMS], *idx[MAX_DIMS];
    const Graph *g = L->tp->g;
    if (g->cfg && n == g->logits && !g->one_layer) {
        n->buf = L->tp->logits = new_buf(L, "logits", BUF_OUTPUT, DT_F32, 2, 1, n->dims[1], 0);
    } else {
        n->buf = lead_buf(L, n, NULL, nd, BUF_ACT, DT_F32);
    }
    TOp *op = new_op(L, TOP_REDUCE, n, n->buf);
    for (int d = 0; d < lead; d++) ax[d] = op->out_idx[d] = axis(L, op, ax_name(L, nd, d), ext(L, n, d));
    ax[lead] = op->out_idx[lead] = axis(L, op, "o", e_i(A, n->dims[lead]));
    memcpy(idx, ax, sizeof(Expr *) * (size_t)lead);
    idx[lead] = raxis(L, op, g->cfg ? "i" : "k", e_i(A, w->dims[1]));
    op->red = RED_SUM;
    op->body = E_MUL(A, e_load(A, x->buf, nd, idx), e_load2(A, w, ax[lead], idx[lead]));
    if (n->nin == 3) op->epilogue = E_ADD(A, e_acc(A), e_load1(A, n->in[2]->buf, ax[lead]));
}

/* softmax over the last dim of s (a buffer shaped like node n), written to out:
 * max, sum of exp, normalise */
static void softmax_parts(TL *L, const GNode *n, Buffer *s, Buffer *out, const char *norm_suffix) {
    Arena *A = L->A;
    int nd = n->ndim, lead = nd - 1;
    Expr *ax[MAX_DIMS], *idx[MAX_DIMS];
    Buffer *M = lead_buf(L, n, "max", lead, BUF_ACT, DT_F32), *Z = lead_buf(L, n, "sum", lead, BUF_ACT, DT_F32);
    Expr *len = e_i(A, n->dims[lead]);
    TOp *mx = reduce_last(L, n, M, "max", lead, RED_MAX, "j", len, ax, idx);
    mx->body = e_load(A, s, nd, idx);
    TOp *sm = reduce_last(L, n, Z, "sum", lead, RED_SUM, "j", len, ax, idx);
    sm->body = e_un(A, EX_EXP, E_SUB(A, e_load(A, s, nd, idx), lead_load(L, M, lead, ax)));
    TOp *nm = over(L, TOP_ELEMWISE, n, out, norm_suffix, nd, ax);
    nm->body = E_DIV(A, e_un(A, EX_EXP, E_SUB(A, e_load(A, s, nd, ax), lead_load(L, M, lead, ax))),
                     lead_load(L, Z, lead, ax));
}

/* argmax and topk over the last dim of x: one reduction over j */
static void lower_select(TL *L, GNode *n) {
    Arena *A = L->A;
    const GNode *x = n->in[0];
    int lead = x->ndim - 1;
    bool topk = n->op == G_TOPK;
    Expr *ax[MAX_DIMS], *idx[MAX_DIMS];
    CHECK(x->dims[lead] <= (1 << 24), "%s over %lld values: indices past 2^24 are not exact in f32",
          graph_op_names[n->op], (long long)x->dims[lead]);
    n->buf = lead_buf(L, n, NULL, topk ? n->ndim : lead, BUF_ACT, DT_F32);
    TOp *op = reduce_last(L, n, n->buf, NULL, lead, topk ? RED_TOPK : RED_ARGMAX, "j", e_i(A, x->dims[lead]), ax, idx);
    op->body = e_load(A, x->buf, x->ndim, idx);
    if (!topk) return;
    op->topk_max = n->topk;
    op->topk_count = L->tp->g->cfg ? e_param(A, P_N) : e_i(A, n->topk);
    op->topk_sel = new_var(A, &L->tp->nvars, "s");
    op->topk_rank = new_var(A, &L->tp->nvars, "r");
    op->out_idx[lead] = e_var(A, op->topk_sel);
    op->out_idx[lead + 1] = e_var(A, op->topk_rank);
}

static void lower_softmax(TL *L, GNode *n) {
    n->buf = lead_buf(L, n, NULL, n->ndim, BUF_ACT, DT_F32);
    softmax_parts(L, n, n->in[0]->buf, n->buf, NULL);
}

/* out[b..., m, p] = sum_k a[b..., m, k] c[b..., k, p], batch dims broadcast */
static void lower_matmul(TL *L, GNode *n) {
    Arena *A = L->A;
    const GNode *a = n->in[0], *b = n->in[1];
    int nd = n->ndim;
    Expr *ax[MAX_DIMS], *ia[MAX_DIMS], *ib[MAX_DIMS];
    n->buf = lead_buf(L, n, NULL, nd, BUF_ACT, DT_F32);
    TOp *op = over(L, TOP_REDUCE, n, n->buf, NULL, nd, ax);
    Expr *k = raxis(L, op, "k", e_i(A, a->dims[a->ndim - 1]));
    bcast_idx(L, a, a->ndim - 2, nd - 2, ax, ia);
    bcast_idx(L, b, b->ndim - 2, nd - 2, ax, ib);
    ia[a->ndim - 2] = ax[nd - 2]; ia[a->ndim - 1] = k;
    ib[b->ndim - 2] = k; ib[b->ndim - 1] = ax[nd - 1];
    op->red = RED_SUM;
    op->body = E_MUL(A, e_load(A, a->buf, a->ndim, ia), e_load(A, b->buf, b->ndim, ib));
}

/* The attention whose five ops were just added (the last five), for loop_flash */
static AttnDesc *new_attn(TL *L, const char *kname, double scale) {
    AttnDesc *d = ARENA_NEW(L->A, AttnDesc);
    d->kname = kname; d->scale = scale;
    d->t = new_var(L->A, &L->tp->nvars, "t"); d->h = new_var(L->A, &L->tp->nvars, "h");
    d->j = new_var(L->A, &L->tp->nvars, "j"); d->d = new_var(L->A, &L->tp->nvars, "d");
    for (int i = 0; i < 5; i++) d->parts[i] = L->tp->ops[L->tp->n - 5 + i];
    d->parts[4]->attn = d;
    return d;
}

/* softmax(q k^T * scale [causal: -inf where j > i]) v, as scores, the
 * softmax parts and p v */
static void lower_sdpa(TL *L, GNode *n) {
    Arena *A = L->A;
    const GNode *q = n->in[0], *k = n->in[1], *v = n->in[2];
    int nd = n->ndim, nb = nd - 2;
    Expr *ax[MAX_DIMS], *iq[MAX_DIMS], *ik[MAX_DIMS];
    /* the scores have the result's batch dims and [L, S] */
    GNode *sn = ARENA_NEW(A, GNode);
    *sn = *n;
    sn->dims[nd - 1] = k->dims[k->ndim - 2];
    Buffer *S = lead_buf(L, sn, "scores", nd, BUF_ACT, DT_F32);
    TOp *s = over(L, TOP_REDUCE, sn, S, "scores", nd, ax);
    Expr *e = raxis(L, s, "e", e_i(A, q->dims[q->ndim - 1]));
    bcast_idx(L, q, q->ndim - 2, nb, ax, iq);
    bcast_idx(L, k, k->ndim - 2, nb, ax, ik);
    iq[q->ndim - 2] = ax[nb]; iq[q->ndim - 1] = e;
    ik[k->ndim - 2] = ax[nb + 1]; ik[k->ndim - 1] = e;
    s->red = RED_SUM;
    s->body = E_MUL(A, e_load(A, q->buf, q->ndim, iq), e_load(A, k->buf, k->ndim, ik));
    s->epilogue = E_MUL(A, e_acc(A), e_f(A, (float)n->scale));
    if (n->causal) s->epilogue = e_select(A, e_bin(A, EX_LE, ax[nb + 1], ax[nb]), s->epilogue, e_f(A, -INFINITY));
    softmax_parts(L, sn, S, S, "softmax");
    n->buf = lead_buf(L, n, NULL, nd, BUF_ACT, DT_F32);
    TOp *pv = over(L, TOP_REDUCE, n, n->buf, "pv", nd, ax);
    Expr *j = raxis(L, pv, "j", e_i(A, sn->dims[nd - 1]));
    Expr *is[MAX_DIMS], *iv[MAX_DIMS];
    memcpy(is, ax, sizeof(Expr *) * (size_t)(nb + 1));
    is[nb + 1] = j;
    bcast_idx(L, v, v->ndim - 2, nb, ax, iv);
    iv[v->ndim - 2] = j; iv[v->ndim - 1] = ax[nb + 1];
    pv->red = RED_SUM;
    pv->body = E_MUL(A, e_load(A, S, nd, is), e_load(A, v->buf, v->ndim, iv));
    /* the whole attention, its batch dims flattened into one head axis (a runtime row count only in the query axis) */
    if (nb && n->rows_n) return;
    AttnDesc *d = new_attn(L, kernel_base_name(A, n->name), (float)n->scale);
    Var *fs[MAX_DIMS + 1], *fp[MAX_DIMS + 1];
    Expr *tq[MAX_DIMS + 1], *tk[MAX_DIMS + 1], *tv[MAX_DIMS + 1];
    int64_t stride = 1;
    for (int b = nb - 1; b >= 0; b--) {
        Expr *hb = e_bin(A, EX_MOD, E_DIV(A, e_var(A, d->h), e_i(A, stride)), e_i(A, n->dims[b]));
        fs[b] = s->axes[b].v; fp[b] = pv->axes[b].v;
        tq[b] = tk[b] = tv[b] = hb;
        stride *= n->dims[b];
    }
    d->heads = stride; d->group = 1;
    d->hd = q->dims[q->ndim - 1]; d->hv = v->dims[v->ndim - 1];
    d->rows = ext(L, n, nb); d->len = e_i(A, sn->dims[nd - 1]);
    d->jmax = n->causal ? E_ADD(A, e_var(A, d->t), e_i(A, 1)) : d->len;
    fs[nb] = s->axes[nb].v; fs[nb + 1] = s->axes[nb + 1].v; fs[nb + 2] = s->raxes[0].v;
    tq[nb] = e_var(A, d->t); tq[nb + 1] = e_i(A, 0); tq[nb + 2] = e_var(A, d->d);
    tk[nb] = e_i(A, 0); tk[nb + 1] = e_var(A, d->j); tk[nb + 2] = e_var(A, d->d);
    d->q = expr_subst_vars(A, s->body->a[0], fs, tq, nb + 3);
    d->k = expr_subst_vars(A, s->body->a[1], fs, tk, nb + 3);
    fp[nb] = pv->axes[nb].v; fp[nb + 1] = pv->axes[nb + 1].v; fp[nb + 2] = pv->raxes[0].v;
    tv[nb] = e_var(A, d->t); tv[nb + 1] = e_var(A, d->d); tv[nb + 2] = e_var(A, d->j);
    d->v = expr_subst_vars(A, pv->body->a[1], fp, tv, nb + 3);
    d->out = pv->out;
    for (int i = 0; i < pv->out->ndim; i++) d->out_idx[i] = expr_subst_vars(A, pv->out_idx[i], fp, tv, nb + 3);
}

static void lower_node(TL *L, GNode *n) {
    Arena *A = L->A;
    TProgram *tp = L->tp;
    const Graph *g = tp->g;
    Expr *t, *c;
    switch (n->op) {
    case G_INPUT_IDS:
        n->buf = tp->ids = new_buf(L, "input_ids", BUF_INPUT, DT_I32, 1, g->max_batch, 0, 0);
        return;
    case G_WEIGHT:
        n->buf = new_buf(L, n->name, BUF_WEIGHT, n->dtype, n->ndim, n->dims[0], n->dims[1], 0);
        n->buf->layer = n->layer;
        n->buf->weight_index = tp->n_weights++;
        return;
    case G_EMBED: case G_LAST_TOKEN: {   /* out[t, c]: row ids[t] of the embeddings, or row pos + t of x */
        n->buf = lead_buf(L, n, NULL, 2, BUF_ACT, DT_F32);
        TOp *op = new_op(L, TOP_INDEXMAP, n, n->buf);
        t = op->out_idx[0] = axis(L, op, "t", ext(L, n, 0));
        c = op->out_idx[1] = axis(L, op, "c", e_i(A, n->dims[1]));
        /* last_token: the tail runs with its own n and pos (graph.h's tail): rows pos .. pos + n - 1 */
        Expr *row = n->op == G_EMBED ? e_load1(A, n->in[1]->buf, t) : E_ADD(A, e_param(A, P_POS), t);
        op->body = e_load2(A, n->in[0]->buf, row, c);
        return;
    }
    case G_RMSNORM: lower_rmsnorm(L, n); return;
    case G_LINEAR: lower_linear(L, n); return;
    case G_ROPE: {
        Buffer *x = n->in[0]->buf;
        int hd = n->head_dim, half = hd / 2;
        Buffer *f = new_buf(L, arena_printf(A, "%s.inv_freq", n->name), BUF_CONST, DT_F32, 1, half, 0, 0);
        f->const_data = n->inv_freq;
        n->buf = lead_buf(L, n, NULL, 2, BUF_ACT, DT_F32);
        Expr *h;
        TOp *op = head_op(L, TOP_ELEMWISE, n, n->buf, NULL, &t, &h);
        Expr *e = axis(L, op, "e", e_i(A, hd));
        Expr *base = E_MUL(A, h, e_i(A, hd));
        op->out_idx[1] = E_ADD(A, base, e);
        Expr *ang = E_MUL(A, e_un(A, EX_TOF, E_ADD(A, e_param(A, P_POS), t)),
                          e_load1(A, f, e_bin(A, EX_MOD, e, e_i(A, half))));
        Expr *xv = e_load2(A, x, t, E_ADD(A, base, e));
        Expr *partner = e_load2(A, x, t, E_ADD(A, base, e_bin(A, EX_MOD, E_ADD(A, e, e_i(A, half)), e_i(A, hd))));
        Expr *rot = e_select(A, e_bin(A, EX_LT, e, e_i(A, half)), e_un(A, EX_NEG, partner), partner);
        op->body = E_ADD(A, E_MUL(A, xv, e_un(A, EX_COS, ang)), E_MUL(A, rot, e_un(A, EX_SIN, ang)));
        return;
    }
    case G_KV_WRITE: {
        Buffer *src = n->in[0]->buf;
        n->buf = new_buf(L, arena_printf(A, "%s[%d]", n->is_v ? "v_cache" : "k_cache", n->layer),
                         n->is_v ? BUF_VCACHE : BUF_KCACHE, g->kv_dtype, 3, g->max_ctx, n->kv_heads, n->head_dim);
        n->buf->layer = n->layer;
        TOp *op = new_op(L, TOP_INDEXMAP, n, n->buf);
        t = axis(L, op, "t", e_param(A, P_N));
        Expr *h = axis(L, op, "h", e_i(A, n->kv_heads));
        Expr *e = axis(L, op, "e", e_i(A, n->head_dim));
        op->out_idx[0] = E_ADD(A, e_param(A, P_POS), t); op->out_idx[1] = h; op->out_idx[2] = e;
        op->body = e_load2(A, src, t, E_ADD(A, E_MUL(A, h, e_i(A, n->head_dim)), e));
        return;
    }
    case G_ATTENTION: {
        Buffer *q = n->in[0]->buf, *kc = n->in[1]->buf, *vc = n->in[2]->buf;
        int H = n->heads, hd = n->head_dim, G = n->heads / n->kv_heads;
        Expr *len = E_ADD(A, e_param(A, P_POS), e_param(A, P_N));
        Buffer *S = new_buf(L, arena_printf(A, "%s.scores", n->name), BUF_ACT, DT_F32, 3, g->max_batch, H, g->max_ctx);
        Buffer *M = new_buf(L, arena_printf(A, "%s.max", n->name), BUF_ACT, DT_F32, 2, g->max_batch, H, 0);
        Buffer *Z = new_buf(L, arena_printf(A, "%s.sum", n->name), BUF_ACT, DT_F32, 2, g->max_batch, H, 0);
        /* scores = q k^T * head_dim^-0.5, causal */
        Expr *h;
        TOp *s = head_op(L, TOP_REDUCE, n, S, "scores", &t, &h);
        Expr *j = s->out_idx[2] = axis(L, s, "j", len);
        Expr *e = raxis(L, s, "e", e_i(A, hd));
        s->red = RED_SUM;
        s->body = E_MUL(A, e_load2(A, q, t, E_ADD(A, E_MUL(A, h, e_i(A, hd)), e)),
                        e_load3(A, kc, j, E_DIV(A, h, e_i(A, G)), e));
        s->epilogue = e_select(A, e_bin(A, EX_LE, j, E_ADD(A, e_param(A, P_POS), t)),
                               E_MUL(A, e_acc(A), e_f(A, (float)(1.0 / sqrt((double)hd)))), e_f(A, -INFINITY));
        /* softmax over j: max, sum of exp, normalise in place */
        TOp *mx = head_op(L, TOP_REDUCE, n, M, "max", &t, &h);
        j = raxis(L, mx, "j", len);
        mx->red = RED_MAX;
        mx->body = e_load3(A, S, t, h, j);
        TOp *sm = head_op(L, TOP_REDUCE, n, Z, "sum", &t, &h);
        j = raxis(L, sm, "j", len);
        sm->red = RED_SUM;
        sm->body = e_un(A, EX_EXP, E_SUB(A, e_load3(A, S, t, h, j), e_load2(A, M, t, h)));
        TOp *nm = head_op(L, TOP_ELEMWISE, n, S, "softmax", &t, &h);
        j = nm->out_idx[2] = axis(L, nm, "j", len);
        nm->body = E_DIV(A, e_un(A, EX_EXP, E_SUB(A, e_load3(A, S, t, h, j), e_load2(A, M, t, h))),
                         e_load2(A, Z, t, h));
        /* out = p v */
        n->buf = lead_buf(L, n, NULL, 2, BUF_ACT, DT_F32);
        TOp *pv = head_op(L, TOP_REDUCE, n, n->buf, "pv", &t, &h);
        e = axis(L, pv, "e", e_i(A, hd));
        j = raxis(L, pv, "j", len);
        pv->out_idx[1] = E_ADD(A, E_MUL(A, h, e_i(A, hd)), e);
        pv->red = RED_SUM;
        pv->body = E_MUL(A, e_load3(A, S, t, h, j), e_load3(A, vc, j, E_DIV(A, h, e_i(A, G)), e));
        AttnDesc *d = new_attn(L, kernel_base_name(A, n->name), (float)(1.0 / sqrt((double)hd)));
        Expr *dt = e_var(A, d->t), *dh = e_var(A, d->h), *dj = e_var(A, d->j), *dd = e_var(A, d->d);
        d->heads = H; d->group = G; d->hd = d->hv = hd;
        d->rows = e_param(A, P_N); d->len = len;
        d->jmax = E_ADD(A, E_ADD(A, e_param(A, P_POS), dt), e_i(A, 1));
        d->q = e_load2(A, q, dt, E_ADD(A, E_MUL(A, dh, e_i(A, hd)), dd));
        d->k = e_load3(A, kc, dj, E_DIV(A, dh, e_i(A, G)), dd);
        d->v = e_load3(A, vc, dj, E_DIV(A, dh, e_i(A, G)), dd);
        d->out = n->buf; d->out_idx[0] = dt; d->out_idx[1] = E_ADD(A, E_MUL(A, dh, e_i(A, hd)), dd);
        return;
    }
    case G_SILU: case G_MUL: case G_ADD: case G_SUB: case G_DIV: lower_elementwise(L, n); return;
    case G_SOFTMAX: lower_softmax(L, n); return;
    case G_ARGMAX: case G_TOPK: lower_select(L, n); return;
    case G_MATMUL: lower_matmul(L, n); return;
    case G_SDPA: lower_sdpa(L, n); return;
    case G_CONST: return;   /* folded into the loads of its users */
    case G_INPUT:
        n->buf = lead_buf(L, n, NULL, n->ndim, BUF_INPUT, n->dtype);
        return;
    case G_COUNT: break;
    }
    UNREACHABLE();
}

void tensor_lower(Arena *A, const Graph *g, TProgram *tp) {
    memset(tp, 0, sizeof *tp);
    tp->g = g;
    if (g->cfg) tp->kv_layer_elems = (int64_t)g->cfg->num_key_value_heads * g->cfg->head_dim;
    TL L = {A, tp};
    for (int i = 0; i < g->n; i++) lower_node(&L, g->nodes[i]);
    /* an expression's (or one layer's) result is the output */
    CHECK(g->logits->buf && g->logits->buf->kind != BUF_INPUT && g->logits->buf->kind != BUF_WEIGHT,
          "output is not computed");
    if (g->logits->buf->kind == BUF_ACT) g->logits->buf->kind = BUF_OUTPUT;
    tp->logits = g->logits->buf;
    tp->next_token = g->next_token ? g->next_token->buf : NULL;
    tp->top_k = g->top_k ? g->top_k->buf : NULL;
    tp->weights = ARENA_ARRAY(A, Buffer *, tp->n_weights);
    for (int i = 0; i < tp->nbufs; i++)
        if (tp->bufs[i]->kind == BUF_WEIGHT) tp->weights[tp->bufs[i]->weight_index] = tp->bufs[i];
}

/* Best fit over freed slots, step by step: a buffer takes the smallest free
 * slot that holds it at its first step, and frees it after its last. */
void tensor_place_buffers(Arena *A, TProgram *tp, const int *first, const int *last, int nsteps) {
    typedef struct { int64_t off, size; int owner; } Slot;
    Slot *slots = ARENA_ARRAY(A, Slot, tp->nbufs + 1);
    int nslots = 0;
    int64_t top = 0;
    for (int i = 0; i < nsteps; i++) {
        for (int s = 0; s < nslots; s++)
            if (slots[s].owner >= 0 && last[slots[s].owner] < i) slots[s].owner = -1;
        for (int bi = 0; bi < tp->nbufs; bi++) {
            Buffer *b = tp->bufs[bi];
            if (b->kind != BUF_ACT || first[bi] != i) continue;
            int64_t need = (dtype_bytes(b->dtype, buffer_elems(b)) + 255) & ~(int64_t)255;
            int best = -1;
            for (int s = 0; s < nslots; s++)
                if (slots[s].owner < 0 && slots[s].size >= need && (best < 0 || slots[s].size < slots[best].size))
                    best = s;
            if (best < 0) { best = nslots++; slots[best].off = top; slots[best].size = need; top += need; }
            slots[best].owner = bi;
            b->act_offset = slots[best].off;
        }
    }
    for (int bi = 0; bi < tp->nbufs; bi++)
        if (tp->bufs[bi]->kind == BUF_ACT && first[bi] < 0) tp->bufs[bi]->act_offset = -1;
    tp->act_bytes = top;
}

/* Static memory plan: activation buffers whose lifetimes do not overlap
 * share memory. A buffer lives from the first op that touches it to the last. */
static void note_use(void *ctx, Buffer *b) { int *last = ((int **)ctx)[0]; int i = *((int **)ctx)[1]; last[b->id] = i; }
void tensor_plan_memory(Arena *A, TProgram *tp) {
    int *first = ARENA_ARRAY(A, int, tp->nbufs), *last = ARENA_ARRAY(A, int, tp->nbufs);
    for (int i = 0; i < tp->nbufs; i++) first[i] = last[i] = -1;
    for (int i = 0; i < tp->n; i++) {
        TOp *op = tp->ops[i];
        void *ctx[2] = {last, &i};
        expr_visit_loads(op->body, note_use, ctx);
        if (op->epilogue) expr_visit_loads(op->epilogue, note_use, ctx);
        last[op->out->id] = i;
        if (first[op->out->id] < 0) first[op->out->id] = i;
    }
    tensor_place_buffers(A, tp, first, last, tp->n);
}

static void print_buf(Str *o, const Buffer *b) {
    str_printf(o, "  %-7s %s %s[", bufkind_names[b->kind], b->name, dtype_names[b->dtype]);
    for (int i = 0; i < b->ndim; i++) str_printf(o, "%s%lld", i ? ", " : "", (long long)b->dims[i]);
    str_printf(o, "]");
    if (b->kind == BUF_ACT && b->act_offset >= 0) str_printf(o, " @%lld", (long long)b->act_offset);
    str_printf(o, "\n");
}
static void print_axes(Str *o, const Axis *ax, int n) {
    for (int i = 0; i < n; i++) {
        str_printf(o, "%s%s<", i ? ", " : "", ax[i].v->name);
        expr_print(o, ax[i].extent);
        str_printf(o, ">");
    }
}
void tensor_print(Str *o, const TProgram *tp) {
    str_printf(o, "# tensor IR: %d ops, %d buffers, activation arena %lld bytes\n", tp->n, tp->nbufs,
               (long long)tp->act_bytes);
    str_printf(o, "buffers:\n");
    for (int i = 0; i < tp->nbufs; i++) if (tp->bufs[i]->kind != BUF_WEIGHT) print_buf(o, tp->bufs[i]);
    str_printf(o, "  (+ %d weights)\n", tp->n_weights);
    for (int i = 0; i < tp->n; i++) {
        const TOp *op = tp->ops[i];
        str_printf(o, "%s %s [", top_kind_names[op->kind], op->kname);
        print_axes(o, op->axes, op->naxes);
        str_printf(o, "]");
        if (op->kind == TOP_REDUCE) {
            str_printf(o, " %s over [", red_op_names[op->red]);
            print_axes(o, op->raxes, op->nraxes); str_printf(o, "]");
        }
        str_printf(o, "  # %s\n    ", op->module);
        expr_print_ref(o, op->out->name, op->out->ndim, op->out_idx);
        str_printf(o, " = ");
        if (op->red == RED_TOPK && op->kind == TOP_REDUCE) {
            str_printf(o, "(%s == 0 ? the value : the %s) of the %s-th largest of ", op->topk_sel->name,
                       op->raxes[0].v->name, op->topk_rank->name);
            expr_print(o, op->body);
            str_printf(o, " for %s < ", op->topk_rank->name);
            expr_print(o, op->topk_count);
            str_printf(o, " (at most %lld; ties to the smaller %s, NaN as -inf)\n", (long long)op->topk_max,
                       op->raxes[0].v->name);
        } else if (op->kind == TOP_REDUCE) {
            if (op->epilogue) expr_print(o, op->epilogue);
            str_printf(o, op->epilogue ? "  where acc = %s(" : "%s(", red_op_names[op->red]);
            expr_print(o, op->body);
            str_printf(o, ")\n");
        } else {
            expr_print(o, op->body);
            str_printf(o, "\n");
        }
    }
}

static const char *check_bound(Arena *A, const Expr *e, const TOp *op) {
    if (e->k == EX_VAR) {
        for (int i = 0; i < op->naxes; i++) if (op->axes[i].v == e->var) return NULL;
        for (int i = 0; i < op->nraxes; i++) if (op->raxes[i].v == e->var) return NULL;
        if (op->red == RED_TOPK && (e->var == op->topk_sel || e->var == op->topk_rank)) return NULL;
        return arena_printf(A, "variable %s is not an axis of the op", e->var->name);
    }
    if (e->k == EX_ACC) return "acc outside a reduction epilogue";
    for (int i = 0; i < e->nargs; i++) { const char *m = check_bound(A, e->a[i], op); if (m) return m; }
    return NULL;
}
const char *tensor_verify(Arena *A, const TProgram *tp) {
    for (int i = 0; i < tp->n; i++) {
        const TOp *op = tp->ops[i];
        const char *m = expr_verify(A, op->body);
        if (!m) m = check_bound(A, op->body, op);
        if (!m && op->body->t != T_F32) m = "value is not f32";
        if (!m && op->epilogue) {
            m = expr_verify(A, op->epilogue);
            Expr *ep = expr_subst_acc(A, op->epilogue, e_f(A, 0));
            if (!m) m = check_bound(A, ep, op);
        }
        if (!m && op->kind == TOP_REDUCE && op->nraxes == 0) m = "reduction without reduction axes";
        if (!m && op->kind != TOP_REDUCE && (op->nraxes || op->epilogue)) m = "non-reduction with reduction axes";
        if (!m && op->out->kind == BUF_WEIGHT) m = "writes a weight";
        if (!m && op->red == RED_TOPK &&
            (op->kind != TOP_REDUCE || op->nraxes != 1 || op->epilogue || !op->topk_count || op->topk_max < 1 ||
             op->topk_max > op->raxes[0].extent->i || op->out->ndim < 2 || op->out->dims[op->out->ndim - 2] != 2 ||
             op->out->dims[op->out->ndim - 1] != op->topk_max ||
             (op->topk_count->k == EX_ICONST && op->topk_count->i > op->topk_max)))
            m = "top_k shape";
        for (int d = 0; !m && d < op->out->ndim; d++) {
            if (!op->out_idx[d]) { m = "missing store index"; break; }
            m = expr_verify(A, op->out_idx[d]);
            if (!m) m = check_bound(A, op->out_idx[d], op);
        }
        if (m) return arena_printf(A, "op %d (%s): %s", i, op->module, m);
    }
    return NULL;
}
