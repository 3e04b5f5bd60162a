/* fuzz_tokenizer_json.c: libFuzzer harness for the tokenizer.json loader
 * (compiler/tokenizer_pack.c). The input up to the first NUL byte is
 * tokenizer.json, the rest (when there is a NUL) tokenizer_config.json.
 * Whatever the packer accepts, the runtime loader must accept too, and must
 * encode and decode a fixed text with ids inside the vocabulary. */
#include "fuzz_common.h"
#include "tokenizer_pack.h"
#include "tokenizer.h"

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
        static const char text[] = "Hello, world! 123 \xC3\xA9t\xC3\xA9  <s>\n\tx \xF0\x9F\x98\x80 \xFF end";
        int32_t *ids;
        int n = tokenizer_encode(t, text, sizeof text - 1, true, &ids);
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) fz_fail("encode gave an id outside the vocabulary", text);
        free(tokenizer_decode(t, ids, n, true));
        free(ids);
        tokenizer_free(t);
    }
    arena_free(&a);
    return 0;
}
