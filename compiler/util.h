/* util.h: the small things every compiler file needs: the per-compilation
 * arena, user-error reporting (one line, exit 1), internal CHECKs, a growable
 * string buffer and whole-file reading. */
#ifndef LLMCC_UTIL_H
#define LLMCC_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdbool.h>

/* ---- arena: one per compilation, nothing is freed node by node ---- */
typedef struct ArenaBlock ArenaBlock;
typedef struct { ArenaBlock *head; } Arena;
void *arena_alloc(Arena *a, size_t n);           /* zeroed, 16-aligned */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);
/* Makes room for one more element in an arena array of *n (capacity *cap), doubling. */
void arena_grow(Arena *a, void **arr, int n, int *cap, size_t elem);
#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))

/* ---- errors ----
 * User errors: "llmcc: FILE: KEY: message", exit status 1. file or key may be
 * NULL and are then left out. Never use assert() for anything a user can cause. */
_Noreturn void die_user(const char *file, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fuzz harnesses (tests/fuzz/) set this to longjmp back to the harness instead
 * of exiting; it gets the line die_user would print (without "\n"). If it
 * returns, die_user prints and exits as usual. NULL outside tests/fuzz/. */
extern void (*die_user_hook)(const char *line);
/* Internal errors: a bug in llmcc. */
_Noreturn void die_internal(const char *srcfile, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CHECK(cond, ...) \
    do { if (!(cond)) die_internal(__FILE__, __LINE__, "CHECK(" #cond ") failed: " __VA_ARGS__); } while (0)
#define UNREACHABLE() die_internal(__FILE__, __LINE__, "unreachable")

/* ---- X-macro lists: LIST(X) calls X(ENUM, "name", ...) once per member ----
 * `typedef enum { LIST(X_ENUM) COUNT } T;` and `const char *const names[] = {LIST(X_NAME)};`
 * (X_NAME_ takes the name apart from the rest: a list may carry more than the name) */
#define X_ENUM(e, ...) e,
#define X_NAME(e, ...) X_NAME_(__VA_ARGS__, 0)
#define X_NAME_(s, ...) s,

/* ---- growable string buffer (malloc'd, not arena) ---- */
typedef struct { char *s; size_t len, cap; } Str;
void str_printf(Str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void str_vprintf(Str *b, const char *fmt, va_list ap);
void str_append(Str *b, const char *s, size_t n);
void str_free(Str *b);

/* ---- files ---- */
/* Reads a whole file; returns NULL and sets errno when it cannot. *len may be NULL. */
char *read_file(const char *path, size_t *len);
bool file_exists(const char *path);
bool dir_exists(const char *path);
/* Writes data to path atomically (path.tmp then rename); dies with a user error on failure. */
void write_file_atomic(const char *path, const void *data, size_t len);
char *path_join(Arena *a, const char *dir, const char *name);

/* FNV-1a of s[0..n): hash tables keyed by names, and fingerprints of known texts */
uint64_t fnv1a(const char *s, size_t n);
/* Seconds on the monotonic clock (for timing what a command reports). */
double now_s(void);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
#endif
