/* kernel_cleanup.c: kernel IR as a person would write it. kernel_lower
 * instantiates schedules that are general in their extents and names, so a
 * kernel can hold code that is right but says more than it needs to; the
 * emitters print it as it is, so it is tidied here, once for both:
 *   - a thread loop that runs at most once (for (r = tid; r < 192; r +=
 *     256): the step covers the range) is a let under the guard it needs,
 *     tid < 192, none where the block covers the range;
 *   - a let that renames a variable (let d = r) goes: a loop's counter
 *     takes the name (for (d = ..)) where the let opens the loop's body,
 *     else the uses name r;
 *   - an empty phase goes where no barrier is lost: one without a barrier,
 *     or whose barrier follows another with nothing between (or opens the
 *     kernel, or closes it).
 * Nothing here changes a value or the order of any arithmetic (index
 * arithmetic only loses a copy), so outputs stay bit-identical. Statements
 * are copied before they change: kernel_lower may share them. */
#include "kernel_cleanup.h"
#include <string.h>

typedef struct { TStmt **s; int n, cap; } List;

static void push(Arena *A, List *l, TStmt *s) {
    arena_grow(A, (void **)&l->s, l->n, &l->cap, sizeof *l->s);
    l->s[l->n++] = s;
}

static TStmt *copy_ts(Arena *A, const TStmt *s) {
    TStmt *c = ARENA_NEW(A, TStmt);
    *c = *s;
    c->body = ARENA_ARRAY(A, TStmt *, s->nbody + 1);
    for (int i = 0; i < s->nbody; i++) c->body[i] = copy_ts(A, s->body[i]);
    return c;
}

/* v replaced by r in s and the statements under it */
static void subst_ts(Arena *A, TStmt *s, Var *v, Expr *r) {
    Expr **f[] = {&s->e, &s->lo, &s->step, &s->sidx};
    for (int i = 0; i < 4; i++) if (*f[i]) *f[i] = expr_subst(A, *f[i], v, r);
    if (s->buf && s->idx) {
        Expr **idx = ARENA_ARRAY(A, Expr *, s->buf->ndim);
        for (int d = 0; d < s->buf->ndim; d++) idx[d] = expr_subst(A, s->idx[d], v, r);
        s->idx = idx;
    }
    for (int i = 0; i < s->nbody; i++) subst_ts(A, s->body[i], v, r);
}

/* The variable s declares in its list's scope, if any */
static const Var *declares(const TStmt *s) { return s->k == TS_LET || s->k == TS_VLOAD ? s->v : NULL; }

static bool declared_in(const Var *v, TStmt *const *l, int n, const TStmt *skip) {
    for (int i = 0; i < n; i++) if (l[i] != skip && declares(l[i]) == v) return true;
    return false;
}

/* b[0..*n) tidied into a new list; *n its length */
static TStmt **tidy_ts(Arena *A, const KKernel *k, TStmt **b, int *n) {
    List out = {0};
    for (int i = 0; i < *n; i++) {
        TStmt *s = b[i];
        if (s->k == TS_FOR && s->nbody && s->body[0]->k == TS_LET && s->body[0]->e->k == EX_VAR &&
            s->body[0]->e->var == s->v) {   /* for (r ..) { let d = r; ... }: the loop counts in d */
            Var *d = s->body[0]->v;
            for (int j = 1; j < s->nbody; j++) subst_ts(A, s->body[j], s->v, e_var(A, d));
            s->v = d;
            s->body++;
            s->nbody--;
        }
        s->body = tidy_ts(A, k, s->body, &s->nbody);
        if (s->k == TS_LET && s->e->k == EX_VAR) {   /* a renaming */
            for (int j = i + 1; j < *n; j++) subst_ts(A, b[j], s->v, s->e);
            continue;
        }
        int64_t hi, step;
        if (s->k != TS_FOR || s->lo->k != EX_TID || !expr_is_const(s->e, &hi) || !expr_is_const(s->step, &step) ||
            step < hi) {
            push(A, &out, s);
            continue;
        }
        /* one trip, r = tid, where tid < hi */
        TStmt *let = ARENA_NEW(A, TStmt), **body = ARENA_ARRAY(A, TStmt *, s->nbody + 1);
        *let = (TStmt){.k = TS_LET, .v = s->v, .e = s->lo};
        body[0] = let;
        memcpy(body + 1, s->body, sizeof *body * (size_t)s->nbody);
        /* without a guard the body joins this list, unless a name it declares is declared here too */
        bool clash = k->block > hi;
        for (int j = 0; j <= s->nbody && !clash; j++) {
            const Var *v = declares(body[j]);
            clash = v && (declared_in(v, b, *n, s) || declared_in(v, out.s, out.n, NULL));
        }
        if (!clash) {
            for (int j = 0; j <= s->nbody; j++) push(A, &out, body[j]);
            continue;
        }
        Expr *guard = e_bin(A, EX_LT, s->lo, s->e);
        *s = (TStmt){.k = TS_IF, .e = guard, .body = body, .nbody = s->nbody + 1};
        push(A, &out, s);
    }
    *n = out.n;
    return out.n ? out.s : ARENA_ARRAY(A, TStmt *, 1);
}

/* b[0..*n) tidied into a new list; top: the kernel's own body (a barrier that opens or closes it orders
 * nothing) */
static KStmt **tidy_ks(Arena *A, const KKernel *k, KStmt **b, int *n, bool top) {
    KStmt **r = ARENA_ARRAY(A, KStmt *, *n + 1);
    int m = 0;
    for (int i = 0; i < *n; i++) {
        KStmt *c = ARENA_NEW(A, KStmt);
        *c = *b[i];
        if (c->k == KS_UFOR) c->kbody = tidy_ks(A, k, c->kbody, &c->nk, false);
        if (c->k == KS_PHASE) {
            TStmt **body = ARENA_ARRAY(A, TStmt *, c->nbody + 1);
            for (int j = 0; j < c->nbody; j++) body[j] = copy_ts(A, c->body[j]);
            c->body = tidy_ts(A, k, body, &c->nbody);
            bool after_barrier = m ? r[m - 1]->k == KS_PHASE && r[m - 1]->barrier : top;
            if (!c->nbody && (!c->barrier || after_barrier || (top && i + 1 == *n))) continue;
        }
        r[m++] = c;
    }
    *n = m;
    return r;
}

void kernel_cleanup(Arena *A, KProgram *kp) {
    for (int i = 0; i < kp->nk; i++) {
        KKernel *k = kp->kernels[i];
        k->body = tidy_ks(A, k, k->body, &k->nbody, true);
    }
}
