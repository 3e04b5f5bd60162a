/* graph.c: graph IR printer and verifier. */
#include "graph.h"
#include <string.h>

const char *const graph_op_names[] = {
#define X(e, s) s,
    GRAPH_OPS(X)
#undef X
};

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
    str_printf(o, "# graph IR: %s, %d layers, hidden %d, heads %d/%d (kv), head_dim %d, vocab %d; n = tokens per call (<= %d), ctx %d\n",
               c->architecture, c->num_hidden_layers, c->hidden_size, c->num_attention_heads, c->num_key_value_heads,
               c->head_dim, c->vocab_size, g->max_batch, g->max_ctx);
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        str_printf(o, "%%%d = %s", n->id, graph_op_names[n->op]);
        if (n->op == G_WEIGHT) str_printf(o, " \"%s\"", n->name);
        str_printf(o, "(");
        for (int j = 0; j < n->nin; j++) str_printf(o, "%s%%%d", j ? ", " : "", n->in[j]->id);
        switch (n->op) {
        case G_RMSNORM: str_printf(o, ", eps=%g", n->eps); break;
        case G_ROPE: str_printf(o, ", heads=%d, head_dim=%d, %s", n->heads, n->head_dim, n->rope_desc); break;
        case G_KV_WRITE: str_printf(o, ", layer=%d, %s", n->layer, n->is_v ? "v" : "k"); break;
        case G_ATTENTION: str_printf(o, ", layer=%d, heads=%d, kv_heads=%d, head_dim=%d, causal", n->layer, n->heads, n->kv_heads, n->head_dim); break;
        default: break;
        }
        str_printf(o, ") : ");
        if (n->op == G_KV_WRITE) str_printf(o, "()");
        else print_shape(o, n);
        if (n->op != G_WEIGHT) str_printf(o, "  # %s", n->name);
        str_printf(o, "\n");
    }
    str_printf(o, "return %%%d\n", g->logits->id);
}

const char *graph_verify(Arena *A, const Graph *g) {
    for (int i = 0; i < g->n; i++) {
        const GNode *n = g->nodes[i];
        if (n->id != i) return arena_printf(A, "node %d has id %d", i, n->id);
        for (int j = 0; j < n->nin; j++)
            if (!n->in[j] || n->in[j]->id >= i) return arena_printf(A, "%%%d: operand %d is not defined before use", i, j);
        const GNode *a = n->nin > 0 ? n->in[0] : NULL, *b = n->nin > 1 ? n->in[1] : NULL;
        switch (n->op) {
        case G_LINEAR:
            if (b->op != G_WEIGHT || b->ndim != 2) return arena_printf(A, "%%%d: linear weight is not a matrix", i);
            if (a->dims[1] != b->dims[1]) return arena_printf(A, "%%%d: linear input has %lld features, weight expects %lld", i, (long long)a->dims[1], (long long)b->dims[1]);
            if (n->dims[1] != b->dims[0]) return arena_printf(A, "%%%d: linear output width", i);
            if (n->nin == 3 && (n->in[2]->ndim != 1 || n->in[2]->dims[0] != b->dims[0])) return arena_printf(A, "%%%d: bias shape", i);
            break;
        case G_RMSNORM:
            if (b->ndim != 1 || b->dims[0] != a->dims[1]) return arena_printf(A, "%%%d: norm weight does not match width", i);
            break;
        case G_ADD: case G_MUL:
            if (a->dims[1] != b->dims[1] || a->rows_n != b->rows_n) return arena_printf(A, "%%%d: operand shapes differ", i);
            break;
        case G_ROPE:
            if (n->head_dim % 2 || (int64_t)n->heads * n->head_dim != a->dims[1]) return arena_printf(A, "%%%d: rope heads x head_dim != width", i);
            break;
        case G_ATTENTION:
            if (n->kv_heads <= 0 || n->heads % n->kv_heads) return arena_printf(A, "%%%d: heads not a multiple of kv heads", i);
            break;
        default: break;
        }
    }
    if (!g->logits) return "graph has no output";
    return NULL;
}
