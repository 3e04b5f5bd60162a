/* fuzz_gguf.c: libFuzzer harness for the GGUF reader (compiler/gguf.c): the
 * input is one .gguf file. An accepted file must keep its promises: every
 * key and tensor found again by name, every string, array and tensor inside
 * the mapping, tensors aligned and sized by their type, and the getter of a
 * value's own type succeeds, and gguf_print prints it; a rejected one gives
 * a one-line message naming the file. The last step asks for a value with the wrong type, which must
 * be a user error too. */
#include "fuzz_common.h"
#include "gguf.h"

static bool inside(const GgufFile *g, const void *p, uint64_t n) {
    const uint8_t *b = p;
    return b >= g->base && b <= g->base + g->size && n <= (uint64_t)(g->base + g->size - b);
}

static unsigned touch_kv(const GgufFile *g, const GgufKV *kv) {
    unsigned sum = 0;
    if (gguf_find_kv(g, kv->key) != kv) fz_fail("gguf_find_kv does not find an accepted key", kv->key);
    int64_t iv;
    double dv;
    bool bv;
    GgufStr sv;
    const GgufKV *arr;
    switch (kv->type) {
    case GGUF_FLOAT32: case GGUF_FLOAT64:
        if (!gguf_get_float(g, kv->key, &dv)) fz_fail("gguf_get_float", kv->key);
        break;
    case GGUF_BOOL:
        if (!gguf_get_bool(g, kv->key, &bv)) fz_fail("gguf_get_bool", kv->key);
        break;
    case GGUF_STRING:
        if (!gguf_get_str(g, kv->key, &sv) || !inside(g, sv.s, sv.len)) fz_fail("gguf_get_str", kv->key);
        sum += sv.len ? (unsigned char)sv.s[sv.len - 1] : 0;
        break;
    case GGUF_ARRAY:
        if (!gguf_get_array(g, kv->key, kv->elem_type, &arr) || arr != kv) fz_fail("gguf_get_array", kv->key);
        for (uint64_t i = 0; i < kv->count; i++) {
            if (kv->elem_type == GGUF_STRING) {
                GgufStr s = gguf_kv_str(kv, i);
                if (!inside(g, s.s, s.len)) fz_fail("an array string outside the file", kv->key);
                sum += s.len ? (unsigned char)s.s[s.len - 1] : 0;
            } else if (kv->elem_type == GGUF_FLOAT32 || kv->elem_type == GGUF_FLOAT64) {
                sum += gguf_kv_float(kv, i) > 0;
            } else if (kv->elem_type == GGUF_UINT64) {
                sum += (unsigned)gguf_kv_uint(kv, i);
            } else {
                sum += (unsigned)gguf_kv_int(kv, i);
            }
        }
        break;
    default:   /* integers; a UINT64 above INT64_MAX is refused, which ends this input */
        if (!gguf_get_int(g, kv->key, &iv)) fz_fail("gguf_get_int", kv->key);
        break;
    }
    return sum;
}

static unsigned touch_tensor(const GgufFile *g, const GgufTensor *t) {
    if (gguf_find_tensor(g, t->name) != t) fz_fail("gguf_find_tensor does not find an accepted tensor", t->name);
    if (t->offset % g->alignment || t->data != g->base + g->data_offset + t->offset)
        fz_fail("tensor misplaced", t->name);
    uint64_t elems = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];   /* cannot overflow once accepted */
    if (elems / (uint64_t)ggml_type_block_size(t->type) * (uint64_t)ggml_type_block_bytes(t->type) != t->nbytes)
        fz_fail("tensor size does not match its shape and type", t->name);
    if (!t->nbytes) return 0;
    if (!inside(g, t->data, t->nbytes)) fz_fail("tensor bytes outside the file", t->name);
    return t->data[0] + t->data[t->nbytes - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_put(0, "model.gguf", data, size);
    fz_must_name = path;
    static Arena a;
    static GgufFile g;
    memset(&g, 0, sizeof g);
    if (setjmp(fz_jmp) == 0) {
        gguf_open(&a, path, &g);
        volatile unsigned sum = 0;
        for (int i = 0; i < g.n_tensors; i++) sum += touch_tensor(&g, &g.tensors[i]);
        for (int i = 0; i < g.n_kv; i++) sum += touch_kv(&g, &g.kv[i]);
        (void)sum;
        static FILE *devnull;   /* inspect's printer too: escapes, array heads, totals */
        if (!devnull && !(devnull = fopen("/dev/null", "w"))) fz_fail("cannot open /dev/null", "");
        gguf_print(&g, devnull);
        if (g.n_kv) {   /* a STRING asked for as a BOOL, anything else as a STRING: a user error */
            bool b;
            GgufStr s;
            if (g.kv[0].type == GGUF_STRING ? gguf_get_bool(&g, g.kv[0].key, &b) : gguf_get_str(&g, g.kv[0].key, &s))
                fz_fail("a getter of the wrong type succeeded", g.kv[0].key);
        }
    }
    gguf_close(&g);
    arena_free(&a);
    return 0;
}
