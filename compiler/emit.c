/* emit.c: what the C and CUDA emitters share (see emit.h). */
#include "emit.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ctype_of(DType d) {
    switch (d) {
    case DT_F32: return "float";
    case DT_F16: case DT_BF16: return "uint16_t";
    case DT_Q8_0: case DT_Q4_0: case DT_Q4_1: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: case DT_Q5_0: case DT_Q5_1:
        return "uint8_t";   /* blocks: runtime/kernels.h's ld_q* read them */
    case DT_I32: return "int32_t";
    case DT_COUNT: break;
    }
    UNREACHABLE();
}

static void var_name(Str *o, const Var *v) { str_printf(o, "%s_%d", v->name, v->id); }

/* Where a name holds "layers.N.", the layer N, and in *rest what follows it; else -1 and the whole name
 * after a leading "model.". Kernels shared by the layers and the host's per-layer tables use the rest. */
static int layer_of(const char *name, const char **rest) {
    const char *s = strncmp(name, "model.", 6) ? name : name + 6;
    for (const char *p = strstr(name, "layers."); p; p = strstr(p + 1, "layers.")) {
        const char *q = p + 7, *d = q;
        while (*d >= '0' && *d <= '9') d++;
        if ((p == name || p[-1] == '.') && d > q && *d == '.') { if (rest) *rest = d + 1; return atoi(q); }
    }
    if (rest) *rest = s;
    return -1;
}

/* A buffer's name as a C identifier (layer prefix dropped, upper case for macros); names that could meet
 * a kernel's own (n, tid, r3, smem0, t_12, o_) or a keyword get a suffix. */
static void ident_str(Str *o, const char *s, bool upper) {
    static const char *const taken[] = {"n", "pos", "tid", "bid", "grid", "lanebuf", "laneaddr", "int", "float",
                                        "char", "const", "if", "else", "for", "do", "while", "case", "default",
                                        "return", "static", "void", "long", "short", "signed", "unsigned", NULL};
    size_t start = o->len;
    if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z')) str_printf(o, upper ? "B_" : "b_");
    for (; *s; s++) {
        char ch = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ? *s : '_';
        if (ch == '_' && o->len > start && o->s[o->len - 1] == '_') continue;
        str_printf(o, "%c", upper && ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
    }
    while (o->len > start + 1 && o->s[o->len - 1] == '_') o->s[--o->len] = 0;
    const char *id = o->s + start, *u = strrchr(id, '_');
    bool clash = (u && u[1] && strspn(u + 1, "0123456789") == strlen(u + 1)) ||
                 ((id[0] == 'r' || !strncmp(id, "smem", 4)) && strspn(id + (id[0] == 'r' ? 1 : 4), "0123456789") ==
                  strlen(id + (id[0] == 'r' ? 1 : 4)));
    for (int i = 0; taken[i] && !clash; i++) clash = !strcmp(id, taken[i]);
    if (clash) str_printf(o, upper ? "_BUF" : "_buf");
}

static void ident(Str *o, const Buffer *b, bool upper) {
    const char *s;
    if (b->kind == BUF_KCACHE || b->kind == BUF_VCACHE) s = b->kind == BUF_KCACHE ? "k_cache" : "v_cache";
    else layer_of(b->name, &s);
    ident_str(o, s, upper);
}

/* Parameter p of k: its buffer's name, numbered where two parameters would share one. */
static void param_name(Str *o, const KKernel *k, int p) {
    Str a = {0}, b = {0};
    ident(&a, k->params[p], false);
    int same = 0;
    for (int j = 0; j < p; j++) {
        b.len = 0;
        ident(&b, k->params[j], false);
        same += !strcmp(a.s, b.s);
    }
    str_printf(o, "%s", a.s);
    if (same) str_printf(o, "_%d", same + 1);
    str_free(&a);
    str_free(&b);
}

/* Printing a cpu kernel's token-positions variant (emit_kernel_tokens): model_forward_batch's tokens each at its
 * own position and slot, in one call. pos + X (token X's position in a call of consecutive tokens) prints as
 * positions[X], a KV cache's row pos + X as kv_rows[X] (the row in the cache of all slots); any other use of pos
 * makes the variant impossible (failed). */
static struct { bool on, failed; } tokens_mode;

/* ---- the decode step's CUDA Graph (GPU targets): emit_program's kernels take pos from decode_pos where their
 * argument is -1; decode_step's grids read grid_pos for pos (the longest context's), and it holds only the
 * launches that run at n = 1 ---- */
static bool decode_pos_kernels, graph_grids;
/* a GPU target's model code: every launch followed by LAUNCH_CHECK (CUDA: LLMCC_CUDA_CHECK's check; cuda-emu: a
 * count of launches, so that a capture of the decode step counts its kernels as CUDA's does) */
static bool gpu_model;

/* e is pos + X or X + pos: X, else NULL */
static const Expr *pos_plus(const Expr *e) {
    if (e->k != EX_ADD) return NULL;
    if (e->a[0]->k == EX_PARAM && e->a[0]->i == P_POS) return e->a[1];
    if (e->a[1]->k == EX_PARAM && e->a[1]->i == P_POS) return e->a[0];
    return NULL;
}

static void lin_index(Str *o, const KKernel *k, const Buffer *b, Expr *const *idx, Target t) {
    /* row-major: ((i0 * d1 + i1) * d2 + i2) */
    for (int d = 1; d < b->ndim; d++) str_printf(o, "(");
    if (tokens_mode.on && (b->kind == BUF_KCACHE || b->kind == BUF_VCACHE)) {
        const Expr *x = pos_plus(idx[0]);
        if (!x) tokens_mode.failed = true;
        str_printf(o, "kv_rows[");
        emit_expr(o, k, x ? x : idx[0], t);
        str_printf(o, "]");
    } else emit_expr(o, k, idx[0], t);
    for (int d = 1; d < b->ndim; d++) {
        str_printf(o, " * %lldLL + ", (long long)b->dims[d]);
        emit_expr(o, k, idx[d], t);
        str_printf(o, ")");
    }
}

/* a pointer to b's element at idx: its parameter + (the linear index) */
static void elem_ptr(Str *o, const KKernel *k, const Buffer *b, Expr *const *idx, Target t) {
    param_name(o, k, kernel_param_index(k, b));
    str_printf(o, " + (");
    lin_index(o, k, b, idx, t);
    str_printf(o, ")");
}

/* a C float literal that reads back as the same f32 */
static void float_lit(Str *o, double v) {
    if (isinf(v)) { str_printf(o, v < 0 ? "(-INFINITY)" : "INFINITY"); return; }
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", (double)(float)v);
    str_printf(o, "%s%sf", buf, strpbrk(buf, ".en") ? "" : ".0");
}

void emit_expr(Str *o, const KKernel *k, const Expr *e, Target t) {
    const Expr *const *a = (const Expr *const *)e->a;
    switch (e->k) {
    case EX_FCONST: float_lit(o, e->f); return;
    case EX_ICONST: str_printf(o, "%lldLL", (long long)e->i); return;
    case EX_VAR: var_name(o, e->var); return;
    case EX_PARAM:
        if (tokens_mode.on && e->i == P_POS) tokens_mode.failed = true;
        str_printf(o, "%s", param_names[e->i]);
        return;
    case EX_TID: str_printf(o, "tid"); return;
    case EX_BID: str_printf(o, "bid"); return;
    case EX_REG: str_printf(o, t != TARGET_CUDA && !k->task ? "r%lld[tid]" : "r%lld", (long long)e->i); return;
    case EX_SLOAD:   /* a b16 array's element widened where the array says so (flash_attn's bf16 K/V tiles) */
        str_printf(o, k->smem[e->i].widen ? "bf16_to_f32(smem%lld[" : "smem%lld[", (long long)e->i);
        emit_expr(o, k, a[0], t);
        str_printf(o, k->smem[e->i].widen ? "])" : "]");
        return;
    case EX_VELEM: var_name(o, e->var); str_printf(o, "[%lld]", (long long)e->i); return;
    case EX_LOAD: {
        int p = kernel_param_index(k, e->buf);
        CHECK(p >= 0, "load of a non-parameter");
        /* f32 and i32 are indexed; the others widened (bf16, f16) or dequantized (q*) by a load function */
        const DType dt = e->buf->dtype;
        const bool fn = dt != DT_F32 && dt != DT_I32;
        if (fn) str_printf(o, "ld_%s(", dtype_names[dt]);
        else if (dt == DT_I32) str_printf(o, "(int64_t)");
        param_name(o, k, p);
        str_printf(o, fn ? ", " : "[");
        lin_index(o, k, e->buf, e->a, t);
        str_printf(o, fn ? ")" : "]");
        return;
    }
    case EX_ACC: UNREACHABLE();
    case EX_NEG: str_printf(o, "(-"); emit_expr(o, k, a[0], t); str_printf(o, ")"); return;
    case EX_EXP: str_printf(o, "expf("); emit_expr(o, k, a[0], t); str_printf(o, ")"); return;
    case EX_COS: str_printf(o, "cosf("); emit_expr(o, k, a[0], t); str_printf(o, ")"); return;
    case EX_SIN: str_printf(o, "sinf("); emit_expr(o, k, a[0], t); str_printf(o, ")"); return;
    case EX_RSQRT: str_printf(o, "(1.0f / sqrtf("); emit_expr(o, k, a[0], t); str_printf(o, "))"); return;
    case EX_TOF: str_printf(o, "((float)"); emit_expr(o, k, a[0], t); str_printf(o, ")"); return;
    case EX_TOI: str_printf(o, "((int64_t)"); emit_expr(o, k, a[0], t); str_printf(o, ")"); return;
    case EX_SELECT:
        str_printf(o, "("); emit_expr(o, k, a[0], t); str_printf(o, " ? "); emit_expr(o, k, a[1], t);
        str_printf(o, " : "); emit_expr(o, k, a[2], t); str_printf(o, ")");
        return;
    case EX_MIN: case EX_MAX:
        if (e->t == T_F32) str_printf(o, e->k == EX_MIN ? "fminf(" : "fmaxf(");
        else str_printf(o, e->k == EX_MIN ? "MINI(" : "MAXI(");
        emit_expr(o, k, a[0], t); str_printf(o, ", "); emit_expr(o, k, a[1], t); str_printf(o, ")");
        return;
    default:
        if (tokens_mode.on && pos_plus(e)) {
            str_printf(o, "(int64_t)positions[");
            emit_expr(o, k, pos_plus(e), t);
            str_printf(o, "]");
            return;
        }
        str_printf(o, "(");
        emit_expr(o, k, a[0], t);
        str_printf(o, " %s ", expr_names[e->k]);
        emit_expr(o, k, a[1], t);
        str_printf(o, ")");
        return;
    }
}

static void ind(Str *o, int d) { for (int i = 0; i < d; i++) str_printf(o, "    "); }

/* A vector load: vec consecutive elements, widened to f32, by the prelude's vload_<dtype>: CUDA reads them
 * with 4-, 8- or 16-byte loads (uint32_t / uint2 / uint4); C reads element by element but first checks
 * the alignment those loads need, so a schedule that would fault on the GPU aborts on the CPU. */
static void emit_vload(Str *o, const KKernel *k, const TStmt *s, Target t) {
    int esz = dtype_sizes[s->buf->dtype], bytes = s->vec * esz, chunk = bytes < 16 ? bytes : 16, nch = bytes / chunk;
    CHECK((bytes & 3) == 0 && nch * chunk == bytes && bytes <= 64, "vector of %d bytes", bytes);
    str_printf(o, "float "); var_name(o, s->v); str_printf(o, "[%d]; vload_%s(", s->vec, dtype_names[s->buf->dtype]);
    var_name(o, s->v); str_printf(o, ", ");
    param_name(o, k, kernel_param_index(k, s->buf));
    str_printf(o, ", "); lin_index(o, k, s->buf, s->idx, t);
    if (t != TARGET_CUDA) str_printf(o, ", %d, %d, \"%s\");\n", s->vec, chunk, k->name);
    else str_printf(o, ", %d);\n", s->vec);
}

/* A run of vector loads (b[0..n), CUDA): every vector's words loaded, then a zero that depends on all of them,
 * then each vector widened through it, so that the run is in flight before any arithmetic reads one of its
 * values (runtime/kernels.h vload_words) */
static void emit_vload_run(Str *o, const KKernel *k, TStmt *const *b, int n, int d, Target t) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        int words = s->vec * dtype_sizes[s->buf->dtype] / 4;
        CHECK(words == 1 || words == 2 || ((words & 3) == 0 && words <= 16), "vector of %d words", words);
        if (i) ind(o, d);
        str_printf(o, "uint32_t "); var_name(o, s->v); str_printf(o, "_w[%d]; vload_words(", words);
        var_name(o, s->v); str_printf(o, "_w, ");
        param_name(o, k, kernel_param_index(k, s->buf));
        str_printf(o, " + "); lin_index(o, k, s->buf, s->idx, t); str_printf(o, ", %d);\n", words);
    }
    ind(o, d);
    str_printf(o, "const uint32_t "); var_name(o, b[0]->v); str_printf(o, "_z = zero_after(");
    for (int i = 0; i < n; i++) { str_printf(o, i ? " ^ " : ""); var_name(o, b[i]->v); str_printf(o, "_w[0]"); }
    str_printf(o, ");\n");
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        ind(o, d);
        str_printf(o, "float "); var_name(o, s->v);
        str_printf(o, "[%d]; vload_widen_%s(", s->vec, dtype_names[s->buf->dtype]);
        var_name(o, s->v); str_printf(o, ", "); var_name(o, s->v); str_printf(o, "_w, %d, ", s->vec);
        var_name(o, b[0]->v); str_printf(o, "_z);\n");
    }
}

/* cp.async of s->vec bytes: CUDA issues cp.async.{ca,cg}.shared.global with src-size 0 when the predicate
 * is false (the destination is zero-filled and the source, then the buffer's base, is not read); C queues
 * the copy for the wait_group that completes it (cp_async_issue in the prelude). */
static void emit_cp_async(Str *o, const KKernel *k, const TStmt *s, int d, Target t) {
    int p = kernel_param_index(k, s->buf), esz = k->smem[s->smem].b16 ? 2 : 4;
    str_printf(o, "{\n");
    ind(o, d + 1);
    str_printf(o, "const int ok_ = ");
    if (s->e) emit_expr(o, k, s->e, t);
    else str_printf(o, "1");
    str_printf(o, ";\n");
    ind(o, d + 1); str_printf(o, "const int64_t so_ = "); emit_expr(o, k, s->sidx, t); str_printf(o, ";\n");
    Str pn = {0};
    param_name(&pn, k, p);
    ind(o, d + 1);
    str_printf(o, "const void *src_ = ok_ ? (const void *)(%s + ", pn.s);
    lin_index(o, k, s->buf, s->idx, t);
    str_printf(o, t != TARGET_CUDA ? ") : NULL;\n" : ") : (const void *)%s;\n", pn.s);
    str_free(&pn);
    ind(o, d + 1);
    if (t != TARGET_CUDA) {
        str_printf(o, "cp_async_issue(&cpq_, \"%s\", smem%d, sizeof smem%d, so_ * %d, src_, %d);\n", k->name, s->smem,
                   s->smem, esz, s->vec);
    } else {
        str_printf(o, "asm volatile(\"cp.async.%s.shared.global [%%0], [%%1], %d, %%2;\" :: "
                      "\"r\"((unsigned)__cvta_generic_to_shared(smem%d + so_)), \"l\"(src_), \"r\"(ok_ ? %d : 0) : "
                      "\"memory\");\n", s->vec == 16 ? "cg" : "ca", s->vec, s->smem, s->vec);
    }
    ind(o, d); str_printf(o, "}\n");
}

/* runtime/kernels.h's bdot forms: bdot_q4_1 (a block a round), bdot_q4_1_x4 (groups), bdot_q4_k_h (halves of
 * super-blocks) */
static void bdot_form(Str *o, const TStmt *s, const char *prefix) {
    str_printf(o, "%s%s", prefix, dtype_names[s->buf->dtype]);
    if (dtype_block[s->buf->dtype] == 256) str_printf(o, "_h");
    else if (s->group > 1) str_printf(o, "_x%d", s->group);
}
static bool bdot_pairs(const TStmt *a, const TStmt *b) {
    return b->k == TS_BDOT && b->buf->dtype == a->buf->dtype && b->group == a->group && b->gn == a->gn &&
           b->vec == a->vec && expr_equal(a->e, b->e) && expr_equal(a->lo, b->lo);
}
/* r += bdot_F(W, i, stride, x, nb); step ("", "_dot", "_load") and extra (the raw registers' and the start's
 * arguments) name the form's steps: the weight's flat element index of the round's first value, the activations
 * from the load's element on */
static void emit_bdot(Str *o, const KKernel *k, const TStmt *s, const char *step, const char *extra, Target t) {
    CHECK(s->e->k == EX_LOAD, "bdot of a non-load");
    bool load = !strcmp(step, "_load");
    if (!load) str_printf(o, t != TARGET_CUDA ? "r%d[tid] += " : "r%d += ", s->reg);
    bdot_form(o, s, "bdot_");
    str_printf(o, "%s(%s", step, load ? extra : "");
    if (!strcmp(step, "_dot")) str_printf(o, "%s", extra);
    else {
        param_name(o, k, kernel_param_index(k, s->buf));
        str_printf(o, ", ");
    }
    lin_index(o, k, s->buf, s->idx, t);
    str_printf(o, ", %lld, ", (long long)s->gn);
    if (!load) {
        elem_ptr(o, k, s->e->buf, s->e->a, t);
        str_printf(o, ", ");
    }
    emit_expr(o, k, s->lo, t);
    str_printf(o, "%s);\n", !strcmp(step, "_dot") ? ", bdot_z" : "");
}
static void emit_bdot_pair(Str *o, const KKernel *k, const TStmt *a, const TStmt *b, int d, Target t) {
    const TStmt *both[2] = {a, b};
    str_printf(o, "{ /* a pair: both rows' loads before either's products */\n");
    ind(o, d + 1); bdot_form(o, a, "bdot_raw_"); str_printf(o, " bdot_w0, bdot_w1;\n");
    for (int j = 0; j < 2; j++) {
        ind(o, d + 1); emit_bdot(o, k, both[j], "_load", j ? "&bdot_w1, " : "&bdot_w0, ", t);
    }
    ind(o, d + 1); str_printf(o, "const float bdot_z = bdot_zero_after(");
    for (int j = 0; j < 2; j++) {
        str_printf(o, j ? " ^ " : ""); bdot_form(o, a, "bdot_"); str_printf(o, "_hold(&bdot_w%d, ", j);
        emit_expr(o, k, a->lo, t); str_printf(o, ")");
    }
    str_printf(o, ");\n");
    for (int j = 0; j < 2; j++) {
        ind(o, d + 1); emit_bdot(o, k, both[j], "_dot", j ? "&bdot_w1, " : "&bdot_w0, ", t);
    }
    ind(o, d); str_printf(o, "}\n");
}

static void emit_tstmts(Str *o, const KKernel *k, TStmt **b, int n, int d, Target t) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        ind(o, d);
        switch (s->k) {
        case TS_LET:
            str_printf(o, "const int64_t "); var_name(o, s->v); str_printf(o, " = ");
            emit_expr(o, k, s->e, t); str_printf(o, ";\n");
            break;
        case TS_ASSIGN:
            str_printf(o, t != TARGET_CUDA && !k->task ? "r%d[tid] = " : "r%d = ", s->reg);
            emit_expr(o, k, s->e, t); str_printf(o, ";\n");
            break;
        case TS_SSTORE:
            str_printf(o, "smem%d[", s->smem); emit_expr(o, k, s->sidx, t);
            str_printf(o, k->smem[s->smem].f16 ? "] = f32_to_f16(" : k->smem[s->smem].b16 ? "] = f32_to_bf16("
                                                                                            : "] = ");
            emit_expr(o, k, s->e, t);
            str_printf(o, k->smem[s->smem].b16 ? ");\n" : ";\n");
            break;
        case TS_STORE: {
            int p = kernel_param_index(k, s->buf);
            /* i32: a b32 register's bits (tests/c/op_harness.c reads fragments back this way); bf16 (a KV cache):
             * the f32 value rounded to nearest even */
            const DType dt = s->buf->dtype;
            CHECK(dt == DT_F32 || dt == DT_I32 || dt == DT_BF16, "stores are f32, i32 or bf16");
            param_name(o, k, p);
            str_printf(o, "[");
            lin_index(o, k, s->buf, s->idx, t);
            str_printf(o, dt == DT_I32    ? "] = (int32_t)("
                          : dt != DT_BF16 ? "] = "
                          : s->truncate   ? "] = f32_to_bf16_truncated("
                                          : "] = f32_to_bf16(");
            emit_expr(o, k, s->e, t);
            str_printf(o, dt != DT_F32 ? ");\n" : ";\n");
            break;
        }
        case TS_IF: {
            /* an if whose body is one if is one condition (&& evaluates the inner one only where the outer holds) */
            const TStmt *in = s;
            str_printf(o, "if ("); emit_expr(o, k, s->e, t);
            while (in->nbody == 1 && in->body[0]->k == TS_IF) {
                in = in->body[0];
                str_printf(o, " && "); emit_expr(o, k, in->e, t);
            }
            str_printf(o, ") {\n");
            emit_tstmts(o, k, in->body, in->nbody, d + 1, t);
            ind(o, d); str_printf(o, "}\n");
            break;
        }
        case TS_FOR:
            str_printf(o, "for (int64_t "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->lo, t);
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " < "); emit_expr(o, k, s->e, t);
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " += "); emit_expr(o, k, s->step, t);
            str_printf(o, ") {\n");
            emit_tstmts(o, k, s->body, s->nbody, d + 1, t);
            ind(o, d); str_printf(o, "}\n");
            break;
        case TS_VLOAD: {
            int last = i;
            while (t == TARGET_CUDA && last + 1 < n && b[last + 1]->k == TS_VLOAD) last++;
            if (last > i) emit_vload_run(o, k, b + i, last - i + 1, d, t);
            else emit_vload(o, k, s, t);
            i = last;
            break;
        }
        case TS_GEMM:
            /* runtime/cpu_gemm.h; the tile's rows are gn apart */
            CHECK(t != TARGET_CUDA, "gemm in CUDA");
            str_printf(o, s->dot ? "cpu_gemm_dot(" : "cpu_gemm_packed(");
            emit_expr(o, k, s->e, t);
            str_printf(o, ", %lld, ", (long long)s->gn);
            emit_expr(o, k, s->lo, t);
            if (s->buf) {
                str_printf(o, ", ");
                elem_ptr(o, k, s->buf, s->idx, t);
                str_printf(o, ", %lld", (long long)s->buf->dims[s->buf->ndim - 1]);
                if (s->dot) str_printf(o, ", smem%d", s->gsmem[0]);
            } else {
                str_printf(o, ", smem%d, 0", s->gsmem[0]);
            }
            str_printf(o, ", smem%d, smem%d + ", s->gsmem[1], s->gsmem[2]);
            emit_expr(o, k, s->sidx, t);
            str_printf(o, ", %lld, ", (long long)s->gn);
            emit_expr(o, k, s->step, t);
            str_printf(o, " != 0);\n");
            break;
        case TS_PACK: {
            /* runtime/cpu_gemm.h: weight rows into the panel */
            CHECK(t != TARGET_CUDA, "pack in CUDA");
            const bool q = dtype_is_quant(s->buf->dtype);
            if (q) str_printf(o, "cpu_gemm_pack_q(%d, ", (int)(s->buf->dtype - DT_Q8_0));
            else str_printf(o, "cpu_gemm_pack_%s(", s->buf->dtype == DT_BF16 ? "bf16" : "f32");
            emit_expr(o, k, s->e, t);
            str_printf(o, ", %lld, ", (long long)s->gn);
            emit_expr(o, k, s->lo, t);
            str_printf(o, ", ");
            if (q) {   /* block types: the weight and its first element's index (the runtime finds the block) */
                param_name(o, k, kernel_param_index(k, s->buf));
                str_printf(o, ", ");
                lin_index(o, k, s->buf, s->idx, t);
            } else elem_ptr(o, k, s->buf, s->idx, t);
            str_printf(o, ", %lld, %lld, %lld, ", (long long)s->buf->dims[s->buf->ndim - 1], (long long)s->run_rows,
                       (long long)s->run_gap);
            if (s->buf->dtype == DT_BF16) str_printf(o, "%d, ", s->dot);
            str_printf(o, "smem%d, ", s->smem);
            emit_expr(o, k, s->sidx, t);
            str_printf(o, ");\n");
            break;
        }
        case TS_QDOT:
            /* runtime/cpu_quant.h: type dtype - q8_0 (q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, q5_0, q5_1); the
             * activations from the load's element on */
            CHECK(t != TARGET_CUDA && s->e->k == EX_LOAD, "qdot in CUDA or of a non-load");
            str_printf(o, "r%d = cpu_qdot%s(%d, ", s->reg, s->dot ? "_q8" : "", (int)(s->buf->dtype - DT_Q8_0));
            param_name(o, k, kernel_param_index(k, s->buf));
            str_printf(o, ", ");
            lin_index(o, k, s->buf, s->idx, t);
            str_printf(o, ", ");
            elem_ptr(o, k, s->e->buf, s->e->a, t);
            str_printf(o, ", ");
            emit_expr(o, k, s->lo, t);
            str_printf(o, "%s, %d);\n", s->dot ? ", acts_q8" : "", s->prefetch);
            break;
        case TS_DOT16: {
            /* runtime/cpu_dot16.h: the weight row from its element, the activation rows from the load's element
             * in the kernel's input rounded to bf16 (n rows of the buffer's row length) */
            CHECK(t == TARGET_CPU && s->e->k == EX_LOAD, "dot16 off the cpu target or of a non-load");
            const Buffer *x = s->e->buf;
            Str w = {0}, xr = {0};
            elem_ptr(&w, k, s->buf, s->idx, t);
            str_printf(&xr, "cpu_acts16(acts16, ");
            param_name(&xr, k, kernel_param_index(k, x));
            str_printf(&xr, ", n * %lldLL) + (", (long long)x->dims[1]);
            lin_index(&xr, k, x, s->e->a, t);
            str_printf(&xr, ")");
            if (s->gn == 1) {
                str_printf(o, "r%d = cpu_dot16_1(%s, %s, ", s->reg, w.s, xr.s);
                emit_expr(o, k, s->lo, t);
                str_printf(o, ", %d);\n", s->prefetch);
            } else {
                str_printf(o, "cpu_dot16_%d(%s, %s, %lldLL, ", (int)s->gn, w.s, xr.s, (long long)x->dims[1]);
                emit_expr(o, k, s->lo, t);
                str_printf(o, ", %d", s->prefetch);
                for (int j = 0; j < s->gn; j++) str_printf(o, ", &r%d", s->reg + j);
                str_printf(o, ");\n");
            }
            str_free(&w); str_free(&xr);
            break;
        }
        case TS_BDOT:
            /* a pair (the next statement a bdot of the same activations): both rows' loads before the products */
            if (i + 1 < n && bdot_pairs(s, b[i + 1])) emit_bdot_pair(o, k, s, b[++i], d, t);
            else emit_bdot(o, k, s, "", "", t);
            break;
        case TS_CP_ASYNC: emit_cp_async(o, k, s, d, t); break;
        case TS_COUNT: UNREACHABLE();
        }
    }
}

void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int d, Target t) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        ind(o, d);
        if (s->k == KS_PHASE) {
            /* a phase of one assignment or store is one line (no declaration needs the block's scope) */
            bool one = s->nbody == 1 && (s->body[0]->k == TS_ASSIGN || s->body[0]->k == TS_STORE ||
                                         s->body[0]->k == TS_SSTORE);
            if (k->task)
                str_printf(o, "%s", one ? "" : "{\n");
            else if (t != TARGET_CUDA)
                str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) %s", k->block,
                           one ? "/* phase */ " : "{ /* phase */\n");
            else if (!one) str_printf(o, "{ /* phase */\n");
            emit_tstmts(o, k, s->body, s->nbody, one ? 0 : d + 1, t);
            if (!one) { ind(o, d); str_printf(o, "}\n"); }
            if (t == TARGET_CUDA && k->nsmem && s->barrier) { ind(o, d); str_printf(o, "__syncthreads();\n"); }
        } else if (s->k == KS_MMA) {
            /* CUDA: C in place, then A, B; C: the warps' fragments A, B, C */
            const int *r[3] = {s->mc, s->ma, s->mb}, cnt[3] = {4, 4, 2}, ord[2][3] = {{0, 1, 2}, {1, 2, 0}};
            if (t == TARGET_CUDA) str_printf(o, "mma_m16n8k16_%s(", s->mf16 ? "f16" : "bf16");
            else str_printf(o, "for (int64_t w_ = 0; w_ < %d; w_ += 32) mma_warp(w_, %d, ", k->block, s->mf16);
            for (int g = 0; g < 3; g++)
                for (int j = 0; j < cnt[ord[t != TARGET_CUDA][g]]; j++)
                    str_printf(o, "%sr%d", g || j ? ", " : "", r[ord[t != TARGET_CUDA][g]][j]);
            str_printf(o, ");\n");
        } else if (s->k == KS_LDMATRIX) {
            if (t == TARGET_CUDA) {
                str_printf(o, "ldmatrix_x%d(", s->nmat);
                for (int j = 0; j < s->nmat; j++) str_printf(o, "r%d, ", s->ldst[j]);
                str_printf(o, "smem%d + (", s->lsmem);
                emit_expr(o, k, s->laddr, t);
                str_printf(o, "));\n");
            } else {
                str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) laneaddr[tid] = ", k->block);
                emit_expr(o, k, s->laddr, t);
                str_printf(o, "; /* ldmatrix */\n");
                ind(o, d);
                str_printf(o, "for (int64_t w_ = 0; w_ < %d; w_ += 32) ldmatrix_warp(\"%s\", w_, "
                              "smem%d, %d, laneaddr, %d", k->block, k->name, s->lsmem, k->smem[s->lsmem].size, s->nmat);
                for (int j = 0; j < 4; j++) str_printf(o, j < s->nmat ? ", r%d" : ", NULL", s->ldst[j]);
                str_printf(o, ");\n");
            }
        } else if (s->k == KS_CP_COMMIT) {
            str_printf(o, t == TARGET_CUDA ? "asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
                                           : "cp_async_commit(&cpq_);\n");
        } else if (s->k == KS_CP_WAIT) {
            str_printf(o, t == TARGET_CUDA ? "asm volatile(\"cp.async.wait_group %d;\" ::: \"memory\");\n"
                                           : "cp_async_wait(&cpq_, %d);\n", s->wait_n);
        } else if (s->k == KS_SHFL) {
            static const char *const cuda_fn[] = {"__shfl_down_sync", "__shfl_up_sync", "__shfl_xor_sync",
                                                  "__shfl_sync"};
            if (t == TARGET_CUDA) {
                str_printf(o, "r%d = %s(0xffffffffu, r%d, (%s)(", s->dst, cuda_fn[s->shfl], s->src,
                           s->shfl <= SHFL_UP ? "unsigned" : "int");
                emit_expr(o, k, s->arg, t);
                str_printf(o, "));\n");
                continue;
            }
            /* shfl_block (the prelude): every lane publishes, then reads its source lane's; the delta, mask or lane
             * is uniform, so it is computed once */
            str_printf(o, "shfl_block(r%d, r%d, lanebuf, %d, SHFL_%s, ", s->dst, s->src, k->block, shfl_names[s->shfl]);
            emit_expr(o, k, s->arg, t);
            str_printf(o, ");\n");
        } else if (s->k == KS_ULET) {
            str_printf(o, "const int64_t "); var_name(o, s->v); str_printf(o, " = ");
            emit_expr(o, k, s->init, t); str_printf(o, "; /* uniform */\n");
        } else {
            str_printf(o, "for (int64_t "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->init, t);
            str_printf(o, "; "); emit_expr(o, k, s->cond, t);
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->update, t);
            str_printf(o, ") { /* uniform */\n");
            emit_kstmts(o, k, s->kbody, s->nk, d + 1, t);
            ind(o, d); str_printf(o, "}\n");
        }
    }
}

/* One parameter a line, named after the first instance's buffer, with its dtype and shape */
void emit_params(Str *o, const KKernel *k, Target t) {
    str_printf(o, "int64_t n, int64_t pos");
    if (tokens_mode.on)
        str_printf(o, ",\n        const int *restrict positions /* [n] each token's position */,\n"
                      "        const int64_t *restrict kv_rows /* [n] its KV rows: slot * layers * ctx + position */");
    for (int i = 0; i < k->nparams; i++) {
        const Buffer *b = k->params[i];
        str_printf(o, ",\n        %s%s *%s ", k->param_written[i] ? "" : "const ", ctype_of(b->dtype),
                   t != TARGET_CUDA ? "restrict" : "__restrict__");
        param_name(o, k, i);
        str_printf(o, " /* %s[", dtype_names[b->dtype]);
        for (int d = 0; d < b->ndim; d++) str_printf(o, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
        str_printf(o, "] */");
    }
}

/* ---- host side ---- */
void emit_launch_guard(Str *o, const KLaunch *l) {
    if (l->run_if == 1) str_printf(o, "if ((int64_t)n > %dLL) ", l->min_n);
    else if (l->run_if == 2) str_printf(o, "if ((int64_t)n <= %dLL) ", l->min_n);
}

static const char *pdt(DType d) {
    static const char *const n[DT_COUNT] = {[DT_F32] = "PDT_F32", [DT_F16] = "PDT_F16", [DT_BF16] = "PDT_BF16",
                                            [DT_I32] = "PDT_I32", [DT_Q8_0] = "PDT_Q8_0", [DT_Q4_0] = "PDT_Q4_0",
                                            [DT_Q4_1] = "PDT_Q4_1", [DT_Q4_K] = "PDT_Q4_K", [DT_Q5_K] = "PDT_Q5_K",
                                            [DT_Q6_K] = "PDT_Q6_K", [DT_Q5_0] = "PDT_Q5_0", [DT_Q5_1] = "PDT_Q5_1"};
    return n[d];
}

/* What the host code calls the buffers: activations by their ACT_ offset macros, constants by their
 * deduplicated arrays (every layer's rotary inv_freq is one), weights by their fields (LayerWeights for a
 * decoder layer's, struct Model for the others). */
typedef struct {
    Arena A;
    int nid;                   /* buffer ids are below */
    const char **act, **field; /* by buffer id: an activation's macro suffix, a weight's field */
    int *cidx, *layer;         /* by buffer id: a constant's array, a weight's layer (-1: the model's) */
    const Buffer **cfirst;     /* by array: its first buffer */
    int nconst, nlayers;
    const Buffer **lfield; int nlfield;   /* LayerWeights: the first buffer of each field */
} Names;

static const char *ident_a(Arena *A, const Buffer *b, bool upper) {
    Str s = {0};
    ident(&s, b, upper);
    const char *r = arena_strdup(A, s.s);
    str_free(&s);
    return r;
}

static void name_act(Names *nm, const Buffer *b, const Buffer **named, int *nnamed) {
    if (b->kind != BUF_ACT || nm->act[b->id]) return;
    const char *base = ident_a(&nm->A, b, true), *name = base;
    for (int k = 2;; k++) {   /* a name keeps one offset: another offset takes the next number */
        int j = 0;
        while (j < *nnamed && strcmp(nm->act[named[j]->id], name)) j++;
        if (j == *nnamed || named[j]->act_offset == b->act_offset) break;
        name = arena_printf(&nm->A, "%s_%d", base, k);
    }
    nm->act[b->id] = name;
    named[(*nnamed)++] = b;
}

static void names_init(Names *nm, const KProgram *kp) {
    const TProgram *tp = kp->tp;
    memset(nm, 0, sizeof *nm);
    for (int i = 0; i < tp->nbufs; i++) nm->nid = tp->bufs[i]->id >= nm->nid ? tp->bufs[i]->id + 1 : nm->nid;
    nm->act = ARENA_ARRAY(&nm->A, const char *, nm->nid);
    nm->field = ARENA_ARRAY(&nm->A, const char *, nm->nid);
    nm->cidx = ARENA_ARRAY(&nm->A, int, nm->nid);
    nm->layer = ARENA_ARRAY(&nm->A, int, nm->nid);
    nm->cfirst = ARENA_ARRAY(&nm->A, const Buffer *, tp->nbufs);
    nm->lfield = ARENA_ARRAY(&nm->A, const Buffer *, tp->n_weights + 1);
    const Buffer **named = ARENA_ARRAY(&nm->A, const Buffer *, tp->nbufs);
    int nnamed = 0;
    for (int i = 0; i < kp->nl; i++)
        for (int j = 0; j < kp->launches[i].k->nparams; j++) name_act(nm, kp->launches[i].args[j], named, &nnamed);
    if (tp->next_token) name_act(nm, tp->next_token, named, &nnamed);
    if (tp->top_k) name_act(nm, tp->top_k, named, &nnamed);
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
        const char *rest;
        int l = layer_of(b->name, &rest);
        nm->field[b->id] = ident_a(&nm->A, b, false);
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
            Str f = {0};
            ident_str(&f, strncmp(b->name, "model.", 6) ? b->name : b->name + 6, false);
            static const char *const own[] = {"w", "c", "act", "kc", "vc", "logits", "host_logits", "ids", "work",
                                               "ctx", "wbytes", "kvbytes", "actbytes", "wdev", "layers", "slots",
                                               "slot_off", NULL};
            bool clash = false;
            for (int j = 0; own[j]; j++) clash |= !strcmp(f.s, own[j]);
            nm->field[b->id] = arena_printf(&nm->A, "%s%s", clash ? "w_" : "", f.s);
            str_free(&f);
        }
        if (l >= 0 && f == nm->nlfield) nm->lfield[nm->nlfield++] = b;
        nm->layer[b->id] = l;
        if (l + 1 > nm->nlayers) nm->nlayers = l + 1;
    }
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

/* Strings of a model-level weight's field could meet another's: they are checked when the struct is printed. */
static void host_arg(Str *o, const Names *nm, const Buffer *b, int seg, ArgsMode mode) {
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

void emit_launch_open(Str *o, const KLaunch *l, const char *mod, bool cuda, bool team, int d) {
    ind(o, d); emit_launch_guard(o, l);
    str_printf(o, "{ /* %s */\n", mod);
    ind(o, d + 1); str_printf(o, "int64_t grid = "); emit_host_expr(o, l->grid); str_printf(o, ";\n");
    if (team) { ind(o, d + 1); str_printf(o, "#pragma omp parallel\n"); }
    ind(o, d + 1);
    if (cuda) str_printf(o, "%s<<<(unsigned)grid, %d, 0, STREAM>>>(n, pos", l->k->name, l->k->block);
    else str_printf(o, "%s(grid, n, pos", l->k->name);
}

/* One launch at indent d; seg >= 0: it runs in the body of decoder layer seg (l, L), else literal. Arguments
 * wrap at 120 columns; mode: host_arg's (ARGS_TOKENS: the kernel's _tokens variant, with positions, kv_rows). */
static void emit_launch(Str *o, const Names *nm, const KLaunch *l, int seg, bool cuda, int d, ArgsMode mode) {
    const char *mod = l->module;
    if (seg >= 0) layer_of(mod, &mod);
    emit_launch_open(o, l, mod, cuda, false, d);
    if (mode == ARGS_TOKENS) {   /* emit_launch_open's call, renamed */
        size_t call = strlen(l->k->name) + strlen("(grid, n, pos");
        CHECK(!cuda && !l->run_if && o->len >= call && !strncmp(o->s + o->len - call, l->k->name, strlen(l->k->name)),
              "a _tokens launch of %s on the gpu or under a guard", l->k->name);
        o->len -= call;
        str_printf(o, "%s_tokens(grid, n, pos, positions, kv_rows", l->k->name);
    }
    size_t line = o->len;
    while (o->s[line - 1] != '\n') line--;
    for (int j = 0; j < l->k->nparams; j++) {
        Str a = {0};
        host_arg(&a, nm, l->args[j], seg, mode);
        if (o->len - line + a.len + 4 > 120) { str_printf(o, ",\n"); line = o->len; ind(o, d + 3); }
        else str_printf(o, ", ");
        str_printf(o, "%s", a.s);
        str_free(&a);
    }
    str_printf(o, ");\n");
    if (cuda || gpu_model) {   /* LLMCC_CUDA_CHECK=1: the kernel and its graph op named where it fails (kernels.h) */
        ind(o, d + 1);
        str_printf(o, "LAUNCH_CHECK(\"%s\", \"%s\", %s);\n", l->k->name, mod, seg >= 0 ? "l" : "-1");
    }
    ind(o, d); str_printf(o, "}\n");
}

static void put_indented(Str *o, const char *text, int d) {
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        ind(o, d);
        str_append(o, p, (size_t)(e - p + 1));
        p = e + 1;
    }
}

/* The text most of a run's layers share at position p: their index in the run */
static int common_text(Str *const *txt, int nseg, int cnt, int p) {
    int best = 0, bestn = 0;
    for (int g = 0; g < nseg; g++) {
        int c = 0;
        for (int h = 0; h < nseg; h++) c += !strcmp((*txt)[g * cnt + p].s, (*txt)[h * cnt + p].s);
        if (c > bestn) { best = g; bestn = c; }
    }
    return best;
}

/* Layers lay0 + lo .. lay0 + hi - 1 of a run (txt: cnt launches per layer) as one loop; a position where
 * some layers' launch differs holds each variant under if (l == ...), the common one under else. */
static void emit_layer_loop(Str *o, Str *txt, int lay0, int cnt, int lo, int hi) {
    str_printf(o, "    for (int l = %d; l < %d; l++) { /* decoder layers %d..%d */\n", lay0 + lo, lay0 + hi, lay0 + lo,
               lay0 + hi - 1);
    bool usesL = false;
    for (int i = lo * cnt; i < hi * cnt; i++) usesL |= strstr(txt[i].s, "L->") != NULL;
    if (usesL) str_printf(o, "        const LayerWeights *L = &m->layers[l];\n");
    Str *run = txt + lo * cnt;
    for (int p = 0; p < cnt; p++) {
        int best = common_text(&run, hi - lo, cnt, p), opened = 0;
        for (int g = 0; g < hi - lo; g++) {
            const char *t = run[g * cnt + p].s;
            bool seen = !strcmp(t, run[best * cnt + p].s);
            for (int h = 0; h < g && !seen; h++) seen = !strcmp(t, run[h * cnt + p].s);
            if (seen) continue;
            str_printf(o, "        %sif (", opened++ ? "} else " : "");
            for (int h = g, first = 1; h < hi - lo; h++)
                if (!strcmp(t, run[h * cnt + p].s)) {
                    str_printf(o, "%sl == %d", first ? "" : " || ", lay0 + lo + h);
                    first = 0;
                }
            str_printf(o, ") { /* this layer's launch differs */\n");
            put_indented(o, t, 3);
        }
        if (!opened) { put_indented(o, run[best * cnt + p].s, 2); continue; }
        str_printf(o, "        } else {\n");
        put_indented(o, run[best * cnt + p].s, 3);
        str_printf(o, "        }\n");
    }
    str_printf(o, "    }\n");
}

/* whether a launch runs in a one-token call (not one of the alternatives for more tokens): decode_step's
 * launches, model_info.decode_launches, decode_weight_bytes' */
static bool runs_at_one_token(const KLaunch *l) {
    return !(l->run_if == 1 && l->min_n >= 1) && !(l->run_if == 2 && l->min_n < 1);
}

/* ---- model_forward_batch: which launches run per token ---- */
static bool expr_reads_pos(const Expr *e) { return expr_reads_param(e, P_POS); }
static bool tstmts_read_pos(TStmt *const *b, int n) {
    for (int i = 0; i < n; i++) {
        const Expr *e[TS_MAX_EXPRS];
        for (int j = 0, ne = ts_exprs(b[i], e); j < ne; j++) if (expr_reads_pos(e[j])) return true;
        if (tstmts_read_pos(b[i]->body, b[i]->nbody)) return true;
    }
    return false;
}
static bool kstmts_read_pos(KStmt *const *b, int n) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        if (tstmts_read_pos(s->body, s->nbody) || expr_reads_pos(s->arg) || expr_reads_pos(s->init) ||
            expr_reads_pos(s->cond) || expr_reads_pos(s->update) || expr_reads_pos(s->laddr) ||
            kstmts_read_pos(s->kbody, s->nk))
            return true;
    }
    return false;
}

void emit_pos_prologue(Str *o, const KKernel *k) {
    if (decode_pos_kernels && kstmts_read_pos(k->body, k->nbody))
        str_printf(o, "    if (pos < 0) pos = decode_pos; /* the decode step's CUDA Graph: the step's position */\n");
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
                        expr_reads_pos(l->grid) || kstmts_read_pos(l->k->body, l->k->nbody));
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

typedef enum { FWD_ONE, FWD_BATCH } FwdMode;

/* How model_forward_batch runs a launch: once for all the tokens (rows independent of pos and of the caches),
 * once through its kernel's _tokens variant (a cpu kernel whose only uses of pos are the tokens' positions and
 * KV rows: RoPE and the cache writes of the q/k/v projections), or in a loop over the tokens (attention, and
 * where no _tokens variant exists) */
typedef enum { BATCH_ONCE, BATCH_TOKENS, BATCH_PER_TOKEN } BatchWay;
static bool has_tokens_variant(const KKernel *k);
static BatchWay batch_way(const KLaunch *l) {
    if (!launch_per_token(l)) return BATCH_ONCE;
    if (l->k->task && !uses_kind(l, BUF_WORK) && !expr_reads_pos(l->grid) && has_tokens_variant(l->k))
        return BATCH_TOKENS;
    return BATCH_PER_TOKEN;
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
/* run_if as emitted: in model_forward_batch a launch that runs once for all the tokens drops its guard */
static int emitted_run_if(const KLaunch *l, FwdMode mode);
static bool launches_conflict(const KLaunch *a, const KLaunch *b, FwdMode mode) {
    int ra = emitted_run_if(a, mode), rb = emitted_run_if(b, mode);
    /* alternatives: never both run (the same n: the tail has its own) */
    if (ra && rb && ra != rb && a->min_n == b->min_n && a->tail == b->tail) return false;
    for (int i = 0; i < a->k->nparams; i++)
        for (int j = 0; j < b->k->nparams; j++)
            if ((a->k->param_written[i] || b->k->param_written[j]) && mem_overlap(a->args[i], b->args[j]))
                return true;
    return false;
}

/* One launch of the plan at indent 0, in model_forward_batch in a loop over the tokens where it runs per token.
 * In model_forward_batch every launch takes the schedule for decode (n <= min_n: gemv, cpu_rows; emit_forward
 * leaves the others out), so each token's row is computed as a call with it alone computes it. */
static void emit_unit(Str *o, const Names *nm, const KLaunch *launch, int seg, bool cuda, FwdMode mode,
                      bool barrier) {
    str_append(o, "", 0);
    if (barrier) str_printf(o, "#pragma omp barrier /* the launches since the last one wrote what this one uses */\n");
    BatchWay way = mode == FWD_BATCH ? batch_way(launch) : BATCH_ONCE;
    bool per_token = way == BATCH_PER_TOKEN;
    if (per_token)
        str_printf(o, "for (int t = 0; t < n; t++) { /* each token: n = 1 at its position, its slot's KV cache */\n"
                      "    const int n = 1, pos = positions[t];\n");
    KLaunch l = *launch;
    l.run_if = emitted_run_if(&l, mode);
    emit_launch(o, nm, &l, seg, cuda, per_token,
                per_token ? ARGS_PER_TOKEN : way == BATCH_TOKENS ? ARGS_TOKENS : ARGS_CALL);
    if (per_token) str_printf(o, "}\n");
}
/* Whether model_forward_batch runs l: the decode schedules (n <= min_n) for all, so that a token in a batch is
 * computed as it is alone (a launch in a loop over the tokens keeps its guard, for n = 1: it is left out where
 * that never holds) */
static bool in_batch(const KLaunch *l) {
    return !kernel_is_sampling(l) && !(l->run_if == 1 && (batch_way(l) != BATCH_PER_TOKEN || l->min_n >= 1));
}
/* whether this build has batched decoding (else model_forward_batch returns -1) */
static bool program_batchable(const KProgram *kp) {
    for (int i = 0; i < kp->nl; i++)
        if (in_batch(&kp->launches[i]) && !batchable(&kp->launches[i])) return false;
    return true;
}
static int emitted_run_if(const KLaunch *l, FwdMode mode) {
    /* batchable: the decode schedule (a loop's launches keep their guard, for n = 1) */
    return mode == FWD_BATCH && batch_way(l) != BATCH_PER_TOKEN ? 0 : l->run_if;
}

/* model_forward's launches (model_forward_batch's with FWD_BATCH). The decoder layers run the same kernels: a
 * run of consecutive layers with as many launches each is one loop over l, its launches printed once with
 * L = &m->layers[l], where they bind the same activations and the layer's weights and KV cache. A layer at either
 * end of the run whose launches differ in more than a quarter of the positions (layer 0 gathers the embedding,
 * and its buffers may sit elsewhere in the arena) is printed on its own, as is a layer with another launch count.
 * The tail (graph.h) runs with its own n and pos: the last row (model_forward) or every row (batch). Returns
 * false where a launch is not batchable: model_forward_batch then returns -1. */
static bool emit_forward(Str *o, const Names *nm, const KProgram *kp, bool cuda, bool team, FwdMode mode) {
    int n = 0, *lay = malloc(sizeof(int) * (size_t)(kp->nl + 1)), *at = malloc(sizeof(int) * (size_t)(kp->nl + 1));
    bool *tail = calloc((size_t)kp->nl + 1, sizeof(bool)), ok = true;
    Str *txt = calloc((size_t)kp->nl + 1, sizeof(Str)), *lit = calloc((size_t)kp->nl + 1, sizeof(Str));
    for (int i = 0; i < kp->nl; i++) {
        const KLaunch *l = &kp->launches[i];
        if (kernel_is_sampling(l) || (mode == FWD_BATCH && !in_batch(l)) || (graph_grids && !runs_at_one_token(l)))
            continue;
        int ly = layer_of(l->module, NULL);
        if (mode == FWD_BATCH && !batchable(l)) ok = false;
        CHECK(!n || !tail[n - 1] || l->tail, "%s after the model's tail", l->module);
        at[n] = i; lay[n] = ly; tail[n] = l->tail;
        n++;
    }
    /* team: the barriers; since[0 .. nsince) the launches since the last one */
    int *since = malloc(sizeof(int) * (size_t)(n + 1)), nsince = 0;
    for (int u = 0; ok && u < n; u++) {
        const KLaunch *l = &kp->launches[at[u]];
        bool barrier = false;
        for (int v = 0; team && v < nsince && !barrier; v++)
            barrier = launches_conflict(&kp->launches[since[v]], l, mode);
        if (barrier) nsince = 0;
        since[nsince++] = at[u];
        emit_unit(&txt[u], nm, l, lay[u], cuda, mode, barrier);
        emit_unit(&lit[u], nm, l, -1, cuda, mode, barrier);
    }
    free(since);
    bool in_tail = false;
    for (int s = 0; ok && s < n;) {
        int e = s;
        while (e < n && lay[e] == lay[s]) e++;
        int cnt_l = e - s, nseg = 1;   /* the run: layers lay[s] .. lay[s] + nseg - 1, cnt_l launches each */
        while (lay[s] >= 0 && s + (nseg + 1) * cnt_l <= n) {
            int t = s + nseg * cnt_l;
            bool same = lay[t] == lay[s] + nseg && (t + cnt_l == n || lay[t + cnt_l] != lay[t]);
            for (int j = t; same && j < t + cnt_l; j++) same = lay[j] == lay[t];
            if (!same) break;
            nseg++;
        }
        int lo = 0, hi = nseg, *diff = calloc((size_t)nseg, sizeof(int));
        Str *run = txt + s;
        for (int p = 0; p < cnt_l; p++) {
            int best = common_text(&run, nseg, cnt_l, p);
            for (int g = 0; g < nseg; g++) diff[g] += strcmp(run[g * cnt_l + p].s, run[best * cnt_l + p].s) != 0;
        }
        while (hi - lo > 1 && diff[lo] * 4 > cnt_l) lo++;
        while (hi - lo > 1 && diff[hi - 1] * 4 > cnt_l) hi--;
        free(diff);
        if (lay[s] < 0 || hi - lo < 2) lo = hi = nseg;
        for (int g = 0; g < nseg; g++) {
            if (g == lo) emit_layer_loop(o, run, lay[s], cnt_l, lo, hi);
            if (g >= lo && g < hi) continue;
            if (lay[s] >= 0) str_printf(o, "    /* layer %d: its launches differ from the loop's */\n", lay[s] + g);
            for (int j = s + g * cnt_l; j < s + (g + 1) * cnt_l; j++) {
                if (tail[j] && !in_tail) {
                    in_tail = true;
                    if (mode == FWD_ONE)
                        str_printf(o, "    { /* the tail: the last token's logits, n = 1 row from row pos = n - 1 */\n"
                                      "    const int tail_row = n - 1;\n    const int n = 1, pos = tail_row;\n%s",
                                   graph_grids ? "    const int grid_pos = pos;\n    (void)grid_pos;\n" : "");
                    else str_printf(o, "    { /* the tail: every token's logits, n rows from row pos = 0 */\n");
                }
                put_indented(o, lit[j].s, 1);
            }
        }
        s += nseg * cnt_l;
    }
    if (in_tail) str_printf(o, "    }\n");
    for (int i = 0; i < n; i++) { str_free(&txt[i]); str_free(&lit[i]); }
    free(txt); free(lit); free(lay); free(at); free(tail);
    return ok;
}

void emit_host_expr(Str *o, const Expr *e) {
    /* grids use only n, pos and integer arithmetic */
    switch (e->k) {
    case EX_ICONST: str_printf(o, "%lldLL", (long long)e->i); return;
    case EX_PARAM: str_printf(o, "(int64_t)%s", graph_grids && e->i == P_POS ? "grid_pos" : param_names[e->i]); return;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MOD:
        str_printf(o, "("); emit_host_expr(o, e->a[0]); str_printf(o, " %s ", expr_names[e->k]);
        emit_host_expr(o, e->a[1]); str_printf(o, ")");
        return;
    case EX_MIN: case EX_MAX:
        str_printf(o, "(("); emit_host_expr(o, e->a[0]); str_printf(o, ") %s (", e->k == EX_MIN ? "<" : ">");
        emit_host_expr(o, e->a[1]); str_printf(o, ") ? ("); emit_host_expr(o, e->a[0]); str_printf(o, ") : (");
        emit_host_expr(o, e->a[1]); str_printf(o, "))");
        return;
    default: CHECK(0, "grid expression uses %s", expr_names[e->k]);
    }
}

/* What the kernels call beyond C is in runtime/kernels.h; a model's host code includes runtime/model_api.h
 * first, for the host side there. */
void emit_prelude(Str *o, const KProgram *kp, Target t, const char *api_header) {
    (void)kp;
    if (api_header)
        str_printf(o, t == TARGET_CUDA ? "extern \"C\" {\n#include \"%s\"\n}\n" : "#include \"%s\"\n", api_header);
    str_printf(o, "#include \"runtime/kernels.h\"\n");
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

void emit_kernel_name(Str *o, const KKernel *k) { str_printf(o, "%s%s", k->name, tokens_mode.on ? "_tokens" : ""); }

/* k's token-positions variant (cpu tasks; tokens_mode) into o; false where k uses pos otherwise */
static bool emit_kernel_tokens(Str *o, const KKernel *k) {
    /* cpu_rows only: there pos enters as the graph's pos + t, t the token (cpu_attn's causal bound pos + t + 1
     * is not a token's position); not with 8-bit activations (cpu_acts_q8 keeps one row per thread, which the
     * token loop in each task would quantize again task after task) */
    if (!k->task || k->sched != SCHED_CPU_ROWS || k->has_acts_q8) return false;
    str_printf(o, "\n/* model_forward_batch's tokens in one call, each at its own position (positions) and in its own "
                  "slot's\n * KV cache (kv_rows) */");
    tokens_mode.on = true;
    tokens_mode.failed = false;
    emit_kernel_c(o, k, TARGET_CPU);
    tokens_mode.on = false;
    return !tokens_mode.failed;
}
/* whether k has one (printed once per kernel: the answers of this program's emission) */
enum { TOKENS_KNOWN_MAX = 1024 };
static struct { const KKernel *k[TOKENS_KNOWN_MAX]; bool ok[TOKENS_KNOWN_MAX]; int n; } tokens_known;
static bool has_tokens_variant(const KKernel *k) {
    for (int i = 0; i < tokens_known.n; i++) if (tokens_known.k[i] == k) return tokens_known.ok[i];
    Str scratch = {0};
    bool ok = emit_kernel_tokens(&scratch, k);
    str_free(&scratch);
    if (tokens_known.n < TOKENS_KNOWN_MAX) {
        tokens_known.k[tokens_known.n] = k;
        tokens_known.ok[tokens_known.n++] = ok;
    }
    return ok;
}

void emit_kernels(Str *o, const KProgram *kp, Target t) {
    str_printf(o, "\n/* ---- kernels ---- */\n");
    for (int i = 0; i < kp->nk; i++) {
        Str k = {0};
        if (t == TARGET_CUDA) emit_kernel_cuda(&k, kp->kernels[i]);
        else emit_kernel_c(&k, kp->kernels[i], t);
        pack_lines(o, k.s);
        str_free(&k);
    }
}

/* struct Model: the payload's tensors (w), the constants' device copies (c), the buffers; each weight also
 * as a typed field, a decoder layer's in LayerWeights (one per layer) */
static void emit_model_struct(Str *o, const Names *nm, const TProgram *tp) {
    if (nm->nlfield) {
        str_printf(o, "typedef struct { /* a decoder layer's weights */\n");
        for (int f = 0; f < nm->nlfield; f++) {
            const Buffer *b = nm->lfield[f];
            str_printf(o, "    const %s *%s; /* ", ctype_of(b->dtype), nm->field[b->id]);
            /* the field's dtypes, in the order the layers first have them (block types may differ by layer) */
            bool seen[DT_COUNT] = {false};
            for (int i = 0; i < tp->n_weights; i++) {
                const Buffer *w = tp->weights[i];
                if (nm->layer[w->id] < 0 || strcmp(nm->field[w->id], nm->field[b->id]) || seen[w->dtype]) continue;
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
static void emit_weight_fields(Str *o, const Names *nm, const TProgram *tp) {
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
        int l = nm->layer[b->id], f = 0;
        if (l < 0) continue;
        while (strcmp(nm->field[nm->lfield[f]->id], nm->field[b->id])) f++;
        first[l * nm->nlfield + f] = i;
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
static void emit_act_macros(Str *o, const Names *nm, const KProgram *kp, int n_layers) {
    const TProgram *tp = kp->tp;
    str_printf(o, "/* the activation arena (f32): byte offsets, reused by buffers that are not live together */\n");
    for (int i = 0; i < tp->nbufs; i++) {
        const Buffer *b = tp->bufs[i];
        if (b->kind != BUF_ACT || !nm->act[b->id]) continue;
        int j = 0;
        while (j < i && !(tp->bufs[j]->kind == BUF_ACT && nm->act[tp->bufs[j]->id] &&
                          !strcmp(nm->act[tp->bufs[j]->id], nm->act[b->id]))) j++;
        if (j < i) continue;
        str_printf(o, "#define ACT_%s %lld /* [%lld", nm->act[b->id], (long long)b->act_offset, (long long)b->dims[0]);
        for (int d = 1; d < b->ndim; d++) str_printf(o, ", %lld", (long long)b->dims[d]);
        str_printf(o, "] */\n");
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

/* model_init: the payload checked against the compiled table, the buffers allocated (runtime/kernels.h's
 * mem_*: device memory for CUDA, host memory for C), the typed weight fields filled */
static void emit_model_init(Str *o, const Names *nm, const KProgram *kp, const ModelInfo *mi, bool graph) {
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
        if (!runs_at_one_token(L)) continue;   /* runs only for more tokens */
        bool gather = uses_kind(L, BUF_INPUT);
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
        count += runs_at_one_token(&kp->launches[l]) && !kernel_is_sampling(&kp->launches[l]);
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
    for (int i = 0; i < 4; i++) { float_lit(o, f[i]); str_printf(o, i < 3 ? ", " : ""); }
    str_printf(o, ",\n    %d,\n    %d, tensor_names,\n    %lld,\n    %lldLL,\n    %d,\n    \"%s\",\n};\n", mi->top_k,
               tp->n_weights, tp->top_k ? (long long)tp->top_k->dims[2] : 0LL, decode_weight_bytes(kp),
               decode_launches(kp), dtype_names[tp->g->kv_dtype]);
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

void emit_program(Str *o, const KProgram *kp, const EmitOptions *eo) {
    tokens_known.n = 0;   /* has_tokens_variant's answers are this program's */
    const TProgram *tp = kp->tp;
    const ModelInfo *mi = &eo->info;
    bool cuda = eo->target == TARGET_CUDA;
    long long V = mi->vocab_size;
    str_printf(o, "/* %s: generated by llmcc from %s (%s). Do not edit: rebuild with llmcc.\n"
                  " * %d distinct kernels, %d launches per forward call. */\n", cuda ? "model.cu" : "model.c",
               eo->source, mi->architecture, kp->nk, kp->nl - kernel_sampling_launches(kp));
    emit_prelude(o, kp, eo->target, "runtime/model_api.h");
    Names nm;
    names_init(&nm, kp);
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
    decode_pos_kernels = gpu_model = eo->target != TARGET_CPU;
    emit_kernels(o, kp, eo->target);
    decode_pos_kernels = false;
    /* model_forward_batch's _tokens variants */
    bool any_tokens = false;
    for (int i = 0; i < kp->nk && program_batchable(kp); i++) {
        bool used = false;
        for (int j = 0; j < kp->nl && !used; j++)
            used = kp->launches[j].k == kp->kernels[i] && in_batch(&kp->launches[j]) &&
                   batch_way(&kp->launches[j]) == BATCH_TOKENS;
        if (!used) continue;
        Str k = {0};
        CHECK(emit_kernel_tokens(&k, kp->kernels[i]), "%s's _tokens variant", kp->kernels[i]->name);
        any_tokens = true;
        pack_lines(o, k.s);
        str_free(&k);
    }
    str_printf(o, "\n/* ---- host ---- */\n%s", cuda ? "extern \"C\" {\n" : "");
    /* the payload's tensors, in order: name, dtype, rank, shape */
    str_printf(o, "#define TENSORS(X) \\\n");
    for (int i = 0; i < tp->n_weights; i++) {
        const Buffer *b = tp->weights[i];
        str_printf(o, "    X(\"%s\", %s, %d, %lld, %lld)%s\n", b->name, pdt(b->dtype), b->ndim, (long long)b->dims[0],
                   (long long)(b->ndim > 1 ? b->dims[1] : 0), i + 1 < tp->n_weights ? " \\" : "");
    }
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
        graph_grids = true;
        emit_forward(o, &nm, kp, cuda, false, FWD_ONE);
        graph_grids = false;
        str_printf(o, "}\n\n");
    }
    str_printf(o, "int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits) {\n"
                  "    mem_put(m->ids, ids, (size_t)n * sizeof(int32_t));\n");
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
    emit_forward(o, &nm, kp, cuda, *team != 0, FWD_ONE);
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
    if (any_tokens)
        str_printf(o, "    int64_t kv_rows[%d]; /* the _tokens kernels' KV rows */\n"
                      "    for (int t = 0; t < n; t++) kv_rows[t] = KV_ROW(slots[t], positions[t]);\n", mi->max_batch);
    str_printf(o, "    const int pos = 0; /* unread but by the per-token launches (each its token's) and the tail */\n"
                  "    (void)pos;\n%s", team);
    Str batch = {0};
    bool batch_ok = emit_forward(&batch, &nm, kp, cuda, *team != 0, FWD_BATCH);
    if (batch_ok) str_printf(o, "%s", batch.s);
    else str_printf(o, "    /* not in this build: a split-K kernel or per-token scratch rows (emit.c, batchable) */\n");
    str_free(&batch);
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
            emit_launch(o, &nm, &kp->launches[i], -1, cuda, 1, ARGS_CALL);
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
    /* model_penalize: the ids and amounts copied to the device, one kernel (runtime/kernels.h) */
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
    arena_free(&nm.A);
    gpu_model = false;
}
