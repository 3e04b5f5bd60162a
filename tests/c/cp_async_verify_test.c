/* cp_async_verify_test.c: kernel_verify's rules for cp.async, on hand-built
 * kernels (two b16 shared arrays, a bf16 parameter): a shared array is not
 * read (phase or ldmatrix) while a copy into it may be pending (no commit,
 * no wait_group covering its group, or no barrier after the wait), nor
 * copied into in a barrier region that reads it; copies of 4, 8 or 16
 * bytes with aligned source rows only. Also that the shared-memory race
 * rule is per array: writing smem1 while smem0 is read is no race. Prints
 * one line per case, "ok" or what went wrong; exits 1 if any case is
 * accepted that should not be or a good kernel is rejected. */
#include "kernel_ir.h"
#include <stdio.h>
#include <string.h>

static Arena A;
static Buffer W = {.name = "w", .kind = BUF_WEIGHT, .dtype = DT_BF16, .ndim = 2, .dims = {64, 64}, .id = -1};

static Expr *tid(void) { return e_leaf(&A, EX_TID, T_I64, 0); }
static KStmt *kst(KStmtKind kind, int n) { KStmt *k = ARENA_NEW(&A, KStmt); k->k = kind; k->wait_n = n; return k; }
static KStmt *phase(TStmt *s, bool barrier) {
    KStmt *k = kst(KS_PHASE, 0);
    k->barrier = barrier;
    k->body = ARENA_ARRAY(&A, TStmt *, 1); k->body[0] = s; k->nbody = s ? 1 : 0;
    return k;
}
static TStmt *cp(int sm, int bytes) {   /* smem<sm>[8 tid] <- w[tid, 0 ..+bytes] */
    TStmt *s = ARENA_NEW(&A, TStmt);
    s->k = TS_CP_ASYNC; s->vec = bytes; s->smem = sm; s->sidx = E_MUL(&A, tid(), e_i(&A, 8)); s->buf = &W;
    s->idx = ARENA_ARRAY(&A, Expr *, 2); s->idx[0] = tid(); s->idx[1] = e_i(&A, 0);
    return s;
}
static TStmt *sread(int sm) {  /* r0 = smem<sm>[tid] */
    TStmt *s = ARENA_NEW(&A, TStmt);
    s->k = TS_ASSIGN; s->reg = 0;
    Expr *e = e_un(&A, EX_SLOAD, tid()); e->i = sm; e->t = T_F32;
    s->e = e;
    return s;
}
static TStmt *swrite(int sm) { /* smem<sm>[tid] = r0 */
    TStmt *s = ARENA_NEW(&A, TStmt);
    s->k = TS_SSTORE; s->smem = sm; s->sidx = tid(); s->e = e_leaf(&A, EX_REG, T_F32, 0);
    return s;
}
static KStmt *ldm(int sm) {   /* ldmatrix_x4 r1..r4 <- smem<sm>[8 tid] */
    KStmt *k = kst(KS_LDMATRIX, 0);
    k->nmat = 4; k->lsmem = sm; k->laddr = E_MUL(&A, tid(), e_i(&A, 8));
    for (int i = 0; i < 4; i++) k->ldst[i] = 1 + i;
    return k;
}

static int failures;
static void expect(const char *what, int n, KStmt **body, const char *want) {
    KKernel *k = ARENA_NEW(&A, KKernel);
    k->name = k->base = "k_test"; k->module = "test"; k->block = 64; k->grid = e_i(&A, 1);
    k->nregs = 5; k->regs[0].t = T_F32;
    for (int i = 1; i < 5; i++) k->regs[i].b32 = true;
    k->nsmem = 2;
    for (int i = 0; i < 2; i++) { k->smem[i].size = 512; k->smem[i].b16 = true; }
    k->params[0] = &W; k->nparams = 1;
    k->body = body; k->nbody = n;
    KProgram kp = {0};
    kp.kernels = &k; kp.nk = 1;
    const char *m = kernel_verify(&A, &kp);
    bool ok = want ? (m && strstr(m, want)) : !m;
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, m ? m : "accepted");
    failures += !ok;
}
#define CASE(what, want, ...) do { KStmt *b_[] = {__VA_ARGS__}; expect(what, (int)(sizeof b_ / sizeof b_[0]), b_, want); } while (0)

int main(void) {
    const char *pend = "may be pending";
    CASE("copy, commit, wait 0, barrier, read", NULL, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), kst(KS_CP_WAIT, 0), phase(NULL, true), phase(sread(0), false));
    CASE("read with no wait", pend, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), phase(NULL, true), phase(sread(0), false));
    CASE("wait with no barrier after", pend, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), kst(KS_CP_WAIT, 0), phase(sread(0), false));
    CASE("never committed", pend, phase(cp(0, 16), false), kst(KS_CP_WAIT, 0), phase(NULL, true), phase(sread(0), false));
    CASE("wait_group 1 leaves the only group", pend, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), kst(KS_CP_WAIT, 1), phase(NULL, true), ldm(0));
    /* two stages: wait_group 1 completes the older group (smem0), the newer (smem1) may be in flight */
    CASE("two stages, read the landed one", NULL, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), phase(cp(1, 16), false), kst(KS_CP_COMMIT, 0),
         kst(KS_CP_WAIT, 1), phase(NULL, true), ldm(0));
    CASE("two stages, read the one in flight", pend, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), phase(cp(1, 16), false), kst(KS_CP_COMMIT, 0),
         kst(KS_CP_WAIT, 1), phase(NULL, true), ldm(1));
    CASE("copy into an array read in the same region", "no barrier", ldm(0), phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0));
    CASE("copy into another array than the one read", NULL, ldm(0), phase(cp(1, 16), false), kst(KS_CP_COMMIT, 0));
    CASE("store into an array with a copy in flight", pend, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), phase(swrite(0), true));
    CASE("12-byte copy", "4, 8 or 16", phase(cp(0, 12), false));
    W.dims[1] = 60;   /* rows of 120 bytes: a 16-byte copy at a row start can be misaligned */
    CASE("16-byte copy of rows of 120 bytes", "not aligned", phase(cp(0, 16), false));
    CASE("8-byte copy of rows of 120 bytes", NULL, phase(cp(0, 8), false), kst(KS_CP_COMMIT, 0), kst(KS_CP_WAIT, 0));
    W.dims[1] = 64;
    /* per array: the register-prefetch store into the next stage while this one is read */
    CASE("store smem1 after ldmatrix of smem0", NULL, ldm(0), phase(swrite(1), true));
    CASE("store smem0 after ldmatrix of smem0", "no barrier", ldm(0), phase(swrite(0), true));
    /* a uniform loop: the copy of iteration i + 1 is committed before the read of iteration i waits for it */
    KStmt *uf = kst(KS_UFOR, 0);
    int nvars = 0;
    Var *v = new_var(&A, &nvars, "s");
    uf->v = v; uf->init = e_i(&A, 0); uf->cond = e_bin(&A, EX_LT, e_var(&A, v), e_i(&A, 4)); uf->update = E_ADD(&A, e_var(&A, v), e_i(&A, 1));
    KStmt *body[] = {kst(KS_CP_WAIT, 0), phase(NULL, true), ldm(0), phase(NULL, true), phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0)};
    uf->kbody = body; uf->nk = 6;
    CASE("loop: wait, barrier, read, barrier, copy the next", NULL, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), uf);
    body[3] = phase(NULL, false);
    CASE("loop: the next copy races this iteration's read", "no barrier", phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), uf);
    body[3] = phase(NULL, true); body[0] = kst(KS_CP_WAIT, 1);
    CASE("loop: waits for one group fewer", pend, phase(cp(0, 16), false), kst(KS_CP_COMMIT, 0), uf);
    return failures ? 1 : 0;
}
