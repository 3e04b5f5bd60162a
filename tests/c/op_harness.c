/* op_harness.c: compiles one tensor op (or the few ops a graph op
 * decomposes into) through loop IR -> tile IR -> kernel IR and prints a C
 * (or CUDA) translation unit of its kernels. For C it adds a table of the
 * buffers and run_ops(), the launch plan; tests/c/op_main.c drives them with
 * guard regions around every buffer (tests/oplib.py).
 *
 * Only for what `llmcc run -c EXPR` (tests/test_ops.py) cannot reach: rows that are
 * the runtime n below the compiled maximum (so gemm_tc, which needs max_batch >
 * gemm_min_n, and rows past n that must stay unwritten), RoPE (no rotary in the
 * expression language), --no-kernel-verify, and the hand-built primitives.
 *
 *   op_harness OP ARGS... [--knob NAME=VALUE]... [--target cpu|cuda-emu|cuda] [--print tile|kernel] [--no-kernel-verify]
 *     (--no-kernel-verify: a deliberately wrong schedule the verifier rejects reaches the C backend)
 *     linear MAXN M K WDT BIAS  y[t,o] = sum_i x[t,i] w[o,i] (+ b[o] when BIAS is 1)   (test_mma.py)
 *     mlp MAXN M K WDT          silu(x @ wg^T) * (x @ wu^T)                          (test_epilogues.py)
 *     rope_proj MAXN H D K WDT  RoPE of x @ w^T over H heads of D                    (test_epilogues.py)
 *     linear_residual MAXN M K WDT   r + x @ w^T                                     (test_epilogues.py)
 *     topk ROWS L K             y[t, 0, r] = the r-th largest x[t, j] (ties to the smaller j), y[t, 1, r] = that j
 *     mma_prim                  one warp: d = c + A*B by mma_m16n8k16_bf16 from per-lane fragments a[32,4], b[32,2]
 *                               (.b32 bits as i32), c[32,4] f32 -> d[32,4] f32
 *     ldmatrix_prim             one warp: smem = s (512 bf16), ldmatrix_x4 with row offsets addr[32] -> out[32,4] (.b32 bits)
 *     cp_async_prim BYTES       one warp: lane l cp.asyncs BYTES bytes of s (288 bf16) from 8l + off[0] to smem[8l], zero-fill
 *                               for l % 3 == 0; wait_group 0 -> out[32,8] (smem[8l..8l+7] bits)
 * Row extents are the runtime n (1..MAXN), as in a model; WDT is f32, bf16 or f16.
 * The _prim ops are kernels built here by hand (no tensor op has their form).
 * The ops are built as tensor_ir.c builds the model's, so the schedules see
 * the same shapes; the expected values come from numpy, not from here. */
#include "emit.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Arena A;
static TProgram tp;
static Graph g;

static Buffer *buf(const char *name, BufKind kind, DType dt, int ndim, int64_t d0, int64_t d1) {
    arena_grow(&A, (void **)&tp.bufs, tp.nbufs, &tp.capb, sizeof(Buffer *));
    Buffer *b = ARENA_NEW(&A, Buffer);
    b->id = tp.nbufs; b->name = name; b->kind = kind; b->dtype = dt; b->ndim = ndim;
    b->dims[0] = d0; b->dims[1] = d1; b->layer = -1; b->weight_index = -1; b->act_offset = -1;
    if (kind == BUF_WEIGHT) b->weight_index = tp.n_weights++;
    tp.bufs[tp.nbufs++] = b;
    return b;
}
static TOp *op(TOpKind kind, const char *kname, Buffer *out) {
    arena_grow(&A, (void **)&tp.ops, tp.n, &tp.cap, sizeof(TOp *));
    TOp *o = ARENA_NEW(&A, TOp);
    o->kind = kind; o->module = kname; o->kname = kname; o->out = out;
    tp.ops[tp.n++] = o;
    return o;
}
static Expr *axis(TOp *o, const char *name, Expr *extent) {
    Var *v = new_var(&A, &tp.nvars, name);
    o->axes[o->naxes].v = v; o->axes[o->naxes].extent = extent; o->naxes++;
    return e_var(&A, v);
}
static Expr *raxis(TOp *o, const char *name, Expr *extent) {
    Var *v = new_var(&A, &tp.nvars, name);
    o->raxes[o->nraxes].v = v; o->raxes[o->nraxes].extent = extent; o->nraxes++;
    return e_var(&A, v);
}
static DType dtype_arg(const char *s) {
    if (!strcmp(s, "f32")) return DT_F32;
    if (!strcmp(s, "bf16")) return DT_BF16;
    if (!strcmp(s, "f16")) return DT_F16;
    for (int d = DT_Q8_0; d < DT_COUNT; d++) if (!strcmp(s, dtype_names[d])) return (DType)d;   /* linear's weight */
    die_user(NULL, "dtype", "'%s' is not f32, bf16, f16 or a block type (q8_0 ...)", s);
}
static int64_t num(const char *s) { return strtoll(s, NULL, 10); }
static Expr *N(void) { return e_param(&A, P_N); }

/* role of each buffer for op_main.c: 0 input (filled from the input file), 1 output, 2 scratch */
static int role_of(const Buffer *b) {
    return b->kind == BUF_WEIGHT || b->kind == BUF_INPUT ? 0 : b->kind == BUF_OUTPUT ? 1 : 2;
}

/* y[t, o] = sum_i x[t, i] * w[o, i]: a linear as tensor_ir.c lowers it */
static TOp *linear_op(const char *kname, Buffer *x, Buffer *w, Buffer *y) {
    TOp *o = op(TOP_REDUCE, kname, y);
    Expr *t = axis(o, "t", N()), *oo = axis(o, "o", e_i(&A, w->dims[0])), *i = raxis(o, "i", e_i(&A, w->dims[1]));
    o->out_idx[0] = t; o->out_idx[1] = oo; o->red = RED_SUM;
    o->body = E_MUL(&A, e_load2(&A, x, t, i), e_load2(&A, w, oo, i));
    return o;
}

static void build(int argc, char **argv) {
    const char *k = argv[0];
    if (!strcmp(k, "linear") && argc >= 6) {
        int64_t R = num(argv[1]), M = num(argv[2]), K = num(argv[3]);
        DType wd = dtype_arg(argv[4]);
        Buffer *x = buf("x", BUF_INPUT, DT_F32, 2, R, K), *w = buf("w", BUF_WEIGHT, wd, 2, M, K);
        Buffer *b = num(argv[5]) ? buf("b", BUF_WEIGHT, dtype_is_quant(wd) ? DT_F32 : wd, 1, M, 0) : NULL;
        Buffer *y = buf("y", BUF_OUTPUT, DT_F32, 2, R, M);
        TOp *o = op(TOP_REDUCE, "proj", y);
        Expr *t = axis(o, "t", N()), *oo = axis(o, "o", e_i(&A, M)), *i = raxis(o, "i", e_i(&A, K));
        o->out_idx[0] = t; o->out_idx[1] = oo; o->red = RED_SUM;
        o->body = E_MUL(&A, e_load2(&A, x, t, i), e_load2(&A, w, oo, i));
        if (b) o->epilogue = E_ADD(&A, e_acc(&A), e_load1(&A, b, oo));
    } else if (!strcmp(k, "mlp") && argc >= 5) {
        /* silu(x @ wg^T) * (x @ wu^T): loop_fuse_epilogues makes it one pair nest */
        int64_t R = num(argv[1]), M = num(argv[2]), K = num(argv[3]);
        DType wd = dtype_arg(argv[4]);
        Buffer *x = buf("x", BUF_INPUT, DT_F32, 2, R, K), *wg = buf("wg", BUF_WEIGHT, wd, 2, M, K), *wu = buf("wu", BUF_WEIGHT, wd, 2, M, K);
        Buffer *gt = buf("gate", BUF_ACT, DT_F32, 2, R, M), *up = buf("up", BUF_ACT, DT_F32, 2, R, M), *y = buf("y", BUF_OUTPUT, DT_F32, 2, R, M);
        linear_op("gate_proj", x, wg, gt);
        linear_op("up_proj", x, wu, up);
        TOp *m = op(TOP_ELEMWISE, "gate_mul_up", y);
        Expr *t = axis(m, "t", N()), *c = axis(m, "c", e_i(&A, M));
        m->out_idx[0] = t; m->out_idx[1] = c;
        Expr *gv = e_load2(&A, gt, t, c);
        m->body = E_MUL(&A, E_DIV(&A, gv, E_ADD(&A, e_f(&A, 1.0), e_un(&A, EX_EXP, e_un(&A, EX_NEG, gv)))), e_load2(&A, up, t, c));
    } else if (!strcmp(k, "rope_proj") && argc >= 6) {
        /* rotary (rotate_half, tensor_ir.c's G_ROPE) of x @ w^T over H heads of D: the halves fusion */
        int64_t R = num(argv[1]), H = num(argv[2]), D = num(argv[3]), K = num(argv[4]), half = D / 2;
        DType wd = dtype_arg(argv[5]);
        Buffer *x = buf("x", BUF_INPUT, DT_F32, 2, R, K), *w = buf("w", BUF_WEIGHT, wd, 2, H * D, K), *f = buf("inv_freq", BUF_INPUT, DT_F32, 1, half, 0);
        Buffer *q = buf("q", BUF_ACT, DT_F32, 2, R, H * D), *y = buf("y", BUF_OUTPUT, DT_F32, 2, R, H * D);
        linear_op("q_proj", x, w, q);
        TOp *o = op(TOP_ELEMWISE, "rotary_q", y);
        Expr *t = axis(o, "t", N()), *h = axis(o, "h", e_i(&A, H)), *e = axis(o, "e", e_i(&A, D));
        Expr *base = E_MUL(&A, h, e_i(&A, D));
        o->out_idx[0] = t; o->out_idx[1] = E_ADD(&A, base, e);
        Expr *ang = E_MUL(&A, e_un(&A, EX_TOF, E_ADD(&A, e_param(&A, P_POS), t)), e_load1(&A, f, e_bin(&A, EX_MOD, e, e_i(&A, half))));
        Expr *xv = e_load2(&A, q, t, E_ADD(&A, base, e));
        Expr *partner = e_load2(&A, q, t, E_ADD(&A, base, e_bin(&A, EX_MOD, E_ADD(&A, e, e_i(&A, half)), e_i(&A, D))));
        Expr *rot = e_select(&A, e_bin(&A, EX_LT, e, e_i(&A, half)), e_un(&A, EX_NEG, partner), partner);
        o->body = E_ADD(&A, E_MUL(&A, xv, e_un(&A, EX_COS, ang)), E_MUL(&A, rot, e_un(&A, EX_SIN, ang)));
    } else if (!strcmp(k, "linear_residual") && argc >= 5) {
        /* r + x @ w^T: the add goes into the linear's store (an epilogue) */
        int64_t R = num(argv[1]), M = num(argv[2]), K = num(argv[3]);
        Buffer *x = buf("x", BUF_INPUT, DT_F32, 2, R, K), *w = buf("w", BUF_WEIGHT, dtype_arg(argv[4]), 2, M, K);
        Buffer *rr = buf("r", BUF_INPUT, DT_F32, 2, R, M), *p = buf("p", BUF_ACT, DT_F32, 2, R, M), *y = buf("y", BUF_OUTPUT, DT_F32, 2, R, M);
        linear_op("down_proj", x, w, p);
        TOp *a = op(TOP_ELEMWISE, "residual", y);
        Expr *t = axis(a, "t", N()), *c = axis(a, "c", e_i(&A, M));
        a->out_idx[0] = t; a->out_idx[1] = c;
        a->body = E_ADD(&A, e_load2(&A, rr, t, c), e_load2(&A, p, t, c));
    } else if (!strcmp(k, "topk") && argc >= 4) {
        /* y[t, 0, r] / y[t, 1, r]: the r-th largest x[t, j] and its j, as tensor_ir.c lowers torch.topk */
        int64_t R = num(argv[1]), L = num(argv[2]), K = num(argv[3]);
        Buffer *x = buf("x", BUF_INPUT, DT_F32, 2, R, L), *y = buf("y", BUF_OUTPUT, DT_F32, 3, R, 2);
        y->dims[2] = K;
        TOp *o = op(TOP_REDUCE, "topk", y);
        Expr *t = axis(o, "t", e_i(&A, R)), *j = raxis(o, "j", e_i(&A, L));
        o->red = RED_TOPK; o->body = e_load2(&A, x, t, j);
        o->topk_max = K; o->topk_count = e_i(&A, K);
        o->topk_sel = new_var(&A, &tp.nvars, "s"); o->topk_rank = new_var(&A, &tp.nvars, "r");
        o->out_idx[0] = t; o->out_idx[1] = e_var(&A, o->topk_sel); o->out_idx[2] = e_var(&A, o->topk_rank);
    } else {
        die_user(NULL, k, "unknown op or missing arguments (see tests/c/op_harness.c)");
    }
    g.max_batch = (int)tp.bufs[0]->dims[0];
    g.max_ctx = 1;
    tp.g = &g;
    tp.weights = ARENA_ARRAY(&A, Buffer *, tp.n_weights + 1);
    for (int i = 0; i < tp.nbufs; i++) if (tp.bufs[i]->kind == BUF_WEIGHT) tp.weights[tp.bufs[i]->weight_index] = tp.bufs[i];
}

/* ---- the kernel-IR primitives alone: one warp, hand-built ---- */
static TStmt *tstmt(TStmtKind k) { TStmt *s = ARENA_NEW(&A, TStmt); s->k = k; return s; }
static KStmt *kphase(TStmt **b, int n, bool barrier) {
    KStmt *k = ARENA_NEW(&A, KStmt); k->k = KS_PHASE; k->body = b; k->nbody = n; k->barrier = barrier; return k;
}
static Expr *TID(void) { return e_leaf(&A, EX_TID, T_I64, 0); }
static TStmt *st2(Buffer *b, Expr *i0, int64_t i1, Expr *v) {
    TStmt *s = tstmt(TS_STORE); s->buf = b; s->idx = ARENA_ARRAY(&A, Expr *, 2); s->idx[0] = i0; s->idx[1] = e_i(&A, i1); s->e = v; return s;
}
/* the program of one kernel launched once on its own parameters */
static void one_launch(KProgram *kp, KKernel *k) {
    kp->tp = &tp; kp->sampler = false;
    kp->kernels = ARENA_ARRAY(&A, KKernel *, 1); kp->kernels[0] = k; kp->nk = 1;
    kp->launches = ARENA_ARRAY(&A, KLaunch, 1); kp->nl = 1;
    kp->launches[0].k = k; kp->launches[0].module = k->module; kp->launches[0].grid = k->grid;
    for (int i = 0; i < k->nparams; i++) kp->launches[0].args[i] = k->params[i];
}
static void prim_program(const char *which, KProgram *kp) {
    KKernel *k = ARENA_NEW(&A, KKernel);
    k->block = 32; k->grid = e_i(&A, 1); k->uses = 1;
    k->body = ARENA_ARRAY(&A, KStmt *, 3); k->nbody = 3;
    if (!strcmp(which, "mma_prim")) {
        Buffer *a = buf("a", BUF_INPUT, DT_I32, 2, 32, 4), *b = buf("b", BUF_INPUT, DT_I32, 2, 32, 2);
        Buffer *c = buf("c", BUF_INPUT, DT_F32, 2, 32, 4), *d = buf("d", BUF_OUTPUT, DT_F32, 2, 32, 4);
        k->name = k->base = "k_mma_prim"; k->module = "mma_prim"; k->sched = SCHED_FLAT;
        k->nregs = 10;
        for (int i = 0; i < 10; i++) { k->regs[i].t = T_F32; k->regs[i].b32 = i < 6; }
        TStmt **p0 = ARENA_ARRAY(&A, TStmt *, 10);
        for (int i = 0; i < 10; i++) {
            Buffer *src = i < 4 ? a : i < 6 ? b : c;
            int j = i < 4 ? i : i < 6 ? i - 4 : i - 6;
            p0[i] = tstmt(TS_ASSIGN); p0[i]->reg = i; p0[i]->e = e_load2(&A, src, TID(), e_i(&A, j));
        }
        k->body[0] = kphase(p0, 10, false);
        KStmt *m = ARENA_NEW(&A, KStmt);
        m->k = KS_MMA;
        for (int i = 0; i < 4; i++) { m->ma[i] = i; m->mc[i] = 6 + i; }
        m->mb[0] = 4; m->mb[1] = 5;
        k->body[1] = m;
        TStmt **p2 = ARENA_ARRAY(&A, TStmt *, 4);
        for (int i = 0; i < 4; i++) p2[i] = st2(d, TID(), i, e_leaf(&A, EX_REG, T_F32, 6 + i));
        k->body[2] = kphase(p2, 4, false);
        Buffer *ps[4] = {a, b, c, d};
        for (int i = 0; i < 4; i++) { k->params[i] = ps[i]; k->param_written[i] = i == 3; }
        k->nparams = 4;
    } else {
        Buffer *sb = buf("s", BUF_INPUT, DT_BF16, 1, 512, 0), *ad = buf("addr", BUF_INPUT, DT_I32, 1, 32, 0);
        Buffer *out = buf("out", BUF_OUTPUT, DT_I32, 2, 32, 4);
        k->name = k->base = "k_ldmatrix_prim"; k->module = "ldmatrix_prim"; k->sched = SCHED_FLAT;
        k->nregs = 4;
        for (int i = 0; i < 4; i++) { k->regs[i].t = T_F32; k->regs[i].b32 = true; }
        k->nsmem = 1; k->smem[0].size = 512; k->smem[0].b16 = true;
        Var *e = new_var(&A, &tp.nvars, "e");
        TStmt *f = tstmt(TS_FOR);
        f->v = e; f->lo = TID(); f->e = e_i(&A, 512); f->step = e_i(&A, 32);
        f->body = ARENA_ARRAY(&A, TStmt *, 1); f->nbody = 1;
        f->body[0] = tstmt(TS_SSTORE); f->body[0]->smem = 0; f->body[0]->sidx = e_var(&A, e); f->body[0]->e = e_load1(&A, sb, e_var(&A, e));
        TStmt **p0 = ARENA_ARRAY(&A, TStmt *, 1); p0[0] = f;
        k->body[0] = kphase(p0, 1, true);
        KStmt *l = ARENA_NEW(&A, KStmt);
        l->k = KS_LDMATRIX; l->nmat = 4; l->lsmem = 0; l->laddr = e_load1(&A, ad, TID());
        for (int i = 0; i < 4; i++) l->ldst[i] = i;
        k->body[1] = l;
        k->has_ldm = true;
        TStmt **p2 = ARENA_ARRAY(&A, TStmt *, 4);
        for (int i = 0; i < 4; i++) p2[i] = st2(out, TID(), i, e_leaf(&A, EX_REG, T_F32, i));
        k->body[2] = kphase(p2, 4, false);
        Buffer *ps[3] = {sb, ad, out};
        for (int i = 0; i < 3; i++) { k->params[i] = ps[i]; k->param_written[i] = i == 2; }
        k->nparams = 3;
    }
    one_launch(kp, k);
}

/* one warp: thread l copies BYTES bytes of s from element 8l + off[0] into smem0[8l] by cp.async (l % 3 == 0:
 * predicate false, zero-fill), commit, wait_group 0, barrier; out[l, j] = smem0[8l + j] (bits; j < 8, so the
 * elements past BYTES show the C backend's NaN fill) */
static void cp_async_program(int bytes, KProgram *kp) {
    KKernel *k = ARENA_NEW(&A, KKernel);
    k->block = 32; k->grid = e_i(&A, 1); k->uses = 1;
    k->name = k->base = "k_cp_async_prim"; k->module = "cp_async_prim"; k->sched = SCHED_FLAT;
    Buffer *sb = buf("s", BUF_INPUT, DT_BF16, 1, 288, 0), *off = buf("off", BUF_INPUT, DT_I32, 1, 1, 0);
    Buffer *out = buf("out", BUF_OUTPUT, DT_I32, 2, 32, 8);
    k->nsmem = 1; k->smem[0].size = 256; k->smem[0].b16 = true;
    Expr *at = E_MUL(&A, TID(), e_i(&A, 8));
    TStmt *c = tstmt(TS_CP_ASYNC);
    c->vec = bytes; c->smem = 0; c->sidx = at; c->buf = sb;
    c->idx = ARENA_ARRAY(&A, Expr *, 1); c->idx[0] = E_ADD(&A, at, e_load1(&A, off, e_i(&A, 0)));
    c->e = e_bin(&A, EX_LT, e_i(&A, 0), e_bin(&A, EX_MOD, TID(), e_i(&A, 3)));
    TStmt **p0 = ARENA_ARRAY(&A, TStmt *, 1); p0[0] = c;
    TStmt **p2 = ARENA_ARRAY(&A, TStmt *, 8);
    for (int j = 0; j < 8; j++) {
        Expr *v = e_un(&A, EX_SLOAD, E_ADD(&A, at, e_i(&A, j))); v->i = 0; v->t = T_F32;
        p2[j] = st2(out, TID(), j, v);
    }
    KStmt *cm = ARENA_NEW(&A, KStmt), *wt = ARENA_NEW(&A, KStmt);
    cm->k = KS_CP_COMMIT; wt->k = KS_CP_WAIT; wt->wait_n = 0;
    k->body = ARENA_ARRAY(&A, KStmt *, 5); k->nbody = 5;
    k->body[0] = kphase(p0, 1, false); k->body[1] = cm; k->body[2] = wt;
    k->body[3] = kphase(ARENA_ARRAY(&A, TStmt *, 1), 0, true); k->body[4] = kphase(p2, 8, false);
    k->has_cp_async = true;
    Buffer *ps[3] = {sb, off, out};
    for (int i = 0; i < 3; i++) { k->params[i] = ps[i]; k->param_written[i] = i == 2; }
    k->nparams = 3;
    one_launch(kp, k);
}

int main(int argc, char **argv) {
    Knobs kn;
    knobs_default(&kn);
    Target target = TARGET_CUDA_EMU;   /* the GPU schedules, run on the CPU exactly */
    const char *print = NULL;
    bool kverify = true;       /* off: a deliberately wrong schedule reaches the C backend, which must catch it too */
    char *pos[16];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--knob") && i + 1 < argc) knobs_set(&kn, argv[++i]);
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) {
            i++;
            for (int t = 0; t < TARGET_COUNT; t++) if (!strcmp(argv[i], target_names[t])) target = (Target)t;
        }
        else if (!strcmp(argv[i], "--print") && i + 1 < argc) print = argv[++i];
        else if (!strcmp(argv[i], "--no-kernel-verify")) kverify = false;
        else if (npos < 16) pos[npos++] = argv[i];
    }
    if (!npos) die_user(NULL, NULL, "usage: op_harness OP ARGS... [--knob NAME=VALUE] [--target cpu|cuda-emu|cuda] [--print tile|kernel]");
    LProgram lp; TileProgram tip; KProgram kp;
    Str o = {0};
    const char *m;
    bool prim = !strcmp(pos[0], "mma_prim") || !strcmp(pos[0], "ldmatrix_prim") || (!strcmp(pos[0], "cp_async_prim") && npos > 1);
    if (prim) {
        if (!strcmp(pos[0], "cp_async_prim")) cp_async_program((int)num(pos[1]), &kp);
        else prim_program(pos[0], &kp);
        m = kernel_verify(&A, &kp);
        CHECK(!m, "%s", m);
        if (print) { kernel_print(&o, &kp); fputs(o.s, stdout); return 0; }
        goto emit;
    }
    build(npos, pos);
    m = tensor_verify(&A, &tp);
    CHECK(!m, "%s", m);
    loop_lower(&A, &tp, &lp);
    m = loop_verify(&A, &lp);
    CHECK(!m, "%s", m);
    loop_fuse(&A, &lp, kn.fuse);
    m = loop_verify(&A, &lp);
    CHECK(!m, "%s", m);
    loop_fuse_epilogues(&A, &lp, kn.fuse);
    m = loop_verify(&A, &lp);
    CHECK(!m, "%s", m);
    tile_schedule(&A, &lp, target, &kn, &tip);
    m = tile_verify(&A, &tip);
    CHECK(!m, "%s", m);
    kernel_lower(&A, &tip, &kp);
    m = kverify ? kernel_verify(&A, &kp) : NULL;
    CHECK(!m, "%s", m);
    if (print) {
        if (!strcmp(print, "tile")) tile_print(&o, &tip);
        else if (!strcmp(print, "loop")) loop_print(&o, &lp);
        else kernel_print(&o, &kp);
        fputs(o.s, stdout);
        return 0;
    }
emit:
    /* scratch: activations get their own allocations here (the model's memory plan is not under test) */
    str_printf(&o, "/* generated by tests/c/op_harness.c */\n");
    emit_prelude(&o, &kp, target, NULL);
    emit_kernels(&o, &kp, target);
    if (target != TARGET_CUDA) {
        /* every buffer the launches bind, in first-use order; the workspace last */
        Buffer *work = NULL;
        for (int i = 0; i < kp.nl; i++)
            for (int j = 0; j < kp.launches[i].k->nparams; j++) if (kp.launches[i].args[j]->kind == BUF_WORK) work = kp.launches[i].args[j];
        str_printf(&o, "\nstruct HBuf { const char *name; int esize; long long elems; int role; };\n"
                       "const int nbufs = %d;\nconst struct HBuf hbufs[] = {\n", tp.nbufs + (work != NULL));
        for (int i = 0; i < tp.nbufs; i++)
            str_printf(&o, "    {\"%s\", 1, %lld, %d},\n", tp.bufs[i]->name,   /* bytes: block types have no element size */
                       (long long)dtype_bytes(tp.bufs[i]->dtype, buffer_elems(tp.bufs[i])), role_of(tp.bufs[i]));
        if (work) str_printf(&o, "    {\"%s\", 4, %lld, 2},\n", work->name, (long long)buffer_elems(work));
        str_printf(&o, "};\nvoid run_ops(void **B, int64_t n, int64_t pos) {\n");
        for (int i = 0; i < kp.nl; i++) {
            const KLaunch *l = &kp.launches[i];
            str_printf(&o, "    ");
            emit_launch_guard(&o, l);
            str_printf(&o, "%s(", l->k->name);
            emit_host_expr(&o, l->grid);
            str_printf(&o, ", n, pos");
            for (int j = 0; j < l->k->nparams; j++) {
                const Buffer *b = l->args[j];
                str_printf(&o, ", (%s%s *)B[%d]", l->k->param_written[j] ? "" : "const ", ctype_of(b->dtype), b->kind == BUF_WORK ? tp.nbufs : b->id);
            }
            str_printf(&o, ");\n");
        }
        str_printf(&o, "}\n");
    }
    fputs(o.s, stdout);
    str_free(&o);
    arena_free(&A);
    return 0;
}
