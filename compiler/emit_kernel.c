/* emit_kernel.c: a kernel's text, as both dialects share it (emit_kernel.h): expressions, statements, the
 * parameter list and the pos prologue. emit_c.c and emit_cuda.c print a kernel's frame around these; where the
 * two spell a statement differently, KernelText's target says which. Nothing here knows the host plan
 * (emit.c), which asks for a kernel's variants through KernelText. */
#include "emit_kernel.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ctype_of(DType d) {
    switch (d) {
    case DT_F32: return "float";
    case DT_F16: case DT_BF16: return "uint16_t";
    case DT_I32: return "int32_t";
    default:
        CHECK(dtype_is_quant(d), "dtype %d", (int)d);
        return "uint8_t";   /* blocks: runtime/kernels.h's ld_q* read them */
    }
}

static void var_name(Str *o, const Var *v) { str_printf(o, "%s_%d", v->name, v->id); }

/* What a name shows in an identifier, shared by the layers' kernels and the host's per-layer tables: what
 * follows its "layers.N." where it holds one, else the whole name after a leading "model." (which layer a
 * buffer belongs to is the IR's to say: Buffer.layer, KLaunch.layer) */
static const char *without_layer_prefix(const char *name) {
    for (const char *p = strstr(name, "layers."); p; p = strstr(p + 1, "layers.")) {
        const char *q = p + 7, *d = q;
        while (*d >= '0' && *d <= '9') d++;
        if ((p == name || p[-1] == '.') && d > q && *d == '.') return d + 1;
    }
    return strncmp(name, "model.", 6) ? name : name + 6;
}

/* A buffer's name as a C identifier (layer prefix dropped, upper case for macros); names that could meet
 * a kernel's own (n, tid, r3, smem0, t_12, o_) or a keyword get a suffix. */
void emit_ident_str(Str *o, const char *s, bool upper) {
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

void emit_ident(Str *o, const Buffer *b, bool upper) {
    const char *s;
    if (b->kind == BUF_KCACHE || b->kind == BUF_VCACHE) s = b->kind == BUF_KCACHE ? "k_cache" : "v_cache";
    else s = without_layer_prefix(b->name);
    emit_ident_str(o, s, upper);
}

/* Parameter p of k: its buffer's name, numbered where two parameters would share one. */
static void param_name(Str *o, const KKernel *k, int p) {
    Str a = {0}, b = {0};
    emit_ident(&a, k->params[p], false);
    int same = 0;
    for (int j = 0; j < p; j++) {
        b.len = 0;
        emit_ident(&b, k->params[j], false);
        same += !strcmp(a.s, b.s);
    }
    str_printf(o, "%s", a.s);
    if (same) str_printf(o, "_%d", same + 1);
    str_free(&a);
    str_free(&b);
}


static void lin_index(Str *o, const KKernel *k, const Buffer *b, Expr *const *idx, KernelText *kt) {
    /* row-major: ((i0 * d1 + i1) * d2 + i2) */
    for (int d = 1; d < b->ndim; d++) str_printf(o, "(");
    emit_expr(o, k, idx[0], kt);
    for (int d = 1; d < b->ndim; d++) {
        str_printf(o, " * %lldLL + ", (long long)b->dims[d]);
        emit_expr(o, k, idx[d], kt);
        str_printf(o, ")");
    }
}

/* a pointer to b's element at idx: its parameter + (the linear index) */
static void elem_ptr(Str *o, const KKernel *k, const Buffer *b, Expr *const *idx, KernelText *kt) {
    param_name(o, k, kernel_param_index(k, b));
    str_printf(o, " + (");
    lin_index(o, k, b, idx, kt);
    str_printf(o, ")");
}

/* a C float literal that reads back as the same f32 */
void emit_float_lit(Str *o, double v) {
    if (isinf(v)) { str_printf(o, v < 0 ? "(-INFINITY)" : "INFINITY"); return; }
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", (double)(float)v);
    str_printf(o, "%s%sf", buf, strpbrk(buf, ".en") ? "" : ".0");
}

void emit_expr(Str *o, const KKernel *k, const Expr *e, KernelText *kt) {
    const Expr *const *a = (const Expr *const *)e->a;
    switch (e->k) {
    case EX_FCONST: emit_float_lit(o, e->f); return;
    case EX_ICONST: str_printf(o, "%lldLL", (long long)e->i); return;
    case EX_VAR: var_name(o, e->var); return;
    case EX_PARAM: str_printf(o, "%s", param_names[e->i]); return;
    case EX_TOKEN_POS: str_printf(o, "(int64_t)positions["); emit_expr(o, k, a[0], kt); str_printf(o, "]"); return;
    case EX_KV_ROW: str_printf(o, "kv_rows["); emit_expr(o, k, a[0], kt); str_printf(o, "]"); return;
    case EX_TID: str_printf(o, "tid"); return;
    case EX_BID: str_printf(o, "bid"); return;
    case EX_REG: str_printf(o, kt->target != TARGET_CUDA && !k->task ? "r%lld[tid]" : "r%lld", (long long)e->i); return;
    case EX_SLOAD:   /* a b16 array's element widened where the array says so (flash_attn's bf16 K/V tiles) */
        str_printf(o, k->smem[e->i].widen ? "bf16_to_f32(smem%lld[" : "smem%lld[", (long long)e->i);
        emit_expr(o, k, a[0], kt);
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
        lin_index(o, k, e->buf, e->a, kt);
        str_printf(o, fn ? ")" : "]");
        return;
    }
    case EX_ACC: UNREACHABLE();
    case EX_NEG: str_printf(o, "(-"); emit_expr(o, k, a[0], kt); str_printf(o, ")"); return;
    case EX_EXP: str_printf(o, "expf("); emit_expr(o, k, a[0], kt); str_printf(o, ")"); return;
    case EX_COS: str_printf(o, "cosf("); emit_expr(o, k, a[0], kt); str_printf(o, ")"); return;
    case EX_SIN: str_printf(o, "sinf("); emit_expr(o, k, a[0], kt); str_printf(o, ")"); return;
    case EX_RSQRT: str_printf(o, "(1.0f / sqrtf("); emit_expr(o, k, a[0], kt); str_printf(o, "))"); return;
    case EX_TOF: str_printf(o, "((float)"); emit_expr(o, k, a[0], kt); str_printf(o, ")"); return;
    case EX_TOI: str_printf(o, "((int64_t)"); emit_expr(o, k, a[0], kt); str_printf(o, ")"); return;
    case EX_SELECT:
        str_printf(o, "("); emit_expr(o, k, a[0], kt); str_printf(o, " ? "); emit_expr(o, k, a[1], kt);
        str_printf(o, " : "); emit_expr(o, k, a[2], kt); str_printf(o, ")");
        return;
    case EX_MIN: case EX_MAX:
        if (e->t == T_F32) str_printf(o, e->k == EX_MIN ? "fminf(" : "fmaxf(");
        else str_printf(o, e->k == EX_MIN ? "MINI(" : "MAXI(");
        emit_expr(o, k, a[0], kt); str_printf(o, ", "); emit_expr(o, k, a[1], kt); str_printf(o, ")");
        return;
    default:
        str_printf(o, "(");
        emit_expr(o, k, a[0], kt);
        str_printf(o, " %s ", expr_names[e->k]);
        emit_expr(o, k, a[1], kt);
        str_printf(o, ")");
        return;
    }
}

void emit_indent(Str *o, int d) { for (int i = 0; i < d; i++) str_printf(o, "    "); }

/* A vector load: vec consecutive elements, widened to f32, by the prelude's vload_<dtype>: CUDA reads them
 * with 4-, 8- or 16-byte loads (uint32_t / uint2 / uint4); C reads element by element but first checks
 * the alignment those loads need, so a schedule that would fault on the GPU aborts on the CPU. */
static void emit_vload(Str *o, const KKernel *k, const TStmt *s, KernelText *kt) {
    int esz = dtype_sizes[s->buf->dtype], bytes = s->vec * esz, chunk = bytes < 16 ? bytes : 16, nch = bytes / chunk;
    CHECK((bytes & 3) == 0 && nch * chunk == bytes && bytes <= 64, "vector of %d bytes", bytes);
    str_printf(o, "float "); var_name(o, s->v); str_printf(o, "[%d]; vload_%s(", s->vec, dtype_names[s->buf->dtype]);
    var_name(o, s->v); str_printf(o, ", ");
    param_name(o, k, kernel_param_index(k, s->buf));
    str_printf(o, ", "); lin_index(o, k, s->buf, s->idx, kt);
    if (kt->target != TARGET_CUDA) str_printf(o, ", %d, %d, \"%s\");\n", s->vec, chunk, k->name);
    else str_printf(o, ", %d);\n", s->vec);
}

/* A run of vector loads (b[0..n), CUDA): every vector's words loaded, then a zero that depends on all of them,
 * then each vector widened through it, so that the run is in flight before any arithmetic reads one of its
 * values (runtime/kernels.h vload_words) */
static void emit_vload_run(Str *o, const KKernel *k, TStmt *const *b, int n, int d, KernelText *kt) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        int words = s->vec * dtype_sizes[s->buf->dtype] / 4;
        CHECK(words == 1 || words == 2 || ((words & 3) == 0 && words <= 16), "vector of %d words", words);
        if (i) emit_indent(o, d);
        str_printf(o, "uint32_t "); var_name(o, s->v); str_printf(o, "_w[%d]; vload_words(", words);
        var_name(o, s->v); str_printf(o, "_w, ");
        param_name(o, k, kernel_param_index(k, s->buf));
        str_printf(o, " + "); lin_index(o, k, s->buf, s->idx, kt); str_printf(o, ", %d);\n", words);
    }
    emit_indent(o, d);
    str_printf(o, "const uint32_t "); var_name(o, b[0]->v); str_printf(o, "_z = zero_after(");
    for (int i = 0; i < n; i++) { str_printf(o, i ? " ^ " : ""); var_name(o, b[i]->v); str_printf(o, "_w[0]"); }
    str_printf(o, ");\n");
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        emit_indent(o, d);
        str_printf(o, "float "); var_name(o, s->v);
        str_printf(o, "[%d]; vload_widen_%s(", s->vec, dtype_names[s->buf->dtype]);
        var_name(o, s->v); str_printf(o, ", "); var_name(o, s->v); str_printf(o, "_w, %d, ", s->vec);
        var_name(o, b[0]->v); str_printf(o, "_z);\n");
    }
}

/* cp.async of s->vec bytes: CUDA issues cp.async.{ca,cg}.shared.global with src-size 0 when the predicate
 * is false (the destination is zero-filled and the source, then the buffer's base, is not read); C queues
 * the copy for the wait_group that completes it (cp_async_issue in the prelude). */
static void emit_cp_async(Str *o, const KKernel *k, const TStmt *s, int d, KernelText *kt) {
    int p = kernel_param_index(k, s->buf), esz = k->smem[s->smem].b16 ? 2 : 4;
    str_printf(o, "{\n");
    emit_indent(o, d + 1);
    str_printf(o, "const int ok_ = ");
    if (s->e) emit_expr(o, k, s->e, kt);
    else str_printf(o, "1");
    str_printf(o, ";\n");
    emit_indent(o, d + 1); str_printf(o, "const int64_t so_ = "); emit_expr(o, k, s->sidx, kt); str_printf(o, ";\n");
    Str pn = {0};
    param_name(&pn, k, p);
    emit_indent(o, d + 1);
    str_printf(o, "const void *src_ = ok_ ? (const void *)(%s + ", pn.s);
    lin_index(o, k, s->buf, s->idx, kt);
    str_printf(o, kt->target != TARGET_CUDA ? ") : NULL;\n" : ") : (const void *)%s;\n", pn.s);
    str_free(&pn);
    emit_indent(o, d + 1);
    if (kt->target != TARGET_CUDA) {
        str_printf(o, "cp_async_issue(&cpq_, \"%s\", smem%d, sizeof smem%d, so_ * %d, src_, %d);\n", k->name, s->smem,
                   s->smem, esz, s->vec);
    } else {
        str_printf(o, "asm volatile(\"cp.async.%s.shared.global [%%0], [%%1], %d, %%2;\" :: "
                      "\"r\"((unsigned)__cvta_generic_to_shared(smem%d + so_)), \"l\"(src_), \"r\"(ok_ ? %d : 0) : "
                      "\"memory\");\n", s->vec == 16 ? "cg" : "ca", s->vec, s->smem, s->vec);
    }
    emit_indent(o, d); str_printf(o, "}\n");
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
static void emit_bdot(Str *o, const KKernel *k, const TStmt *s, const char *step, const char *extra, KernelText *kt) {
    CHECK(s->e->k == EX_LOAD, "bdot of a non-load");
    bool load = !strcmp(step, "_load");
    if (!load) str_printf(o, kt->target != TARGET_CUDA ? "r%d[tid] += " : "r%d += ", s->reg);
    bdot_form(o, s, "bdot_");
    str_printf(o, "%s(%s", step, load ? extra : "");
    if (!strcmp(step, "_dot")) str_printf(o, "%s", extra);
    else {
        param_name(o, k, kernel_param_index(k, s->buf));
        str_printf(o, ", ");
    }
    lin_index(o, k, s->buf, s->idx, kt);
    str_printf(o, ", %lld, ", (long long)s->gn);
    if (!load) {
        elem_ptr(o, k, s->e->buf, s->e->a, kt);
        str_printf(o, ", ");
    }
    emit_expr(o, k, s->lo, kt);
    str_printf(o, "%s);\n", !strcmp(step, "_dot") ? ", bdot_z" : "");
}
static void emit_bdot_pair(Str *o, const KKernel *k, const TStmt *a, const TStmt *b, int d, KernelText *kt) {
    const TStmt *both[2] = {a, b};
    str_printf(o, "{ /* a pair: both rows' loads before either's products */\n");
    emit_indent(o, d + 1); bdot_form(o, a, "bdot_raw_"); str_printf(o, " bdot_w0, bdot_w1;\n");
    for (int j = 0; j < 2; j++) {
        emit_indent(o, d + 1); emit_bdot(o, k, both[j], "_load", j ? "&bdot_w1, " : "&bdot_w0, ", kt);
    }
    emit_indent(o, d + 1); str_printf(o, "const float bdot_z = bdot_zero_after(");
    for (int j = 0; j < 2; j++) {
        str_printf(o, j ? " ^ " : ""); bdot_form(o, a, "bdot_"); str_printf(o, "_hold(&bdot_w%d, ", j);
        emit_expr(o, k, a->lo, kt); str_printf(o, ")");
    }
    str_printf(o, ");\n");
    for (int j = 0; j < 2; j++) {
        emit_indent(o, d + 1); emit_bdot(o, k, both[j], "_dot", j ? "&bdot_w1, " : "&bdot_w0, ", kt);
    }
    emit_indent(o, d); str_printf(o, "}\n");
}

static void emit_tstmts(Str *o, const KKernel *k, TStmt **b, int n, int d, KernelText *kt) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        emit_indent(o, d);
        switch (s->k) {
        case TS_LET:
            str_printf(o, "const int64_t "); var_name(o, s->v); str_printf(o, " = ");
            emit_expr(o, k, s->e, kt); str_printf(o, ";\n");
            break;
        case TS_ASSIGN:
            str_printf(o, kt->target != TARGET_CUDA && !k->task ? "r%d[tid] = " : "r%d = ", s->reg);
            emit_expr(o, k, s->e, kt); str_printf(o, ";\n");
            break;
        case TS_SSTORE:
            str_printf(o, "smem%d[", s->smem); emit_expr(o, k, s->sidx, kt);
            str_printf(o, k->smem[s->smem].f16 ? "] = f32_to_f16(" : k->smem[s->smem].b16 ? "] = f32_to_bf16("
                                                                                            : "] = ");
            emit_expr(o, k, s->e, kt);
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
            lin_index(o, k, s->buf, s->idx, kt);
            str_printf(o, dt == DT_I32    ? "] = (int32_t)("
                          : dt != DT_BF16 ? "] = "
                          : s->truncate   ? "] = f32_to_bf16_truncated("
                                          : "] = f32_to_bf16(");
            emit_expr(o, k, s->e, kt);
            str_printf(o, dt != DT_F32 ? ");\n" : ";\n");
            break;
        }
        case TS_IF: {
            /* an if whose body is one if is one condition (&& evaluates the inner one only where the outer holds) */
            const TStmt *in = s;
            str_printf(o, "if ("); emit_expr(o, k, s->e, kt);
            while (in->nbody == 1 && in->body[0]->k == TS_IF) {
                in = in->body[0];
                str_printf(o, " && "); emit_expr(o, k, in->e, kt);
            }
            str_printf(o, ") {\n");
            emit_tstmts(o, k, in->body, in->nbody, d + 1, kt);
            emit_indent(o, d); str_printf(o, "}\n");
            break;
        }
        case TS_FOR:
            str_printf(o, "for (int64_t "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->lo, kt);
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " < "); emit_expr(o, k, s->e, kt);
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " += "); emit_expr(o, k, s->step, kt);
            str_printf(o, ") {\n");
            emit_tstmts(o, k, s->body, s->nbody, d + 1, kt);
            emit_indent(o, d); str_printf(o, "}\n");
            break;
        case TS_VLOAD: {
            int last = i;
            while (kt->target == TARGET_CUDA && last + 1 < n && b[last + 1]->k == TS_VLOAD) last++;
            if (last > i) emit_vload_run(o, k, b + i, last - i + 1, d, kt);
            else emit_vload(o, k, s, kt);
            i = last;
            break;
        }
        case TS_GEMM:
            /* runtime/cpu_gemm.h; the tile's rows are gn apart */
            CHECK(kt->target != TARGET_CUDA, "gemm in CUDA");
            str_printf(o, s->dot ? "cpu_gemm_dot(" : "cpu_gemm_packed(");
            emit_expr(o, k, s->e, kt);
            str_printf(o, ", %lld, ", (long long)s->gn);
            emit_expr(o, k, s->lo, kt);
            if (s->buf) {
                str_printf(o, ", ");
                elem_ptr(o, k, s->buf, s->idx, kt);
                str_printf(o, ", %lld", (long long)s->buf->dims[s->buf->ndim - 1]);
                if (s->dot) str_printf(o, ", smem%d", s->gsmem[0]);
            } else {
                str_printf(o, ", smem%d, 0", s->gsmem[0]);
            }
            str_printf(o, ", smem%d, smem%d + ", s->gsmem[1], s->gsmem[2]);
            emit_expr(o, k, s->sidx, kt);
            str_printf(o, ", %lld, ", (long long)s->gn);
            emit_expr(o, k, s->step, kt);
            str_printf(o, " != 0);\n");
            break;
        case TS_PACK: {
            /* runtime/cpu_gemm.h: weight rows into the panel */
            CHECK(kt->target != TARGET_CUDA, "pack in CUDA");
            const bool q = dtype_is_quant(s->buf->dtype);
            if (q) str_printf(o, "cpu_gemm_pack_q(%d, ", (int)(s->buf->dtype - DT_Q8_0));
            else str_printf(o, "cpu_gemm_pack_%s(", s->buf->dtype == DT_BF16 ? "bf16" : "f32");
            emit_expr(o, k, s->e, kt);
            str_printf(o, ", %lld, ", (long long)s->gn);
            emit_expr(o, k, s->lo, kt);
            str_printf(o, ", ");
            if (q) {   /* block types: the weight and its first element's index (the runtime finds the block) */
                param_name(o, k, kernel_param_index(k, s->buf));
                str_printf(o, ", ");
                lin_index(o, k, s->buf, s->idx, kt);
            } else elem_ptr(o, k, s->buf, s->idx, kt);
            str_printf(o, ", %lld, %lld, %lld, ", (long long)s->buf->dims[s->buf->ndim - 1], (long long)s->run_rows,
                       (long long)s->run_gap);
            if (s->buf->dtype == DT_BF16) str_printf(o, "%d, ", s->dot);
            str_printf(o, "smem%d, ", s->smem);
            emit_expr(o, k, s->sidx, kt);
            str_printf(o, ");\n");
            break;
        }
        case TS_QDOT:
            /* runtime/cpu_quant.h: type dtype - q8_0 (q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, q5_0, q5_1); the
             * activations from the load's element on */
            CHECK(kt->target != TARGET_CUDA && s->e->k == EX_LOAD, "qdot in CUDA or of a non-load");
            str_printf(o, "r%d = cpu_qdot%s(%d, ", s->reg, s->dot ? "_q8" : "", (int)(s->buf->dtype - DT_Q8_0));
            param_name(o, k, kernel_param_index(k, s->buf));
            str_printf(o, ", ");
            lin_index(o, k, s->buf, s->idx, kt);
            str_printf(o, ", ");
            elem_ptr(o, k, s->e->buf, s->e->a, kt);
            str_printf(o, ", ");
            emit_expr(o, k, s->lo, kt);
            str_printf(o, "%s, %d);\n", s->dot ? ", acts_q8" : "", s->prefetch);
            break;
        case TS_DOT16: {
            /* runtime/cpu_dot16.h: the weight row from its element, the activation rows from the load's element
             * in the kernel's input rounded to bf16 (n rows of the buffer's row length) */
            CHECK(kt->target == TARGET_CPU && s->e->k == EX_LOAD, "dot16 off the cpu target or of a non-load");
            const Buffer *x = s->e->buf;
            Str w = {0}, xr = {0};
            elem_ptr(&w, k, s->buf, s->idx, kt);
            str_printf(&xr, "cpu_acts16(acts16, ");
            param_name(&xr, k, kernel_param_index(k, x));
            str_printf(&xr, ", n * %lldLL) + (", (long long)x->dims[1]);
            lin_index(&xr, k, x, s->e->a, kt);
            str_printf(&xr, ")");
            /* at most gn rows, into the scratch array */
            str_printf(o, "cpu_dot16_rows(%s, %s, %lldLL, ", w.s, xr.s, (long long)x->dims[1]);
            emit_expr(o, k, s->lo, kt);
            str_printf(o, ", %d, ", s->prefetch);
            emit_expr(o, k, s->step, kt);
            str_printf(o, ", smem%d + ", s->smem);
            emit_expr(o, k, s->sidx, kt);
            str_printf(o, ");\n");
            str_free(&w); str_free(&xr);
            break;
        }
        case TS_BDOT:
            /* a pair (the next statement a bdot of the same activations): both rows' loads before the products */
            if (i + 1 < n && bdot_pairs(s, b[i + 1])) emit_bdot_pair(o, k, s, b[++i], d, kt);
            else emit_bdot(o, k, s, "", "", kt);
            break;
        case TS_CP_ASYNC: emit_cp_async(o, k, s, d, kt); break;
        case TS_COUNT: UNREACHABLE();
        }
    }
}

void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int d, KernelText *kt) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        emit_indent(o, d);
        if (s->k == KS_PHASE) {
            /* a phase of one assignment or store is one line (no declaration needs the block's scope) */
            bool one = s->nbody == 1 && (s->body[0]->k == TS_ASSIGN || s->body[0]->k == TS_STORE ||
                                         s->body[0]->k == TS_SSTORE);
            if (k->task)
                str_printf(o, "%s", one ? "" : "{\n");
            else if (kt->target != TARGET_CUDA)
                str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) %s", k->block,
                           one ? "/* phase */ " : "{ /* phase */\n");
            else if (!one) str_printf(o, "{ /* phase */\n");
            emit_tstmts(o, k, s->body, s->nbody, one ? 0 : d + 1, kt);
            if (!one) { emit_indent(o, d); str_printf(o, "}\n"); }
            if (kt->target == TARGET_CUDA && k->nsmem && s->barrier) {
                emit_indent(o, d);
                str_printf(o, "__syncthreads();\n");
            }
        } else if (s->k == KS_MMA) {
            /* CUDA: C in place, then A, B; C: the warps' fragments A, B, C */
            const int *r[3] = {s->mc, s->ma, s->mb}, cnt[3] = {4, 4, 2}, ord[2][3] = {{0, 1, 2}, {1, 2, 0}};
            if (kt->target == TARGET_CUDA) str_printf(o, "mma_m16n8k16_%s(", s->mf16 ? "f16" : "bf16");
            else str_printf(o, "for (int64_t w_ = 0; w_ < %d; w_ += 32) mma_warp(w_, %d, ", k->block, s->mf16);
            for (int g = 0; g < 3; g++)
                for (int j = 0; j < cnt[ord[kt->target != TARGET_CUDA][g]]; j++)
                    str_printf(o, "%sr%d", g || j ? ", " : "", r[ord[kt->target != TARGET_CUDA][g]][j]);
            str_printf(o, ");\n");
        } else if (s->k == KS_LDMATRIX) {
            if (kt->target == TARGET_CUDA) {
                str_printf(o, "ldmatrix_x%d(", s->nmat);
                for (int j = 0; j < s->nmat; j++) str_printf(o, "r%d, ", s->ldst[j]);
                str_printf(o, "smem%d + (", s->lsmem);
                emit_expr(o, k, s->laddr, kt);
                str_printf(o, "));\n");
            } else {
                str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) laneaddr[tid] = ", k->block);
                emit_expr(o, k, s->laddr, kt);
                str_printf(o, "; /* ldmatrix */\n");
                emit_indent(o, d);
                str_printf(o, "for (int64_t w_ = 0; w_ < %d; w_ += 32) ldmatrix_warp(\"%s\", w_, "
                              "smem%d, %d, laneaddr, %d", k->block, k->name, s->lsmem, k->smem[s->lsmem].size, s->nmat);
                for (int j = 0; j < 4; j++) str_printf(o, j < s->nmat ? ", r%d" : ", NULL", s->ldst[j]);
                str_printf(o, ");\n");
            }
        } else if (s->k == KS_CP_COMMIT) {
            str_printf(o, kt->target == TARGET_CUDA ? "asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
                                           : "cp_async_commit(&cpq_);\n");
        } else if (s->k == KS_CP_WAIT) {
            str_printf(o, kt->target == TARGET_CUDA ? "asm volatile(\"cp.async.wait_group %d;\" ::: \"memory\");\n"
                                           : "cp_async_wait(&cpq_, %d);\n", s->wait_n);
        } else if (s->k == KS_SHFL) {
            static const char *const cuda_fn[] = {"__shfl_down_sync", "__shfl_up_sync", "__shfl_xor_sync",
                                                  "__shfl_sync"};
            if (kt->target == TARGET_CUDA) {
                str_printf(o, "r%d = %s(0xffffffffu, r%d, (%s)(", s->dst, cuda_fn[s->shfl], s->src,
                           s->shfl <= SHFL_UP ? "unsigned" : "int");
                emit_expr(o, k, s->arg, kt);
                str_printf(o, "));\n");
                continue;
            }
            /* shfl_block (the prelude): every lane publishes, then reads its source lane's; the delta, mask or lane
             * is uniform, so it is computed once */
            str_printf(o, "shfl_block(r%d, r%d, lanebuf, %d, SHFL_%s, ", s->dst, s->src, k->block, shfl_names[s->shfl]);
            emit_expr(o, k, s->arg, kt);
            str_printf(o, ");\n");
        } else if (s->k == KS_ULET) {
            str_printf(o, "const int64_t "); var_name(o, s->v); str_printf(o, " = ");
            emit_expr(o, k, s->init, kt); str_printf(o, "; /* uniform */\n");
        } else {
            str_printf(o, "for (int64_t "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->init, kt);
            str_printf(o, "; "); emit_expr(o, k, s->cond, kt);
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->update, kt);
            str_printf(o, ") { /* uniform */\n");
            emit_kstmts(o, k, s->kbody, s->nk, d + 1, kt);
            emit_indent(o, d); str_printf(o, "}\n");
        }
    }
}

/* One parameter a line, named after the first instance's buffer, with its dtype and shape */
void emit_params(Str *o, const KKernel *k, KernelText *kt) {
    str_printf(o, "int64_t n, int64_t pos");
    if (k->tokens)
        str_printf(o, ",\n        const int *restrict positions /* [n] each token's position */,\n"
                      "        const int64_t *restrict kv_rows /* [n] its KV rows: slot * layers * ctx + position */");
    for (int i = 0; i < k->nparams; i++) {
        const Buffer *b = k->params[i];
        str_printf(o, ",\n        %s%s *%s ", k->param_written[i] ? "" : "const ", ctype_of(b->dtype),
                   kt->target != TARGET_CUDA ? "restrict" : "__restrict__");
        param_name(o, k, i);
        str_printf(o, " /* %s[", dtype_names[b->dtype]);
        for (int d = 0; d < b->ndim; d++) str_printf(o, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
        str_printf(o, "] */");
    }
}



void emit_pos_prologue(Str *o, const KKernel *k, const KernelText *kt) {
    if (kt->decode_pos && kernel_reads_pos(k))
        str_printf(o, "    if (pos < 0) pos = decode_pos; /* the decode step's CUDA Graph: the step's position */\n");
}

void emit_kernel_name(Str *o, const KKernel *k) {
    str_printf(o, "%s%s", k->name, k->tokens ? "_tokens" : "");
}
