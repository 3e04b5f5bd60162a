/* kernel_verify_test.c: kernel_verify rejects kernel IR that would be wrong
 * on the GPU even where the C backend would run it: shuffles in a block
 * that is not whole warps, with an out-of-range or thread-dependent
 * argument, of undeclared registers; two phases touching shared memory with
 * no barrier between them (also around a uniform loop's back edge); a
 * misaligned vector; ldmatrix of shared memory written with no barrier
 * between, or from a non-b16 array; mma on registers of the wrong kind. Prints one line per case, "ok" or what went wrong;
 * exits 1 if any case is accepted or a good kernel is rejected. */
#include "kernel_ir.h"
#include <stdio.h>
#include <string.h>

static Arena A;
static int nvars;

static KStmt *phase(TStmt *s, bool barrier) {
    KStmt *k = ARENA_NEW(&A, KStmt);
    k->k = KS_PHASE; k->barrier = barrier;
    k->body = ARENA_ARRAY(&A, TStmt *, 1); k->body[0] = s; k->nbody = 1;
    return k;
}
static TStmt *sstore(void) {   /* smem0[tid] = r0 */
    TStmt *s = ARENA_NEW(&A, TStmt);
    s->k = TS_SSTORE; s->smem = 0; s->sidx = e_leaf(&A, EX_TID, T_I64, 0); s->e = e_leaf(&A, EX_REG, T_F32, 0);
    return s;
}
static TStmt *sread(void) {    /* r0 = smem0[tid] */
    TStmt *s = ARENA_NEW(&A, TStmt);
    s->k = TS_ASSIGN; s->reg = 0;
    Expr *e = e_un(&A, EX_SLOAD, e_leaf(&A, EX_TID, T_I64, 0)); e->i = 0; e->t = T_F32;
    s->e = e;
    return s;
}
static KStmt *shfl(ShflKind kind, Expr *arg) {
    KStmt *k = ARENA_NEW(&A, KStmt);
    k->k = KS_SHFL; k->shfl = kind; k->dst = 1; k->src = 0; k->arg = arg;
    return k;
}
static KProgram *prog(int block, KStmt **body, int n) {
    KKernel *k = ARENA_NEW(&A, KKernel);
    k->name = k->base = "k_test"; k->module = "test"; k->block = block; k->grid = e_i(&A, 1);
    k->nregs = 2; k->regs[0].t = k->regs[1].t = T_F32;
    k->nsmem = 1; k->smem[0].size = block;
    k->body = body; k->nbody = n;
    KProgram *kp = ARENA_NEW(&A, KProgram);
    kp->kernels = ARENA_ARRAY(&A, KKernel *, 1); kp->kernels[0] = k; kp->nk = 1;
    return kp;
}

static int failures;
static void expect(const char *what, KProgram *kp, const char *want) {
    const char *m = kernel_verify(&A, kp);
    bool ok = want ? (m && strstr(m, want)) : !m;
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, m ? m : "accepted");
    failures += !ok;
}

int main(void) {
    KStmt *b[4];
    b[0] = phase(sstore(), true); b[1] = phase(sread(), false); b[2] = shfl(SHFL_DOWN, e_i(&A, 16));
    expect("good kernel", prog(64, b, 3), NULL);
    expect("partial warp", prog(48, b, 3), "not whole warps");
    b[2] = shfl(SHFL_DOWN, e_i(&A, 32));
    expect("delta 32", prog(64, b, 3), "outside 0..31");
    b[2] = shfl(SHFL_XOR, e_leaf(&A, EX_TID, T_I64, 0));
    expect("thread-dependent mask", prog(64, b, 3), "depends on a thread");
    b[2] = shfl(SHFL_DOWN, e_i(&A, 1)); b[2]->src = 5;
    expect("undeclared register", prog(64, b, 3), "undeclared register");
    b[0] = phase(sstore(), false); b[1] = phase(sread(), false);
    expect("smem race", prog(64, b, 2), "no barrier");
    /* ufor { read smem, barrier; write smem, barrier }: accepted. Without the second barrier the
     * write of iteration i meets the read of iteration i+1 across the loop's back edge: a race. */
    KStmt *uf = ARENA_NEW(&A, KStmt);
    Var *v = new_var(&A, &nvars, "s");
    uf->k = KS_UFOR; uf->v = v; uf->init = e_i(&A, 0); uf->cond = e_bin(&A, EX_LT, e_var(&A, v), e_i(&A, 4));
    uf->update = E_ADD(&A, e_var(&A, v), e_i(&A, 1));
    uf->kbody = ARENA_ARRAY(&A, KStmt *, 2); uf->nk = 2;
    uf->kbody[0] = phase(sread(), true); uf->kbody[1] = phase(sstore(), true);
    b[0] = uf;
    expect("uniform loop with barriers", prog(64, b, 1), NULL);
    uf->kbody[1] = phase(sstore(), false);
    expect("uniform loop, back-edge race", prog(64, b, 1), "no barrier");
    /* a vector load whose rows are not vector aligned */
    Buffer *buf = ARENA_NEW(&A, Buffer);
    buf->name = "w"; buf->kind = BUF_WEIGHT; buf->dtype = DT_BF16; buf->ndim = 2; buf->dims[0] = 4; buf->dims[1] = 12; buf->id = -1;
    TStmt *vl = ARENA_NEW(&A, TStmt);
    vl->k = TS_VLOAD; vl->v = new_var(&A, &nvars, "v0"); vl->vec = 8; vl->buf = buf;
    vl->idx = ARENA_ARRAY(&A, Expr *, 2); vl->idx[0] = e_i(&A, 0); vl->idx[1] = e_i(&A, 0);
    KProgram *kp = prog(64, b, 1);
    kp->kernels[0]->body[0] = phase(vl, false);
    kp->kernels[0]->params[0] = buf; kp->kernels[0]->nparams = 1;
    expect("misaligned vector rows", kp, "not aligned");
    buf->dims[1] = 16;
    expect("aligned vector rows", kp, NULL);
    /* tensor-core statements: r2..r5 .b32 fragments, r6..r9 f32 accumulators, smem0 b16 */
    KKernel *k = kp->kernels[0];
    k->nparams = 0;
    k->nregs = 10;
    for (int i = 2; i < 10; i++) { k->regs[i].t = T_F32; k->regs[i].b32 = i < 6; }
    k->smem[0].b16 = true;
    KStmt *ld = ARENA_NEW(&A, KStmt);
    ld->k = KS_LDMATRIX; ld->nmat = 4; ld->lsmem = 0; ld->laddr = E_MUL(&A, e_leaf(&A, EX_TID, T_I64, 0), e_i(&A, 8));
    for (int i = 0; i < 4; i++) ld->ldst[i] = 2 + i;
    TStmt *zs = sstore();
    k->body = b; b[0] = phase(zs, true); b[1] = ld; k->nbody = 2;
    expect("ldmatrix after a barrier", kp, NULL);
    b[0] = phase(zs, false);
    expect("ldmatrix racing a shared store", kp, "no barrier");
    b[0] = phase(zs, true);
    k->smem[0].b16 = false;
    expect("ldmatrix of f32 shared memory", kp, "non-b16");
    k->smem[0].b16 = true;
    KStmt *mm = ARENA_NEW(&A, KStmt);
    mm->k = KS_MMA;
    for (int i = 0; i < 4; i++) { mm->ma[i] = 2 + i; mm->mc[i] = 6 + i; }
    mm->mb[0] = 2; mm->mb[1] = 3;
    b[2] = mm; k->nbody = 3;
    expect("mma after ldmatrix", kp, NULL);
    mm->mc[3] = 5;
    expect("mma accumulating into a .b32 register", kp, "wrong type");
    /* ulet: a uniform value (of bid) bounds a uniform loop; one of tid may not */
    KStmt *ul = ARENA_NEW(&A, KStmt);
    ul->k = KS_ULET; ul->v = new_var(&A, &nvars, "u"); ul->init = E_MUL(&A, e_leaf(&A, EX_BID, T_I64, 0), e_i(&A, 2));
    KStmt *uf2 = ARENA_NEW(&A, KStmt);
    Var *v2 = new_var(&A, &nvars, "s2");
    uf2->k = KS_UFOR; uf2->v = v2; uf2->init = e_i(&A, 0); uf2->cond = e_bin(&A, EX_LT, e_var(&A, v2), e_var(&A, ul->v));
    uf2->update = E_ADD(&A, e_var(&A, v2), e_i(&A, 1));
    uf2->kbody = ARENA_ARRAY(&A, KStmt *, 1); uf2->nk = 1;
    uf2->kbody[0] = phase(sread(), true);
    b[0] = ul; b[1] = uf2;
    expect("uniform value bounding a uniform loop", prog(64, b, 2), NULL);
    ul->init = e_leaf(&A, EX_TID, T_I64, 0);
    expect("uniform value of a thread", prog(64, b, 2), "depends on a thread");
    b[0] = uf2;
    expect("uniform loop before its bound's ulet", prog(64, b, 1), "non-uniform u");
    return failures ? 1 : 0;
}
