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

static void lin_index(Str *o, const KKernel *k, const Buffer *b, Expr *const *idx, Target t) {
    /* row-major: ((i0 * d1 + i1) * d2 + i2) */
    for (int d = 1; d < b->ndim; d++) str_printf(o, "(");
    emit_expr(o, k, idx[0], t);
    for (int d = 1; d < b->ndim; d++) {
        str_printf(o, " * %lldLL + ", (long long)b->dims[d]);
        emit_expr(o, k, idx[d], t);
        str_printf(o, ")");
    }
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
    case EX_PARAM: str_printf(o, "%s", param_names[e->i]); return;
    case EX_TID: str_printf(o, "tid"); return;
    case EX_BID: str_printf(o, "bid"); return;
    case EX_REG: str_printf(o, t == TARGET_CPU ? "r%lld[tid]" : "r%lld", (long long)e->i); return;
    case EX_SLOAD: str_printf(o, "smem%lld[", (long long)e->i); emit_expr(o, k, a[0], t); str_printf(o, "]"); return;
    case EX_VELEM: var_name(o, e->var); str_printf(o, "[%lld]", (long long)e->i); return;
    case EX_LOAD: {
        int p = kernel_param_index(k, e->buf);
        CHECK(p >= 0, "load of a non-parameter");
        static const char *const open[DT_COUNT] = {[DT_F32] = "", [DT_BF16] = "ld_bf16(", [DT_F16] = "ld_f16(",
                                                   [DT_I32] = "(int64_t)"};
        str_printf(o, "%s", open[e->buf->dtype]);
        param_name(o, k, p);
        str_printf(o, (e->buf->dtype == DT_BF16 || e->buf->dtype == DT_F16) ? ", " : "[");
        lin_index(o, k, e->buf, e->a, t);
        str_printf(o, (e->buf->dtype == DT_BF16 || e->buf->dtype == DT_F16) ? ")" : "]");
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
    if (t == TARGET_CPU) str_printf(o, ", %d, %d, \"%s\");\n", s->vec, chunk, k->name);
    else str_printf(o, ", %d);\n", s->vec);
}

/* cp.async of s->vec bytes: CUDA issues cp.async.{ca,cg}.shared.global with src-size 0 when the predicate
 * is false (the destination is zero-filled and the source, then the buffer's base, is not read); C queues
 * the copy for the wait_group that completes it (cp_async_issue in the prelude). */
static void emit_cp_async(Str *o, const KKernel *k, const TStmt *s, int d, Target t) {
    int p = kernel_param_index(k, s->buf), esz = k->smem[s->smem].b16 ? 2 : 4;
    str_printf(o, "{\n");
    ind(o, d + 1); str_printf(o, "const int ok_ = "); if (s->e) emit_expr(o, k, s->e, t); else str_printf(o, "1"); str_printf(o, ";\n");
    ind(o, d + 1); str_printf(o, "const int64_t so_ = "); emit_expr(o, k, s->sidx, t); str_printf(o, ";\n");
    Str pn = {0};
    param_name(&pn, k, p);
    ind(o, d + 1); str_printf(o, "const void *src_ = ok_ ? (const void *)(%s + ", pn.s); lin_index(o, k, s->buf, s->idx, t);
    str_printf(o, t == TARGET_CPU ? ") : NULL;\n" : ") : (const void *)%s;\n", pn.s);
    str_free(&pn);
    ind(o, d + 1);
    if (t == TARGET_CPU) {
        str_printf(o, "cp_async_issue(&cpq_, \"%s\", smem%d, sizeof smem%d, so_ * %d, src_, %d);\n", k->name, s->smem, s->smem, esz, s->vec);
    } else {
        str_printf(o, "asm volatile(\"cp.async.%s.shared.global [%%0], [%%1], %d, %%2;\" :: \"r\"((unsigned)__cvta_generic_to_shared(smem%d + so_)), "
                      "\"l\"(src_), \"r\"(ok_ ? %d : 0) : \"memory\");\n", s->vec == 16 ? "cg" : "ca", s->vec, s->smem, s->vec);
    }
    ind(o, d); str_printf(o, "}\n");
}

void emit_tstmts(Str *o, const KKernel *k, TStmt **b, int n, int d, Target t) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        ind(o, d);
        switch (s->k) {
        case TS_LET: str_printf(o, "const int64_t "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->e, t); str_printf(o, ";\n"); break;
        case TS_ASSIGN: str_printf(o, t == TARGET_CPU ? "r%d[tid] = " : "r%d = ", s->reg); emit_expr(o, k, s->e, t); str_printf(o, ";\n"); break;
        case TS_SSTORE:
            str_printf(o, "smem%d[", s->smem); emit_expr(o, k, s->sidx, t);
            str_printf(o, k->smem[s->smem].f16 ? "] = f32_to_f16(" : k->smem[s->smem].b16 ? "] = f32_to_bf16(" : "] = ");
            emit_expr(o, k, s->e, t);
            str_printf(o, k->smem[s->smem].b16 ? ");\n" : ";\n");
            break;
        case TS_STORE: {
            int p = kernel_param_index(k, s->buf);
            /* i32: a b32 register's bits (tests/c/op_harness.c reads fragments back this way) */
            CHECK(s->buf->dtype == DT_F32 || s->buf->dtype == DT_I32, "stores are f32 or i32");
            param_name(o, k, p);
            str_printf(o, "[");
            lin_index(o, k, s->buf, s->idx, t);
            str_printf(o, s->buf->dtype == DT_I32 ? "] = (int32_t)(" : "] = ");
            emit_expr(o, k, s->e, t);
            str_printf(o, s->buf->dtype == DT_I32 ? ");\n" : ";\n");
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
            str_printf(o, "; "); var_name(o, s->v); str_printf(o, " += "); emit_expr(o, k, s->step, t); str_printf(o, ") {\n");
            emit_tstmts(o, k, s->body, s->nbody, d + 1, t);
            ind(o, d); str_printf(o, "}\n");
            break;
        case TS_VLOAD: emit_vload(o, k, s, t); break;
        case TS_CP_ASYNC: emit_cp_async(o, k, s, d, t); break;
        case TS_COUNT: UNREACHABLE();
        }
    }
}

void emit_kstmts(Str *o, const KKernel *k, KStmt **b, int n, int d, Target t) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        ind(o, d);
        /* a phase of one assignment or store is one line (no declaration needs the block's scope) */
        bool one = s->k == KS_PHASE && s->nbody == 1 && (s->body[0]->k == TS_ASSIGN || s->body[0]->k == TS_STORE ||
                                                          s->body[0]->k == TS_SSTORE);
        if (one) {
            if (t == TARGET_CPU) str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) /* phase */ ", k->block);
            emit_tstmts(o, k, s->body, 1, 0, t);
            if (t == TARGET_CUDA && k->nsmem && s->barrier) { ind(o, d); str_printf(o, "__syncthreads();\n"); }
        } else if (s->k == KS_PHASE) {
            if (t == TARGET_CPU) str_printf(o, "for (int64_t tid = 0; tid < %d; tid++) { /* phase */\n", k->block);
            else str_printf(o, "{ /* phase */\n");
            emit_tstmts(o, k, s->body, s->nbody, d + 1, t);
            ind(o, d); str_printf(o, "}\n");
            if (t == TARGET_CUDA && k->nsmem && s->barrier) { ind(o, d); str_printf(o, "__syncthreads();\n"); }
        } else if (s->k == KS_MMA) {
            if (t == TARGET_CUDA) {
                str_printf(o, "mma_m16n8k16_%s(r%d, r%d, r%d, r%d, r%d, r%d, r%d, r%d, r%d, r%d);\n", s->mf16 ? "f16" : "bf16",
                           s->mc[0], s->mc[1], s->mc[2], s->mc[3], s->ma[0], s->ma[1], s->ma[2], s->ma[3], s->mb[0], s->mb[1]);
            } else {
                str_printf(o, "for (int64_t w_ = 0; w_ < %d; w_ += 32) mma_warp(w_, %d, r%d, r%d, r%d, r%d, r%d, r%d, r%d, r%d, r%d, r%d);\n", k->block,
                           s->mf16, s->ma[0], s->ma[1], s->ma[2], s->ma[3], s->mb[0], s->mb[1], s->mc[0], s->mc[1], s->mc[2], s->mc[3]);
            }
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
                ind(o, d); str_printf(o, "for (int64_t w_ = 0; w_ < %d; w_ += 32) ldmatrix_warp(\"%s\", w_, smem%d, %d, laneaddr, %d", k->block, k->name,
                                      s->lsmem, k->smem[s->lsmem].size, s->nmat);
                for (int j = 0; j < 4; j++) { if (j < s->nmat) str_printf(o, ", r%d", s->ldst[j]); else str_printf(o, ", NULL"); }
                str_printf(o, ");\n");
            }
        } else if (s->k == KS_CP_COMMIT) {
            str_printf(o, t == TARGET_CUDA ? "asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n" : "cp_async_commit(&cpq_);\n");
        } else if (s->k == KS_CP_WAIT) {
            if (t == TARGET_CUDA) str_printf(o, "asm volatile(\"cp.async.wait_group %d;\" ::: \"memory\");\n", s->wait_n);
            else str_printf(o, "cp_async_wait(&cpq_, %d);\n", s->wait_n);
        } else if (s->k == KS_SHFL) {
            static const char *const cuda_fn[] = {"__shfl_down_sync", "__shfl_up_sync", "__shfl_xor_sync", "__shfl_sync"};
            if (t == TARGET_CUDA) {
                str_printf(o, "r%d = %s(0xffffffffu, r%d, (%s)(", s->dst, cuda_fn[s->shfl], s->src, s->shfl <= SHFL_UP ? "unsigned" : "int");
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
            str_printf(o, "const int64_t "); var_name(o, s->v); str_printf(o, " = "); emit_expr(o, k, s->init, t); str_printf(o, "; /* uniform */\n");
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
    for (int i = 0; i < k->nparams; i++) {
        const Buffer *b = k->params[i];
        str_printf(o, ",\n        %s%s *%s ", k->param_written[i] ? "" : "const ", ctype_of(b->dtype),
                   t == TARGET_CPU ? "restrict" : "__restrict__");
        param_name(o, k, i);
        str_printf(o, " /* %s[", dtype_names[b->dtype]);
        for (int d = 0; d < b->ndim; d++) str_printf(o, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
        str_printf(o, "] */");
    }
}

/* ---- host side ---- */
static const char PRELUDE[] =
    "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
    "#define MINI(a, b) ((a) < (b) ? (a) : (b))\n#define MAXI(a, b) ((a) > (b) ? (a) : (b))\n";
static const char VLOAD_FAULT[] =
    "/* the GPU's vector loads need aligned addresses: the CPU build checks them */\n"
    "static void vload_fault(const char *kernel, int64_t at) {\n"
    "    fprintf(stderr, \"llmcc: %s: misaligned vector load at element %lld\\n\", kernel, (long long)at);\n    abort();\n}\n";
/* bf16 weights are widened to f32 at each load (ld_bf16) or vector load (bf16_to_f32); the prelude holds
 * only the converters the kernels use, since nvcc warns about an unused static function */
static const char CONVERT_BF16[] =
    "/* bf16 weights are widened to f32 at each load */\n"
    "static DEVFN float bf16_to_f32(uint32_t h) { uint32_t u = h << 16; float f; memcpy(&f, &u, 4); return f; }\n";
static const char LD_BF16[] = "static DEVFN float ld_bf16(const uint16_t *p, int64_t i) { return bf16_to_f32(p[i]); }\n";
/* vload_<dtype>(v, p, o, n, ...): p[o .. o + n) widened to f32 (emit_vload) */
static const char VLOAD_C[] =
    "static DEVFN void vload_%s(float *v, const %s *p, int64_t o, int n, int align, const char *kernel) {\n"
    "    if ((uintptr_t)(p + o) %% align) vload_fault(kernel, o);\n"
    "    for (int j = 0; j < n; j++) v[j] = %s(p[o + j]);\n}\n";
static const char VLOAD_CUDA[] =
    "static DEVFN void vload_%s(float *v, const %s *p, int64_t o, int n) {\n"
    "    const int per = 4 / (int)sizeof *p, words = n / per;   /* elements per 32-bit word */\n"
    "    uint32_t w[16];\n"
    "    if (words >= 4) {\n"
    "#pragma unroll\n"
    "        for (int c = 0; c < words / 4; c++) {\n"
    "            const uint4 q = ((const uint4 *)(p + o))[c];\n"
    "            w[4 * c] = q.x; w[4 * c + 1] = q.y; w[4 * c + 2] = q.z; w[4 * c + 3] = q.w;\n"
    "        }\n"
    "    } else if (words == 2) {\n"
    "        const uint2 q = *(const uint2 *)(p + o);\n"
    "        w[0] = q.x; w[1] = q.y;\n"
    "    } else w[0] = *(const uint32_t *)(p + o);\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < words; i++)\n"
    "        if (per == 1) v[i] = __uint_as_float(w[i]);\n"
    "        else { v[2 * i] = %s(w[i] & 0xffffu); v[2 * i + 1] = %s(w[i] >> 16); }\n}\n";
/* mma.sync m16n8k16 with f32 accumulators in place (kernel_ir.h gives the fragments' layout) */
static const char MMA_CUDA[] =
    "static DEVFN void mma_m16n8k16_%s(float &c0, float &c1, float &c2, float &c3, uint32_t a0, uint32_t a1, uint32_t a2,\n"
    "                                  uint32_t a3, uint32_t b0, uint32_t b1) {\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, \"\n"
    "                 \"{%%0, %%1, %%2, %%3};\"\n"
    "                 : \"+f\"(c0), \"+f\"(c1), \"+f\"(c2), \"+f\"(c3) : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n}\n";
/* A warp shuffle on the CPU, over a block's lanes: a source lane outside the warp (down, up) gives the lane
 * its own value, as on the GPU */
static const char SHFL_C[] =
    "enum { SHFL_down, SHFL_up, SHFL_xor, SHFL_idx };\n"
    "static void shfl_block(float *dst, const float *src, float *lanebuf, int64_t block, int kind, int64_t a) {\n"
    "    for (int64_t tid = 0; tid < block; tid++) lanebuf[tid] = src[tid];\n"
    "    for (int64_t tid = 0; tid < block; tid++) {\n"
    "        const int64_t lane = tid & 31;\n"
    "        int64_t s = kind == SHFL_down ? lane + a : kind == SHFL_up ? lane - a : kind == SHFL_xor ? lane ^ a : a & 31;\n"
    "        if ((kind == SHFL_down && (a < 0 || s > 31)) || (kind == SHFL_up && (a < 0 || s < 0)) ||\n"
    "            (kind == SHFL_xor && (s < 0 || s > 31))) s = lane;\n"
    "        dst[tid] = lanebuf[tid - lane + s];\n"
    "    }\n}\n";
static const char CONVERT_F16[] =
    "/* f16 weights are widened to f32 at each load */\n"
    "static DEVFN float f16_to_f32(uint32_t h) {\n"
    "    uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023, u;\n"
    "    if (e == 31) u = s | 0x7f800000u | (m << 13);\n"
    "    else if (e) u = s | ((e + 112) << 23) | (m << 13);\n"
    "    else if (!m) u = s;\n"
    "    else { e = 113; while (!(m & 1024)) { m <<= 1; e--; } u = s | (e << 23) | ((m & 1023) << 13); }\n"
    "    float f; memcpy(&f, &u, 4); return f;\n}\n";
static const char LD_F16[] = "static DEVFN float ld_f16(const uint16_t *p, int64_t i) { return f16_to_f32(p[i]); }\n";

static const char F32_TO_F16[] =
    "/* activations staged as f16 (for f16 weights): round to nearest even; past 65504 -> inf, below 2^-14 subnormal */\n"
    "static DEVFN uint16_t f32_to_f16(float f) {\n"
    "    uint32_t u; memcpy(&u, &f, 4);\n"
    "    uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
    "    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);\n"
    "    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);   /* rounds past 65504 */\n"
    "    if (a < 0x38800000u) {   /* below 2^-14: a subnormal half, m * 2^-24 */\n"
    "        if (a < 0x33000000u) return (uint16_t)s;   /* below 2^-25: rounds to 0 */\n"
    "        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;   /* value = m * 2^(e - 150) */\n"
    "        uint32_t q = m >> sh, r = m & ((1u << sh) - 1), half = 1u << (sh - 1);\n"
    "        q += r > half || (r == half && (q & 1));\n"
    "        return (uint16_t)(s | q);\n"
    "    }\n"
    "    uint32_t r = a + 0xfffu + ((a >> 13) & 1);   /* round the 13 dropped bits to nearest even */\n"
    "    return (uint16_t)(s | ((r - 0x38000000u) >> 13));\n}\n";
static const char F32_TO_BF16[] =
    "/* activations staged as bf16: round to nearest even (NaN stays NaN) */\n"
    "static DEVFN uint16_t f32_to_bf16(float f) {\n"
    "    uint32_t u; memcpy(&u, &f, 4);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);\n"
    "    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);\n}\n";
/* The CPU's tensor core: one warp's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, gathering
 * every lane's fragments per the PTX ISA's layouts (kernel_ir.h), so a schedule that puts a value in the
 * wrong register computes a wrong product here as on the GPU. Products of bf16 are exact in f32; the 16
 * of one output are summed in double and added to C with one rounding to f32 (the GPU's adder is at least
 * f32 wide but unspecified in order and rounding: results can differ in the last bits). */
static const char MMA_EMU[] =
    "static float mma_bf16(uint32_t h) { uint32_t u = (h & 0xffffu) << 16; float f; memcpy(&f, &u, 4); return f; }\n"
    "static float mma_elem(int f16, uint32_t h) { return f16 ? f16_to_f32(h & 0xffffu) : mma_bf16(h); }\n"
    "static void mma_warp(int64_t w, int f16, const uint32_t *a0, const uint32_t *a1, const uint32_t *a2, const uint32_t *a3,\n"
    "                     const uint32_t *b0, const uint32_t *b1, float *c0, float *c1, float *c2, float *c3) {\n"
    "    float A[16][16], B[16][8];\n"
    "    for (int l = 0; l < 32; l++) {\n"
    "        const int g = l >> 2, t = l & 3;\n"
    "        const int64_t i = w + l;\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            A[g][2 * t + h] = mma_elem(f16, a0[i] >> (16 * h));\n"
    "            A[g + 8][2 * t + h] = mma_elem(f16, a1[i] >> (16 * h));\n"
    "            A[g][2 * t + 8 + h] = mma_elem(f16, a2[i] >> (16 * h));\n"
    "            A[g + 8][2 * t + 8 + h] = mma_elem(f16, a3[i] >> (16 * h));\n"
    "            B[2 * t + h][g] = mma_elem(f16, b0[i] >> (16 * h));\n"
    "            B[2 * t + 8 + h][g] = mma_elem(f16, b1[i] >> (16 * h));\n"
    "        }\n"
    "    }\n"
    "    for (int l = 0; l < 32; l++) {\n"
    "        const int g = l >> 2, t = l & 3;\n"
    "        float *c[4] = {c0 + w + l, c1 + w + l, c2 + w + l, c3 + w + l};\n"
    "        for (int q = 0; q < 4; q++) {\n"
    "            const int r = g + 8 * (q >> 1), col = 2 * t + (q & 1);\n"
    "            double s = 0;\n"
    "            for (int k = 0; k < 16; k++) s += (double)A[r][k] * (double)B[k][col];\n"
    "            *c[q] = (float)((double)*c[q] + s);\n"
    "        }\n"
    "    }\n"
    "}\n";
/* ldmatrix.sync.aligned.m8n8.xN.shared.b16 for one warp: lanes 8m..8m+7 give the rows of matrix m */
static const char LDM_EMU[] =
    "static void ldmatrix_warp(const char *kernel, int64_t w, const uint16_t *s, int64_t size, const int64_t *addr, int nmat,\n"
    "                          uint32_t *d0, uint32_t *d1, uint32_t *d2, uint32_t *d3) {\n"
    "    uint32_t *d[4] = {d0, d1, d2, d3};\n"
    "    for (int j = 0; j < 8 * nmat; j++) {\n"
    "        const int64_t a = addr[w + j];\n"
    "        if (a < 0 || a % 8 || a + 8 > size) {\n"
    "            fprintf(stderr, \"llmcc: %s: ldmatrix row at element %lld is outside shared memory or not 16-byte aligned\\n\", kernel, (long long)a);\n"
    "            abort();\n"
    "        }\n"
    "    }\n"
    "    for (int l = 0; l < 32; l++)\n"
    "        for (int m = 0; m < nmat; m++) {\n"
    "            const int64_t o = addr[w + 8 * m + (l >> 2)] + 2 * (l & 3);\n"
    "            d[m][w + l] = (uint32_t)s[o] | (uint32_t)s[o + 1] << 16;\n"
    "        }\n"
    "}\n";

/* cp.async on the CPU. A copy is queued when a thread issues it (after the alignment and bounds checks the
 * GPU would fault on) and performed only by the wait_group that completes its group, oldest first; commit
 * and wait are kernel-level statements, so the block's threads share one group count. A schedule that
 * reads a stage before waiting for it reads what was there before (the C backend fills shared memory
 * with NaN at block start), as it may on the GPU. */
static const char CP_EMU[] =
    "typedef struct { uint8_t *dst; const uint8_t *src; int bytes; int64_t group; } CpCopy;\n"
    "typedef struct { CpCopy *q; int n, cap; int64_t groups; } CpQueue;\n"
    "static void cp_async_issue(CpQueue *c, const char *kernel, void *smem, int64_t size, int64_t off, const void *src, int bytes) {\n"
    "    if (off < 0 || off + bytes > size || (uintptr_t)((uint8_t *)smem + off) % bytes || (src && (uintptr_t)src % bytes)) {\n"
    "        fprintf(stderr, \"llmcc: %s: %d-byte cp.async at shared byte %lld is outside shared memory or misaligned\\n\", kernel, bytes, (long long)off);\n"
    "        abort();\n"
    "    }\n"
    "    if (c->n == c->cap) {\n"
    "        c->cap = c->cap ? 2 * c->cap : 256;\n"
    "        c->q = (CpCopy *)realloc(c->q, (size_t)c->cap * sizeof *c->q);\n"
    "        if (!c->q) { fprintf(stderr, \"llmcc: %s: out of memory\\n\", kernel); abort(); }\n"
    "    }\n"
    "    c->q[c->n++] = (CpCopy){(uint8_t *)smem + off, (const uint8_t *)src, bytes, c->groups};\n"
    "}\n"
    "static void cp_async_commit(CpQueue *c) { c->groups++; }\n"
    "static void cp_async_wait(CpQueue *c, int pending) {\n"
    "    int keep = 0;\n"
    "    for (int i = 0; i < c->n; i++) {\n"
    "        const CpCopy *p = &c->q[i];\n"
    "        if (p->group >= c->groups - pending) { c->q[keep++] = *p; continue; }\n"
    "        if (p->src) memcpy(p->dst, p->src, (size_t)p->bytes);\n"
    "        else memset(p->dst, 0, (size_t)p->bytes);\n"
    "    }\n"
    "    c->n = keep;\n"
    "}\n";

void emit_launch_guard(Str *o, const KLaunch *l) {
    if (l->run_if == 1) str_printf(o, "if ((int64_t)n > %dLL) ", l->min_n);
    else if (l->run_if == 2) str_printf(o, "if ((int64_t)n <= %dLL) ", l->min_n);
}

static const char *pdt(DType d) {
    switch (d) { case DT_F32: return "PDT_F32"; case DT_F16: return "PDT_F16"; case DT_BF16: return "PDT_BF16"; case DT_I32: return "PDT_I32"; default: break; }
    UNREACHABLE();
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
        /* a field holds one dtype and shape in every layer */
        if (l >= 0 && f < nm->nlfield && (nm->lfield[f]->dtype != b->dtype || nm->lfield[f]->ndim != b->ndim ||
                                          memcmp(nm->lfield[f]->dims, b->dims, sizeof b->dims))) l = -1;
        if (l < 0) {   /* a model-level field: the whole name where a layer's would not fit, clear of Model's own */
            Str f = {0};
            ident_str(&f, strncmp(b->name, "model.", 6) ? b->name : b->name + 6, false);
            static const char *const own[] = {"w", "c", "act", "kc", "vc", "logits", "host_logits", "ids", "work",
                                               "ctx", "wbytes", "kvbytes", "actbytes", "wdev", "layers", NULL};
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

/* Strings of a model-level weight's field could meet another's: they are checked when the struct is printed */
static void host_arg(Str *o, const Names *nm, const Buffer *b, int seg) {
    switch (b->kind) {
    case BUF_WEIGHT: {
        int wl = nm->layer[b->id];
        if (wl < 0) str_printf(o, "m->%s", nm->field[b->id]);
        else if (wl == seg) str_printf(o, "L->%s", nm->field[b->id]);
        else if (seg >= 0) str_printf(o, "m->layers[l %c %d].%s", wl < seg ? '-' : '+', abs(wl - seg), nm->field[b->id]);
        else str_printf(o, "m->layers[%d].%s", wl, nm->field[b->id]);
        return;
    }
    case BUF_KCACHE: case BUF_VCACHE: {
        const char *c = b->kind == BUF_KCACHE ? "kc" : "vc";
        if (b->layer == seg) str_printf(o, "LAYER_KV(%s, l)", c);
        else if (seg >= 0) str_printf(o, "LAYER_KV(%s, l %c %d)", c, b->layer < seg ? '-' : '+', abs(b->layer - seg));
        else str_printf(o, "LAYER_KV(%s, %d)", c, b->layer);
        return;
    }
    case BUF_INPUT: str_printf(o, "m->ids"); return;
    case BUF_OUTPUT: str_printf(o, "m->logits"); return;
    case BUF_ACT: str_printf(o, "ACT(%s)", nm->act[b->id]); return;
    case BUF_CONST: str_printf(o, "m->c[%d]", nm->cidx[b->id]); return;
    case BUF_WORK: str_printf(o, "m->work"); return;
    case BUF_KIND_COUNT: break;
    }
    UNREACHABLE();
}

/* One launch at indent d; seg >= 0: it runs in the body of decoder layer seg (l, L), else literal. Arguments
 * wrap at 120 columns. */
static void emit_launch(Str *o, const Names *nm, const KLaunch *l, int seg, bool cuda, int d) {
    const char *mod = l->module;
    if (seg >= 0) layer_of(mod, &mod);
    ind(o, d); emit_launch_guard(o, l);
    str_printf(o, "{ /* %s */\n", mod);
    ind(o, d + 1); str_printf(o, "int64_t grid = "); emit_host_expr(o, l->grid); str_printf(o, ";\n");
    size_t line = o->len;
    ind(o, d + 1);
    if (cuda) str_printf(o, "%s<<<(unsigned)grid, %d>>>(n, pos", l->k->name, l->k->block);
    else str_printf(o, "%s(grid, n, pos", l->k->name);
    for (int j = 0; j < l->k->nparams; j++) {
        Str a = {0};
        host_arg(&a, nm, l->args[j], seg);
        if (o->len - line + a.len + 4 > 120) { str_printf(o, ",\n"); line = o->len; ind(o, d + 3); }
        else str_printf(o, ", ");
        str_printf(o, "%s", a.s);
        str_free(&a);
    }
    str_printf(o, ");\n"); ind(o, d); str_printf(o, "}\n");
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
                if (!strcmp(t, run[h * cnt + p].s)) { str_printf(o, "%sl == %d", first ? "" : " || ", lay0 + lo + h); first = 0; }
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

/* model_forward's launches. The decoder layers run the same kernels: a run of consecutive layers with as
 * many launches each is one loop over l, its launches printed once with L = &m->layers[l], where they bind
 * the same activations and the layer's weights and KV cache. A layer at either end of the run whose
 * launches differ in more than a quarter of the positions (layer 0 gathers the embedding, and its buffers
 * may sit elsewhere in the arena) is printed on its own, as is a layer with another launch count. */
static void emit_forward(Str *o, const Names *nm, const KProgram *kp, bool cuda) {
    int n = 0, *lay = malloc(sizeof(int) * (size_t)(kp->nl + 1)), *at = malloc(sizeof(int) * (size_t)(kp->nl + 1));
    Str *txt = calloc((size_t)kp->nl + 1, sizeof(Str));
    for (int i = 0; i < kp->nl; i++) {
        if (kernel_is_sampling(&kp->launches[i])) continue;
        at[n] = i;
        lay[n] = layer_of(kp->launches[i].module, NULL);
        emit_launch(&txt[n], nm, &kp->launches[i], lay[n], cuda, 0);
        n++;
    }
    for (int s = 0; s < n;) {
        int e = s;
        while (e < n && lay[e] == lay[s]) e++;
        int cnt = e - s, nseg = 1;   /* the run: layers lay[s] .. lay[s] + nseg - 1, cnt launches each */
        while (lay[s] >= 0 && s + (nseg + 1) * cnt <= n) {
            int t = s + nseg * cnt;
            bool ok = lay[t] == lay[s] + nseg && (t + cnt == n || lay[t + cnt] != lay[t]);
            for (int j = t; ok && j < t + cnt; j++) ok = lay[j] == lay[t];
            if (!ok) break;
            nseg++;
        }
        int lo = 0, hi = nseg, *diff = calloc((size_t)nseg, sizeof(int));
        Str *run = txt + s;
        for (int p = 0; p < cnt; p++) {
            int best = common_text(&run, nseg, cnt, p);
            for (int g = 0; g < nseg; g++) diff[g] += strcmp(run[g * cnt + p].s, run[best * cnt + p].s) != 0;
        }
        while (hi - lo > 1 && diff[lo] * 4 > cnt) lo++;
        while (hi - lo > 1 && diff[hi - 1] * 4 > cnt) hi--;
        free(diff);
        if (lay[s] < 0 || hi - lo < 2) lo = hi = nseg;
        for (int g = 0; g < nseg; g++) {
            if (g == lo) emit_layer_loop(o, run, lay[s], cnt, lo, hi);
            if (g >= lo && g < hi) continue;
            if (lay[s] >= 0) str_printf(o, "    /* layer %d: its launches differ from the loop's */\n", lay[s] + g);
            for (int j = s + g * cnt; j < s + (g + 1) * cnt; j++) emit_launch(o, nm, &kp->launches[at[j]], -1, cuda, 1);
        }
        s += nseg * cnt;
    }
    for (int i = 0; i < n; i++) str_free(&txt[i]);
    free(txt); free(lay); free(at);
}

void emit_host_expr(Str *o, const Expr *e) {
    /* grids use only n, pos and integer arithmetic */
    switch (e->k) {
    case EX_ICONST: str_printf(o, "%lldLL", (long long)e->i); return;
    case EX_PARAM: str_printf(o, "(int64_t)%s", param_names[e->i]); return;
    case EX_ADD: case EX_SUB: case EX_MUL: case EX_DIV: case EX_MOD:
        str_printf(o, "("); emit_host_expr(o, e->a[0]); str_printf(o, " %s ", expr_names[e->k]); emit_host_expr(o, e->a[1]); str_printf(o, ")");
        return;
    case EX_MIN: case EX_MAX:
        str_printf(o, "(("); emit_host_expr(o, e->a[0]); str_printf(o, ") %s (", e->k == EX_MIN ? "<" : ">"); emit_host_expr(o, e->a[1]);
        str_printf(o, ") ? ("); emit_host_expr(o, e->a[0]); str_printf(o, ") : ("); emit_host_expr(o, e->a[1]); str_printf(o, "))");
        return;
    default: CHECK(0, "grid expression uses %s", expr_names[e->k]);
    }
}

/* what the kernels' statements need from the prelude: loads and vector loads per dtype, shared stores
 * that round to bf16 */
typedef struct { bool load[DT_COUNT], vload[DT_COUNT], any_vload, to_bf16, to_f16, mma[2], ldm[5]; } Needs;
static void needs_expr(Needs *nd, const Expr *e) {
    if (!e) return;
    if (e->k == EX_LOAD) nd->load[e->buf->dtype] = true;
    for (int i = 0; i < e->nargs; i++) needs_expr(nd, e->a[i]);
}
static void needs_ts(Needs *nd, const KKernel *k, TStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        const TStmt *s = b[i];
        needs_expr(nd, s->e); needs_expr(nd, s->lo); needs_expr(nd, s->step); needs_expr(nd, s->sidx);
        if (s->k == TS_STORE || s->k == TS_VLOAD || s->k == TS_CP_ASYNC)
            for (int d = 0; d < s->buf->ndim; d++) needs_expr(nd, s->idx[d]);
        if (s->k == TS_VLOAD) nd->vload[s->buf->dtype] = nd->any_vload = true;
        if (s->k == TS_SSTORE && k->smem[s->smem].b16) *(k->smem[s->smem].f16 ? &nd->to_f16 : &nd->to_bf16) = true;
        needs_ts(nd, k, s->body, s->nbody);
    }
}
static void needs_ks(Needs *nd, const KKernel *k, KStmt **b, int n) {
    for (int i = 0; i < n; i++) {
        const KStmt *s = b[i];
        if (s->k == KS_PHASE) needs_ts(nd, k, s->body, s->nbody);
        if (s->k == KS_LDMATRIX) needs_expr(nd, s->laddr);
        if (s->k == KS_MMA) nd->mma[s->mf16] = true;
        if (s->k == KS_LDMATRIX) nd->ldm[s->nmat] = true;
        if (s->k == KS_ULET) needs_expr(nd, s->init);
        if (s->k == KS_UFOR) { needs_expr(nd, s->init); needs_expr(nd, s->cond); needs_expr(nd, s->update); needs_ks(nd, k, s->kbody, s->nk); }
    }
}

void emit_prelude(Str *o, const KProgram *kp, Target t, const char *api_header) {
    bool cuda = t == TARGET_CUDA;
    str_printf(o, "%s", PRELUDE);
    if (cuda) str_printf(o, "#include <cuda_runtime.h>\n#define DEVFN __device__ __forceinline__\n");
    else str_printf(o, "#define DEVFN inline\n");
    if (api_header) {
        if (cuda) str_printf(o, "extern \"C\" {\n#include \"%s\"\n}\n", api_header);
        else str_printf(o, "#include \"%s\"\n", api_header);
    }
    Needs nd = {0};
    for (int i = 0; i < kp->nk; i++) needs_ks(&nd, kp->kernels[i], kp->kernels[i]->body, kp->kernels[i]->nbody);
    if (!cuda && nd.any_vload) str_printf(o, "%s", VLOAD_FAULT);
    if (!cuda && nd.vload[DT_F32]) str_printf(o, VLOAD_C, "f32", "float", "");
    bool mma = false, ldm = false, cp = false;
    for (int i = 0; i < kp->nk; i++) {
        const KKernel *k = kp->kernels[i];
        mma |= ks_has(k->body, k->nbody, KS_MMA);
        ldm |= ks_has(k->body, k->nbody, KS_LDMATRIX);
        cp |= k->has_cp_async;
    }
    if (nd.to_bf16) str_printf(o, "%s", F32_TO_BF16);
    if (nd.to_f16) str_printf(o, "%s", F32_TO_F16);
    /* converters for the 16-bit dtypes the kernels read (cp.async copies bits: none); the mma emulation
     * decodes halves too */
    if (nd.load[DT_BF16] || nd.vload[DT_BF16]) str_printf(o, "%s", CONVERT_BF16);
    if (nd.load[DT_BF16]) str_printf(o, "%s", LD_BF16);
    if (nd.load[DT_F16] || nd.vload[DT_F16] || (!cuda && mma)) str_printf(o, "%s", CONVERT_F16);
    if (nd.load[DT_F16]) str_printf(o, "%s", LD_F16);
    static const char *const conv[DT_COUNT] = {[DT_F32] = "", [DT_BF16] = "bf16_to_f32", [DT_F16] = "f16_to_f32"};
    for (int d = 0; d < DT_COUNT; d++) {
        if (!nd.vload[d] || (!cuda && d == DT_F32)) continue;
        if (cuda) str_printf(o, VLOAD_CUDA, dtype_names[d], ctype_of((DType)d), conv[d], conv[d]);
        else str_printf(o, VLOAD_C, dtype_names[d], ctype_of((DType)d), conv[d]);
    }
    if (!cuda && mma) str_printf(o, "%s", MMA_EMU);
    bool shfl = false;
    for (int i = 0; i < kp->nk; i++) shfl |= kp->kernels[i]->has_shfl;
    if (!cuda && shfl) str_printf(o, "%s", SHFL_C);
    for (int x = 1; x <= 4; x++) {   /* ldmatrix_xN(d0, .., dN-1, shared address of this lane's row) */
        if (!cuda || !nd.ldm[x]) continue;
        str_printf(o, "static DEVFN void ldmatrix_x%d(", x);
        for (int j = 0; j < x; j++) str_printf(o, "uint32_t &d%d, ", j);
        str_printf(o, "const uint16_t *row) {\n    asm volatile(\"ldmatrix.sync.aligned.m8n8.x%d.shared.b16 {", x);
        for (int j = 0; j < x; j++) str_printf(o, "%s%%%d", j ? ", " : "", j);
        str_printf(o, "}, [%%%d];\"\n                 : ", x);
        for (int j = 0; j < x; j++) str_printf(o, "%s\"=r\"(d%d)", j ? ", " : "", j);
        str_printf(o, " : \"r\"((unsigned)__cvta_generic_to_shared(row)));\n}\n");
    }
    for (int f = 0; f < 2; f++)
        if (cuda && nd.mma[f]) str_printf(o, MMA_CUDA, f ? "f16" : "bf16", f ? "f16" : "bf16", f ? "f16" : "bf16");
    if (!cuda && ldm) str_printf(o, "%s", LDM_EMU);
    if (!cuda && cp) str_printf(o, "%s", CP_EMU);
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

void emit_kernels(Str *o, const KProgram *kp, Target t) {
    str_printf(o, "\n/* ---- kernels ---- */\n");
    for (int i = 0; i < kp->nk; i++) {
        Str k = {0};
        if (t == TARGET_CUDA) emit_kernel_cuda(&k, kp->kernels[i]);
        else emit_kernel_c(&k, kp->kernels[i]);
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
            str_printf(o, "    const %s *%s; /* %s[%lld", ctype_of(b->dtype), nm->field[b->id], dtype_names[b->dtype],
                       (long long)b->dims[0]);
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
    str_printf(o, "    const float *c[%d];\n    uint8_t *act;\n    float *kc, *vc, *logits, *host_logits;\n"
                  "    int32_t *ids;\n    float *work;\n    int ctx;\n    size_t wbytes, kvbytes, actbytes;\n    void *wdev;\n};\n\n",
               nm->nconst ? nm->nconst : 1);
}

/* model_init: the typed fields from w. A field at the same stride in every layer fills in one loop. */
static void emit_weight_fields(Str *o, const Names *nm, const TProgram *tp) {
    for (int i = 0; i < tp->n_weights; i++) {
        const Buffer *b = tp->weights[i];
        if (nm->layer[b->id] < 0) str_printf(o, "    m->%s = (const %s *)m->w[%d];\n", nm->field[b->id], ctype_of(b->dtype), i);
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
        for (int f = 0; f < nm->nlfield; f++) regular &= first[l * nm->nlfield + f] == first[f] + l * stride && first[f] >= 0;
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
static void emit_act_macros(Str *o, const Names *nm, const KProgram *kp) {
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
                  "/* layer l's rows of a KV cache (kc, vc): ctx positions of %lld floats */\n"
                  "#define LAYER_KV(cache, l) (m->cache + (size_t)(l) * m->ctx * %lld)\n\n",
               (long long)tp->kv_layer_elems, (long long)tp->kv_layer_elems);
}

void emit_program(Str *o, const KProgram *kp, const EmitOptions *eo) {
    const TProgram *tp = kp->tp;
    const ModelConfig *c = eo->cfg;
    bool cuda = eo->target == TARGET_CUDA;
    str_printf(o, "/* %s: generated by llmcc from %s (%s). Do not edit: rebuild with llmcc.\n"
                  " * %d distinct kernels, %d launches per forward call. */\n",
               cuda ? "model.cu" : "model.c", c->dir, c->architecture, kp->nk, kp->nl - kernel_sampling_launches(kp));
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
    emit_kernels(o, kp, eo->target);
    /* model info */
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
    str_printf(o, "const ModelInfo model_info = {\n    \"%s\", \"%s\", \"%s\",\n", eo->name, c->architecture, cuda ? "cuda" : "cpu");
    str_printf(o, "    %d, %d, %d, %d,\n    %d, %d, %d,\n    %d, %d,\n    %d,\n    %d, {", c->vocab_size, c->hidden_size,
               c->intermediate_size, c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads, c->head_dim,
               eo->max_ctx, eo->max_batch, c->bos_token_id, c->n_eos);
    for (int i = 0; i < c->n_eos; i++) str_printf(o, "%s%d", i ? ", " : "", c->eos_token_ids[i]);
    if (!c->n_eos) str_printf(o, "0");
    str_printf(o, "},\n    ");
    float_lit(o, c->temperature); str_printf(o, ", ");
    float_lit(o, c->top_p); str_printf(o, ", ");
    float_lit(o, c->min_p); str_printf(o, ", ");
    float_lit(o, c->repetition_penalty);
    str_printf(o, ",\n    %d,\n    %d, tensor_names,\n    %lld,\n};\n", c->top_k, tp->n_weights, tp->top_k ? (long long)tp->top_k->dims[2] : 0LL);
    /* expected tensor table */
    str_printf(o, "#define SHAPE_OF(name, dtype, ndim, d0, d1) {dtype, ndim, {d0, d1}},\n"
                  "static const struct { uint32_t dtype, ndim; uint64_t shape[2]; } tensor_shapes[%d] = {TENSORS(SHAPE_OF)};\n\n",
               tp->n_weights);
    emit_model_struct(o, &nm, tp);
    int64_t V = c->vocab_size;
    int64_t work = kernel_work_bytes(kp);
    /* model_init */
    str_printf(o, "const char *model_init(Model **out, const PayloadTensor *t, const uint8_t *data, int ctx) {\n"
                  "    static char err[256];\n"
                  "    if (ctx < 1 || ctx > model_info.max_ctx) { snprintf(err, sizeof err, \"context %%d is outside 1..%%d\", ctx, model_info.max_ctx); return err; }\n"
                  "    for (int i = 0; i < %d; i++) {\n"
                  "        if (strcmp(t[i].name, tensor_names[i]) || t[i].dtype != tensor_shapes[i].dtype || t[i].ndim != tensor_shapes[i].ndim ||\n"
                  "            t[i].shape[0] != tensor_shapes[i].shape[0] || (t[i].ndim > 1 && t[i].shape[1] != tensor_shapes[i].shape[1])) {\n"
                  "            snprintf(err, sizeof err, \"payload tensor %%d is %%.100s, expected %%s with its compiled shape\", i, t[i].name, tensor_names[i]);\n"
                  "            return err;\n        }\n    }\n"
                  "    Model *m = (Model *)calloc(1, sizeof *m);\n    if (!m) return \"out of memory\";\n    m->ctx = ctx;\n"
                  "    size_t kv = (size_t)%d * ctx * %lld;\n"
                  "    m->kvbytes = 2 * kv * sizeof(float);\n    m->actbytes = %lld;\n",
               tp->n_weights, c->num_hidden_layers, (long long)tp->kv_layer_elems, (long long)tp->act_bytes);
    if (!cuda) {
        str_printf(o, "    for (int i = 0; i < %d; i++) { m->w[i] = data + t[i].offset; m->wbytes += t[i].nbytes; }\n", tp->n_weights);
        for (int i = 0; i < nm.nconst; i++) str_printf(o, "    m->c[%d] = c_%d;\n", i, i);
        str_printf(o, "    m->act = (uint8_t *)calloc(1, m->actbytes + 1);\n    m->kc = (float *)calloc(kv, sizeof(float));\n"
                      "    m->vc = (float *)calloc(kv, sizeof(float));\n    m->logits = (float *)calloc(%lld, sizeof(float));\n"
                      "    m->ids = (int32_t *)calloc(%d, sizeof(int32_t));\n"
                      "    m->work = (float *)calloc(1, %lld); /* split-K partials */\n"
                      "    if (!m->act || !m->kc || !m->vc || !m->logits || !m->ids || !m->work) { model_free(m); return \"out of memory\"; }\n",
                   (long long)V, eo->max_batch, (long long)work + 16);
    } else {
        str_printf(o, "    int ndev = 0;\n    cudaError_t e = cudaGetDeviceCount(&ndev);\n"
                      "    if (e != cudaSuccess || ndev == 0) { snprintf(err, sizeof err, \"no CUDA GPU is available (%%s)\", e != cudaSuccess ? cudaGetErrorString(e) : \"no devices\"); free(m); return err; }\n"
                      "    size_t total = 0;\n    for (int i = 0; i < %d; i++) total += (t[i].nbytes + 255) & ~(size_t)255;\n"
                      "    m->wbytes = total;\n"
                      "#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(err, sizeof err, \"%%s: %%s\", #x, cudaGetErrorString(e_)); model_free(m); return err; } } while (0)\n"
                      "    CK(cudaMalloc(&m->wdev, total ? total : 1));\n"
                      "    size_t off = 0;\n"
                      "    for (int i = 0; i < %d; i++) {\n"
                      "        CK(cudaMemcpy((uint8_t *)m->wdev + off, data + t[i].offset, t[i].nbytes, cudaMemcpyHostToDevice));\n"
                      "        m->w[i] = (uint8_t *)m->wdev + off; off += (t[i].nbytes + 255) & ~(size_t)255;\n    }\n",
                   tp->n_weights, tp->n_weights);
        for (int i = 0; i < nm.nconst; i++)
            str_printf(o, "    { void *p; CK(cudaMalloc(&p, sizeof c_%d)); CK(cudaMemcpy(p, c_%d, sizeof c_%d, cudaMemcpyHostToDevice));"
                          " m->c[%d] = (const float *)p; }\n", i, i, i, i);
        str_printf(o, "    CK(cudaMalloc(&m->act, m->actbytes + 1));\n    CK(cudaMalloc(&m->kc, kv * sizeof(float)));\n"
                      "    CK(cudaMalloc(&m->vc, kv * sizeof(float)));\n    CK(cudaMemset(m->kc, 0, kv * sizeof(float)));\n    CK(cudaMemset(m->vc, 0, kv * sizeof(float)));\n"
                      "    CK(cudaMalloc(&m->logits, %lld * sizeof(float)));\n    CK(cudaMalloc(&m->ids, %d * sizeof(int32_t)));\n"
                      "    CK(cudaMalloc(&m->work, %lld)); /* split-K partials */\n#undef CK\n",
                   (long long)V, eo->max_batch, (long long)work + 16);
    }
    emit_weight_fields(o, &nm, tp);
    str_printf(o, "    *out = m;\n    return NULL;\n}\n\n");
    emit_act_macros(o, &nm, kp);
    /* model_forward: the launch plan */
    str_printf(o, "int model_forward(Model *m, const int32_t *ids, int n, int pos, float *logits) {\n");
    if (cuda) str_printf(o, "    cudaMemcpy(m->ids, ids, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice);\n");
    else str_printf(o, "    memcpy(m->ids, ids, (size_t)n * sizeof(int32_t));\n");
    emit_forward(o, &nm, kp, cuda);
    /* the argmax kernel's result (an index held exactly in an f32) sits in the activation arena */
    const Buffer *nt = tp->next_token;
    CHECK(nt && nt->kind == BUF_ACT && nt->act_offset >= 0, "the model has no argmax of its logits");
    str_printf(o, "    float next;\n");
    if (cuda) str_printf(o, "    cudaError_t e = cudaMemcpy(&next, ACT(%s), sizeof next, cudaMemcpyDeviceToHost);\n"
                            "    if (e == cudaSuccess && logits) e = cudaMemcpy(logits, m->logits, %lld * sizeof(float), cudaMemcpyDeviceToHost);\n"
                            "    if (e != cudaSuccess) { fprintf(stderr, \"%s: CUDA error: %%s\\n\", cudaGetErrorString(e)); exit(1); }\n",
                         nm.act[nt->id], (long long)V, eo->name);
    else str_printf(o, "    memcpy(&next, ACT(%s), sizeof next);\n    if (logits) memcpy(logits, m->logits, %lld * sizeof(float));\n",
                    nm.act[nt->id], (long long)V);
    str_printf(o, "    return (int)next;\n}\n\n");
    /* model_topk: the sampler's kernels, with n = k */
    const Buffer *tk = tp->top_k;
    CHECK(tk && tk->kind == BUF_ACT && tk->act_offset >= 0 && tk->ndim == 3, "the model has no topk of its logits");
    int64_t KM = tk->dims[2];
    str_printf(o, "int model_topk(Model *m, int k, float *vals, int32_t *ids) {\n"
                  "    if (k < 1 || k > %lld) return -1;\n    const int n = k, pos = 0;\n    (void)pos;\n", (long long)KM);
    for (int i = 0; i < kp->nl; i++)
        if (kernel_is_sampling(&kp->launches[i])) emit_launch(o, &nm, &kp->launches[i], -1, cuda, 1);
    str_printf(o, "    float out[%lld];\n", (long long)(2 * KM));
    if (cuda) str_printf(o, "    cudaError_t e = cudaMemcpy(out, ACT(%s), sizeof out, cudaMemcpyDeviceToHost);\n"
                            "    if (e != cudaSuccess) { fprintf(stderr, \"%s: CUDA error: %%s\\n\", cudaGetErrorString(e)); exit(1); }\n",
                         nm.act[tk->id], eo->name);
    else str_printf(o, "    memcpy(out, ACT(%s), sizeof out);\n", nm.act[tk->id]);
    str_printf(o, "    for (int i = 0; i < k; i++) { vals[i] = out[i]; ids[i] = (int32_t)out[%lld + i]; }\n    return 0;\n}\n\n", (long long)KM);
    str_printf(o, "void model_logits(Model *m, float *logits) {\n");
    if (cuda) str_printf(o, "    cudaError_t e = cudaMemcpy(logits, m->logits, %lld * sizeof(float), cudaMemcpyDeviceToHost);\n"
                            "    if (e != cudaSuccess) { fprintf(stderr, \"%s: CUDA error: %%s\\n\", cudaGetErrorString(e)); exit(1); }\n}\n\n",
                         (long long)V, eo->name);
    else str_printf(o, "    memcpy(logits, m->logits, %lld * sizeof(float));\n}\n\n", (long long)V);
    str_printf(o, "size_t model_memory_bytes(const Model *m, size_t *weights, size_t *kv, size_t *act) {\n"
                  "    if (weights) *weights = m->wbytes;\n    if (kv) *kv = m->kvbytes;\n    if (act) *act = m->actbytes;\n"
                  "    return m->wbytes + m->kvbytes + m->actbytes;\n}\n\n");
    str_printf(o, "void model_free(Model *m) {\n    if (!m) return;\n");
    if (cuda) {
        str_printf(o, "    cudaFree(m->wdev); cudaFree(m->act); cudaFree(m->kc); cudaFree(m->vc); cudaFree(m->logits); cudaFree(m->ids); cudaFree(m->work);\n");
        for (int i = 0; i < nm.nconst; i++) str_printf(o, "    cudaFree((void *)m->c[%d]);\n", i);
    } else {
        str_printf(o, "    free(m->act); free(m->kc); free(m->vc); free(m->logits); free(m->ids); free(m->work);\n");
    }
    str_printf(o, "    free(m);\n}\n%s", cuda ? "} /* extern \"C\" */\n" : "");
    arena_free(&nm.A);
}
