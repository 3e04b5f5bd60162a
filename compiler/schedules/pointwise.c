/* pointwise.c: the flat schedule. Every output element is one thread
 * (elementwise ops, index maps: a nest with no reduction): thread
 * bid * block + tid computes element g of the parallel axes, flattened.
 * Tests: tests/test_ops.py (elementwise ops), tests/test_torch_expr.py. */
#include "schedules/schedule.h"

int flat_choose(const ScheduleChoice *c, TileKernel *k, TileKernel **out) {
    if (!c->leaf || c->leaf->k != LS_STORE) return 0;
    k->kind = SCHED_FLAT;
    k->body = *c->shape;
    k->block = c->kn->flat_block;
    k->grid = ceil_div(c->A, c->total, k->block);
    out[0] = k;
    return 1;
}
void flat_print(Str *o, const TileKernel *k) {
    str_printf(o, "\n  thread (bid*%d + tid) -> [", k->block);
    print_axes(o, k->body.par, k->body.npar);
    str_printf(o, "]\n");
}

TStmt *thread_element(KernelBuilder *B, int block, Expr *total, KList *body, Var **g, int cap) {
    Arena *A = B->A;
    *g = new_var(A, B->nvars, "g");
    TStmt *in = ts_if(A, lt(A, e_var(A, *g), total), cap);
    kl_phase(A, body, false, 2, ts_let(A, *g, E_ADD(A, E_MUL(A, bid(A), e_i(A, block)), tid(A))), in);
    return in;
}
TStmt *flat_element(KernelBuilder *B, const TileKernel *t, KList *body, Var **g, int extra) {
    const NestBody *nb = &t->body;
    TStmt *in = thread_element(B, t->block, product(B->A, nb->par, nb->npar), body, g, nb->npar + extra);
    in->nbody = decompose(B->A, in->body, nb->par, nb->npar, e_var(B->A, *g));
    return in;
}
/* if (g < total) { decompose; store } */
void flat_materialise(KernelBuilder *B, const TileKernel *t, KKernel *k, KList *body) {
    (void)k;
    Var *g;
    TStmt *in = flat_element(B, t, body, &g, 1);
    in->nbody += epi_stores(B->A, &t->body, NULL, NULL, in->body + in->nbody);
}
