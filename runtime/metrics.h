/* metrics.h: GET /metrics, the server's counters, gauges and histograms in Prometheus's text format (version
 * 0.0.4), under the names vLLM gives them (vllm:num_requests_running, vllm:kv_cache_usage_perc, ...), so that what
 * reads vLLM's (the Kubernetes Gateway API Inference Extension's model-server protocol, Grafana boards) reads
 * these. Histograms have fixed buckets, vLLM's; nothing here allocates after metrics_init. */
#ifndef LLMCC_METRICS_H
#define LLMCC_METRICS_H
#include "buf.h"
#include <stdbool.h>

/* X(field, name after "vllm:", help, bucket upper bounds in seconds) */
#define METRIC_HISTOGRAMS(X) \
    X(ttft, "time_to_first_token_seconds", "Time from a request's arrival to its first generated token.", \
      0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0) \
    X(itl, "inter_token_latency_seconds", "Time between two generated tokens of a request.", \
      0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0) \
    X(e2e, "e2e_request_latency_seconds", "Time from a request's arrival to its last token.", \
      0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0)

#define METRIC_BUCKETS 19   /* each histogram's bounds above (+Inf besides) */

typedef struct {
    double bound[METRIC_BUCKETS];
    long count[METRIC_BUCKETS + 1];   /* per bucket, not cumulative; the last: above every bound */
    double sum;
    long n;
} Histogram;

typedef struct {
#define METRIC_FIELD(field, ...) Histogram field;
    METRIC_HISTOGRAMS(METRIC_FIELD)
#undef METRIC_FIELD
    long prompt_tokens, generation_tokens;   /* counters */
    long finished_stop, finished_length;     /* requests ended by a stop (EOS, a stop string) / by max_tokens */
} Metrics;

/* What the server is doing when scraped */
typedef struct {
    int running, waiting;        /* requests in a slot / queued for one */
    double kv_usage;             /* KV rows in use over all the slots' rows, 0..1 */
    long requests, errors;       /* HTTP requests read whole; answered with a status other than 200 */
} MetricsNow;

void metrics_init(Metrics *m);
void metrics_observe(Histogram *h, double seconds);
/* The exposition: every metric labelled model_name="model" */
void metrics_write(Buf *b, const Metrics *m, const MetricsNow *now, const char *model);
#endif
