/* fuzz_gguf_model.c: libFuzzer harness for a model read from a GGUF file, past the reader that fuzz_gguf.c covers:
 * the metadata into a ModelConfig (compiler/gguf_model.c), the tensors checked against the weights the graph
 * reads, and the tokenizer.* metadata packed into the runtime's blob (compiler/tokenizer_gguf.c). The input is one
 * .gguf file. A refused file gives a one-line message naming it; an accepted one keeps the promises the later
 * stages rely on: sizes positive and within CONFIG_LIMITS, heads that divide, finite positive floats, token ids
 * inside the vocabulary, every weight inside the mapping, and a packed tokenizer that the runtime loads (a blob the
 * compiler writes and the executable refuses would be a bug) with the vocabulary the embedding has, which then
 * encodes, decodes and renders a two-message conversation through the file's chat template, where it has one. */
#include "fuzz_tok.h"
#include "gguf_model.h"
#include "tokenizer_pack.h"
#include <math.h>

static void check_config(const ModelConfig *c, const char *path) {
    if (c->hidden_size <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 || c->head_dim <= 0 ||
        c->vocab_size <= 0 || c->num_hidden_layers <= 0 || c->intermediate_size <= 0)
        fz_fail("accepted a non-positive size", path);
#define BEYOND(field, key, gguf_key, max) \
    if ((int64_t)c->field > (int64_t)(max)) fz_fail("accepted " key " beyond its limit", path);
    CONFIG_LIMITS(BEYOND)
#undef BEYOND
    if (c->num_attention_heads % c->num_key_value_heads || c->head_dim % 2)
        fz_fail("accepted inconsistent heads", path);
    if (c->n_eos < 0 || c->n_eos > LLMCC_MAX_EOS || c->bos_token_id >= c->vocab_size)
        fz_fail("accepted bad token ids", path);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] < 0 || c->eos_token_ids[i] >= c->vocab_size)
            fz_fail("accepted an eos id outside the vocabulary", path);
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0) || !(c->rope_factor > 0) || !isfinite(c->rms_norm_eps) ||
        !isfinite(c->rope_theta) || !isfinite(c->rope_factor))
        fz_fail("accepted a bad float", path);
}

static void check_chat(const Tokenizer *t) {
    if (!tokenizer_has_chat(t)) return;
    static const ChatMsg conv[] = {{"user", "Hello", 5}, {"assistant", "Hi there", 8}};
    char err[256];
    size_t len;
    char *s = tokenizer_chat_render(t, conv, 2, true, TOK_THINK_DEFAULT, NULL, &len, err, sizeof err);
    if (!s && (!err[0] || strchr(err, '\n'))) fz_fail("a template refused without a one-line reason", err);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_put(0, "model.gguf", data, size);
    fz_must_name = path;
    static Arena a;
    static GgufModel m;
    static ModelConfig c;
    static StModel st;
    if (setjmp(fz_jmp) == 0) {
        gguf_model_open(&a, path, NULL, &m, &c);
        check_config(&c, path);
        gguf_model_tensors(&a, &m, &c, &st);
        const GgufFile *g = &m.file;
        for (int i = 0; i < st.n; i++) {
            const StTensor *w = &st.t[i];
            if (w->data < g->base || w->nbytes > g->size || w->data + w->nbytes > g->base + g->size)
                fz_fail("a weight outside the mapping", w->name);
        }
        size_t n;
        uint8_t *blob = tokenizer_pack_gguf(&a, g, path, &(TokPackOpts){0}, &n);
        if (blob) {
            Tokenizer *t;
            const char *err = tokenizer_load(&t, blob, n);
            if (err) fz_fail("the runtime refuses the blob the compiler packed", err);
            if (tokenizer_vocab_size(t) != c.vocab_size) fz_fail("the tokenizer's vocabulary is not the model's", path);
            check_chat(t);
            fz_encode_check_free(t);
        }
    }
    st_close(&st);
    gguf_model_close(&m);
    memset(&m, 0, sizeof m);
    arena_free(&a);
    return 0;
}
