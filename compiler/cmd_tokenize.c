/* cmd_tokenize.c: `llmcc tokenize DIR [--no-special] [TEXT]` and
 * `llmcc detokenize DIR [--show-special] ID...`, through the same packed blob
 * and runtime code that the emitted binaries use, so what these print is
 * what a compiled model will see. */
#include "tokenizer_pack.h"
#include "tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Tokenizer *load_dir(Arena *a, const char *dir) {
    if (!dir_exists(dir)) die_user(dir, NULL, "not a directory");
    size_t size;
    uint8_t *blob = tokenizer_pack(a, dir, &size);
    if (!blob) die_user(dir, NULL, "no tokenizer.json in this model directory");
    Tokenizer *t;
    const char *err = tokenizer_load(&t, blob, size);
    if (err) die_internal(__FILE__, __LINE__, "packed tokenizer does not load: %s", err);
    return t;
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *text = NULL;
    bool special = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-special") == 0) special = false;
        else if (!dir) dir = argv[i];
        else if (!text) text = argv[i];
        else die_user(NULL, NULL, "tokenize: unexpected argument \"%s\" (usage: llmcc tokenize DIR [--no-special] [TEXT])", argv[i]);
    }
    if (!dir) die_user(NULL, NULL, "usage: llmcc tokenize DIR [--no-special] [TEXT]");
    Arena a = {0};
    Tokenizer *t = load_dir(&a, dir);
    Str in = {0};
    if (text) str_append(&in, text, strlen(text));
    else {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) str_append(&in, buf, n);
        if (ferror(stdin)) die_user("stdin", NULL, "read error: %s", strerror(errno));
    }
    int32_t *ids;
    int n = tokenizer_encode(t, in.s ? in.s : "", in.len, special, &ids);
    if (n < 0) die_user(NULL, NULL, "out of memory while tokenizing");
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids); str_free(&in);
    tokenizer_free(t); arena_free(&a);
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *dir = NULL;
    bool show = false;
    int nid = 0;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(argc + 1));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--show-special") == 0) { show = true; continue; }
        if (!dir) { dir = argv[i]; continue; }
        char *end;
        errno = 0;
        long v = strtol(argv[i], &end, 10);
        if (errno || end == argv[i] || *end || v < 0 || v > INT32_MAX)
            die_user(NULL, NULL, "detokenize: \"%s\" is not a token id", argv[i]);
        ids[nid++] = (int32_t)v;
    }
    if (!dir) die_user(NULL, NULL, "usage: llmcc detokenize DIR [--show-special] ID...");
    Arena a = {0};
    Tokenizer *t = load_dir(&a, dir);
    for (int i = 0; i < nid; i++)
        if (ids[i] >= tokenizer_vocab_size(t)) die_user(NULL, NULL, "detokenize: id %d is outside the vocabulary (size %d)", ids[i], tokenizer_vocab_size(t));
    char *s = tokenizer_decode(t, ids, nid, show);
    if (!s) die_user(NULL, NULL, "out of memory");
    fputs(s, stdout);        /* exactly the text: no newline added */
    free(s); free(ids);
    tokenizer_free(t); arena_free(&a);
    return 0;
}
