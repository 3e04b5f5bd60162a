/* grammar_test.c: runtime/grammar.c from tests/test_grammar.py.
 *   grammar_test compile GBNF            "ok", or the one-line error (exit 1); GBNF "@json": the built-in
 *                                        JSON-object grammar, "@schema:FILE": FILE's JSON Schema as a grammar
 *   grammar_test schema FILE             the GBNF a JSON Schema becomes, or the one-line error (exit 1)
 *   grammar_test sample GBNF N SEED      N random sentences of the grammar (random walks over bytes), hex
 *   grammar_test match GBNF < LINES      per line (hex of the bytes): 1 if the whole line is a sentence, else 0
 *   grammar_test prefix GBNF < LINES     per line: dead (it leaves the grammar), alive, or end (it may end here)
 *   grammar_test masks GBNF VOCAB N SEED N random states (random walks through allowed tokens): each state's
 *                                        mask (trie and cache) against grammar_mask_brute; VOCAB: one token a
 *                                        line, "S" (special) or "T" (text) or "E" (stop), then its bytes in hex
 * Prints a summary line; exit 1 on the first difference. */
#include "grammar.h"
#include "json_schema.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) { perror(path); exit(2); }
    fclose(f);
    s[n] = 0;
    *len = (size_t)n;
    return s;
}

/* path "@json": the built-in JSON-object grammar; "@schema:FILE": FILE's JSON Schema as a grammar */
static Grammar *compile_or_die(const char *path) {
    size_t len;
    char err[512], *src;
    if (!strcmp(path, "@json")) src = strdup(grammar_json_object_gbnf);
    else if (!strncmp(path, "@schema:", 8)) {
        char *schema = read_file(path + 8, &len);
        src = json_schema_to_gbnf(schema, len, err, sizeof err);
        free(schema);
        if (!src) { printf("%s\n", err); exit(1); }
    } else src = read_file(path, &len);
    len = strlen(src);
    Grammar *g = grammar_compile(src, len, err, sizeof err);
    free(src);
    if (!g) { printf("%s\n", err); exit(1); }
    return g;
}

static int hex(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static size_t unhex(const char *s, uint8_t *out) {
    size_t n = 0;
    for (; s[0] && s[1] && s[0] != '\n'; s += 2) out[n++] = (uint8_t)(hex(s[0]) << 4 | hex(s[1]));
    return n;
}

static unsigned long long rng_state;
static unsigned long long rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "schema")) {   /* the GBNF a JSON Schema file becomes */
        size_t len;
        char err[512], *schema = read_file(argv[2], &len), *gbnf = json_schema_to_gbnf(schema, len, err, sizeof err);
        printf("%s\n", gbnf ? gbnf : err);
        free(schema);
        free(gbnf);
        return gbnf ? 0 : 1;
    }
    if (argc >= 5 && !strcmp(argv[1], "sample")) {   /* sample GBNF N SEED: N random sentences, hex, a line each */
        Grammar *g = compile_or_die(argv[2]);
        static uint8_t byte[256];
        static const uint8_t *tok[256];
        static int lens[256];
        for (int b = 0; b < 256; b++) { byte[b] = (uint8_t)b; tok[b] = &byte[b]; lens[b] = 1; }
        GrammarVocab *v = grammar_vocab_new(256, tok, lens, NULL, NULL, 0);
        rng_state = strtoull(argv[4], NULL, 10) * 2654435761ULL + 1;
        static uint8_t out[4096];
        for (int done = 0, tries = 0; done < atoi(argv[3]) && tries < 100000; tries++) {
            GrammarState s = grammar_start(g);
            size_t n = 0;
            while (n < sizeof out) {
                if (grammar_can_end(&s) && (grammar_must_end(&s) || rnd() % 4 == 0)) break;
                const uint64_t *m = grammar_mask(&s, v);
                int allowed[256], k = 0, ascii[256], ka = 0;
                for (int b = 0; m && b < 256; b++)
                    if (m[b >> 6] >> (b & 63) & 1) { allowed[k++] = b; if (b >= 0x20 && b < 0x7f) ascii[ka++] = b; }
                if (!k) break;
                /* mostly ASCII, so that a string's closing quote comes now and then */
                int b = ka && rnd() % 8 ? ascii[rnd() % (unsigned)ka] : allowed[rnd() % (unsigned)k];
                out[n++] = (uint8_t)b;
                grammar_advance(&s, &out[n - 1], 1);
            }
            if (!grammar_can_end(&s)) continue;   /* too long: another */
            for (size_t i = 0; i < n; i++) printf("%02x", out[i]);
            printf("\n");
            done++;
        }
        grammar_vocab_free(v);
        grammar_free(g);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "compile")) {
        Grammar *g = compile_or_die(argv[2]);
        printf("ok\n");
        grammar_free(g);
        return 0;
    }
    bool prefix = argc >= 3 && !strcmp(argv[1], "prefix");   /* per line: dead, alive (more may follow) or end */
    if (prefix || (argc >= 3 && !strcmp(argv[1], "match"))) {
        Grammar *g = compile_or_die(argv[2]);
        static char line[1 << 20];
        static uint8_t bytes[1 << 19];
        while (fgets(line, sizeof line, stdin)) {
            size_t n = unhex(line, bytes);
            GrammarState s = grammar_start(g);
            bool alive = grammar_advance(&s, bytes, n), end = alive && grammar_can_end(&s);
            if (prefix) printf("%s\n", !alive ? "dead" : end ? "end" : "alive");
            else printf("%d\n", end);
        }
        grammar_free(g);
        return 0;
    }
    bool follow = argc >= 6 && !strcmp(argv[1], "follow");   /* follow GBNF VOCAB REPEAT TEXT: the text's tokens */
    if (follow || (argc >= 6 && !strcmp(argv[1], "masks"))) {
        Grammar *g = compile_or_die(argv[2]);
        size_t len;
        char *text = read_file(argv[3], &len);
        int n = 0, cap = 1024, n_stop = 0;
        uint8_t **bytes = malloc((size_t)cap * sizeof *bytes);
        int *lens = malloc((size_t)cap * sizeof *lens);
        bool *special = malloc((size_t)cap);
        int32_t *stop = malloc((size_t)cap * sizeof *stop);
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (n == cap) {
                cap *= 2;
                bytes = realloc(bytes, (size_t)cap * sizeof *bytes);
                lens = realloc(lens, (size_t)cap * sizeof *lens);
                special = realloc(special, (size_t)cap);
                stop = realloc(stop, (size_t)cap * sizeof *stop);
            }
            bytes[n] = malloc(strlen(line) / 2 + 1);
            lens[n] = (int)unhex(line + 2, bytes[n]);
            special[n] = line[0] != 'T';
            if (line[0] == 'E') stop[n_stop++] = n;
            n++;
        }
        GrammarVocab *v = grammar_vocab_new(n, (const uint8_t *const *)bytes, lens, special, stop, n_stop);
        int states = atoi(argv[4]), words = (n + 63) / 64;
        rng_state = strtoull(argv[5], NULL, 10) * 2654435761ULL + 1;
        uint64_t *brute = malloc((size_t)words * sizeof *brute);
        int32_t *allowed = malloc((size_t)n * sizeof *allowed);
        GrammarState s = grammar_start(g);
        double t_mask = 0, t_brute = 0;
        /* follow: the text cut greedily into the longest tokens, REPEAT times over, each token's state checked */
        const char *ftext = follow ? argv[5] : NULL;
        size_t fpos = 0, flen = follow ? strlen(ftext) : 0;
        int frounds = follow ? atoi(argv[4]) : 0, fdone = 0;
        if (follow) states = 1 << 30;
        long total_allowed = 0;
        int walks = 1;
        for (int i = 0; i < states; i++) {
            clock_t c0 = clock();
            const uint64_t *mask = grammar_mask(&s, v);
            clock_t c1 = clock();
            grammar_mask_brute(&s, v, brute);
            clock_t c2 = clock();
            if (!grammar_ok(g)) { printf("past the grammar's bounds at state %d\n", i); return 1; }
            t_mask += (double)(c1 - c0) / CLOCKS_PER_SEC;
            t_brute += (double)(c2 - c1) / CLOCKS_PER_SEC;
            if (!mask) { printf("out of memory at state %d\n", i); return 1; }
            int k = 0;
            for (int t = 0; t < n; t++) {
                bool a = mask[t >> 6] >> (t & 63) & 1, b = brute[t >> 6] >> (t & 63) & 1;
                if (a != b) {
                    printf("state %d: token %d allowed by the %s only\n", i, t, a ? "mask" : "brute force");
                    return 1;
                }
                if (a && !special[t]) allowed[k++] = t;
            }
            total_allowed += k;
            if (follow) {   /* the longest token the text goes on with */
                int best = -1;
                for (int t = 0; t < n; t++)
                    if (!special[t] && lens[t] > 0 && (size_t)lens[t] <= flen - fpos &&
                        !memcmp(bytes[t], ftext + fpos, (size_t)lens[t]) && (best < 0 || lens[t] > lens[best]))
                        best = t;
                if (best < 0 || !grammar_accept_token(&s, v, best)) {
                    printf("follow: the text leaves the grammar at byte %zu\n", fpos);
                    return 1;
                }
                fpos += (size_t)lens[best];
                if (fpos == flen) {
                    fpos = 0;
                    s = grammar_start(g);
                    if (++fdone == frounds) { states = i + 1; break; }
                }
                continue;
            }
            /* the next state: a random allowed text token, preferring one that leads to another state (a random
             * token inside a JSON string keeps it there); a new walk where none is, or now and then */
            if (!k || grammar_must_end(&s) || rnd() % 64 == 0) { s = grammar_start(g); walks++; continue; }
            GrammarState next = s;
            for (int tries = 0; tries < 16; tries++) {
                next = s;
                if (!grammar_accept_token(&next, v, allowed[rnd() % (unsigned long long)k])) {
                    printf("state %d: an allowed token is not accepted\n", i);
                    return 1;
                }
                if (next.set != s.set) break;
            }
            s = next;
        }
        GrammarStats st = grammar_stats(g);
        printf("states %d walks %d tokens %d allowed-mean %.1f mask-ms %.3f brute-ms %.3f computed %ld cached %ld "
               "nodes %ld sets %ld contexts %ld unsure %ld visited %ld\n", states, walks, n,
               (double)total_allowed / states, 1e3 * t_mask / states, 1e3 * t_brute / states, st.masks_computed,
               st.masks_cached, st.nodes, st.sets, st.contexts_computed, st.unsure_checked, st.trie_nodes_visited);
        grammar_vocab_free(v);
        grammar_free(g);
        for (int t = 0; t < n; t++) free(bytes[t]);
        free(bytes); free(lens); free(special); free(stop); free(brute); free(allowed); free(text);
        return 0;
    }
    fprintf(stderr, "usage: grammar_test compile|match|masks ...\n");
    return 2;
}
