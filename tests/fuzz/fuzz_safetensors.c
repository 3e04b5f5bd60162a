/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader
 * (compiler/safetensors.h): the input is one .safetensors file. Accepted
 * files must give tensors whose bytes lie inside the file and that st_find
 * finds; rejected ones a one-line message naming the file. */
#include "fuzz_common.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_put(0, "model.safetensors", data, size);
    fz_must_name = path;
    static Arena a;
    static StModel m;
    memset(&m, 0, sizeof m);
    if (setjmp(fz_jmp) == 0) {
        st_open_file(&a, path, &m);
        const uint8_t *base = m.files[0].base, *end = base + m.files[0].size;
        unsigned sum = 0;
        for (int i = 0; i < m.n; i++) {
            const StTensor *t = &m.t[i];
            if (st_find(&m, t->name) != t) fz_fail("st_find does not find an accepted tensor", t->name);
            if (t->nbytes && (t->data < base || t->data + t->nbytes > end)) fz_fail("tensor bytes outside the file", t->name);
            if (t->nbytes) sum += t->data[0] + t->data[t->nbytes - 1];
        }
        (void)sum;
    }
    st_close(&m);
    arena_free(&a);
    return 0;
}
