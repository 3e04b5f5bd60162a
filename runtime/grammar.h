/* grammar.h: constrained decoding. A grammar in llama.cpp's GBNF, compiled to a byte-level pushdown automaton,
 * and the mask of the vocabulary's tokens that keep the output inside it, for the sampler.
 *
 * How (learnt from llama.cpp's grammar sampler, XGrammar and RE2's lazy DFA): character classes become UTF-8
 * byte sequences, so every step of the automaton reads one byte and a token is its bytes. A parse in progress is
 * a set of stacks (the grammar may be ambiguous), each a chain of interned nodes (an element to match, the node
 * to return to), and the sets themselves are interned: reading a byte maps a set to a set, and that map is
 * memoized, so after warming up a token costs a table lookup per byte. A token mask walks the vocabulary's byte
 * trie from the set's context (its stacks cut at one depth, so that a JSON string's characters at any depth are
 * one walk; the few tokens that cross the cut are checked against the whole stack), leaving a subtree where no
 * stack survives and taking whole one made only of bytes that keep the context where it is; masks are cached
 * per context and per set. Tokens the tokenizer calls special never match
 * text; the stop tokens (EOS, end of turn) are allowed exactly where the grammar may end.
 *
 * Supported GBNF: rules `name ::= alternatives`, "literals" with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes,
 * [classes] and [^negated] of characters and ranges, `.` (any character), rule references, ( groups ), and the
 * repetitions * + ? {m} {m,} {m,n}; # comments. The root rule is `root`. Left recursion is refused. */
#ifndef LLMCC_GRAMMAR_H
#define LLMCC_GRAMMAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Grammar Grammar;
typedef struct GrammarVocab GrammarVocab;

/* Compiles src (len bytes of GBNF); NULL with a one-line reason ("line 3, column 8: ...") in err */
Grammar *grammar_compile(const char *src, size_t len, char *err, size_t err_size);
void grammar_free(Grammar *g);

/* The grammar a JSON object matches: RFC 8259's, whitespace bounded (as llama.cpp's json.gbnf: a model can
 * otherwise emit spaces forever) */
extern const char grammar_json_object_gbnf[];

/* The vocabulary as the grammar sees it: each token's bytes (bytes[i], lens[i]; borrowed: they must outlive it),
 * special[i] for tokens that are not text (control tokens: never allowed), stop[0..n_stop) the ids that end the
 * reply */
GrammarVocab *grammar_vocab_new(int n, const uint8_t *const *bytes, const int *lens, const bool *special,
                                const int32_t *stop, int n_stop);
void grammar_vocab_free(GrammarVocab *v);

/* A parse in progress: where the output so far leaves the grammar. Cheap to copy (an id). */
typedef struct {
    Grammar *g;
    int set;                   /* the interned set of stacks; -1: the output left the grammar */
} GrammarState;

GrammarState grammar_start(Grammar *g);
/* After bytes[0..n) of output; false (and the state dead) where they leave the grammar */
bool grammar_advance(GrammarState *s, const uint8_t *bytes, size_t n);
bool grammar_can_end(const GrammarState *s);        /* the output so far is a whole sentence of the grammar */
bool grammar_must_end(const GrammarState *s);       /* ... and nothing can follow it */
/* The tokens allowed next, one bit each (mask[id / 64] >> id % 64): a token whose bytes keep the output inside the
 * grammar, or a stop token where it may end. The words are the cache's: valid until the next call. NULL: out of
 * memory. */
const uint64_t *grammar_mask(GrammarState *s, const GrammarVocab *v);
/* false once the grammar ran out of memory or past a bound (MASK_BUDGET expansions for one mask, 2^20 stack
 * nodes or sets): every mask is then NULL and every advance fails */
bool grammar_ok(const Grammar *g);
/* The same, computed token by token from the bytes alone (no trie, no cache): the tests' reference */
void grammar_mask_brute(const GrammarState *s, const GrammarVocab *v, uint64_t *mask);
/* After token id: the state advanced by its bytes (a stop token: unchanged); false where it is not allowed */
bool grammar_accept_token(GrammarState *s, const GrammarVocab *v, int32_t id);

/* Statistics for the benchmarks and the tests: interned stack nodes, sets, masks computed (cache misses) */
typedef struct {
    long nodes, sets, masks_computed, masks_cached, trie_nodes_visited;
    long contexts_computed;    /* trie walks (a context's: a set cut a few frames down, shared across depths) */
    long unsure_checked;       /* tokens a context left to the whole stack, checked by their bytes */
} GrammarStats;
GrammarStats grammar_stats(const Grammar *g);
#endif
