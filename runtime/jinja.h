/* jinja.h: the Jinja language as chat templates use it, interpreted. A checkpoint carries its chat template as
 * Jinja source (tokenizer_config.json's chat_template, chat_template.jinja, GGUF's tokenizer.chat_template);
 * transformers renders it with Python's jinja2, configured as apply_chat_template configures it
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, its own tojson, raise_exception,
 * strftime_now). This renders the same text, byte for byte, from the same variables, given as one JSON object
 * (messages, tools, add_generation_prompt, bos_token, ...): the server has them as JSON already, the CLI writes
 * them so. Parsing checks the whole template once (an error names its line and column); rendering is bounded
 * (output bytes, loop steps, call depth), so no template runs forever or grows without end. */
#ifndef LLMCC_RUNTIME_JINJA_H
#define LLMCC_RUNTIME_JINJA_H
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

typedef struct JinjaTemplate JinjaTemplate;

typedef enum {
    JINJA_OK,
    JINJA_ERR_SYNTAX,     /* the template is not Jinja llmcc reads (line, column) */
    JINJA_ERR_RAISE,      /* the template called raise_exception(message): message is the template's, verbatim */
    JINJA_ERR_RUNTIME,    /* what jinja2 would raise as it renders (line): a type error, an undefined's use, ... */
    JINJA_ERR_LIMIT,      /* past a bound of JinjaLimits (line) */
    JINJA_ERR_VARS,       /* the variables are not a JSON object */
} JinjaErrorKind;

typedef struct {
    JinjaErrorKind kind;
    int line, column;     /* 1-based where known, else 0 */
    char message[512];
} JinjaError;

typedef struct {
    size_t max_output;    /* bytes of rendered text (0: 16 MiB) */
    long max_steps;       /* loop iterations, macro calls and filter items together (0: 10 million) */
    int max_depth;        /* nested macro calls (0: 64) */
} JinjaLimits;

/* The source's first len bytes parsed; NULL with *err (kind JINJA_ERR_SYNTAX) where it is not Jinja llmcc reads */
JinjaTemplate *jinja_parse(const char *src, size_t len, JinjaError *err);
void jinja_free(JinjaTemplate *t);

/* The text the template renders with the variables of the JSON object vars (its keys are the template's global
 * names), malloc'd and NUL-terminated (*len its bytes); NULL with *err where rendering fails. now: the clock
 * strftime_now reads (NULL: the local time). limits may be NULL. */
char *jinja_render(const JinjaTemplate *t, const char *vars, size_t vars_len, const struct tm *now,
                   const JinjaLimits *limits, size_t *len, JinjaError *err);

/* "line 3, column 7: ..." or the message alone, as a user reads it */
void jinja_error_string(const JinjaError *err, char *out, size_t size);
#endif
