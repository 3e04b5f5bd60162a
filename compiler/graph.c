/* graph.c: graph IR helpers (nodes, shapes with broadcasting), the printer,
 * the verifier, and the one-layer filter behind `--layer N`. */
#include "graph.h"
#include <stdio.h>
#include <string.h>

const char *const graph_op_names[] = {GRAPH_OPS(X_NAME)};
const char *const fill_names[] = {FILL_KINDS(X_NAME)};

const char *kernel_base_name(Arena *A, const char *module) {
    const char *s = module;
    if (!strncmp(s, "model.", 6)) s += 6;
    if (!strncmp(s, "layers.", 7)) {
        s += 7;
        while (*s >= '0' && *s <= '9') s++;
        if (*s == '.') s++;
    }
    char *r = arena_strdup(A, s);
    for (char *p = r; *p; p++) if (*p == '.') *p = '_';
    return r;
}

GNode *graph_add(Arena *A, Graph *g, GraphOp op, const char *name) {
    arena_grow(A, (void **)&g->nodes, g->n, &g->cap, sizeof(GNode *));
    GNode *n = ARENA_NEW(A, GNode);
    n->id = g->n; n->op = op; n->name = name; n->dtype = DT_F32; n->layer = -1;
    g->nodes[g->n++] = n;
    return n;
}

int64_t gnode_elems(const GNode *n) { return dims_elems(n->dims, n->ndim); }

/* A dimension that is n (rows_n) only matches another n. */
bool shape_broadcast(const GNode *a, const GNode *b, int *ndim, int64_t *dims) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        bool na = ia == 0 && a->rows_n, nb = ib == 0 && b->rows_n;
        if (na || nb) {
            if (na != nb || ia != ib) return false;
            dims[i] = da;
            continue;
        }
        if (da != db && da != 1 && db != 1) return false;
        dims[i] = da == 1 ? db : da;
    }
    *ndim = nd;
    return true;
}

void shape_format(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

static void print_shape(Str *o, const GNode *n) {
    str_printf(o, "%s[", dtype_names[n->dtype]);
    for (int i = 0; i < n->ndim; i++) {
        if (i) str_printf(o, ", ");
        if (i == 0 && n->rows_n) str_printf(o, "n");
        else str_printf(o, "%lld", (long long)n->dims[i]);
    }
    str_printf(o, "]");
}

void graph_print(Str *o, const Graph *g) {
    const ModelConfig *c = g->cfg;
    if (c) {
        str_printf(o, "# graph IR: %s, %d layers, hidden %d, heads %d/%d (kv), head_dim %d, vocab %d; "
                   "n = tokens per call (<= %d), ctx %d, kv cache %s\n", c->architecture,
                   c->num_hidden_layers, c->hidden_size, c->num_attention_heads, c->num_key_value_heads, c->head_dim,
                   c->vocab_size, g->max_batch, g->max_ctx, dtype_names[g->kv_dtype]);
        if (g->one_layer)
            str_printf(o, "# decoder layer %d only: its input is hidden_states [n, %d], its output the layer's\n",
                       g->layer, c->hidden_size);
    } else {
        str_printf(o, "# graph IR of the expression: %s\n", g->source ? g->source : "?");
    }
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        str_printf(o, "%%%d = %s", n->id, graph_op_names[n->op]);
        if (n->op == G_WEIGHT) str_printf(o, " \"%s\"", n->name);
        str_printf(o, "(");
        for (int j = 0; j < n->nin; j++) str_printf(o, "%s%%%d", j ? ", " : "", n->in[j]->id);
        const char *sep = n->nin ? ", " : "";
        switch (n->op) {
        case G_RMSNORM:
            if (n->head_dim) str_printf(o, ", heads=%d, head_dim=%d", n->heads, n->head_dim);
            str_printf(o, ", eps=%g", n->eps);
            break;
        case G_ROPE: str_printf(o, ", heads=%d, head_dim=%d, %s", n->heads, n->head_dim, n->rope_desc); break;
        case G_KV_WRITE: str_printf(o, ", layer=%d, %s", n->layer, n->is_v ? "v" : "k"); break;
        case G_ATTENTION: str_printf(o, ", layer=%d, heads=%d, kv_heads=%d, head_dim=%d, causal", n->layer, n->heads,
                                     n->kv_heads, n->head_dim); break;
        case G_CONST: str_printf(o, "%.9g", n->value); break;
        case G_SOFTMAX: case G_ARGMAX: str_printf(o, ", dim=-1"); break;
        case G_TOPK: str_printf(o, ", k=%d, dim=-1", n->topk); break;
        case G_SDPA: str_printf(o, ", scale=%.9g%s", n->scale, n->causal ? ", causal" : ""); break;
        case G_INPUT: case G_WEIGHT:
            if (n->fill == FILL_UNIFORM) str_printf(o, "%suniform(%g, %g)", sep, n->fill_lo, n->fill_hi);
            else if (n->fill != FILL_NONE) str_printf(o, "%s%s", sep, fill_names[n->fill]);
            break;
        default: break;
        }
        str_printf(o, ") : ");
        if (n->op == G_KV_WRITE) str_printf(o, "()");
        else print_shape(o, n);
        if (n->op != G_WEIGHT) str_printf(o, "  # %s", n->name);
        str_printf(o, "\n");
    }
    if (g->next_token && g->top_k)
        str_printf(o, "return %%%d, %%%d, %%%d\n", g->logits->id, g->next_token->id, g->top_k->id);
    else if (g->next_token) str_printf(o, "return %%%d, %%%d\n", g->logits->id, g->next_token->id);
    else str_printf(o, "return %%%d\n", g->logits->id);
}

static bool same_shape(const GNode *n, int nd, const int64_t *dims) {
    if (n->ndim != nd) return false;
    for (int i = 0; i < nd; i++) if (n->dims[i] != dims[i]) return false;
    return true;
}

const char *graph_verify(Arena *A, const Graph *g) {
#define BAD(msg) return arena_printf(A, "%%%d: " msg, i)
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        if (n->id != i) return arena_printf(A, "node %d has id %d", i, n->id);
        if (n->ndim < 0 || n->ndim > MAX_DIMS) return arena_printf(A, "%%%d: %d dimensions", i, n->ndim);
        for (int j = 0; j < n->nin; j++)
            if (!n->in[j] || n->in[j]->id >= i)
                return arena_printf(A, "%%%d: operand %d is not defined before use", i, j);
        const GNode *a = n->nin > 0 ? n->in[0] : NULL, *b = n->nin > 1 ? n->in[1] : NULL;
        int64_t bd[MAX_DIMS];
        int bn;
        switch (n->op) {
        case G_LINEAR:
            if (b->op != G_WEIGHT || b->ndim != 2) BAD("linear weight is not a matrix");
            if (a->dims[a->ndim - 1] != b->dims[1])
                return arena_printf(A, "%%%d: linear input has %lld features, weight expects %lld", i,
                                    (long long)a->dims[a->ndim - 1], (long long)b->dims[1]);
            if (n->dims[n->ndim - 1] != b->dims[0]) BAD("linear output width");
            if (n->nin == 3 && (n->in[2]->ndim != 1 || n->in[2]->dims[0] != b->dims[0])) BAD("bias shape");
            break;
        case G_RMSNORM:
            if (n->head_dim ? !b || (int64_t)n->heads * n->head_dim != a->dims[a->ndim - 1] || b->dims[0] != n->head_dim
                            : b && b->dims[0] != a->dims[a->ndim - 1])
                BAD("norm weight does not match width");
            if (b && b->ndim != 1) BAD("norm weight is not a vector");
            break;
        case G_ADD: case G_MUL: case G_SUB: case G_DIV:
            if (!shape_broadcast(a, b, &bn, bd) || !same_shape(n, bn, bd) || n->rows_n != (a->rows_n || b->rows_n))
                BAD("operand shapes do not broadcast to the result");
            break;
        case G_ARGMAX:
            if (n->ndim != (a->ndim > 1 ? a->ndim - 1 : 1) ||
                memcmp(n->dims, a->dims, sizeof(int64_t) * (size_t)(a->ndim - 1)))
                BAD("argmax result shape");
            break;
        case G_TOPK: {
            /* a model's top_k: of the logits' first row (n rows, of which model_forward fills one) */
            bool first_row = a->rows_n && !n->rows_n && n->dims[0] == 1;
            if (n->ndim != a->ndim + 1 ||
                memcmp(n->dims + first_row, a->dims + first_row, sizeof(int64_t) * (size_t)(a->ndim - 1 - first_row)) ||
                n->dims[a->ndim - 1] != 2 || n->dims[a->ndim] != n->topk || n->topk < 1 ||
                n->topk > a->dims[a->ndim - 1])
                BAD("topk result shape");
            break;
        }
        case G_SILU: case G_SOFTMAX:
            if (!same_shape(n, a->ndim, a->dims)) BAD("result shape differs from the operand's");
            break;
        case G_MATMUL:
            if (a->ndim < 2 || b->ndim < 2 || a->dims[a->ndim - 1] != b->dims[b->ndim - 2])
                BAD("matmul inner dimensions");
            if (n->dims[n->ndim - 2] != a->dims[a->ndim - 2] || n->dims[n->ndim - 1] != b->dims[b->ndim - 1])
                BAD("matmul result shape");
            break;
        case G_SDPA: {
            const GNode *v = n->in[2];
            if (a->ndim < 2 || b->ndim < 2 || v->ndim < 2 || a->dims[a->ndim - 1] != b->dims[b->ndim - 1] ||
                b->dims[b->ndim - 2] != v->dims[v->ndim - 2])
                BAD("attention operand shapes");
            if (n->dims[n->ndim - 1] != v->dims[v->ndim - 1] || n->dims[n->ndim - 2] != a->dims[a->ndim - 2])
                BAD("attention result shape");
            break;
        }
        case G_CONST:
            if (n->ndim != 0) BAD("a constant is a scalar");
            break;
        case G_ROPE:
            if (n->head_dim % 2 || (int64_t)n->heads * n->head_dim != a->dims[1]) BAD("rope heads x head_dim != width");
            break;
        case G_ATTENTION:
            if (n->kv_heads <= 0 || n->heads % n->kv_heads) BAD("heads not a multiple of kv heads");
            break;
        default: break;
        }
    }
#undef BAD
    if (!g->logits) return "graph has no output";
    GraphOp lop = g->logits->op;
    if (lop == G_INPUT || lop == G_WEIGHT || lop == G_CONST) return "the output is a leaf";
    return NULL;
}

void graph_select_layer(Arena *A, Graph *g, int layer) {
    const ModelConfig *c = g->cfg;
    CHECK(c, "--layer needs a model graph");
    if (layer < 0 || layer >= c->num_hidden_layers)
        die_user(NULL, "--layer", "%d is out of range: the model has %d decoder layer%s (0..%d)", layer,
                 c->num_hidden_layers, c->num_hidden_layers == 1 ? "" : "s", c->num_hidden_layers - 1);
    const char *prefix = arena_printf(A, "model.layers.%d.", layer);
    size_t pl = strlen(prefix);
    GNode **keep = ARENA_ARRAY(A, GNode *, g->n + 1);
    int nk = 0;
    GNode *hidden = ARENA_NEW(A, GNode);
    hidden->op = G_INPUT; hidden->name = "hidden_states"; hidden->dtype = DT_F32; hidden->layer = -1;
    hidden->ndim = 2; hidden->rows_n = true; hidden->dims[1] = c->hidden_size; hidden->fill = FILL_RANDN;
    keep[nk++] = hidden;
    GNode *h_in = NULL;   /* the residual stream entering the layer */
    for (int i = 0; i < g->n; i++) {
        GNode *n = g->nodes[i];
        if (strncmp(n->name, prefix, pl)) continue;
        for (int j = 0; j < n->nin; j++) {
            GNode *x = n->in[j];
            if (!strncmp(x->name, prefix, pl)) continue;
            CHECK(!h_in || h_in == x, "layer %d reads %s and %s from outside", layer, h_in->name, x->name);
            h_in = x;
            n->in[j] = hidden;
        }
        keep[nk++] = n;
    }
    CHECK(h_in && nk > 1, "layer %d has no input", layer);
    for (int i = 0; i < nk; i++) keep[i]->id = i;
    g->nodes = keep; g->n = nk; g->cap = nk + 1;
    g->logits = keep[nk - 1];
    g->next_token = g->top_k = NULL;
    g->one_layer = true; g->layer = layer;
}
