/* fuzz_jinja.c: libFuzzer harness for the chat-template interpreter (runtime/jinja.c): the input is a template.
 * It must be refused with a syntax error that names a line and column, or render a fixed conversation (with
 * tools, with and without the generation prompt) to text or to an error with a message, within small bounds:
 * no crash, no leak, no sanitizer report, no hang. The corpus's real templates are seeds where
 * ../shared/assets/chat-templates is present (make fuzz adds it). */
#include "jinja.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
    "\"What's the weather in Paris?\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": "
    "\"call12345\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"22 C\"}, {\"role\": "
    "\"assistant\", \"content\": \"<think>x</think>It is 22 \\u00b0C.\"}], \"tools\": [{\"type\": \"function\", "
    "\"function\": {\"name\": \"get_weather\", \"description\": \"Weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}], \"documents\": null, "
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false, \"add_generation_prompt\": ";

static void fail(const char *what, const JinjaError *e) {
    fprintf(stderr, "FUZZ CHECK FAILED: %s (kind %d, line %d, column %d): %s\n", what, e->kind, e->line, e->column,
            e->message);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    JinjaError err;
    JinjaTemplate *t = jinja_parse((const char *)data, size, &err);
    if (!t) {
        if (err.kind != JINJA_ERR_SYNTAX && err.kind != JINJA_ERR_LIMIT) fail("parse: not a syntax error", &err);
        if (err.kind == JINJA_ERR_SYNTAX && (err.line < 1 || err.column < 1)) fail("syntax error without a place", &err);
        if (!err.message[0] || strchr(err.message, '\n')) fail("syntax error message not one line", &err);
        return 0;
    }
    struct tm now = {.tm_year = 125, .tm_mon = 0, .tm_mday = 15, .tm_hour = 12, .tm_wday = 3, .tm_yday = 14};
    JinjaLimits limits = {.max_output = 1 << 20, .max_steps = 200000, .max_depth = 32};
    for (int agp = 0; agp < 2; agp++) {
        char vars[sizeof VARS + 8];
        int n = snprintf(vars, sizeof vars, "%s%s}", VARS, agp ? "true" : "false");
        size_t len;
        char *text = jinja_render(t, vars, (size_t)n, &now, &limits, &len, &err);
        if (text) {
            if (len > limits.max_output || strlen(text) > len) fail("rendered text past its length", &err);
            free(text);
        } else {
            if (err.kind == JINJA_OK || err.kind == JINJA_ERR_SYNTAX || err.kind == JINJA_ERR_VARS)
                fail("render: no error kind", &err);
            if (err.kind != JINJA_ERR_RAISE && (!err.message[0] || strchr(err.message, '\n')))
                fail("render error message not one line", &err);
        }
    }
    jinja_free(t);
    return 0;
}
