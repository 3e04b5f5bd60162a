/* metrics.c: see metrics.h. */
#include "metrics.h"
#include <stdio.h>
#include <string.h>

static void histogram_init(Histogram *h, const double *bounds) {
    memset(h, 0, sizeof *h);
    memcpy(h->bound, bounds, sizeof h->bound);
}

void metrics_init(Metrics *m) {
    memset(m, 0, sizeof *m);
#define METRIC_INIT(field, name, help, ...) \
    { \
        static const double bounds[] = { __VA_ARGS__ }; \
        _Static_assert(sizeof bounds / sizeof bounds[0] == METRIC_BUCKETS, "buckets of " name); \
        histogram_init(&m->field, bounds); \
    }
    METRIC_HISTOGRAMS(METRIC_INIT)
#undef METRIC_INIT
}

void metrics_observe(Histogram *h, double seconds) {
    int b = 0;
    while (b < METRIC_BUCKETS && seconds > h->bound[b]) b++;
    h->count[b]++;
    h->sum += seconds;
    h->n++;
}

/* A label value as the format escapes it: backslash, double quote and line feed */
static void label_value(Buf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') buf_fmt(b, "\\%c", *s);
        else if (*s == '\n') buf_str(b, "\\n");
        else buf_add(b, s, 1);
    }
}

static void head(Buf *b, const char *name, const char *type, const char *help) {
    buf_fmt(b, "# HELP vllm:%s %s\n# TYPE vllm:%s %s\n", name, help, name, type);
}

static void sample(Buf *b, const char *name, const char *model, const char *extra, double v) {
    buf_fmt(b, "vllm:%s{model_name=\"", name);
    label_value(b, model);
    buf_fmt(b, "\"%s} %.17g\n", extra, v);
}

static void histogram(Buf *b, const char *name, const char *help, const Histogram *h, const char *model) {
    head(b, name, "histogram", help);
    char bucket[96], le[48];
    snprintf(bucket, sizeof bucket, "%s_bucket", name);
    long cumulative = 0;
    for (int i = 0; i <= METRIC_BUCKETS; i++) {
        cumulative += h->count[i];
        if (i < METRIC_BUCKETS) snprintf(le, sizeof le, ",le=\"%g\"", h->bound[i]);
        else snprintf(le, sizeof le, ",le=\"+Inf\"");
        sample(b, bucket, model, le, (double)cumulative);
    }
    char more[96];
    snprintf(more, sizeof more, "%s_sum", name);
    sample(b, more, model, "", h->sum);
    snprintf(more, sizeof more, "%s_count", name);
    sample(b, more, model, "", (double)h->n);
}

void metrics_write(Buf *b, const Metrics *m, const MetricsNow *now, const char *model) {
    head(b, "num_requests_running", "gauge", "Requests in a slot (prefilling or generating).");
    sample(b, "num_requests_running", model, "", now->running);
    head(b, "num_requests_waiting", "gauge", "Requests waiting for a slot.");
    sample(b, "num_requests_waiting", model, "", now->waiting);
    head(b, "kv_cache_usage_perc", "gauge", "KV-cache usage: 1 means 100 percent (the rows the requests in the "
         "slots hold over all the slots' rows).");
    sample(b, "kv_cache_usage_perc", model, "", now->kv_usage);
    head(b, "prompt_tokens_total", "counter", "Prompt tokens of the requests finished.");
    sample(b, "prompt_tokens_total", model, "", (double)m->prompt_tokens);
    head(b, "generation_tokens_total", "counter", "Tokens generated for the requests finished.");
    sample(b, "generation_tokens_total", model, "", (double)m->generation_tokens);
    head(b, "request_success_total", "counter", "Requests finished, by why they ended.");
    sample(b, "request_success_total", model, ",finished_reason=\"stop\"", (double)m->finished_stop);
    sample(b, "request_success_total", model, ",finished_reason=\"length\"", (double)m->finished_length);
#define METRIC_WRITE(field, name, help, ...) histogram(b, name, help, &m->field, model);
    METRIC_HISTOGRAMS(METRIC_WRITE)
#undef METRIC_WRITE
    /* llmcc's own: what vLLM has no name for */
    buf_str(b, "# HELP llmcc:http_requests_total HTTP requests read whole, whatever their answer.\n"
               "# TYPE llmcc:http_requests_total counter\n");
    buf_fmt(b, "llmcc:http_requests_total %ld\n", now->requests);
    buf_str(b, "# HELP llmcc:http_errors_total HTTP requests answered with a status other than 200.\n"
               "# TYPE llmcc:http_errors_total counter\n");
    buf_fmt(b, "llmcc:http_errors_total %ld\n", now->errors);
}
