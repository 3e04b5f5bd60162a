/* fuzz_tokenizer_json.c: libFuzzer harness for the tokenizer.json loader
 * (compiler/tokenizer_pack.c). The input up to the first NUL byte is
 * tokenizer.json, the rest (when there is a NUL) tokenizer_config.json.
 * Whatever the packer accepts, the runtime loader must accept too, and must
 * encode and decode a fixed text with ids inside the vocabulary. */
#include "fuzz_tok.h"
#include "tokenizer_pack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t n1, n2; const uint8_t *p2;
    fz_split(data, size, &n1, &p2, &n2);
    fz_put(0, "tokenizer.json", data, n1);
    fz_put(1, "tokenizer_config.json", p2, n2);
    fz_must_name = fz_dir();
    static Arena a;
    if (setjmp(fz_jmp) == 0) {
        size_t bs;
        uint8_t *blob = tokenizer_pack(&a, fz_dir(), &bs);
        if (!blob) fz_fail("tokenizer.json exists but tokenizer_pack returned NULL", fz_dir());
        Tokenizer *t;
        const char *err = tokenizer_load(&t, blob, bs);
        if (err) fz_fail("the runtime rejects a blob the packer wrote", err);
        fz_encode_check_free(t);
    }
    arena_free(&a);
    return 0;
}
