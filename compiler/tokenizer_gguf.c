/* tokenizer_gguf.c: the tokenizer of a GGUF file (its tokenizer.* metadata, as
 * llama.cpp's convert_hf_to_gguf.py writes it) -> the packed blob of
 * runtime/tokenizer.h, the same blob tokenizer_pack.c writes for the
 * tokenizer.json the file was converted from. A byte-level ("gpt2") GGUF keeps
 * the vocabulary, the merges, the token types and the special ids, but not the
 * normalizer or the pre-tokenizer: those are named by tokenizer.ggml.pre, and
 * only the names whose pre-tokenizer llama.cpp's llama-vocab.cpp runs as llmcc
 * does (the same regex, the same flags) are accepted; anything else is a user
 * error naming the key, never a silently different tokenizer.
 *
 * A SentencePiece ("llama") GGUF (Llama 2, TinyLlama, Mistral) keeps pieces and
 * scores, no merges: llama.cpp merges the adjacent pair whose concatenation is
 * the piece of highest score. That is BPE with one merge per split of each
 * piece, ranked by the piece's score, as transformers' LlamaConverter writes
 * the tokenizer.json (and scripts/convert_llama2c.py for llama2.c's export):
 * spm_merges builds them, and the rest is that tokenizer.json's (U+2581 for
 * spaces and in front, byte fallback, BOS added). */
#include "tokenizer_pack.h"
#include "gguf.h"
#include "tokenizer.h"
#include "tokenizer_pack_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define K_MODEL "tokenizer.ggml.model"
#define K_PRE "tokenizer.ggml.pre"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_TYPES "tokenizer.ggml.token_type"
#define K_MERGES "tokenizer.ggml.merges"
#define K_BOS "tokenizer.ggml.bos_token_id"
#define K_EOS "tokenizer.ggml.eos_token_id"
#define K_ADD_BOS "tokenizer.ggml.add_bos_token"
#define K_ADD_EOS "tokenizer.ggml.add_eos_token"
#define K_CHAT "tokenizer.chat_template"
#define K_SCORES "tokenizer.ggml.scores"
#define K_UNK "tokenizer.ggml.unknown_token_id"
#define K_SPACE_PREFIX "tokenizer.ggml.add_space_prefix"
#define K_EXTRA_SPACES "tokenizer.ggml.remove_extra_whitespaces"

/* gguf-py's TokenType (llama.cpp's llama_token_type) */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* tokenizer.ggml.pre of a byte-level ("gpt2") vocabulary: the names llama-vocab.cpp gives a
 * pre-tokenizer that llmcc runs, with what the tokenizer.json behind them holds besides. */
static const struct {
    const char *name;
    uint32_t pre, flags;
    bool add_bos;            /* llama.cpp's default when tokenizer.ggml.add_bos_token is absent */
} GPT2_PRES[] = {
    /* GPT-2's regex alone: ByteLevel(use_regex) */
    { "gpt-2", TOK_PRE_GPT2, 0, false },
    /* "\p{N}", then GPT-2's regex: SmolLM's [Digits(individual_digits), ByteLevel(use_regex)] */
    { "smollm", TOK_PRE_GPT2, TOKF_DIGITS, false },
    /* Qwen2's Split regex; Qwen2's tokenizer.json normalizes to NFC first (llama.cpp does not) */
    { "qwen2", TOK_PRE_QWEN2, TOKF_NFC, false },
    /* Llama 3's Split regex; llama.cpp, like Llama 3's tokenizer.json, ignores merges for a word in the
     * vocabulary and adds BOS unless the file says otherwise */
    { "llama3", TOK_PRE_LLAMA3, TOKF_IGNORE_MERGES, true },
    { "llama-v3", TOK_PRE_LLAMA3, TOKF_IGNORE_MERGES, true },
    { "llama-bpe", TOK_PRE_LLAMA3, TOKF_IGNORE_MERGES, true },
};

typedef struct {
    Arena *a;
    const char *path;
    const GgufKV *tokens;
    uint32_t n;
    Hash vocab;              /* the vocabulary's spelling (GGUF's, byte-mapped) -> id: NORMAL, UNKNOWN, BYTE */
    Hash added;              /* CONTROL and USER_DEFINED tokens' text -> id */
    uint8_t *types_of;       /* each id's TT_* */
} Gk;

static bool str_is(GgufStr s, const char *lit) { return s.len == strlen(lit) && memcmp(s.s, lit, s.len) == 0; }

/* Token text -> id as HF's AddedVocabulary looks it up: added tokens first, then the vocabulary. */
static int32_t gk_lookup(const void *ctx, const char *s, size_t n) {
    const Gk *k = ctx;
    int32_t id = tokhash_get(&k->added, s, n);
    return id >= 0 ? id : tokhash_get(&k->vocab, s, n);
}

/* An optional token id key: -1 when absent, else an id of the vocabulary. */
static int32_t token_id_key(const GgufFile *g, const Gk *k, const char *key) {
    int64_t v;
    if (!gguf_get_int(g, key, &v)) return -1;
    if (v < 0 || v >= (int64_t)k->n)
        die_user(k->path, key, "%lld is not a token id (%s has %u tokens)", (long long)v, K_TOKENS, k->n);
    return (int32_t)v;
}

typedef struct { float score; uint32_t id, at; int32_t left, right; } SpmMerge;
static int spm_merge_order(const void *x, const void *y) {
    const SpmMerge *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* SentencePiece's merges from its scores: every split of a NORMAL piece (at a character boundary) into two
 * pieces of the file, ranked by the piece's score (highest first), then its id, then where it splits. */
static uint32_t *spm_merges(Gk *k, const uint8_t *tf, const GgufKV *scores, uint32_t *count) {
    size_t n = 0, cap = 1024;
    SpmMerge *m = ARENA_ARRAY(k->a, SpmMerge, cap);
    for (uint32_t id = 0; id < k->n; id++) {
        GgufStr s = k->tokens->strs[id];
        if (tf[id] != TOKT_VOCAB || k->types_of[id] != TT_NORMAL) continue;
        double score = gguf_kv_float(scores, id);
        if (!isfinite(score))
            die_user(k->path, arena_printf(k->a, "%s[%u]", K_SCORES, id), "%g is not a finite score", score);
        for (uint32_t at = 1; at < s.len; at++) {
            if (((uint8_t)s.s[at] & 0xC0) == 0x80) continue;   /* inside a UTF-8 character */
            int32_t left = gk_lookup(k, s.s, at), right = gk_lookup(k, s.s + at, s.len - at);
            if (left < 0 || right < 0) continue;
            if (n == cap) {
                SpmMerge *grown = ARENA_ARRAY(k->a, SpmMerge, 2 * cap);
                memcpy(grown, m, cap * sizeof *m);
                m = grown;
                cap *= 2;
            }
            m[n++] = (SpmMerge){ (float)score, id, at, left, right };
        }
    }
    if (n >= (1u << 24)) die_user(k->path, K_TOKENS, "its pieces split into more than 16777215 merges");
    qsort(m, n, sizeof *m, spm_merge_order);
    uint32_t *mg = ARENA_ARRAY(k->a, uint32_t, 3 * (n > 0 ? n : 1));
    for (size_t i = 0; i < n; i++) {
        mg[3 * i] = (uint32_t)m[i].left; mg[3 * i + 1] = (uint32_t)m[i].right; mg[3 * i + 2] = m[i].id;
    }
    *count = (uint32_t)n;
    return mg;
}

uint8_t *tokenizer_pack_gguf(Arena *a, const GgufFile *g, const char *path, const TokPackOpts *opts, size_t *size) {
    Gk gk = { .a = a, .path = path }, *k = &gk;
    GgufStr model;
    if (!gguf_get_str(g, K_MODEL, &model) || str_is(model, "none")) return NULL;
    const bool spm = str_is(model, "llama");
    if (!spm && !str_is(model, "gpt2"))
        die_user(path, K_MODEL, "\"%.*s\" is not supported yet (only \"gpt2\", byte-level BPE, and \"llama\", "
                 "SentencePiece)", (int)(model.len > 64 ? 64 : model.len), model.s);

    /* ---- pre-tokenizer: byte-level BPE's by name; SentencePiece's is U+2581 for every space and one in front,
     * which llama.cpp does only with add_space_prefix (its default) ---- */
    int ip = -1;
    bool flag = true;
    if (spm && gguf_get_bool(g, K_SPACE_PREFIX, &flag) && !flag)
        die_user(path, K_SPACE_PREFIX, "false is not supported yet (only a SentencePiece model that adds one)");
    if (spm && gguf_get_bool(g, K_EXTRA_SPACES, &flag) && flag)
        die_user(path, K_EXTRA_SPACES, "true is not supported yet (llmcc keeps every space, as Llama 2's does)");
    if (!spm) {
        GgufStr pre;
        if (!gguf_get_str(g, K_PRE, &pre))
            die_user(path, K_PRE, "absent: llama.cpp's \"default\" pre-tokenizer is not supported yet");
        for (int i = 0; i < (int)(sizeof GPT2_PRES / sizeof GPT2_PRES[0]); i++)
            if (str_is(pre, GPT2_PRES[i].name)) ip = i;
        if (ip < 0)
            die_user(path, K_PRE, "\"%.*s\" is not supported yet (known: gpt-2, smollm, qwen2, llama3, llama-v3, "
                     "llama-bpe)", (int)(pre.len > 64 ? 64 : pre.len), pre.s);
    }

    /* ---- tokens and their types ---- */
    if (!gguf_get_array(g, K_TOKENS, GGUF_STRING, &k->tokens)) die_user(path, K_TOKENS, "absent");
    if (k->tokens->count == 0) die_user(path, K_TOKENS, "no tokens");
    if (k->tokens->count >= (1u << 24))
        die_user(path, K_TOKENS, "%llu tokens: more than the 16777215 llmcc packs",
                 (unsigned long long)k->tokens->count);
    uint32_t n = k->n = (uint32_t)k->tokens->count;
    const GgufKV *types = NULL;
    if (gguf_get_array(g, K_TYPES, GGUF_INT64, &types) && types->count != n)
        die_user(path, K_TYPES, "%llu types for %u tokens", (unsigned long long)types->count, n);
    const char **ts = ARENA_ARRAY(a, const char *, n);
    uint32_t *tn = ARENA_ARRAY(a, uint32_t, n);
    uint8_t *tf = ARENA_ARRAY(a, uint8_t, n);
    k->types_of = ARENA_ARRAY(a, uint8_t, n);
    tokhash_init(a, &k->vocab, n);
    tokhash_init(a, &k->added, n);
    int16_t unmap[GPT2_UNMAP_SIZE];
    gpt2_unmap_table(unmap);
    for (uint32_t id = 0; id < n; id++) {
        GgufStr s = k->tokens->strs[id];
        int64_t ty = types ? gguf_kv_int(types, id) : TT_NORMAL;
        if (ty < TT_NORMAL || ty > TT_BYTE)
            die_user(path, arena_printf(a, "%s[%u]", K_TYPES, id), "%lld is not a token type (1 to 6)", (long long)ty);
        ts[id] = s.s; tn[id] = (uint32_t)s.len; tf[id] = 0;
        k->types_of[id] = (uint8_t)ty;
        /* an unused id ("[PAD123]", where the model has more rows than the tokenizer ids) is no token,
         * as an id missing from tokenizer.json is; so is an empty string */
        if (ty == TT_UNUSED || s.len == 0) { tn[id] = 0; continue; }
        if (ty == TT_CONTROL || ty == TT_USER_DEFINED || (spm && ty == TT_UNKNOWN)) {
            /* tokenizer.json's added_tokens: matched in the text before BPE, in their own spelling;
             * control ones are special (hidden when decoding). SentencePiece's <unk>, <s>, </s> are pieces too
             * (a Llama tokenizer.json has them in model.vocab and in added_tokens) */
            tf[id] = TOKT_ADDED | (ty != TT_USER_DEFINED ? TOKT_SPECIAL : 0) | (spm ? TOKT_VOCAB : 0);
            *tokhash_slot(&k->added, s.s, s.len) = (HEnt){ s.s, s.len, (int32_t)id };
            continue;
        }
        tf[id] = TOKT_VOCAB;
        HEnt *e = tokhash_slot(&k->vocab, s.s, s.len);
        /* the same spelling twice: the later id is the token, as in llama.cpp's token_to_id and in
         * transformers' vocabulary dict; the earlier one is left out of BPE's lookups */
        if (e->id >= 0) tf[e->id] &= (uint8_t)~TOKT_VOCAB;
        *e = (HEnt){ s.s, s.len, (int32_t)id };
        char *o = arena_alloc(a, s.len);
        size_t on;
        if (!spm && gpt2_unmap(unmap, s.s, s.len, o, &on)) { ts[id] = o; tn[id] = (uint32_t)on; }
    }

    /* ---- merges: "left right", split at the first space after the first byte, as llama.cpp does ---- */
    /* (SentencePiece: built from the scores, spm_merges) */
    const GgufKV *mkv = NULL, *scores = NULL;
    uint32_t nm = 0, *mg = NULL;
    if (spm) {
        if (!gguf_get_array(g, K_SCORES, GGUF_FLOAT32, &scores))
            die_user(path, K_SCORES, "absent: a SentencePiece vocabulary needs its scores");
        if (scores->count != n)
            die_user(path, K_SCORES, "%llu scores for %u tokens", (unsigned long long)scores->count, n);
        mg = spm_merges(k, tf, scores, &nm);
    } else {
        if (!gguf_get_array(g, K_MERGES, GGUF_STRING, &mkv))
            die_user(path, K_MERGES, "%s: BPE needs its merges", gguf_find_kv(g, K_MERGES) ? "not a list of strings"
                                                                                            : "absent");
        if (mkv->count >= (1u << 24)) die_user(path, K_MERGES, "more than 16777215 merges");
        /* no merges leave every token of more than one byte out of reach: the text would be misread as bytes */
        if (mkv->count == 0 && n > 256) die_user(path, K_MERGES, "empty, for %u tokens: BPE needs its merges", n);
        nm = (uint32_t)mkv->count;
        mg = ARENA_ARRAY(a, uint32_t, 3 * (size_t)(nm > 0 ? nm : 1));
    }
    size_t catcap = 256;
    char *cat = arena_alloc(a, catcap);
    for (uint32_t i = 0; mkv && i < nm; i++) {
        GgufStr m = mkv->strs[i];
        const char *sp = m.len > 1 ? memchr(m.s + 1, ' ', m.len - 1) : NULL;
        const char *mkey = arena_printf(a, "%s[%u]", K_MERGES, i);
        if (!sp) die_user(path, mkey, "\"%.*s\" is not \"left right\"", (int)(m.len > 64 ? 64 : m.len), m.s);
        const char *as = m.s, *bs = sp + 1;
        size_t an = (size_t)(sp - m.s), bn = m.len - an - 1;
        if (an + bn > catcap) { catcap = 2 * (an + bn); cat = arena_alloc(a, catcap); }
        memcpy(cat, as, an); memcpy(cat + an, bs, bn);
        /* a merge names vocabulary spellings; an added token is taken only where no vocabulary token is */
        int32_t ia = tokhash_get(&k->vocab, as, an), ib = tokhash_get(&k->vocab, bs, bn);
        int32_t ic = tokhash_get(&k->vocab, cat, an + bn);
        if (ia < 0) ia = tokhash_get(&k->added, as, an);
        if (ib < 0) ib = tokhash_get(&k->added, bs, bn);
        if (ic < 0) ic = tokhash_get(&k->added, cat, an + bn);
        if (ia < 0 || ib < 0 || ic < 0)
            die_user(path, mkey, "\"%.*s\" + \"%.*s\": %s is not in %s", (int)an, as, (int)bn, bs,
                     ia < 0 ? "the left part" : ib < 0 ? "the right part" : "the merged token", K_TOKENS);
        mg[3 * i] = (uint32_t)ia; mg[3 * i + 1] = (uint32_t)ib; mg[3 * i + 2] = (uint32_t)ic;
    }

    /* ---- special ids ---- */
    /* tokenizer.ggml.unknown_token_id is tokenizer_config's unk_token, not BPE's: byte-level BPE has none
     * (Qwen2's, Llama 3's, SmolLM's tokenizer.json), and llama.cpp, like HF, drops a byte without a token.
     * SentencePiece's is BPE's unk_token (a character without a piece or a byte token) */
    int32_t bos = token_id_key(g, k, K_BOS), eos = token_id_key(g, k, K_EOS), unk = -1;
    bool byte_tokens = false;
    for (uint32_t id = 0; spm && id < n; id++) {
        if (unk < 0 && k->types_of[id] == TT_UNKNOWN) unk = (int32_t)id;
        byte_tokens = byte_tokens || k->types_of[id] == TT_BYTE;
    }
    int32_t unk_key = spm ? token_id_key(g, k, K_UNK) : -1;
    if (unk_key >= 0) unk = unk_key;
    bool add_bos = spm || GPT2_PRES[ip].add_bos, add_eos = false;
    gguf_get_bool(g, K_ADD_BOS, &add_bos);
    gguf_get_bool(g, K_ADD_EOS, &add_eos);
    if (add_bos && bos < 0)
        die_user(path, K_ADD_BOS, "true%s but there is no %s", gguf_find_kv(g, K_ADD_BOS) ? "" : " (llama.cpp's "
                 "default for this pre-tokenizer)", K_BOS);
    if (add_eos && eos < 0) die_user(path, K_ADD_EOS, "true but there is no %s", K_EOS);

    /* ---- chat template: --chat-template's or the file's; bos_token and eos_token as the texts of their ids ---- */
    ChatInfo ci = { .eot = -1 };
    GgufStr tpl;
    const char *tpl_text = NULL, *tpl_path = path, *tpl_key = K_CHAT;
    size_t tpl_len = 0;
    if (opts && opts->chat_template) {
        tpl_text = chat_template_file(a, opts->chat_template, &tpl_len);
        tpl_path = opts->chat_template;
        tpl_key = NULL;
    } else if (!(opts && opts->no_chat) && gguf_get_str(g, K_CHAT, &tpl)) {
        tpl_text = tpl.s;
        tpl_len = (size_t)tpl.len;
    }
    if (tpl_text) {
        ChatSource src = { .a = a, .path = tpl_path, .tpl_key = tpl_key, .lookup = gk_lookup, .ctx = k };
        const char *bos_text = bos >= 0 ? arena_strndup(a, ts[bos], tn[bos]) : NULL;
        const char *eos_text = eos >= 0 ? arena_strndup(a, ts[eos], tn[eos]) : NULL;
        chat_prepare(&src, tpl_text, tpl_len, bos_text, eos_text, eos, &ci);
    }

    uint32_t flags = (add_bos ? TOKF_ADD_BOS : 0) | (add_eos ? TOKF_ADD_EOS : 0) |
                     (spm ? TOKF_SPM_NORM | TOKF_FUSE_UNK | TOKF_STRIP_LEAD | (byte_tokens ? TOKF_BYTE_FALLBACK : 0)
                          : GPT2_PRES[ip].flags);
    TokSpec spec = { .model = spm ? TOK_MODEL_SPM : TOK_MODEL_BYTELEVEL, .flags = flags,
                     .pre = spm ? TOK_PRE_NONE : GPT2_PRES[ip].pre, .bos = bos, .eos = eos,
                     .unk = unk, .ntok = n, .str = ts, .len = tn, .tflag = tf, .nmerge = nm, .merges = mg, .chat = ci };
    return tokpack_write(a, &spec, path, K_TOKENS, size);
}
