/* ir.h: what every IR level shares: scalar types, variables, buffers (the
 * memory a kernel reads and writes) and expression trees. Graph IR, tensor
 * IR, loop IR and kernel IR all compute with the same Expr nodes; each level
 * adds its own structure around them. */
#ifndef LLMCC_IR_H
#define LLMCC_IR_H
#include "util.h"
#include "dtypes.h"

/* Storage types of buffers: runtime/dtypes.h's rows as DT_F32, DT_Q8_0, ... (the value is the type's payload
 * code). Arithmetic is f32 (values) and i64 (indices). A row of a weight of a block type is whole blocks,
 * dequantized to f32 where an element is loaded (runtime/kernels.h ld_q8_0 ..., docs/gguf.md "Quantized
 * weights"); only weights have them. */
#define DTYPE_DT_ENUM(id, name, bytes, block, ggml) DT_##id,
typedef enum { ALL_DTYPES(DTYPE_DT_ENUM) DT_COUNT } DType;
extern const char *const dtype_names[];
extern const int dtype_sizes[];   /* bytes per block (per element for the scalar types) */
extern const int dtype_block[];   /* elements per block: 1 for the scalar types */
static inline bool dtype_is_quant(DType d) { return d >= DT_Q8_0 && d < DT_COUNT; }
/* bytes of elems values of d (for a block type, a whole number of blocks: CHECKed) */
int64_t dtype_bytes(DType d, int64_t elems);

/* Runtime scalars every kernel receives: tokens in this call, and the
 * position of the first of them. */
#define PARAMS(X) X(P_N, "n") X(P_POS, "pos")
typedef enum { PARAMS(X_ENUM) P_COUNT } ParamId;
extern const char *const param_names[];

#define BUFKINDS(X) X(BUF_WEIGHT, "weight") X(BUF_INPUT, "input") X(BUF_ACT, "act") \
    X(BUF_KCACHE, "kcache") X(BUF_VCACHE, "vcache") X(BUF_CONST, "const") X(BUF_OUTPUT, "output") \
    X(BUF_WORK, "workspace")
typedef enum { BUFKINDS(X_ENUM) BUF_KIND_COUNT } BufKind;
extern const char *const bufkind_names[];

#define MAX_DIMS 4
typedef struct Buffer {
    int id;
    const char *name;          /* weights: the checkpoint's tensor name */
    BufKind kind;
    DType dtype;
    int ndim;
    int64_t dims[MAX_DIMS];    /* allocated extents (rows sized for max_batch / max_ctx) */
    int layer;                 /* a KV-cache view's and a weight's decoder layer; else -1 */
    int weight_index;          /* weights: index in the payload's tensor table */
    const float *const_data;   /* BUF_CONST: values, dims[0] floats */
    int64_t act_offset;        /* BUF_ACT: byte offset in the activation arena (memory plan) */
    bool rows_n;               /* BUF_ACT: dims[0] is the call's tokens (max_batch rows), one row per token */
                               /* BUF_WORK: one split-K kernel pair's scratch, always at workspace offset 0 */
} Buffer;

typedef struct Var { int id; const char *name; } Var;

/* Expression kinds: name, arity (-1: variable). */
#define EXPR_KINDS(X) \
    X(EX_FCONST, "fconst", 0) X(EX_ICONST, "iconst", 0) X(EX_VAR, "var", 0) X(EX_PARAM, "param", 0) \
    X(EX_LOAD, "load", -1) X(EX_ACC, "acc", 0) \
    X(EX_ADD, "+", 2) X(EX_SUB, "-", 2) X(EX_MUL, "*", 2) X(EX_DIV, "/", 2) X(EX_MOD, "%", 2) \
    X(EX_MIN, "min", 2) X(EX_MAX, "max", 2) X(EX_LT, "<", 2) X(EX_LE, "<=", 2) X(EX_EQ, "==", 2) \
    X(EX_NEG, "neg", 1) X(EX_EXP, "exp", 1) X(EX_RSQRT, "rsqrt", 1) X(EX_COS, "cos", 1) X(EX_SIN, "sin", 1) \
    X(EX_TOF, "f32", 1) X(EX_TOI, "i64", 1) X(EX_SELECT, "select", 3) \
    X(EX_TID, "tid", 0) X(EX_BID, "bid", 0) X(EX_REG, "reg", 0) X(EX_SLOAD, "sload", 1) \
    X(EX_VELEM, "velem", 0) X(EX_TOKEN_POS, "token_pos", 1) X(EX_KV_ROW, "kv_row", 1)
/* token_pos(x), kv_row(x): a _tokens kernel's (plan.c) token x's position and its row in the KV caches of all
 * slots (model_forward_batch's positions[x], kv_rows[x]), where the kernel it comes from reads pos + x */
typedef enum { EXPR_KINDS(X_ENUM) EX_COUNT } ExprKind;
extern const char *const expr_names[];
extern const int expr_arity[];

typedef enum { T_F32, T_I64, T_BOOL } EType;

typedef struct Expr {
    ExprKind k;
    EType t;
    double f;                  /* EX_FCONST */
    int64_t i;                 /* EX_ICONST, EX_PARAM (ParamId), EX_REG / EX_SLOAD (index into the kernel's tables),
                                  EX_VELEM (element of the vector) */
    Var *var;                  /* EX_VAR; EX_VELEM: the vector a kernel-IR vload bound */
    Buffer *buf;               /* EX_LOAD */
    int nargs;
    struct Expr **a;
} Expr;

/* Builders (all allocate in the arena). Integer constants fold. */
Expr *e_f(Arena *A, double v);
Expr *e_i(Arena *A, int64_t v);
Expr *e_var(Arena *A, Var *v);
Expr *e_param(Arena *A, ParamId p);
Expr *e_load(Arena *A, Buffer *b, int nidx, Expr **idx);
Expr *e_load1(Arena *A, Buffer *b, Expr *i0);
Expr *e_load2(Arena *A, Buffer *b, Expr *i0, Expr *i1);
Expr *e_load3(Arena *A, Buffer *b, Expr *i0, Expr *i1, Expr *i2);
Expr *e_acc(Arena *A);
Expr *e_acc_slot(Arena *A, int slot);                      /* accumulator slot of a nest with several (loop IR pairs) */
Expr *e_bin(Arena *A, ExprKind k, Expr *x, Expr *y);
Expr *e_un(Arena *A, ExprKind k, Expr *x);
Expr *e_select(Arena *A, Expr *c, Expr *x, Expr *y);
Expr *e_leaf(Arena *A, ExprKind k, EType t, int64_t i);   /* tid, bid, reg, ... */
Expr *e_velem(Arena *A, Var *vec, int64_t j);              /* element j of a vector loaded by a kernel-IR vload */
#define E_ADD(A, x, y) e_bin(A, EX_ADD, x, y)
#define E_SUB(A, x, y) e_bin(A, EX_SUB, x, y)
#define E_MUL(A, x, y) e_bin(A, EX_MUL, x, y)
#define E_DIV(A, x, y) e_bin(A, EX_DIV, x, y)

/* Replaces every EX_VAR v by r (and EX_ACC by acc when acc != NULL). */
Expr *expr_subst(Arena *A, Expr *e, Var *v, Expr *r);
Expr *expr_subst_acc(Arena *A, Expr *e, Expr *acc);        /* slot 0 */
Expr *expr_subst_accs(Arena *A, Expr *e, Expr *const *acc, int n);   /* slot j by acc[j] */
Expr *expr_subst_vars(Arena *A, Expr *e, Var *const *from, Expr *const *to, int n);   /* from[i] by to[i] */
/* Integer index arithmetic simplified with what the ranges (lo <= v < hi) tell:
 * constants gathered (x + 16 + 16 is x + 32), x % m dropped or shifted and
 * comparisons in a select decided where x's range allows. Loop IR splits
 * loops with it (rotary's halves). */
typedef struct { const Var *v; int64_t lo, hi; } VarRange;
Expr *expr_simplify(Arena *A, Expr *e, const VarRange *r, int nr);
/* Pure structural equality. */
bool expr_equal(const Expr *x, const Expr *y);
bool expr_uses_var(const Expr *e, const Var *v);
bool expr_reads_param(const Expr *e, ParamId p);   /* e NULL: false */
bool expr_is_const(const Expr *e, int64_t *v);
int64_t dims_elems(const int64_t *dims, int n);   /* the product of dims[0..n) */
/* Calls f on every EX_LOAD buffer (for parameter lists). */
void expr_visit_loads(const Expr *e, void (*f)(void *ctx, Buffer *b), void *ctx);

/* Debug printer used by every IR printer: loads as name[i, j]. */
void expr_print(Str *o, const Expr *e);
/* name[idx[0], ..., idx[n-1]]: a store's target, printed as a load of it would be */
void expr_print_ref(Str *o, const char *name, int n, Expr *const *idx);
/* Verifies types and arities; returns NULL or a message. */
const char *expr_verify(Arena *A, const Expr *e);
#endif
