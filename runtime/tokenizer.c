/* tokenizer.c: encoder/decoder over the packed blob (format in tokenizer.h).
 * Needs only libc, utf8proc and runtime/jinja.c (the chat template) because it is linked into both the
 * compiler and every emitted binary. Parity target: Hugging Face `tokenizers`.
 *  - added tokens are split out first (leftmost-longest, raw text);
 *  - byte-level: NFC, then the Qwen2 / Llama 3 Split regex or GPT-2's (ByteLevel's
 *    use_regex, after an optional Digits split) as hand-written scanners (the
 *    regexes have one lookahead, \s+(?!\S); a scanner over Unicode categories is
 *    exact and far faster than a regex engine), then BPE over raw bytes (the
 *    GPT-2 byte map is undone at pack time);
 *  - SentencePiece-style: Prepend/Replace normalizer or the Metaspace pre-tokenizer, BPE over characters,
 *    byte fallback to <0xNN>, unk.
 * The blob is validated once at load; afterwards ids and offsets are trusted. */
#include "tokenizer.h"
#include "jinja.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

struct Tokenizer {
    uint32_t model, flags, pre;
    int32_t bos, eos, unk;
    uint32_t n, nmerge;
    uint32_t *off;              /* n+1 native copies of the offsets */
    const uint8_t *tflag, *pool;
    uint32_t *mleft, *mright, *mres;
    uint32_t *vslot; uint32_t vmask;            /* vocab hash: id, or UINT32_MAX */
    uint64_t *mkey; uint32_t *mrank; uint32_t mmask;   /* merge hash */
    int32_t byte_id[256];       /* byte-level: single-byte token; SPM: <0xNN> */
    uint32_t *added; uint32_t nadded;   /* added ids by first byte, longest first */
    uint32_t afirst[257];
    size_t maxlen;
    /* chat template (blob v3): parsed once, rendered per conversation */
    JinjaTemplate *chat_tpl;    /* NULL: none */
    uint32_t chat_flags, chat_tpl_len;
    int32_t chat_eot;
    const char *chat_bos, *chat_eos; uint32_t chat_bos_len, chat_eos_len;   /* NULL: none */
};

#define NONE UINT32_MAX

static uint32_t rd24(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16; }
static uint32_t rd32(const uint8_t *p) { return rd24(p) | (uint32_t)p[3] << 24; }

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) { uint64_t w; memcpy(&w, s, 8); h = (h ^ w) * 0xFF51AFD7ED558CCDull; h ^= h >> 32; s += 8; n -= 8; }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}
static uint64_t hash_u64(uint64_t k) { k *= 0x9E3779B97F4A7C15ull; return k ^ (k >> 31); }

static uint32_t pow2_at_least(uint64_t n) { uint32_t p = 16; while (p < n) p <<= 1; return p; }

/* The vocab hash's slot for s[0..n): the one holding its id, or the empty one (NONE) where it goes. */
static uint32_t *vocab_slot(const Tokenizer *t, const uint8_t *s, size_t n) {
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & t->vmask;; i = (i + 1) & t->vmask) {
        uint32_t id = t->vslot[i];
        if (id == NONE || (t->off[id + 1] - t->off[id] == n && memcmp(t->pool + t->off[id], s, n) == 0))
            return &t->vslot[i];
    }
}
/* Model-vocabulary lookup (added tokens that are not in model.vocab are not
 * found: BPE must not see them, as in HF). */
static int32_t vocab_find(const Tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t id = *vocab_slot(t, s, n);
    return id == NONE ? -1 : (int32_t)id;
}
/* The merge hash's slot for the pair k: the one holding k, or the empty one (rank NONE) where it goes. */
static uint32_t merge_slot(const Tokenizer *t, uint64_t k) {
    uint32_t i = (uint32_t)hash_u64(k) & t->mmask;
    while (t->mrank[i] != NONE && t->mkey[i] != k) i = (i + 1) & t->mmask;
    return i;
}
static uint32_t merge_rank(const Tokenizer *t, uint32_t a, uint32_t b) {
    return t->mrank[merge_slot(t, (uint64_t)a << 32 | b)];
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->off); free(t->mleft); free(t->mright); free(t->mres);
    free(t->vslot); free(t->mkey); free(t->mrank); free(t->added);
    jinja_free(t->chat_tpl);
    free(t);
}

static int cmp_u64(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? -1 : a > b;
}

const char *tokenizer_load(Tokenizer **out, const uint8_t *blob, size_t size) {
    *out = NULL;
    if (!blob || size < TOK_HEADER_SIZE) return "tokenizer blob: too short";
    if (rd32(blob) != TOK_MAGIC) return "tokenizer blob: bad magic";
    uint32_t version = rd32(blob + 4);
    if (version == 2) return "tokenizer blob: version 2 (an older llmcc's): build the model again";
    if (version != 1 && version != TOK_VERSION) return "tokenizer blob: unsupported version";
    uint32_t model = rd32(blob + 8), flags = rd32(blob + 12), pre = rd32(blob + 16);
    int32_t bos = (int32_t)rd32(blob + 20), eos = (int32_t)rd32(blob + 24), unk = (int32_t)rd32(blob + 28);
    uint32_t n = rd32(blob + 32), nmerge = rd32(blob + 36), npool = rd32(blob + 40), nchat = rd32(blob + 44);
    if (version == 1 && nchat) return "tokenizer blob: v1 with a chat section";
    if (model > TOK_MODEL_SPM) return "tokenizer blob: unknown model kind";
    if (pre > TOK_PRE_META_NEVER) return "tokenizer blob: unknown pre-tokenizer";
    if (flags & ~TOKF_ALL) return "tokenizer blob: unknown flags";
    /* Metaspace and its decoder belong to SentencePiece-style BPE, and replace the legacy normalizer */
    bool meta = pre >= TOK_PRE_META_ALWAYS;
    if (meta && (model != TOK_MODEL_SPM || (flags & TOKF_SPM_NORM)))
        return "tokenizer blob: Metaspace with a byte-level model or the SentencePiece normalizer";
    if ((flags & TOKF_META_SPLIT) && !meta) return "tokenizer blob: Metaspace split without Metaspace";
    if ((flags & (TOKF_DEC_NO_BYTES | TOKF_DEC_META_FIRST)) && model != TOK_MODEL_SPM)
        return "tokenizer blob: Metaspace decoder with a byte-level model";
    if ((flags & TOKF_DEC_META_FIRST) && (flags & TOKF_STRIP_LEAD)) return "tokenizer blob: two decoders";
    /* Digits and add_prefix_space come before a whole-piece or GPT-2 split only (what the packer accepts) */
    if ((flags & (TOKF_DIGITS | TOKF_PREFIX_SPACE)) &&
        (model != TOK_MODEL_BYTELEVEL || (pre != TOK_PRE_NONE && pre != TOK_PRE_GPT2)))
        return "tokenizer blob: Digits / add_prefix_space with another pre-tokenizer";
    if ((flags & TOKF_DIGIT_RUNS) && !(flags & TOKF_DIGITS)) return "tokenizer blob: digit runs without Digits";
    if (n == 0 || n >= (1u << 24)) return "tokenizer blob: bad vocabulary size";
    uint64_t need = (uint64_t)TOK_HEADER_SIZE + 4ull * (n + 1) + n + 9ull * nmerge + npool + nchat;
    if (need != size) return "tokenizer blob: size does not match its header";
    const uint8_t *chat = blob + (size - nchat);
    uint32_t cfl = 0, lens[3] = {0, UINT32_MAX, UINT32_MAX};   /* template, bos text, eos text */
    int32_t eot = -1;
    if (nchat) {
        if (nchat < TOK_CHAT_HEADER_SIZE) return "tokenizer blob: chat section too short";
        cfl = rd32(chat);
        eot = (int32_t)rd32(chat + 4);
        uint64_t total = TOK_CHAT_HEADER_SIZE;
        for (int i = 0; i < 3; i++) {
            lens[i] = rd32(chat + 8 + 4 * i);
            total += lens[i] == UINT32_MAX && i ? 0 : lens[i];
        }
        if (cfl & ~(uint32_t)TOKC_ALL) return "tokenizer blob: unknown chat flags";
        if (eot < -1 || eot >= (int32_t)n) return "tokenizer blob: chat token id out of range";
        if (lens[0] == 0 || lens[0] == UINT32_MAX || total != nchat)
            return "tokenizer blob: chat section size does not match";
    }
    if ((bos < -1 || bos >= (int32_t)n) || (eos < -1 || eos >= (int32_t)n) || (unk < -1 || unk >= (int32_t)n))
        return "tokenizer blob: bos/eos/unk id out of range";

    Tokenizer *t = calloc(1, sizeof *t);
    if (!t) return "tokenizer: out of memory";
    t->model = model; t->flags = flags; t->pre = pre; t->bos = bos; t->eos = eos; t->unk = unk;
    t->n = n; t->nmerge = nmerge;
    if (nchat) {
        const char *text = (const char *)chat + TOK_CHAT_HEADER_SIZE;
        JinjaError je;
        t->chat_tpl = jinja_parse(text, lens[0], &je);
        if (!t->chat_tpl) { free(t); return "tokenizer blob: its chat template does not parse"; }
        t->chat_flags = cfl; t->chat_eot = eot; t->chat_tpl_len = lens[0];
        text += lens[0];
        if (lens[1] != UINT32_MAX) { t->chat_bos = text; t->chat_bos_len = lens[1]; text += lens[1]; }
        if (lens[2] != UINT32_MAX) { t->chat_eos = text; t->chat_eos_len = lens[2]; }
    }
    const uint8_t *p = blob + TOK_HEADER_SIZE;
    const uint8_t *offs = p; p += 4ull * (n + 1);
    t->tflag = p; p += n;
    const uint8_t *mg = p; p += 9ull * nmerge;
    t->pool = p;
    const char *err = NULL;
    t->off = malloc(sizeof(uint32_t) * (n + 1));
    t->mleft = malloc(sizeof(uint32_t) * (nmerge + 1));
    t->mright = malloc(sizeof(uint32_t) * (nmerge + 1));
    t->mres = malloc(sizeof(uint32_t) * (nmerge + 1));
    t->vmask = pow2_at_least(2ull * n) - 1;
    t->vslot = malloc(sizeof(uint32_t) * ((size_t)t->vmask + 1));
    t->mmask = pow2_at_least(2ull * nmerge) - 1;
    t->mkey = malloc(sizeof(uint64_t) * ((size_t)t->mmask + 1));
    t->mrank = malloc(sizeof(uint32_t) * ((size_t)t->mmask + 1));
    t->added = malloc(sizeof(uint32_t) * n);
    if (!t->off || !t->mleft || !t->mright || !t->mres || !t->vslot || !t->mkey || !t->mrank || !t->added) {
        err = "tokenizer: out of memory"; goto fail;
    }
    bool bad_off = false;
    for (uint32_t i = 0; i <= n; i++) {
        t->off[i] = rd32(offs + 4ull * i);
        bad_off |= t->off[i] > npool || (i && t->off[i] < t->off[i - 1]);
    }
    if (bad_off || t->off[0] != 0 || t->off[n] != npool) { err = "tokenizer blob: bad string offsets"; goto fail; }
    memset(t->vslot, 0xFF, sizeof(uint32_t) * ((size_t)t->vmask + 1));
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (uint32_t id = 0; id < n; id++) {
        size_t len = t->off[id + 1] - t->off[id];
        uint8_t fl = t->tflag[id];
        if (fl & ~7) { err = "tokenizer blob: bad token flags"; goto fail; }
        if (len == 0) { if (fl) { err = "tokenizer blob: flagged token with no text"; goto fail; } continue; }
        if (len > t->maxlen) t->maxlen = len;
        const uint8_t *s = t->pool + t->off[id];
        if (fl & TOKT_ADDED) t->added[t->nadded++] = id;
        uint32_t *slot = fl & TOKT_VOCAB ? vocab_slot(t, s, len) : NULL;
        if (slot && *slot == NONE) *slot = id;   /* the first id wins */
    }
    /* the ids BPE starts from */
    for (int b = 0; b < 256; b++) {
        if (model == TOK_MODEL_BYTELEVEL) { uint8_t c = (uint8_t)b; t->byte_id[b] = vocab_find(t, &c, 1); }
        else {
            static const char hx[] = "0123456789ABCDEF";
            uint8_t nm[6] = { '<', '0', 'x', (uint8_t)hx[b >> 4], (uint8_t)hx[b & 15], '>' };
            t->byte_id[b] = vocab_find(t, nm, 6);
        }
    }
    memset(t->mrank, 0xFF, sizeof(uint32_t) * ((size_t)t->mmask + 1));
    for (uint32_t r = 0; r < nmerge; r++) {
        uint32_t a = rd24(mg + 9ull * r), b = rd24(mg + 9ull * r + 3), c = rd24(mg + 9ull * r + 6);
        if (a >= n || b >= n || c >= n) { err = "tokenizer blob: merge id out of range"; goto fail; }
        t->mleft[r] = a; t->mright[r] = b; t->mres[r] = c;
        uint64_t k = (uint64_t)a << 32 | b;
        uint32_t i = merge_slot(t, k);
        /* a duplicate pair keeps its first (lowest) rank, as in HF */
        if (t->mrank[i] == NONE) { t->mkey[i] = k; t->mrank[i] = r; }
    }
    /* added tokens grouped by first byte, longest first: the first hit at a
     * position is the leftmost-longest match (HF uses Aho-Corasick LeftmostLongest) */
    if (t->nadded) {
        uint64_t *key = malloc(sizeof(uint64_t) * t->nadded);
        if (!key) { err = "tokenizer: out of memory"; goto fail; }
        for (uint32_t i = 0; i < t->nadded; i++) {
            uint32_t id = t->added[i], l = t->off[id + 1] - t->off[id];
            if (l > 0xFFFFFF) l = 0xFFFFFF;
            key[i] = (uint64_t)t->pool[t->off[id]] << 56 | (uint64_t)(0xFFFFFF - l) << 32 | id;
        }
        qsort(key, t->nadded, sizeof *key, cmp_u64);
        for (uint32_t i = 0; i < t->nadded; i++) t->added[i] = (uint32_t)key[i];
        free(key);
    }
    memset(t->afirst, 0, sizeof t->afirst);
    for (uint32_t i = 0; i < t->nadded; i++) t->afirst[t->pool[t->off[t->added[i]]] + 1]++;
    for (int b = 0; b < 256; b++) t->afirst[b + 1] += t->afirst[b];
    *out = t;
    return NULL;
fail:
    tokenizer_free(t);
    return err;
}

int tokenizer_vocab_size(const Tokenizer *t) { return (int)t->n; }
int tokenizer_bos_id(const Tokenizer *t) { return t->bos; }
int tokenizer_eos_id(const Tokenizer *t) { return t->eos; }
size_t tokenizer_max_piece_bytes(const Tokenizer *t) { return 3 * (t->maxlen + 8); }

/* The longest added token s[0..n) begins with (whole: that is all of it), or NONE; n > 0. */
static uint32_t added_at(const Tokenizer *t, const uint8_t *s, size_t n, bool whole) {
    for (uint32_t a = t->afirst[s[0]]; a < t->afirst[s[0] + 1]; a++) {   /* longest first */
        uint32_t id = t->added[a];
        size_t l = t->off[id + 1] - t->off[id];
        if ((whole ? l == n : l <= n) && memcmp(t->pool + t->off[id], s, l) == 0) return id;
    }
    return NONE;
}

int tokenizer_token_id(const Tokenizer *t, const char *s) {
    size_t n = strlen(s);
    if (n == 0) return -1;
    uint32_t id = added_at(t, (const uint8_t *)s, n, true);
    return id != NONE ? (int)id : vocab_find(t, (const uint8_t *)s, n);
}

/* ------------------------------------------------------------------ encode */

typedef struct {
    int32_t *ids; size_t n, ids_cap;
    /* scratch, reused across words and segments */
    uint8_t *norm; size_t norm_cap;
    uint8_t *pfx; size_t pfx_cap;       /* a piece with add_prefix_space's ' ' in front */
    uint32_t *cp; uint8_t *cls; uint32_t *coff; size_t cp_cap, cls_cap, coff_cap;
    uint32_t *sym; uint32_t *rank; size_t sym_cap, rank_cap;
    /* heap path */
    int32_t *prev, *next; uint64_t *heap; size_t prev_cap, next_cap, heap_cap;
    /* word cache: most text repeats its words, and BPE of a word is pure.
     * Allocated once an encode call has seen enough words to profit. */
    struct WCache { uint8_t klen, nid; uint8_t key[22]; int32_t id[6]; } *wc;
    size_t nwords;
    bool oom;
} Enc;
#define WC_SIZE 4096

/* Grows the array *p (capacity *cap) to hold need elements of elem bytes; false (and *oom) when out of memory. */
static bool grow(void **p, size_t *cap, size_t need, size_t elem, bool *oom) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) { *oom = true; return false; }
    *p = q; *cap = c;
    return true;
}
/* e's scratch array f (capacity f_cap) */
#define GROW(e, f, need) grow((void **)&(e)->f, &(e)->f##_cap, (need), sizeof *(e)->f, &(e)->oom)
static void emit(Enc *e, int32_t id) {
    if (GROW(e, ids, e->n + 1)) e->ids[e->n++] = id;
}

/* Character classes for the pre-tokenizer regex. */
enum { C_L = 1, C_N = 2, C_WS = 4, C_CRLF = 8, C_SP = 16 };

/* White_Space as in Oniguruma's Unicode \s (= Unicode White_Space property). */
static bool is_white(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
static uint8_t class_of(uint32_t c) {
    if (c < 128) {
        if ((c | 32) >= 'a' && (c | 32) <= 'z') return C_L;
        if (c >= '0' && c <= '9') return C_N;
        if (c == ' ') return C_WS | C_SP;
        if (c == '\r' || c == '\n') return C_WS | C_CRLF;
        if (c >= 9 && c <= 13) return C_WS;
        return 0;
    }
    if (is_white(c)) return C_WS;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return C_L;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return C_N;
    default: return 0;
    }
}

/* Decodes one UTF-8 character at s[0..n); invalid input counts as one byte
 * with code point UINT32_MAX (category "other"). Returns its length. */
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    utf8proc_int32_t c;
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)(n < 4 ? n : 4), &c);
    if (k <= 0) { *cp = UINT32_MAX; return 1; }
    *cp = (uint32_t)c;
    return (size_t)k;
}

/* BPE over e->sym[0..n); appends the result. Small words: rescan the pair
 * ranks (cheap, cache-friendly); long words: HF's heap of (rank, pos). */
static void bpe(const Tokenizer *t, Enc *e, size_t n) {
    uint32_t *s = e->sym;
    if (n > 1 && n <= 64) {
        uint32_t *r = e->rank;
        for (size_t i = 0; i + 1 < n; i++) r[i] = merge_rank(t, s[i], s[i + 1]);
        for (;;) {
            uint32_t best = NONE; size_t bi = 0;
            for (size_t i = 0; i + 1 < n; i++) if (r[i] < best) { best = r[i]; bi = i; }
            if (best == NONE) break;
            s[bi] = t->mres[best];
            memmove(s + bi + 1, s + bi + 2, (n - bi - 2) * sizeof *s);
            memmove(r + bi + 1, r + bi + 2, (n > bi + 3 ? n - bi - 3 : 0) * sizeof *r);
            n--;
            if (bi > 0) r[bi - 1] = merge_rank(t, s[bi - 1], s[bi]);
            if (bi + 1 < n) r[bi] = merge_rank(t, s[bi], s[bi + 1]);
        }
        for (size_t i = 0; i < n; i++) emit(e, (int32_t)s[i]);
        return;
    }
    if (n == 1) { emit(e, (int32_t)s[0]); return; }
    if (n == 0) return;
    /* the heap: at most n-1 initial entries plus 2 per merge */
    if (!GROW(e, prev, n) || !GROW(e, next, n) || !GROW(e, heap, 3 * n)) return;
    int32_t *pv = e->prev, *nx = e->next;
    uint64_t *hp = e->heap;
    /* heap entries: rank << 32 | pos; the smallest is popped: lowest rank, then leftmost */
    size_t hn = 0;
    /* pushes the pair at `at` unless its rank is NONE */
#define HPUSH(rank, at) do { uint32_t _r = (rank); if (_r == NONE) break; \
        uint64_t _v = (uint64_t)_r << 32 | (at); size_t _i = hn++; \
        while (_i) { size_t _p = (_i - 1) / 2; if (hp[_p] <= _v) break; hp[_i] = hp[_p]; _i = _p; } hp[_i] = _v; \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        pv[i] = (int32_t)i - 1; nx[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        if (i + 1 < n) HPUSH(merge_rank(t, s[i], s[i + 1]), i);
    }
    while (hn) {
        uint64_t top = hp[0];
        uint64_t last = hp[--hn];
        size_t i = 0;
        for (;;) {   /* sift last down from the root */
            size_t c = 2 * i + 1;
            if (c >= hn) break;
            if (c + 1 < hn && hp[c + 1] < hp[c]) c++;
            if (hp[c] >= last) break;
            hp[i] = hp[c]; i = c;
        }
        if (hn) hp[i] = last;
        uint32_t r = (uint32_t)(top >> 32), pos = (uint32_t)top;
        if (s[pos] == NONE || nx[pos] < 0) continue;        /* removed, or now last */
        int32_t q = nx[pos];
        uint32_t cr = merge_rank(t, s[pos], s[q]);
        if (cr == NONE || t->mres[cr] != t->mres[r]) continue;   /* stale: the pair changed */
        s[pos] = t->mres[r];
        s[q] = NONE;
        nx[pos] = nx[q];
        if (nx[q] >= 0) pv[nx[q]] = (int32_t)pos;
        if (pv[pos] >= 0) HPUSH(merge_rank(t, s[pv[pos]], s[pos]), (uint32_t)pv[pos]);
        if (nx[pos] >= 0) HPUSH(merge_rank(t, s[pos], s[nx[pos]]), pos);
    }
#undef HPUSH
    for (int32_t i = 0; i >= 0; i = nx[i]) emit(e, (int32_t)s[i]);
}

static bool ensure_sym(Enc *e, size_t n) { return GROW(e, sym, n) && GROW(e, rank, n); }

static void encode_word_bpe(const Tokenizer *t, Enc *e, const uint8_t *w, size_t n);

/* One byte-level pre-token. */
static void encode_word_bytes(const Tokenizer *t, Enc *e, const uint8_t *w, size_t n) {
    if (n == 0) return;
    if (t->flags & TOKF_IGNORE_MERGES) {
        int32_t id = vocab_find(t, w, n);
        if (id >= 0) { emit(e, id); return; }
    }
    struct WCache *c = NULL;
    if (n <= sizeof c->key) {
        if (!e->wc && ++e->nwords > 512) e->wc = calloc(WC_SIZE, sizeof *e->wc);
        if (e->wc) {
            c = &e->wc[hash_bytes(w, n) & (WC_SIZE - 1)];
            if (c->klen == n && c->nid && memcmp(c->key, w, n) == 0) {
                for (int i = 0; i < c->nid; i++) emit(e, c->id[i]);
                return;
            }
        }
    }
    size_t before = e->n;
    encode_word_bpe(t, e, w, n);
    if (c && !e->oom && e->n - before <= 6 && e->n > before) {
        c->klen = (uint8_t)n; c->nid = (uint8_t)(e->n - before);
        memcpy(c->key, w, n);
        memcpy(c->id, e->ids + before, sizeof(int32_t) * c->nid);
    }
}

/* A character no token covers: unk (a run of them one unk with fuse_unk); HF drops it when there is no unk. */
static void push_unk(const Tokenizer *t, Enc *e, size_t *k, bool *prev_unk) {
    if (t->unk < 0 || (*prev_unk && (t->flags & TOKF_FUSE_UNK))) return;
    e->sym[(*k)++] = (uint32_t)t->unk;
    *prev_unk = true;
}

static void encode_word_bpe(const Tokenizer *t, Enc *e, const uint8_t *w, size_t n) {
    if (!ensure_sym(e, n)) return;
    size_t k = 0;
    bool prev_unk = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) push_unk(t, e, &k, &prev_unk);
        else { e->sym[k++] = (uint32_t)id; prev_unk = false; }
    }
    bpe(t, e, k);
}

/* Decodes w[0..n) into e->cp (code points), e->cls (classes) and e->coff
 * (byte offsets, one past the end too); returns the character count, or
 * SIZE_MAX when out of memory. */
static size_t classify(Enc *e, const uint8_t *w, size_t n) {
    if (!GROW(e, cp, n + 1) || !GROW(e, cls, n + 1) || !GROW(e, coff, n + 1)) return SIZE_MAX;
    uint32_t *cp = e->cp, *co = e->coff;
    uint8_t *cls = e->cls;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t k = utf8_next(w + i, n - i, &c);
        cp[m] = c; cls[m] = c == UINT32_MAX ? 0 : class_of(c); co[m] = (uint32_t)i;
        m++; i += k;
    }
    co[m] = (uint32_t)n;
    return m;
}

/* The end of the pre-token that starts at character i of m (classified by classify), by the Qwen2 /
 * Llama 3 regex (l3: Llama 3's \p{N}{1,3}). */
static size_t qwen2_end(const Enc *e, size_t i, size_t m, bool l3) {
    const uint32_t *cp = e->cp;
    const uint8_t *cls = e->cls;
    size_t j;
    uint8_t c0 = cls[i];
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d); U+017F folds to s */
    if (cp[i] == '\'' && i + 1 < m) {
        uint32_t a = cp[i + 1] == 0x17F ? 's' : (cp[i + 1] < 128 ? (cp[i + 1] | 32) : 0);
        uint32_t b = i + 2 < m && cp[i + 2] < 128 ? (cp[i + 2] | 32) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if ((c0 & C_L) || (!(c0 & (C_L | C_N | C_CRLF)) && i + 1 < m && (cls[i + 1] & C_L))) {
        for (j = i + 1; j < m && (cls[j] & C_L); j++) {}
        return j;
    }
    /* \p{N} or \p{N}{1,3} */
    if (c0 & C_N) {
        j = i + 1;
        if (l3) while (j < m && j < i + 3 && (cls[j] & C_N)) j++;
        return j;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    if (c0 == 0 || ((c0 & C_SP) && i + 1 < m && cls[i + 1] == 0)) {
        j = i + 1;
        while (j < m && cls[j] == 0) j++;
        while (j < m && (cls[j] & C_CRLF)) j++;
        return j;
    }
    /* whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ */
    size_t k = i;
    while (k < m && (cls[k] & C_WS)) k++;
    for (size_t p = k; p > i; p--) if (cls[p - 1] & C_CRLF) return p;
    return (k == m || k - i < 2) ? k : k - 1;
}

/* The same by GPT-2's regex, ByteLevel's own (use_regex):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * At each position the first alternative that matches wins, as in Oniguruma.
 * Unlike Qwen2's, the contractions are case-sensitive and numbers run whole. */
static size_t gpt2_end(const Enc *e, size_t i, size_t m, bool l3) {
    (void)l3;
    const uint32_t *cp = e->cp;
    const uint8_t *cls = e->cls;
    size_t j;
    if (cp[i] == '\'' && i + 1 < m) {
        uint32_t a = cp[i + 1], b = i + 2 < m ? cp[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    /* " ?" keeps its space only where a letter, number or other character follows
     * (else the three alternatives fail and the space is whitespace) */
    size_t k = cp[i] == ' ' && i + 1 < m && !(cls[i + 1] & C_WS) ? i + 1 : i;
    if (!(cls[k] & C_WS)) {
        uint8_t c = cls[k] & (C_L | C_N);
        for (j = k + 1; j < m && (c ? (cls[j] & c) != 0 : cls[j] == 0); j++) {}
        return j;
    }
    /* \s+(?!\S) leaves the last space for the word after it; \s+ takes a lone one */
    for (j = i; j < m && (cls[j] & C_WS); j++) {}
    return (j == m || j - i < 2) ? j : j - 1;
}

/* Splits w[0..n) (already normalized) into pre-tokens with end (qwen2_end, gpt2_end) and encodes each. */
static void split_words(const Tokenizer *t, Enc *e, const uint8_t *w, size_t n,
                        size_t (*end)(const Enc *, size_t, size_t, bool)) {
    size_t m = classify(e, w, n);
    if (m == SIZE_MAX) return;
    for (size_t i = 0, j; i < m; i = j) {
        j = end(e, i, m, t->pre == TOK_PRE_LLAMA3);
        encode_word_bytes(t, e, w + e->coff[i], e->coff[j] - e->coff[i]);
    }
}

/* One piece after Digits: add_prefix_space, then the GPT-2 split (or none). */
static void encode_piece(const Tokenizer *t, Enc *e, const uint8_t *w, size_t n) {
    if (n == 0) return;
    if ((t->flags & TOKF_PREFIX_SPACE) && w[0] != ' ') {
        if (!GROW(e, pfx, n + 1)) return;
        e->pfx[0] = ' ';
        memcpy(e->pfx + 1, w, n);
        w = e->pfx; n++;
    }
    if (t->pre == TOK_PRE_GPT2) split_words(t, e, w, n, gpt2_end); else encode_word_bytes(t, e, w, n);
}

/* The pre-tokenizer over one normalized segment. Digits (Rust's char::is_numeric:
 * categories Nd, Nl, No) splits first; each piece then goes through ByteLevel alone,
 * so a piece boundary ends words and \s+(?!\S)'s lookahead as the text's end does. */
static void pre_tokenize(const Tokenizer *t, Enc *e, const uint8_t *w, size_t n) {
    if (t->pre == TOK_PRE_QWEN2 || t->pre == TOK_PRE_LLAMA3) { split_words(t, e, w, n, qwen2_end); return; }
    if (!(t->flags & TOKF_DIGITS)) { encode_piece(t, e, w, n); return; }
    const bool runs = (t->flags & TOKF_DIGIT_RUNS) != 0;
    size_t start = 0;
    for (size_t i = 0; i < n && !e->oom;) {
        uint32_t c;
        size_t k = utf8_next(w + i, n - i, &c);
        if (c == UINT32_MAX || !(class_of(c) & C_N)) { i += k; continue; }
        encode_piece(t, e, w + start, i - start);
        size_t j = i + k;
        while (runs && j < n) {
            size_t k2 = utf8_next(w + j, n - j, &c);
            if (c == UINT32_MAX || !(class_of(c) & C_N)) break;
            j += k2;
        }
        encode_piece(t, e, w + i, j - i);
        start = i = j;
    }
    encode_piece(t, e, w + start, n - start);
}

/* Byte-level: NFC (where configured), then split and BPE. */
static void encode_segment_bytes(const Tokenizer *t, Enc *e, const uint8_t *s, size_t n) {
    if (n == 0) return;
    bool ascii = true;
    for (size_t i = 0; i < n; i++) if (s[i] >= 0x80) { ascii = false; break; }
    if (ascii || !(t->flags & TOKF_NFC)) {
        pre_tokenize(t, e, s, n);
        return;
    }
    /* NFC each maximal valid UTF-8 run; invalid bytes pass through */
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n) { uint32_t c; size_t k = utf8_next(s + j, n - j, &c); if (c == UINT32_MAX) break; j += k; }
        if (j > i) {
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t r = utf8proc_map(s + i, (utf8proc_ssize_t)(j - i), &dst,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            const uint8_t *src = s + i; size_t sl = j - i;
            if (r >= 0 && dst) { src = dst; sl = (size_t)r; }
            if (!GROW(e, norm, len + sl + 4)) { free(dst); return; }
            memcpy(e->norm + len, src, sl); len += sl;
            free(dst);
        }
        if (j < n) {
            if (!GROW(e, norm, len + 4)) return;
            e->norm[len++] = s[j]; j++;
        }
        i = j;
    }
    /* pre_tokenize reuses other scratch buffers, never e->norm */
    pre_tokenize(t, e, e->norm, len);
}

static bool is_meta(const uint8_t *s, size_t n) { return n >= 3 && s[0] == 0xE2 && s[1] == 0x96 && s[2] == 0x81; }

static void encode_word_spm(const Tokenizer *t, Enc *e, const uint8_t *w, size_t wn);

/* SentencePiece-style, one segment (the text between added tokens; at_start: it begins
 * the input): the legacy normalizer Prepend("▁") + Replace(" " -> "▁"), or the Metaspace
 * pre-tokenizer (see TOK_PRE_META_*: unlike Prepend, it adds no "▁" in front of one that
 * is there, so " x" is "▁x", not "▁▁x"), then BPE over characters with byte fallback / unk. */
static void encode_segment_spm(const Tokenizer *t, Enc *e, const uint8_t *s, size_t n, bool at_start) {
    if (n == 0) return;
    const uint8_t *w = s; size_t wn = n;
    bool meta = t->pre >= TOK_PRE_META_ALWAYS;
    if ((t->flags & TOKF_SPM_NORM) || meta) {
        bool prepend = !meta;
        if (meta && (t->pre == TOK_PRE_META_ALWAYS || (t->pre == TOK_PRE_META_FIRST && at_start)))
            prepend = s[0] != ' ' && !is_meta(s, n);
        if (!GROW(e, norm, 3 * n + 3)) return;
        uint8_t *nb = e->norm;
        size_t k = 0;
        if (prepend) { nb[k++] = 0xE2; nb[k++] = 0x96; nb[k++] = 0x81; }
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') { nb[k++] = 0xE2; nb[k++] = 0x96; nb[k++] = 0x81; }
            else nb[k++] = s[i];
        }
        w = nb; wn = k;
    }
    if (!(t->flags & TOKF_META_SPLIT)) { encode_word_spm(t, e, w, wn); return; }
    /* split: each "▁" begins a pre-token (tokenizers' MergedWithNext) */
    size_t start = 0;
    for (size_t i = 1; i < wn && !e->oom; i++)
        if (is_meta(w + i, wn - i)) { encode_word_spm(t, e, w + start, i - start); start = i; }
    if (!e->oom) encode_word_spm(t, e, w + start, wn - start);
}

/* One SentencePiece-style pre-token: characters to ids (byte fallback / unk), then BPE. */
static void encode_word_spm(const Tokenizer *t, Enc *e, const uint8_t *w, size_t wn) {
    if (wn == 0) return;
    if (!ensure_sym(e, wn)) return;
    size_t k = 0;
    bool prev_unk = false;
    for (size_t i = 0; i < wn;) {
        uint32_t c;
        size_t cl = utf8_next(w + i, wn - i, &c);
        int32_t id = vocab_find(t, w + i, cl);
        if (id >= 0) { e->sym[k++] = (uint32_t)id; prev_unk = false; i += cl; continue; }
        if (t->flags & TOKF_BYTE_FALLBACK) {
            bool all = true;
            for (size_t b = 0; b < cl; b++) if (t->byte_id[w[i + b]] < 0) all = false;
            if (all) {
                for (size_t b = 0; b < cl; b++) e->sym[k++] = (uint32_t)t->byte_id[w[i + b]];
                prev_unk = false; i += cl; continue;
            }
        }
        i += cl;
        push_unk(t, e, &k, &prev_unk);
    }
    bpe(t, e, k);
}

/* The text s[seg..end) between added tokens. */
static void encode_segment(const Tokenizer *t, Enc *e, const uint8_t *s, size_t seg, size_t end) {
    if (t->model == TOK_MODEL_BYTELEVEL) encode_segment_bytes(t, e, s + seg, end - seg);
    else encode_segment_spm(t, e, s + seg, end - seg, seg == 0);
}

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids) {
    Enc e = {0};
    const uint8_t *s = (const uint8_t *)text;
    if (add_special && (t->flags & TOKF_ADD_BOS) && t->bos >= 0) emit(&e, t->bos);
    size_t seg = 0;
    for (size_t i = 0; i < len && !e.oom;) {
        uint32_t hit = added_at(t, s + i, len - i, false);
        if (hit == NONE) { i++; continue; }
        encode_segment(t, &e, s, seg, i);
        emit(&e, (int32_t)hit);
        i += t->off[hit + 1] - t->off[hit];
        seg = i;
    }
    if (!e.oom) encode_segment(t, &e, s, seg, len);
    if (add_special && (t->flags & TOKF_ADD_EOS) && t->eos >= 0) emit(&e, t->eos);
    free(e.norm); free(e.pfx); free(e.cp); free(e.cls); free(e.coff); free(e.sym); free(e.rank);
    free(e.prev); free(e.next); free(e.heap); free(e.wc);
    if (e.oom) { free(e.ids); *ids = NULL; return -1; }
    if (!e.ids) e.ids = malloc(sizeof(int32_t));
    *ids = e.ids;
    return (int)e.n;
}

/* ------------------------------------------------------------------ decode */

typedef struct { char *buf; size_t cap, len; TokDecoder *d; } Out;

static void out_byte(Out *o, uint8_t b) {
    if (o->d->first) {          /* Strip(" ", 1, 0) of the whole decoded text */
        o->d->first = false;
        if (b == ' ') return;
    }
    if (o->len < o->cap) o->buf[o->len++] = (char)b;
}
static void out_fffd(Out *o) { out_byte(o, 0xEF); out_byte(o, 0xBF); out_byte(o, 0xBD); }

static int utf8_need(uint8_t b) {
    return b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
}
static bool utf8_cont_ok(const uint8_t *pend, int np, uint8_t b) {
    if ((b & 0xC0) != 0x80) return false;
    if (np == 1) {
        switch (pend[0]) {
        case 0xE0: return b >= 0xA0;
        case 0xED: return b <= 0x9F;
        case 0xF0: return b >= 0x90;
        case 0xF4: return b <= 0x8F;
        }
    }
    return true;
}
/* Feeds bytes through the UTF-8 assembler: complete characters go out,
 * a maximal invalid subpart becomes one U+FFFD (as Rust's from_utf8_lossy). */
static void out_bytes(Out *o, const uint8_t *s, size_t n) {
    TokDecoder *d = o->d;
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        if (d->npend == 0) {
            if (b < 0x80) out_byte(o, b);
            else if (utf8_need(b)) d->pend[d->npend++] = b;
            else out_fffd(o);
            i++;
            continue;
        }
        if (!utf8_cont_ok(d->pend, d->npend, b)) { out_fffd(o); d->npend = 0; continue; }   /* b again, fresh */
        d->pend[d->npend++] = b; i++;
        if (d->npend == utf8_need(d->pend[0])) {
            for (int k = 0; k < d->npend; k++) out_byte(o, d->pend[k]);
            d->npend = 0;
        }
    }
}

static int hexval(uint8_t c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

void tokdec_init(TokDecoder *d, const Tokenizer *t, bool show_special) {
    memset(d, 0, sizeof *d);
    d->t = t; d->show_special = show_special;
    d->first = (t->flags & TOKF_STRIP_LEAD) != 0;
    d->first_tok = true;
}

/* SentencePiece's byte-fallback token <0xNN>: its byte */
static bool spm_byte_token(const Tokenizer *t, const uint8_t *s, size_t n, uint8_t *b) {
    int h1, h2;
    if (!(t->flags & TOKF_BYTE_FALLBACK) || (t->flags & TOKF_DEC_NO_BYTES) || n != 6 || s[0] != '<' || s[1] != '0' ||
        s[2] != 'x' || s[5] != '>' || (h1 = hexval(s[3])) < 0 || (h2 = hexval(s[4])) < 0)
        return false;
    *b = (uint8_t)(h1 << 4 | h2);
    return true;
}

size_t tokenizer_token_bytes(const Tokenizer *t, int32_t id, char *out, bool *special) {
    *special = true;
    if (id < 0 || (uint32_t)id >= t->n) return 0;
    uint8_t fl = t->tflag[id];
    *special = fl & TOKT_SPECIAL;
    const uint8_t *s = t->pool + t->off[id];
    size_t n = t->off[id + 1] - t->off[id], k = 0;
    uint8_t b;
    if (t->model != TOK_MODEL_SPM || (fl & TOKT_ADDED)) { memcpy(out, s, n); return n; }
    if (spm_byte_token(t, s, n, &b)) { out[0] = (char)b; return 1; }
    for (size_t i = 0; i < n;) {
        if (is_meta(s + i, n - i)) { out[k++] = ' '; i += 3; }
        else out[k++] = (char)s[i++];
    }
    return k;
}

size_t tokdec_push(TokDecoder *d, int32_t id, char *out, size_t cap) {
    const Tokenizer *t = d->t;
    Out o = { out, cap, 0, d };
    if (id < 0 || (uint32_t)id >= t->n) return 0;
    uint8_t fl = t->tflag[id];
    if ((fl & TOKT_SPECIAL) && !d->show_special) return 0;
    /* the Metaspace decoder's token 0 is the first token it is given: skipped special tokens are not */
    bool tok0 = d->first_tok;
    d->first_tok = false;
    const uint8_t *s = t->pool + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    if (t->model == TOK_MODEL_SPM && !(fl & TOKT_ADDED)) {
        uint8_t b;
        if (spm_byte_token(t, s, n, &b)) {   /* ByteFallback */
            out_bytes(&o, &b, 1);
            return o.len;
        }
        /* Replace("▁" -> " "); the Metaspace decoder (prepend_scheme first / always) drops token 0's */
        bool drop = tok0 && (t->flags & TOKF_DEC_META_FIRST);
        for (size_t i = 0; i < n;) {
            if (is_meta(s + i, n - i)) {
                uint8_t sp = ' ';
                if (!drop) out_bytes(&o, &sp, 1);
                i += 3;
            } else { out_bytes(&o, s + i, 1); i++; }
        }
        return o.len;
    }
    out_bytes(&o, s, n);
    return o.len;
}

size_t tokdec_flush(TokDecoder *d, char *out, size_t cap) {
    Out o = { out, cap, 0, d };
    if (d->npend) { out_fffd(&o); d->npend = 0; }
    return o.len;
}

char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n, bool show_special) {
    TokDecoder d;
    tokdec_init(&d, t, show_special);
    size_t piece = tokenizer_max_piece_bytes(t), cap = 0, len = 0;
    char *buf = NULL;
    bool oom = false;
    for (int i = 0; i <= n; i++) {
        if (!grow((void **)&buf, &cap, len + piece + 1, 1, &oom)) { free(buf); return NULL; }
        len += i < n ? tokdec_push(&d, ids[i], buf + len, cap - len) : tokdec_flush(&d, buf + len, cap - len);
    }
    buf[len] = 0;
    return buf;
}

/* ------------------------------------------------------------------ chat */

bool tokenizer_has_chat(const Tokenizer *t) { return t->chat_tpl != NULL; }
int tokenizer_chat_eot(const Tokenizer *t) { return t->chat_tpl ? t->chat_eot : -1; }
bool tokenizer_chat_has_thinking(const Tokenizer *t) { return t->chat_tpl && (t->chat_flags & TOKC_THINKING); }
size_t tokenizer_chat_template_size(const Tokenizer *t) { return t->chat_tpl ? t->chat_tpl_len : 0; }

typedef struct { char *s; size_t n, cap; bool oom; } Buf;
static void buf_put(Buf *b, const void *p, size_t n) {
    if (b->oom || !grow((void **)&b->s, &b->cap, b->n + n + 1, 1, &b->oom)) return;
    if (n) memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_json(Buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    buf_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; buf_put(b, e, 2); }
        else if (c < 0x20) { char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}; buf_put(b, e, 6); }
        else buf_put(b, &s[i], 1);
    }
    buf_str(b, "\"");
}

bool tokenizer_json_quote(char **out, size_t *out_len, size_t *out_cap, const char *s, size_t n) {
    Buf b = {*out, *out_len, *out_cap, false};
    buf_json(&b, s, n);
    *out = b.s; *out_len = b.n; *out_cap = b.cap;
    return !b.oom;
}

/* a JSON object's members without its braces (""-when empty), to follow other members */
static void buf_members(Buf *b, const char *obj, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi && obj[lo] != '{') lo++;
    while (hi > lo && obj[hi - 1] != '}') hi--;
    if (hi - lo < 2) return;
    size_t k = lo + 1;
    while (k < hi - 1 && (obj[k] == ' ' || obj[k] == '\n' || obj[k] == '\t' || obj[k] == '\r')) k++;
    if (k == hi - 1) return;
    buf_str(b, ", ");
    buf_put(b, obj + lo + 1, hi - lo - 2);
}

char *tokenizer_chat_apply(const Tokenizer *t, const ChatRequest *r, size_t *len, char *err, size_t err_size) {
    if (!t->chat_tpl) { snprintf(err, err_size, "no chat template"); return NULL; }
    Buf b = {0};
    buf_str(&b, "{\"messages\": ");
    buf_put(&b, r->messages, r->messages_len);
    buf_str(&b, ", \"tools\": ");
    if (r->tools) buf_put(&b, r->tools, r->tools_len); else buf_str(&b, "null");
    buf_str(&b, ", \"documents\": null, \"add_generation_prompt\": ");
    buf_str(&b, r->add_generation_prompt ? "true" : "false");
    if (t->chat_bos) { buf_str(&b, ", \"bos_token\": "); buf_json(&b, t->chat_bos, t->chat_bos_len); }
    if (t->chat_eos) { buf_str(&b, ", \"eos_token\": "); buf_json(&b, t->chat_eos, t->chat_eos_len); }
    const char *date = getenv(TOK_CHAT_DATE_ENV);
    if (date && *date) { buf_str(&b, ", \"date_string\": "); buf_json(&b, date, strlen(date)); }
    if (r->think >= 0) buf_str(&b, r->think ? ", \"enable_thinking\": true" : ", \"enable_thinking\": false");
    if (r->kwargs) buf_members(&b, r->kwargs, r->kwargs_len);
    buf_str(&b, "}");
    if (b.oom) { free(b.s); snprintf(err, err_size, "out of memory"); return NULL; }
    JinjaError je;
    size_t n;
    char *text = jinja_render(t->chat_tpl, b.s, b.n, NULL, NULL, &n, &je);
    free(b.s);
    if (!text) {
        if (je.kind == JINJA_ERR_RAISE) snprintf(err, err_size, "line %d: raise_exception: %s", je.line, je.message);
        else jinja_error_string(&je, err, err_size);
        return NULL;
    }
    if (len) *len = n;
    return text;
}

char *tokenizer_chat_render(const Tokenizer *t, const ChatMsg *m, int n, bool add_gen, int think,
                            const char *kwargs, size_t *len, char *err, size_t err_size) {
    Buf b = {0};
    buf_str(&b, "[");
    for (int i = 0; i < n; i++) {
        buf_str(&b, i ? ", {\"role\": " : "{\"role\": ");
        buf_json(&b, m[i].role, strlen(m[i].role));
        buf_str(&b, ", \"content\": ");
        buf_json(&b, m[i].content, m[i].len);
        buf_str(&b, "}");
    }
    buf_str(&b, "]");
    if (b.oom) { free(b.s); snprintf(err, err_size, "out of memory"); return NULL; }
    ChatRequest r = {.messages = b.s, .messages_len = b.n, .kwargs = kwargs, .kwargs_len = kwargs ? strlen(kwargs) : 0,
                     .add_generation_prompt = add_gen, .think = think};
    char *text = tokenizer_chat_apply(t, &r, len, err, err_size);
    free(b.s);
    return text;
}
