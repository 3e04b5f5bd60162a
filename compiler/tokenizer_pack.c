/* tokenizer_pack.c: reads a Hugging Face tokenizer.json (and
 * tokenizer_config.json when present) and writes the packed blob of
 * runtime/tokenizer.h. Everything that can be decided once (model kind,
 * pre-tokenizer, GPT-2 byte map, merge result ids, BOS/EOS) is decided here
 * so that the runtime only validates and builds hash tables; the chat
 * template is checked here too (see "chat templates" below). Only the
 * configurations we reproduce exactly are accepted; anything else is a user
 * error naming the key, never a silently different tokenizer. */
#include "tokenizer_pack.h"
#include "json.h"
#include "tokenizer.h"
#include "tokenizer_pack_internal.h"
#include "jinja.h"
#include <stdlib.h>
#include <string.h>

#define RE_HEAD "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
static const char QWEN2_RE[] = RE_HEAD "\\p{N}" RE_TAIL;
static const char LLAMA3_RE[] = RE_HEAD "\\p{N}{1,3}" RE_TAIL;
#define SPM_SPACE "\xE2\x96\x81"   /* U+2581 */

void tokhash_init(Arena *a, Hash *h, size_t n) {
    size_t c = 16; while (c < 2 * n + 1) c <<= 1;
    h->e = ARENA_ARRAY(a, HEnt, c); h->mask = c - 1;
    for (size_t i = 0; i < c; i++) h->e[i].id = -1;
}
HEnt *tokhash_slot(const Hash *h, const char *s, size_t n) {
    for (size_t i = fnv1a(s, n) & h->mask;; i = (i + 1) & h->mask) {
        HEnt *e = &h->e[i];
        if (e->id < 0 || (e->n == n && memcmp(e->s, s, n) == 0)) return e;
    }
}
int32_t tokhash_get(const Hash *h, const char *s, size_t n) { return tokhash_slot(h, s, n)->id; }

typedef struct {
    Arena *a;
    const char *path;
    Json j;
    Hash vocab;          /* JSON (byte-mapped) spelling -> id */
    int32_t nadd;
    struct { int32_t id; char *s; size_t n; bool special; } *add;   /* added_tokens */
} Pk;

static const char *str_or_die(Pk *p, int t, const char *key, size_t *n) {
    char *s = json_get_str(p->a, &p->j, t, n);
    if (!s) die_user(p->path, key, "expected a string, got %s", t < 0 ? "nothing" : json_raw(p->a, &p->j, t));
    return s;
}
static const char *type_of(Pk *p, int obj, const char *key) {
    int t = json_find(&p->j, obj, "type");
    if (t < 0) die_user(p->path, key, "object without \"type\"");
    return str_or_die(p, t, key, NULL);
}
static bool get_bool(Pk *p, int obj, const char *k, bool dflt, const char *key) {
    int t = json_find(&p->j, obj, k);
    bool v = dflt;
    if (t < 0 || json_is_null(&p->j, t)) return dflt;
    if (!json_is_bool(&p->j, t, &v)) die_user(p->path, arena_printf(p->a, "%s.%s", key, k), "expected true or false");
    return v;
}
static bool empty_or_null_str(Pk *p, int obj, const char *k) {
    int t = json_find(&p->j, obj, k);
    if (t < 0 || json_is_null(&p->j, t)) return true;
    size_t n;
    return json_get_str(p->a, &p->j, t, &n) && n == 0;
}

/* Token string -> id: added tokens first (HF's AddedVocabulary), then the model vocab. */
static int32_t token_lookup(Pk *p, const char *s, size_t n) {
    for (int32_t i = 0; i < p->nadd; i++)
        if (p->add[i].n == n && memcmp(p->add[i].s, s, n) == 0) return p->add[i].id;
    return tokhash_get(&p->vocab, s, n);
}
static int32_t token_lookup_cb(const void *ctx, const char *s, size_t n) { return token_lookup((Pk *)ctx, s, n); }

void gpt2_unmap_table(int16_t *tab) {
    for (int i = 0; i < GPT2_UNMAP_SIZE; i++) tab[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (self) tab[b] = (int16_t)b;
        else tab[256 + n++] = (int16_t)b;
    }
}
bool gpt2_unmap(const int16_t *tab, const char *s, size_t n, char *out, size_t *on) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp; size_t l;
        if (c < 0x80) { cp = c; l = 1; }
        else if ((c & 0xE0) == 0xC0 && i + 1 < n) {
            cp = (uint32_t)(c & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F); l = 2;
        }
        else return false;
        if (cp >= GPT2_UNMAP_SIZE || tab[cp] < 0) return false;
        out[k++] = (char)tab[cp];
        i += l;
    }
    *on = k;
    return true;
}

/* Resolves a special token given in tokenizer_config.json: "str" or {"content": "str"}. */
static int32_t config_token(Pk *p, Json *cj, const char *cpath, const char *k, const char **text) {
    int t = json_find(cj, 0, k);
    if (t < 0 || json_is_null(cj, t)) return -1;
    if (json_type(cj, t) == JSON_OBJECT) t = json_find(cj, t, "content");
    size_t n;
    char *s = json_get_str(p->a, cj, t, &n);
    if (!s) die_user(cpath, k, "expected a token string or {\"content\": ...}");
    int32_t id = token_lookup(p, s, n);
    if (id < 0) die_user(cpath, k, "token \"%s\" is not in tokenizer.json", s);
    *text = s;
    return id;
}

/* TemplateProcessing.single -> the special token before / after $A. */
static void template_single(Pk *p, int tp, const char *key, int32_t *bos, int32_t *eos) {
    int single = json_find(&p->j, tp, "single");
    const char *skey = arena_printf(p->a, "%s.single", key);
    if (json_type(&p->j, single) != JSON_ARRAY) die_user(p->path, skey, "expected an array");
    int specials = json_find(&p->j, tp, "special_tokens");
    bool seen_seq = false;
    int k = single + 1;
    for (int i = 0; i < json_size(&p->j, single); i++, k = json_next(&p->j, k)) {
        if (json_find(&p->j, k, "Sequence") >= 0) {
            if (seen_seq) die_user(p->path, skey, "more than one sequence is not supported");
            seen_seq = true;
            continue;
        }
        int st = json_find(&p->j, k, "SpecialToken");
        if (st < 0) die_user(p->path, skey, "item %d is neither SpecialToken nor Sequence", i);
        size_t n;
        const char *name = str_or_die(p, json_find(&p->j, st, "id"), skey, &n);
        int32_t id = -1;
        int ent = json_find(&p->j, specials, name);
        int ids = json_find(&p->j, ent, "ids");
        int64_t v;
        if (json_size(&p->j, ids) == 1 && json_get_int64(&p->j, json_at(&p->j, ids, 0), &v) && v >= 0 && v < (1 << 24))
            id = (int32_t)v;
        else id = token_lookup(p, name, n);
        if (id < 0) die_user(p->path, skey, "special token \"%s\" has no id", name);
        int32_t *slot = seen_seq ? eos : bos;
        if (*slot >= 0)
            die_user(p->path, skey, "more than one special token on one side of the sequence is not supported");
        *slot = id;
    }
}

/* ---- chat templates ----
 * The template is kept as the checkpoint has it (Jinja source) and run by runtime/jinja.c; here it is parsed
 * once, so that a template llmcc cannot read is refused at build time with its line and column, and a probe
 * conversation is rendered to find the end-of-turn token: what the template writes right after an assistant's
 * message (<|im_end|>, <|eot_id|>, </s>, <end_of_turn>, ...), where the reply is to stop. */
#define PROBE_REPLY "llmcc-probe-reply"

/* a render of the template with messages (a JSON list), or NULL where it raises */
static char *probe_render(Arena *a, const JinjaTemplate *t, const char *messages, const char *bos, const char *eos) {
    char *vars = NULL;
    size_t n = 0, cap = 0;
    Str v = {0};
    str_printf(&v, "{\"messages\": %s, \"tools\": null, \"documents\": null, \"add_generation_prompt\": false",
               messages);
    for (int i = 0; i < 2; i++) {
        const char *tok = i ? eos : bos;
        if (!tok) continue;
        n = 0;
        if (!tokenizer_json_quote(&vars, &n, &cap, tok, strlen(tok))) die_internal(__FILE__, __LINE__, "oom");
        str_printf(&v, ", \"%s\": %.*s", i ? "eos_token" : "bos_token", (int)n, vars);
    }
    free(vars);
    str_printf(&v, "}");
    struct tm now = {.tm_year = 125, .tm_mon = 0, .tm_mday = 15, .tm_hour = 12, .tm_wday = 3, .tm_yday = 14};
    JinjaError err;
    size_t len;
    char *text = jinja_render(t, v.s, v.len, &now, NULL, &len, &err);
    str_free(&v);
    if (!text) return NULL;
    char *copy = arena_strndup(a, text, len);
    free(text);
    return copy;
}

void chat_prepare(const ChatSource *src, const char *tpl, size_t n, const char *bos, const char *eos,
                  int32_t eos_id, ChatInfo *ci) {
    JinjaError err;
    JinjaTemplate *t = jinja_parse(tpl, n, &err);
    if (!t) {
        char msg[700];
        jinja_error_string(&err, msg, sizeof msg);
        die_user(src->path, src->tpl_key, "%s (not Jinja llmcc reads: build with --chat-template FILE to give "
                 "another, or --no-chat to leave chat out)", msg);
    }
    ci->tpl = tpl;
    ci->tpl_len = n;
    ci->bos = bos;
    ci->eos = eos;
    ci->flags = memmem(tpl, n, "enable_thinking", 15) ? TOKC_THINKING : 0;
    /* the end of an assistant's turn: the longest token the text after the reply starts with (spaces and
     * newlines skipped), one that ends in > or ] as special tokens do; else the eos token */
    static const char *const probes[] = {
        "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"" PROBE_REPLY "\"}]",
        "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"}, "
        "{\"role\": \"assistant\", \"content\": \"" PROBE_REPLY "\"}]",
        "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"" PROBE_REPLY "\"}, "
        "{\"role\": \"user\", \"content\": \"Bye\"}]",
    };
    ci->eot = eos_id;
    for (size_t p = 0; p < sizeof probes / sizeof *probes; p++) {
        char *text = probe_render(src->a, t, probes[p], bos, eos);
        const char *at = text ? strstr(text, PROBE_REPLY) : NULL;
        if (!at) continue;
        at += strlen(PROBE_REPLY);
        while (*at == ' ' || *at == '\n' || *at == '\r' || *at == '\t') at++;
        int32_t best = -1;
        for (size_t k = 2; k <= 64 && at[k - 1]; k++)
            if (at[k - 1] == '>' || at[k - 1] == ']') {
                int32_t id = src->lookup(src->ctx, at, k);
                if (id >= 0) best = id;
            }
        if (best >= 0) ci->eot = best;
        break;
    }
    jinja_free(t);
}

/* the template text of --chat-template FILE, replacing the checkpoint's */
const char *chat_template_file(Arena *a, const char *path, size_t *len) {
    char *t = read_file(path, len);
    if (!t) die_user(path, "--chat-template", "cannot read");
    const char *copy = arena_strndup(a, t, *len);
    free(t);
    return copy;
}

/* A Metaspace pre-tokenizer or decoder at obj (key: its JSON path): TOK_PRE_META_*, and *split.
 * Read as `tokenizers` reads it: prepend_scheme defaults to "always" and split to true; the older
 * add_prefix_space false must come with prepend_scheme "never". */
static uint32_t metaspace(Pk *p, int obj, const char *key, bool *split) {
    Json *j = &p->j;
    const char *rk = arena_printf(p->a, "%s.replacement", key);
    const char *rep = str_or_die(p, json_find(j, obj, "replacement"), rk, NULL);
    if (strcmp(rep, SPM_SPACE) != 0) die_user(p->path, rk, "\"%s\" is not supported (only \"\u2581\")", rep);
    uint32_t pre = TOK_PRE_META_ALWAYS;
    int ps = json_find(j, obj, "prepend_scheme");
    const char *sk = arena_printf(p->a, "%s.prepend_scheme", key);
    if (ps >= 0 && !json_is_null(j, ps)) {
        const char *sc = str_or_die(p, ps, sk, NULL);
        if (strcmp(sc, "always") == 0) pre = TOK_PRE_META_ALWAYS;
        else if (strcmp(sc, "first") == 0) pre = TOK_PRE_META_FIRST;
        else if (strcmp(sc, "never") == 0) pre = TOK_PRE_META_NEVER;
        else die_user(p->path, sk, "\"%s\" is not one of \"always\", \"first\", \"never\"", sc);
    }
    if (!get_bool(p, obj, "add_prefix_space", true, key) && pre != TOK_PRE_META_NEVER)
        die_user(p->path, arena_printf(p->a, "%s.add_prefix_space", key),
                 "false does not match prepend_scheme \"%s\"", pre == TOK_PRE_META_FIRST ? "first" : "always");
    *split = get_bool(p, obj, "split", true, key);
    return pre;
}

uint8_t *tokpack_write(Arena *a, const TokSpec *s, const char *path, const char *key, size_t *size) {
    uint64_t pool = 0;
    for (uint32_t i = 0; i < s->ntok; i++) pool += s->len[i];
    const ChatInfo *ci = &s->chat;
    size_t bos_len = ci->bos ? strlen(ci->bos) : 0, eos_len = ci->eos ? strlen(ci->eos) : 0;
    uint64_t nchat = ci->tpl ? TOK_CHAT_HEADER_SIZE + (uint64_t)ci->tpl_len + bos_len + eos_len : 0;
    uint64_t total = TOK_HEADER_SIZE + 4ull * (s->ntok + 1) + s->ntok + 9ull * s->nmerge + pool + nchat;
    if (total > 0x7FFFFFFFull) die_user(path, key, "tokenizer too large to pack");
    uint8_t *blob = arena_alloc(a, (size_t)total), *w = blob;
#define PUT32(v) do { uint32_t _v = (v); for (int _s = 0; _s < 32; _s += 8) *w++ = (uint8_t)(_v >> _s); } while (0)
#define PUT24(v) do { uint32_t _v = (v); for (int _s = 0; _s < 24; _s += 8) *w++ = (uint8_t)(_v >> _s); } while (0)
    PUT32(TOK_MAGIC); PUT32(TOK_VERSION); PUT32(s->model); PUT32(s->flags);
    PUT32(s->pre); PUT32(s->bos); PUT32(s->eos); PUT32(s->unk);
    PUT32(s->ntok); PUT32(s->nmerge); PUT32(pool); PUT32(nchat);
    uint32_t off = 0;
    for (uint32_t i = 0; i < s->ntok; i++) { PUT32(off); off += s->len[i]; }
    PUT32(off);
    memcpy(w, s->tflag, s->ntok); w += s->ntok;
    const uint32_t *mg = s->merges;
    for (uint32_t i = 0; i < s->nmerge; i++) { PUT24(mg[3 * i]); PUT24(mg[3 * i + 1]); PUT24(mg[3 * i + 2]); }
    for (uint32_t i = 0; i < s->ntok; i++) { if (s->len[i]) memcpy(w, s->str[i], s->len[i]); w += s->len[i]; }
    if (nchat) {
        PUT32(ci->flags); PUT32(ci->eot); PUT32((uint32_t)ci->tpl_len);
        PUT32(ci->bos ? (uint32_t)bos_len : UINT32_MAX); PUT32(ci->eos ? (uint32_t)eos_len : UINT32_MAX);
        memcpy(w, ci->tpl, ci->tpl_len); w += ci->tpl_len;
        if (bos_len) { memcpy(w, ci->bos, bos_len); w += bos_len; }
        if (eos_len) { memcpy(w, ci->eos, eos_len); w += eos_len; }
    }
#undef PUT32
#undef PUT24
    CHECK((uint64_t)(w - blob) == total, "tokenizer blob size");
    *size = (size_t)total;
    return blob;
}

uint8_t *tokenizer_pack_opts(Arena *a, const char *dir, const TokPackOpts *opts, size_t *size) {
    Pk pk = { .a = a }, *p = &pk;
    p->path = path_join(a, dir, "tokenizer.json");
    if (!file_exists(p->path)) return NULL;
    json_load_file(a, &p->j, p->path);
    Json *j = &p->j;
    if (json_type(j, 0) != JSON_OBJECT) die_user(p->path, NULL, "expected a JSON object");

    /* ---- model ---- */
    int model = json_find(j, 0, "model");
    if (json_type(j, model) != JSON_OBJECT) die_user(p->path, "model", "missing or not an object");
    const char *mtype = type_of(p, model, "model.type");
    if (strcmp(mtype, "BPE") != 0) die_user(p->path, "model.type", "\"%s\" is not supported yet (only BPE)", mtype);
    int drop = json_find(j, model, "dropout");
    double dv = 0;
    if (drop >= 0 && !json_is_null(j, drop) && (!json_get_double(j, drop, &dv) || dv != 0))
        die_user(p->path, "model.dropout", "BPE dropout is not supported");
    if (!empty_or_null_str(p, model, "continuing_subword_prefix"))
        die_user(p->path, "model.continuing_subword_prefix", "is not supported yet");
    if (!empty_or_null_str(p, model, "end_of_word_suffix"))
        die_user(p->path, "model.end_of_word_suffix", "is not supported yet");
    bool byte_fallback = get_bool(p, model, "byte_fallback", false, "model");
    bool fuse_unk = get_bool(p, model, "fuse_unk", false, "model");
    bool ignore_merges = get_bool(p, model, "ignore_merges", false, "model");

    int vocab = json_find(j, model, "vocab");
    if (json_type(j, vocab) != JSON_OBJECT) die_user(p->path, "model.vocab", "missing or not an object");
    int nv = json_size(j, vocab);
    tokhash_init(a, &p->vocab, (size_t)nv);
    int32_t maxid = -1;
    HEnt *ve = ARENA_ARRAY(a, HEnt, nv > 0 ? nv : 1);   /* in the file's order */
    int iv = 0;
    for (int k = json_obj_first(j, vocab); k >= 0; k = json_obj_next(j, vocab, k), iv++) {
        size_t n;
        const char *s = str_or_die(p, k, "model.vocab", &n);
        int64_t id;
        if (!json_get_int64(j, k + 1, &id) || id < 0 || id >= (1 << 24))
            die_user(p->path, "model.vocab", "\"%s\": id must be an integer in [0, 16777215]", s);
        if (n == 0) die_user(p->path, "model.vocab", "empty token string");
        HEnt *e = tokhash_slot(&p->vocab, s, n);
        if (e->id >= 0) die_user(p->path, "model.vocab", "\"%s\" appears twice", s);
        *e = ve[iv] = (HEnt){s, n, (int32_t)id};
        if (id > maxid) maxid = (int32_t)id;
    }

    /* ---- added tokens ---- */
    int added = json_find(j, 0, "added_tokens");
    int na = added < 0 || json_is_null(j, added) ? 0 : json_size(j, added);
    if (added >= 0 && !json_is_null(j, added) && json_type(j, added) != JSON_ARRAY)
        die_user(p->path, "added_tokens", "expected an array");
    p->add = arena_alloc(a, sizeof *p->add * (size_t)(na + 1));
    for (int i = 0, k = added + 1; i < na; i++, k = json_next(j, k)) {
        const char *key = arena_printf(a, "added_tokens[%d]", i);
        if (json_type(j, k) != JSON_OBJECT) die_user(p->path, key, "expected an object");
        int64_t id;
        if (!json_get_int64(j, json_find(j, k, "id"), &id) || id < 0 || id >= (1 << 24))
            die_user(p->path, arena_printf(a, "%s.id", key), "must be an integer in [0, 16777215]");
        size_t n;
        char *s = (char *)str_or_die(p, json_find(j, k, "content"), arena_printf(a, "%s.content", key), &n);
        if (n == 0) die_user(p->path, arena_printf(a, "%s.content", key), "empty token");
        p->add[p->nadd].id = (int32_t)id; p->add[p->nadd].s = s; p->add[p->nadd].n = n;
        p->add[p->nadd++].special = get_bool(p, k, "special", false, key);
        if (id > maxid) maxid = (int32_t)id;
    }
    if (maxid < 0) die_user(p->path, "model.vocab", "empty vocabulary");
    uint32_t ntok = (uint32_t)maxid + 1;

    /* ---- normalizer ---- */
    bool nfc = false, spm_norm = false;
    int norm = json_find(j, 0, "normalizer");
    if (norm >= 0 && !json_is_null(j, norm)) {
        const char *nt = type_of(p, norm, "normalizer.type");
        if (strcmp(nt, "NFC") == 0) nfc = true;
        else if (strcmp(nt, "Sequence") == 0) {
            int ns = json_find(j, norm, "normalizers");
            /* an empty Sequence changes nothing (transformers' GGUF converter writes one for byte-level BPE) */
            bool empty = json_type(j, ns) == JSON_ARRAY && json_size(j, ns) == 0;
            int n0 = json_at(j, ns, 0), n1 = json_at(j, ns, 1);
            bool ok = json_size(j, ns) == 2 && n0 >= 0 && n1 >= 0;
            if (ok) {
                int pre = json_find(j, n0, "prepend"), pat = json_find(j, json_find(j, n1, "pattern"), "String");
                ok = strcmp(type_of(p, n0, "normalizer.normalizers[0]"), "Prepend") == 0 &&
                     json_str_eq(j, pre, SPM_SPACE) &&
                     strcmp(type_of(p, n1, "normalizer.normalizers[1]"), "Replace") == 0 && json_str_eq(j, pat, " ") &&
                     json_str_eq(j, json_find(j, n1, "content"), SPM_SPACE);
            }
            if (!ok && !empty)
                die_user(p->path, "normalizer.normalizers",
                         "only [Prepend(\"\u2581\"), Replace(\" \" -> \"\u2581\")] is supported yet");
            spm_norm = !empty;
        } else die_user(p->path, "normalizer.type", "\"%s\" is not supported yet", nt);
    }

    /* ---- pre-tokenizer ----
     * Accepted: ByteLevel; [ByteLevel]; [Split(Qwen2 / Llama 3 regex), ByteLevel(use_regex false)];
     * [Digits, ByteLevel]. ByteLevel's use_regex is GPT-2's regex (TOK_PRE_GPT2).
     * Metaspace (SentencePiece-style BPE, as transformers 5 and legacy=False conversions write it). */
    bool byte_level = false, digits = false, digit_runs = false, prefix_space = false, meta_split = false;
    uint32_t pre = TOK_PRE_NONE;
    int pt = json_find(j, 0, "pre_tokenizer");
    if (pt >= 0 && !json_is_null(j, pt) && strcmp(type_of(p, pt, "pre_tokenizer.type"), "Metaspace") == 0) {
        pre = metaspace(p, pt, "pre_tokenizer", &meta_split);
        if (spm_norm)
            die_user(p->path, "normalizer", "the SentencePiece normalizer (Prepend, Replace) before a Metaspace "
                     "pre-tokenizer is not supported");
    } else if (pt >= 0 && !json_is_null(j, pt)) {
        const char *ptt = type_of(p, pt, "pre_tokenizer.type");
        int bl = pt, first = -1;
        const char *blkey = "pre_tokenizer";
        if (strcmp(ptt, "Sequence") == 0) {
            int ps = json_find(j, pt, "pretokenizers");
            int np = json_type(j, ps) == JSON_ARRAY ? json_size(j, ps) : 0;
            const char *hint = "only [Split(regex), ByteLevel], [Digits, ByteLevel] or [ByteLevel] is supported yet";
            if (np < 1 || np > 2) die_user(p->path, "pre_tokenizer.pretokenizers", "%s", hint);
            bl = json_at(j, ps, np - 1);
            blkey = np == 2 ? "pre_tokenizer.pretokenizers[1]" : "pre_tokenizer.pretokenizers[0]";
            if (strcmp(type_of(p, bl, arena_printf(a, "%s.type", blkey)), "ByteLevel") != 0)
                die_user(p->path, "pre_tokenizer.pretokenizers", "%s", hint);
            if (np == 2) {
                first = json_at(j, ps, 0);
                const char *ft = type_of(p, first, "pre_tokenizer.pretokenizers[0].type");
                if (strcmp(ft, "Split") != 0 && strcmp(ft, "Digits") != 0)
                    die_user(p->path, "pre_tokenizer.pretokenizers[0].type", "\"%s\" is not supported yet; %s",
                             ft, hint);
                digits = strcmp(ft, "Digits") == 0;
            }
        } else if (strcmp(ptt, "ByteLevel") != 0) {
            die_user(p->path, "pre_tokenizer.type", "\"%s\" is not supported yet", ptt);
        }
        bool use_regex = get_bool(p, bl, "use_regex", true, blkey);
        prefix_space = get_bool(p, bl, "add_prefix_space", false, blkey);
        if (first >= 0 && !digits) {
            const char *rk = "pre_tokenizer.pretokenizers[0].pattern.Regex";
            int rx = json_find(j, json_find(j, first, "pattern"), "Regex");
            const char *re = str_or_die(p, rx, rk, NULL);
            if (strcmp(re, QWEN2_RE) == 0) pre = TOK_PRE_QWEN2;
            else if (strcmp(re, LLAMA3_RE) == 0) pre = TOK_PRE_LLAMA3;
            else die_user(p->path, rk, "this pre-tokenizer regex is not supported yet "
                          "(known: the Qwen2 and Llama 3 patterns)");
            int beh = json_find(j, first, "behavior");
            if (beh >= 0 && !json_str_eq(j, beh, "Isolated"))
                die_user(p->path, "pre_tokenizer.pretokenizers[0].behavior", "only \"Isolated\" is supported yet");
            if (get_bool(p, first, "invert", false, "pre_tokenizer.pretokenizers[0]"))
                die_user(p->path, "pre_tokenizer.pretokenizers[0].invert", "true is not supported");
            /* ByteLevel would prepend its space to every piece of the Split, and split them again */
            if (prefix_space)
                die_user(p->path, arena_printf(a, "%s.add_prefix_space", blkey),
                         "true after a Split is not supported yet");
            if (use_regex)
                die_user(p->path, arena_printf(a, "%s.use_regex", blkey), "true after a Split is not supported yet");
        } else {
            pre = use_regex ? TOK_PRE_GPT2 : TOK_PRE_NONE;
            if (digits) digit_runs = !get_bool(p, first, "individual_digits", false, "pre_tokenizer.pretokenizers[0]");
        }
        byte_level = true;
    }
    if (byte_level && spm_norm)
        die_user(p->path, "normalizer", "SentencePiece normalizer with a ByteLevel pre-tokenizer is not supported");
    /* the SentencePiece-style encoder has no NFC step: it would encode decomposed text differently */
    if (!byte_level && nfc)
        die_user(p->path, "normalizer.type", "\"NFC\" without a ByteLevel pre-tokenizer is not supported yet");

    /* ---- decoder (SentencePiece-style): the Strip of [Replace, ByteFallback, Fuse, Strip], or Metaspace ---- */
    bool strip_lead = false, dec_no_bytes = false, dec_meta_first = false;
    int dec = json_find(j, 0, "decoder");
    if (!byte_level && dec >= 0 && !json_is_null(j, dec) && json_str_eq(j, json_find(j, dec, "type"), "Metaspace")) {
        bool split;
        /* its prepend_scheme and split matter only where they differ from never / the pre-tokenizer's */
        dec_meta_first = metaspace(p, dec, "decoder", &split) != TOK_PRE_META_NEVER;
        dec_no_bytes = true;
    } else if (!byte_level && dec >= 0 && !json_is_null(j, dec)) {
        int ds = json_find(j, dec, "decoders");
        int k = ds + 1;
        int nd = json_type(j, ds) == JSON_ARRAY ? json_size(j, ds) : 0;
        for (int i = 0; i < nd; i++, k = json_next(j, k)) {
            if (json_str_eq(j, json_find(j, k, "type"), "Strip")) {
                int64_t st = 0;
                json_get_int64(j, json_find(j, k, "start"), &st);
                if (st > 1)
                    die_user(p->path, "decoder.decoders", "Strip of more than one leading character is not supported");
                strip_lead = st == 1;
            }
            if (json_str_eq(j, json_find(j, k, "type"), "ByteLevel"))
                die_user(p->path, "decoder", "ByteLevel decoder without a ByteLevel pre-tokenizer is not supported");
            /* the Metaspace decoder counts tokens: after ByteFallback and Fuse they are not the model's */
            if (json_str_eq(j, json_find(j, k, "type"), "Metaspace"))
                die_user(p->path, arena_printf(a, "decoder.decoders[%d]", i),
                         "Metaspace inside a Sequence is not supported yet (only alone)");
        }
    }

    /* ---- post-processor: BOS / EOS ---- */
    int32_t bos = -1, eos = -1;
    int pp = json_find(j, 0, "post_processor");
    if (pp >= 0 && !json_is_null(j, pp)) {
        const char *ppt = type_of(p, pp, "post_processor.type");
        if (strcmp(ppt, "TemplateProcessing") == 0) template_single(p, pp, "post_processor", &bos, &eos);
        else if (strcmp(ppt, "Sequence") == 0) {
            int ps = json_find(j, pp, "processors");
            int k = ps + 1;
            for (int i = 0; i < json_size(j, ps); i++, k = json_next(j, k)) {
                const char *key = arena_printf(a, "post_processor.processors[%d]", i);
                const char *tt = type_of(p, k, key);
                if (strcmp(tt, "TemplateProcessing") == 0) template_single(p, k, key, &bos, &eos);
                else if (strcmp(tt, "ByteLevel") != 0)
                    die_user(p->path, key, "post-processor \"%s\" is not supported yet", tt);
            }
        } else if (strcmp(ppt, "ByteLevel") != 0)
            die_user(p->path, "post_processor.type", "\"%s\" is not supported yet", ppt);
    }
    bool add_bos = bos >= 0, add_eos = eos >= 0;
    int32_t cfg_bos = -1, cfg_eos = -1;
    const char *cfg_bos_text = NULL, *cfg_eos_text = NULL;
    char *cpath = path_join(a, dir, "tokenizer_config.json");
    const char *tpl = NULL, *tpl_path = cpath;
    size_t tpl_len = 0;
    if (file_exists(cpath)) {
        Json cj;
        json_load_file(a, &cj, cpath);
        if (json_type(&cj, 0) != JSON_OBJECT) die_user(cpath, NULL, "expected a JSON object");
        cfg_bos = config_token(p, &cj, cpath, "bos_token", &cfg_bos_text);
        cfg_eos = config_token(p, &cj, cpath, "eos_token", &cfg_eos_text);
        int ct = opts && opts->no_chat ? -1 : json_find(&cj, 0, "chat_template");
        if (ct >= 0 && json_type(&cj, ct) == JSON_ARRAY) {   /* [{"name": "default", "template": ...}, ...] */
            int k = ct + 1, hit = -1;
            for (int i = 0; i < json_size(&cj, ct); i++, k = json_next(&cj, k))
                if (json_str_eq(&cj, json_find(&cj, k, "name"), "default")) hit = json_find(&cj, k, "template");
            if (hit < 0)
                die_user(cpath, "chat_template", "a list of templates without a \"default\" one; build with --no-chat");
            ct = hit;
        }
        if (ct >= 0 && !json_is_null(&cj, ct)) {
            tpl = json_get_str(a, &cj, ct, &tpl_len);
            if (!tpl) die_user(cpath, "chat_template", "expected a string");
        }
        /* transformers' LlamaTokenizer(Fast) rebuilds the template from these flags */
        int cls = json_find(&cj, 0, "tokenizer_class");
        char *cn = json_get_str(a, &cj, cls, NULL);
        if (cn && strstr(cn, "LlamaTokenizer")) {   /* a flag that is not true or false changes nothing */
            json_is_bool(&cj, json_find(&cj, 0, "add_bos_token"), &add_bos);
            json_is_bool(&cj, json_find(&cj, 0, "add_eos_token"), &add_eos);
        }
    }
    if (bos < 0) bos = cfg_bos;
    if (cfg_eos >= 0) eos = cfg_eos;
    if (add_bos && bos < 0) die_user(cpath, "add_bos_token", "true but there is no bos_token");
    if (add_eos && eos < 0) die_user(cpath, "add_eos_token", "true but there is no eos_token");

    /* ---- chat template: --chat-template's, tokenizer_config.json's, or chat_template.jinja (newer transformers);
     * bos_token and eos_token as tokenizer_config.json names them, the texts transformers gives the template ---- */
    ChatInfo ci = { .eot = -1 };
    const char *tpl_key = "chat_template";
    if (opts && opts->chat_template) {
        tpl = chat_template_file(a, opts->chat_template, &tpl_len);
        tpl_path = opts->chat_template;
        tpl_key = NULL;
    }
    if (!tpl && !(opts && opts->no_chat)) {
        char *jp = path_join(a, dir, "chat_template.jinja");
        if (file_exists(jp)) {
            char *t = read_file(jp, &tpl_len);
            if (!t) die_user(jp, NULL, "cannot read");
            tpl = arena_strndup(a, t, tpl_len);
            free(t);
            tpl_path = jp;
            tpl_key = NULL;
        }
    }
    if (tpl && !(opts && opts->no_chat)) {
        ChatSource src = { .a = a, .path = tpl_path, .tpl_key = tpl_key, .lookup = token_lookup_cb, .ctx = p };
        chat_prepare(&src, tpl, tpl_len, cfg_bos_text, cfg_eos_text, eos, &ci);
    }

    int32_t unk = -1;
    int ut = json_find(j, model, "unk_token");
    if (ut >= 0 && !json_is_null(j, ut)) {
        size_t n;
        const char *s = str_or_die(p, ut, "model.unk_token", &n);
        unk = tokhash_get(&p->vocab, s, n);
        if (unk < 0) die_user(p->path, "model.unk_token", "\"%s\" is not in model.vocab", s);
    }

    /* ---- per-id strings and flags ---- */
    const char **ts = ARENA_ARRAY(a, const char *, ntok);
    uint32_t *tn = ARENA_ARRAY(a, uint32_t, ntok);
    uint8_t *tf = ARENA_ARRAY(a, uint8_t, ntok);
    int16_t unmap[GPT2_UNMAP_SIZE];
    gpt2_unmap_table(unmap);
    for (int i = 0; i < nv; i++) {
        int32_t id = ve[i].id;
        if (tf[id]) die_user(p->path, "model.vocab", "id %d is used twice", id);
        const char *s = ve[i].s; size_t n = ve[i].n;
        if (byte_level) {
            char *o = arena_alloc(a, n);
            size_t on;
            if (gpt2_unmap(unmap, s, n, o, &on)) { s = o; n = on; }
        }
        ts[id] = s; tn[id] = (uint32_t)n; tf[id] = TOKT_VOCAB;
    }
    for (int i = 0; i < p->nadd; i++) {
        int32_t id = p->add[i].id;
        uint8_t f = TOKT_ADDED | (p->add[i].special ? TOKT_SPECIAL : 0);
        /* an added token that is also in model.vocab stays visible to BPE only with the same text */
        if (tokhash_get(&p->vocab, p->add[i].s, p->add[i].n) == id) f |= TOKT_VOCAB;
        if (tf[id] & TOKT_ADDED) die_user(p->path, "added_tokens", "id %d is used twice", id);
        ts[id] = p->add[i].s; tn[id] = (uint32_t)p->add[i].n; tf[id] = f;
    }
    /* A byte-level vocabulary may lack some bytes' tokens (SmolLM2's has no 0x04, 0xC0, 0xF5..0xFF):
     * such a byte becomes unk, or is dropped without one, in the runtime as in HF's BPE. */

    /* ---- merges ---- */
    int merges = json_find(j, model, "merges");
    if (json_type(j, merges) != JSON_ARRAY) die_user(p->path, "model.merges", "missing or not an array");
    int nm = json_size(j, merges);
    uint32_t *mg = ARENA_ARRAY(a, uint32_t, 3 * (size_t)(nm > 0 ? nm : 1));
    /* the merged token's text: an arena buffer (a user error below unwinds without freeing) */
    size_t catcap = 256;
    char *cat = arena_alloc(a, catcap);
    for (int i = 0, k = merges + 1; i < nm; i++, k = json_next(j, k)) {
        const char *ms, *as, *bs; size_t an, bn, mn;
        if (json_type(j, k) == JSON_STRING) {
            ms = json_get_str(a, j, k, &mn);
            const char *sp = memchr(ms, ' ', mn);
            if (!sp) die_user(p->path, arena_printf(a, "model.merges[%d]", i), "\"%s\" is not \"left right\"", ms);
            as = ms; an = (size_t)(sp - ms); bs = sp + 1; bn = mn - an - 1;
        } else if (json_type(j, k) == JSON_ARRAY && json_size(j, k) == 2) {
            as = json_get_str(a, j, k + 1, &an);
            bs = json_get_str(a, j, json_next(j, k + 1), &bn);
            if (!as || !bs) die_user(p->path, arena_printf(a, "model.merges[%d]", i), "expected two strings");
        } else die_user(p->path, arena_printf(a, "model.merges[%d]", i), "expected \"left right\" or [left, right]");
        int32_t ia = tokhash_get(&p->vocab, as, an), ib = tokhash_get(&p->vocab, bs, bn);
        if (an + bn > catcap) { catcap = 2 * (an + bn); cat = arena_alloc(a, catcap); }
        memcpy(cat, as, an); memcpy(cat + an, bs, bn);
        int32_t ic = tokhash_get(&p->vocab, cat, an + bn);
        if (ia < 0 || ib < 0 || ic < 0)
            die_user(p->path, arena_printf(a, "model.merges[%d]", i), "\"%.*s\" + \"%.*s\": %s is not in model.vocab",
                     (int)an, as, (int)bn, bs,
                     ia < 0 ? "the left part" : ib < 0 ? "the right part" : "the merged token");
        mg[3 * i] = (uint32_t)ia; mg[3 * i + 1] = (uint32_t)ib; mg[3 * i + 2] = (uint32_t)ic;
    }

    uint32_t flags = (nfc ? TOKF_NFC : 0) | (ignore_merges ? TOKF_IGNORE_MERGES : 0) | (add_bos ? TOKF_ADD_BOS : 0) |
                     (add_eos ? TOKF_ADD_EOS : 0) | (byte_fallback ? TOKF_BYTE_FALLBACK : 0) |
                     (spm_norm ? TOKF_SPM_NORM : 0) | (fuse_unk ? TOKF_FUSE_UNK : 0) |
                     (strip_lead ? TOKF_STRIP_LEAD : 0) | (digits ? TOKF_DIGITS : 0) |
                     (digit_runs ? TOKF_DIGIT_RUNS : 0) | (prefix_space ? TOKF_PREFIX_SPACE : 0) |
                     (meta_split ? TOKF_META_SPLIT : 0) | (dec_no_bytes ? TOKF_DEC_NO_BYTES : 0) |
                     (dec_meta_first ? TOKF_DEC_META_FIRST : 0);
    TokSpec spec = { .model = byte_level ? TOK_MODEL_BYTELEVEL : TOK_MODEL_SPM, .flags = flags, .pre = pre,
                     .bos = bos, .eos = eos, .unk = unk, .ntok = ntok, .str = ts, .len = tn, .tflag = tf,
                     .nmerge = (uint32_t)nm, .merges = mg, .chat = ci };
    return tokpack_write(a, &spec, p->path, "model.vocab", size);
}

uint8_t *tokenizer_pack(Arena *a, const char *dir, size_t *size) { return tokenizer_pack_opts(a, dir, NULL, size); }
