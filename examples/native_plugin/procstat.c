/*
 * procstat: a polyprof native plugin that records, for every thread of the
 * profiled process, how much CPU it got, how long it waited in the run queue and
 * how often it was switched out (voluntarily: blocked on I/O, a lock, a device;
 * involuntarily: preempted). A background pthread samples /proc/self/task/<tid>/
 * {stat,schedstat,status} every `interval_ms` (option, default 10) and the data
 * comes back as an XSpace plane "/host:procstat" with one line per thread and one
 * event per sampling interval in which the thread ran or switched.
 *
 * Build:  cc -shared -fPIC -O2 -pthread -I../../include procstat.c -o libprocstat.so
 * Variants (for the conformance kit's own tests):
 *   -DBROKEN_DOUBLE_START  a second start() succeeds instead of POLYPROF_ERR_STATE
 *   -DBROKEN_BUFFER        collect() ignores `capacity` and writes past the buffer
 *   -DBROKEN_XSPACE        events refer to event metadata the plane never defines
 *   -DBROKEN               all three
 *   -DBROKEN_SLOW_STOP     stop() takes 1.5 s (for the kit's time limits)
 *   -DPOLYPROF_ABI_MINOR=0 built against the older, smaller ABI 1.0 structs
 *   -DOWN_CLOCK            timestamps on CLOCK_MONOTONIC_RAW; polyprof syncs clocks
 * Builds the loader must refuse or accept (its tests):
 *   -DFUTURE_ABI           a larger plugin table, as built against a newer header
 *   -DBAD_TABLE_SIZE=N     declares a struct_size of N bytes
 *   -DBAD_MAJOR            declares ABI major 2
 *   -DMISSING_STOP         leaves stop() NULL
 * Faults polyprof must survive (it runs native plugins in a helper process):
 *   -DFAULT_INIT=K, -DFAULT_START=K, -DFAULT_STOP=K, -DFAULT_COLLECT=K with K =
 *   1 segfault, 2 abort(), 3 _exit(3), 4 hang for ever
 * Chatter polyprof must keep out of the program's output:
 *   -DNOISY                printf()s in start() and fprintf(stderr)s in stop()
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "polyprof/plugin.h"
#include "xspace_writer.h"

#ifdef BROKEN
#define BROKEN_DOUBLE_START
#define BROKEN_BUFFER
#define BROKEN_XSPACE
#endif

#ifndef PLUGIN_NAME /* each build names itself, so several can be installed at once */
#if defined(BROKEN)
#define PLUGIN_NAME "procstat-broken"
#elif defined(OWN_CLOCK)
#define PLUGIN_NAME "procstat-ownclock"
#elif POLYPROF_ABI_MINOR < 1
#define PLUGIN_NAME "procstat-abi10"
#else
#define PLUGIN_NAME "procstat"
#endif
#endif

#if defined(OWN_CLOCK) && POLYPROF_ABI_MINOR < 1
#error "OWN_CLOCK needs ABI minor >= 1"
#endif

#if defined(FAULT_INIT) || defined(FAULT_START) || defined(FAULT_STOP) || defined(FAULT_COLLECT)
static void fault(int kind) {
  switch (kind) {
    case 1: { volatile int* volatile nowhere = NULL; *nowhere = 1; break; } /* segfault */
    case 2: abort();
    case 3: _exit(3);
    default: for (;;) sleep(1); /* hang */
  }
}
#endif

#define COMM_MAX 64

typedef struct sample {
  int64_t ts_ns;
  int32_t tid;
  uint64_t run_ns, wait_ns, slices, vcs, ivcs;
} sample;

typedef struct thread_name {
  int32_t tid;
  char comm[COMM_MAX];
} thread_name;

typedef struct procstat {
  const PolyprofHostApi* host;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int state; /* 0 new, 1 started, 2 stopped */
  int halt;
  int64_t interval_ns;
  int64_t start_ns, stop_ns;
  sample* samples;
  size_t n_samples, cap_samples;
  thread_name* names;
  size_t n_names, cap_names;
  uint8_t* xspace; /* serialized on the first collect(), returned by every collect() */
  size_t xspace_len;
  int have_xspace;
  char task_dir[64]; /* /proc/<profiled pid>/task */
} procstat;

static int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t now(procstat* p) {
#ifdef OWN_CLOCK
  (void)p;
  return clock_ns(CLOCK_MONOTONIC_RAW);
#else
  if (p->host->session_clock_id >= 0) return clock_ns((clockid_t)p->host->session_clock_id);
  return p->host->now_ns(p->host->host_data);
#endif
}

static void host_log(procstat* p, int level, const char* msg) {
#if POLYPROF_ABI_MINOR >= 1
  if (POLYPROF_HAS_FIELD(p->host, PolyprofHostApi, log) && p->host->log)
    p->host->log(p->host->host_data, level, msg);
#else
  (void)p; (void)level; (void)msg;
#endif
}

static int read_file(const char* path, char* buf, size_t n) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t got = fread(buf, 1, n - 1, f);
  fclose(f);
  buf[got] = '\0';
  return (int)got;
}

static uint64_t status_field(const char* text, const char* key) {
  const char* s = strstr(text, key);
  return s ? strtoull(s + strlen(key), NULL, 10) : 0;
}

static void remember_name(procstat* p, int32_t tid, const char* comm) {
  for (size_t i = 0; i < p->n_names; i++)
    if (p->names[i].tid == tid) {
      snprintf(p->names[i].comm, COMM_MAX, "%s", comm);
      return;
    }
  if (p->n_names == p->cap_names) {
    size_t cap = p->cap_names ? 2 * p->cap_names : 16;
    thread_name* n = realloc(p->names, cap * sizeof *n);
    if (!n) return;
    p->names = n;
    p->cap_names = cap;
  }
  p->names[p->n_names].tid = tid;
  snprintf(p->names[p->n_names].comm, COMM_MAX, "%s", comm);
  p->n_names++;
}

/* One pass over /proc/self/task. Called with p->mu held. */
static void sample_all(procstat* p) {
  DIR* d = opendir(p->task_dir);
  if (!d) return;
  int64_t ts = now(p);
  char path[96], buf[4096];
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int32_t tid = (int32_t)atoi(e->d_name);
    sample s = {ts, tid, 0, 0, 0, 0, 0};
    snprintf(path, sizeof path, "%s/%d/stat", p->task_dir, tid);
    if (read_file(path, buf, sizeof buf) <= 0) continue; /* the thread just ended */
    char* open = strchr(buf, '(');
    char* close = strrchr(buf, ')');
    if (open && close && close > open) {
      *close = '\0';
      remember_name(p, tid, open + 1);
    }
    snprintf(path, sizeof path, "%s/%d/schedstat", p->task_dir, tid);
    if (read_file(path, buf, sizeof buf) > 0) {
      unsigned long long run = 0, wait = 0, slices = 0;
      if (sscanf(buf, "%llu %llu %llu", &run, &wait, &slices) == 3) {
        s.run_ns = run;
        s.wait_ns = wait;
        s.slices = slices;
      }
    }
    snprintf(path, sizeof path, "%s/%d/status", p->task_dir, tid);
    if (read_file(path, buf, sizeof buf) > 0) {
      s.vcs = status_field(buf, "\nvoluntary_ctxt_switches:");
      s.ivcs = status_field(buf, "\nnonvoluntary_ctxt_switches:");
    }
    if (p->n_samples == p->cap_samples) {
      size_t cap = p->cap_samples ? 2 * p->cap_samples : 1024;
      sample* n = realloc(p->samples, cap * sizeof *n);
      if (!n) break;
      p->samples = n;
      p->cap_samples = cap;
    }
    p->samples[p->n_samples++] = s;
  }
  closedir(d);
}

static void* sampler(void* arg) {
  procstat* p = (procstat*)arg;
  pthread_setname_np(pthread_self(), "procstat");
  pthread_mutex_lock(&p->mu);
  while (!p->halt) {
    sample_all(p);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t t = (int64_t)until.tv_sec * 1000000000LL + until.tv_nsec + p->interval_ns;
    until.tv_sec = t / 1000000000LL;
    until.tv_nsec = t % 1000000000LL;
    while (!p->halt && pthread_cond_timedwait(&p->cv, &p->mu, &until) != ETIMEDOUT) {
    }
  }
  sample_all(p); /* the final state, so the last interval is complete */
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static int64_t option_int(const char* json, const char* key, int64_t dflt) {
  if (!json) return dflt;
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char* s = strstr(json, pat);
  if (!s) return dflt;
  s = strchr(s + strlen(pat), ':');
  return s ? strtoll(s + 1, NULL, 10) : dflt;
}

static int32_t ps_start(void* self, const char* options_json, PolyprofStatus* st) {
  procstat* p = (procstat*)self;
#ifdef FAULT_START
  fault(FAULT_START);
#endif
#ifdef NOISY
  printf("procstat: hello from start()\n");
  fflush(stdout);
#endif
  pthread_mutex_lock(&p->mu);
  if (p->state != 0) {
    int state = p->state;
    pthread_mutex_unlock(&p->mu);
#ifdef BROKEN_DOUBLE_START
    if (state == 1) return polyprof_status(st, POLYPROF_OK, "");
#endif
    return polyprof_status(st, POLYPROF_ERR_STATE,
                           state == 1 ? "start() while already started: a plugin starts once per session"
                                      : "start() after stop(): a plugin starts once per session");
  }
  int64_t ms = option_int(options_json, "interval_ms", 10);
  if (ms <= 0 || ms > 60000) {
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_ERR_INVALID_ARGUMENT, "interval_ms must be in 1..60000");
  }
  p->interval_ns = ms * 1000000LL;
  p->halt = 0;
  p->start_ns = now(p);
  if (pthread_create(&p->thread, NULL, sampler, p) != 0) {
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_ERR_INTERNAL, "cannot create the sampling thread");
  }
  p->state = 1;
  pthread_mutex_unlock(&p->mu);
  host_log(p, POLYPROF_LOG_DEBUG, "procstat: sampling started");
  return polyprof_status(st, POLYPROF_OK, "");
}

static int32_t ps_stop(void* self, PolyprofStatus* st) {
  procstat* p = (procstat*)self;
#ifdef FAULT_STOP
  fault(FAULT_STOP);
#endif
#ifdef NOISY
  fprintf(stderr, "procstat: complaint from stop()\n");
#endif
  pthread_mutex_lock(&p->mu);
  if (p->state != 1) {
    int state = p->state;
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_ERR_STATE,
                           state == 0 ? "stop() before start()" : "stop() called twice");
  }
  p->state = 2; /* claim the stop: a racing second stop() sees state 2 */
#ifdef BROKEN_SLOW_STOP
  struct timespec nap = {1, 500000000};
  nanosleep(&nap, NULL);
#endif
  p->halt = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  pthread_mutex_lock(&p->mu);
  p->stop_ns = now(p);
  pthread_mutex_unlock(&p->mu);
  return polyprof_status(st, POLYPROF_OK, "");
}

static int cmp_sample(const void* a, const void* b) {
  const sample* x = a;
  const sample* y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return x->ts_ns < y->ts_ns ? -1 : x->ts_ns > y->ts_ns;
}

static const char* comm_of(procstat* p, int32_t tid) {
  for (size_t i = 0; i < p->n_names; i++)
    if (p->names[i].tid == tid) return p->names[i].comm;
  return "thread";
}

enum { ST_CPU = 1, ST_WAIT, ST_SLICES, ST_VCS, ST_IVCS, ST_INTERVAL, ST_UTIL, ST_TID, ST_SOURCE,
       ST_CATEGORY, ST_PRODUCER, ST_COUNTER };

/* Process-wide counters, one sample per sampling pass. Event metadata ids for the
 * counter names start at COUNTER_META so they never clash with thread names. */
#define COUNTER_META 100000
static const char* COUNTER_NAMES[] = {"procstat.cpu_cores", "procstat.runqueue_wait_cores",
                                      "procstat.context_switches_per_s", "procstat.threads"};
#define N_COUNTERS 4

/* polyprof reads instant events on a line named "polyprof counters" carrying a
 * "polyprof.counter_value" stat as counter samples, when the plane says it follows
 * polyprof's conventions (plane stat polyprof.producer = "polyprof"). Samples are in
 * time order here (before the sort by thread). */
static void write_counters(procstat* p, pb_buf* plane, pb_buf* line, pb_buf* ev, pb_buf* tmp, int64_t line_ts) {
  size_t nt = p->n_names ? p->n_names : 1;
  sample* last = calloc(nt, sizeof(sample));
  int* seen = calloc(nt, sizeof(int));
  if (!last || !seen) { free(last); free(seen); return; }
  pb_int(line, XLINE_ID, 0);
  pb_str(line, XLINE_NAME, "polyprof counters");
  pb_int(line, XLINE_TIMESTAMP_NS, line_ts);
  size_t i = 0;
  int64_t prev_ts = 0;
  while (i < p->n_samples) {
    int64_t ts = p->samples[i].ts_ns;
    double cpu = 0, wait = 0, cs = 0, threads = 0;
    int have_prev = 0;
    for (; i < p->n_samples && p->samples[i].ts_ns == ts; i++) {
      const sample* s = &p->samples[i];
      size_t k = 0;
      while (k < p->n_names && p->names[k].tid != s->tid) k++;
      if (k >= nt) continue;
      threads += 1;
      if (seen[k]) {
        cpu += (double)(s->run_ns - last[k].run_ns);
        wait += (double)(s->wait_ns - last[k].wait_ns);
        cs += (double)((s->vcs + s->ivcs) - (last[k].vcs + last[k].ivcs));
        have_prev = 1;
      }
      seen[k] = 1;
      last[k] = *s;
    }
    if (have_prev && ts > prev_ts) {
      double dt = (double)(ts - prev_ts);
      double values[N_COUNTERS] = {cpu / dt, wait / dt, cs * 1e9 / dt, threads};
      for (int c = 0; c < N_COUNTERS; c++) {
        pb_int(ev, XEVENT_METADATA_ID, COUNTER_META + c);
        pb_int(ev, XEVENT_OFFSET_PS, (ts - line_ts) * 1000);
        xstat_double(ev, XEVENT_STATS, tmp, ST_COUNTER, values[c]);
        pb_msg(line, XLINE_EVENTS, ev);
      }
    }
    prev_ts = ts;
  }
  free(last);
  free(seen);
  pb_msg(plane, XPLANE_LINES, line);
}

/* Build the XSpace. Called with p->mu held, after stop(). */
static int serialize(procstat* p) {
  pb_buf space = {0}, plane = {0}, line = {0}, ev = {0}, tmp = {0}, tmp2 = {0};
  pb_int(&plane, XPLANE_ID, 1);
  pb_str(&plane, XPLANE_NAME, "/host:procstat");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_CPU, "cpu_ns", "CPU time the thread got in the interval");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_WAIT, "runqueue_wait_ns", "time runnable but waiting for a CPU");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_SLICES, "timeslices", "times scheduled onto a CPU");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_VCS, "voluntary_switches", "switched out by blocking");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_IVCS, "involuntary_switches", "preempted");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_INTERVAL, "interval_ns", "sampling interval");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_UTIL, "cpu_utilization", "cpu_ns / interval_ns");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_TID, "tid", "OS thread id");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_SOURCE, "source", "where the data comes from");
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_CATEGORY, "polyprof.category", NULL);
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_PRODUCER, "polyprof.producer", NULL);
  xplane_stat_metadata(&plane, &tmp, &tmp2, ST_COUNTER, "polyprof.counter_value", NULL);
  xstat_str(&plane, XPLANE_STATS, &tmp, ST_SOURCE, "/proc/self/task/*/{stat,schedstat,status}");
  xstat_str(&plane, XPLANE_STATS, &tmp, ST_PRODUCER, "polyprof");
  for (int c = 0; c < N_COUNTERS; c++)
    xplane_event_metadata(&plane, &tmp, &tmp2, COUNTER_META + c, COUNTER_NAMES[c]);
  write_counters(p, &plane, &line, &ev, &tmp, p->start_ns);
  qsort(p->samples, p->n_samples, sizeof(sample), cmp_sample);

  /* one event metadata per distinct thread name */
  char** metas = calloc(p->n_names + 1, sizeof(char*));
  size_t n_metas = 0;

  int64_t line_ts = p->start_ns;
  size_t i = 0;
  while (i < p->n_samples) {
    size_t j = i;
    while (j < p->n_samples && p->samples[j].tid == p->samples[i].tid) j++;
    int32_t tid = p->samples[i].tid;
    const char* comm = comm_of(p, tid);
    int64_t meta = 0;
    for (size_t m = 0; m < n_metas; m++)
      if (strcmp(metas[m], comm) == 0) meta = (int64_t)m + 1;
    if (!meta && metas) {
      metas[n_metas++] = (char*)comm;
      meta = (int64_t)n_metas;
      xplane_event_metadata(&plane, &tmp, &tmp2, meta, comm);
    }
#ifdef BROKEN_XSPACE
    meta += 1000; /* never defined in event_metadata */
#endif
    char display[COMM_MAX + 24];
    snprintf(display, sizeof display, "%s [%d]", comm, tid);
    pb_int(&line, XLINE_ID, tid);
    pb_int(&line, XLINE_DISPLAY_ID, tid);
    pb_str(&line, XLINE_NAME, display); /* thread names repeat; "name [tid]" does not */
    pb_str(&line, XLINE_DISPLAY_NAME, display);
    pb_int(&line, XLINE_TIMESTAMP_NS, line_ts);
    pb_int(&line, XLINE_DURATION_PS, (p->stop_ns - line_ts) * 1000);
    for (size_t k = i + 1; k < j; k++) {
      const sample* a = &p->samples[k - 1];
      const sample* b = &p->samples[k];
      /* a counter that went down is a read that failed (the thread was ending: its
       * schedstat or status gone, read as 0): no interval, or the differences wrap */
      if (b->run_ns < a->run_ns || b->wait_ns < a->wait_ns || b->slices < a->slices || b->vcs < a->vcs ||
          b->ivcs < a->ivcs)
        continue;
      uint64_t cpu = b->run_ns - a->run_ns, vcs = b->vcs - a->vcs, ivcs = b->ivcs - a->ivcs;
      int64_t interval = b->ts_ns - a->ts_ns;
      if ((cpu == 0 && vcs == 0 && ivcs == 0) || interval <= 0) continue;
      /* The event starts with the interval and lasts as long as the thread ran in it. */
      int64_t dur = (int64_t)cpu < interval ? (int64_t)cpu : interval;
      pb_int(&ev, XEVENT_METADATA_ID, meta);
      pb_int(&ev, XEVENT_OFFSET_PS, (a->ts_ns - line_ts) * 1000);
      pb_int(&ev, XEVENT_DURATION_PS, dur * 1000);
      xstat_uint(&ev, XEVENT_STATS, &tmp, ST_CPU, cpu);
      xstat_uint(&ev, XEVENT_STATS, &tmp, ST_WAIT, b->wait_ns - a->wait_ns);
      xstat_uint(&ev, XEVENT_STATS, &tmp, ST_SLICES, b->slices - a->slices);
      xstat_uint(&ev, XEVENT_STATS, &tmp, ST_VCS, vcs);
      xstat_uint(&ev, XEVENT_STATS, &tmp, ST_IVCS, ivcs);
      xstat_int(&ev, XEVENT_STATS, &tmp, ST_INTERVAL, interval);
      xstat_double(&ev, XEVENT_STATS, &tmp, ST_UTIL, (double)cpu / (double)interval);
      xstat_int(&ev, XEVENT_STATS, &tmp, ST_TID, tid);
      xstat_str(&ev, XEVENT_STATS, &tmp, ST_CATEGORY, "thread_cpu");
      pb_msg(&line, XLINE_EVENTS, &ev);
    }
    pb_msg(&plane, XPLANE_LINES, &line);
    i = j;
  }
  free(metas);
  pb_msg(&space, XSPACE_PLANES, &plane);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  pb_str(&space, XSPACE_HOSTNAMES, host);
  int failed = space.failed || plane.failed || line.failed || ev.failed || tmp.failed || tmp2.failed;
  pb_free(&plane); pb_free(&line); pb_free(&ev); pb_free(&tmp); pb_free(&tmp2);
  if (failed) {
    pb_free(&space);
    return 0;
  }
  p->xspace = space.data;
  p->xspace_len = space.len;
  p->have_xspace = 1;
  return 1;
}

static int32_t ps_collect(void* self, uint8_t* buffer, size_t capacity, size_t* size, PolyprofStatus* st) {
  procstat* p = (procstat*)self;
#ifdef FAULT_COLLECT
  if (buffer) fault(FAULT_COLLECT); /* while filling the buffer (the size query returns) */
#endif
  if (!size) return polyprof_status(st, POLYPROF_ERR_INVALID_ARGUMENT, "size must not be NULL");
  pthread_mutex_lock(&p->mu);
  if (p->state != 2) {
    int state = p->state;
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_ERR_STATE,
                           state == 0 ? "collect() before start()" : "collect() before stop()");
  }
  if (!p->have_xspace && !serialize(p)) {
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_ERR_INTERNAL, "out of memory while serializing");
  }
  *size = p->xspace_len;
  if (!buffer) {
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_OK, "");
  }
#ifndef BROKEN_BUFFER
  if (capacity < p->xspace_len) {
    char msg[128];
    snprintf(msg, sizeof msg, "buffer of %zu bytes is too small: %zu needed", capacity, p->xspace_len);
    pthread_mutex_unlock(&p->mu);
    return polyprof_status(st, POLYPROF_ERR_BUFFER_TOO_SMALL, msg);
  }
#else
  (void)capacity;
#endif
  memcpy(buffer, p->xspace, p->xspace_len);
  pthread_mutex_unlock(&p->mu);
  return polyprof_status(st, POLYPROF_OK, "");
}

static void ps_destroy(void* self) {
  procstat* p = (procstat*)self;
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  int running = p->state == 1;
  p->halt = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (running) pthread_join(p->thread, NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->samples);
  free(p->names);
  free(p->xspace);
  free(p);
}

#ifdef OWN_CLOCK
static int64_t ps_clock(void* self) {
  (void)self;
  return clock_ns(CLOCK_MONOTONIC_RAW);
}
#endif

POLYPROF_EXPORT int32_t polyprof_plugin_init(const PolyprofHostApi* host, PolyprofPlugin* out,
                                             PolyprofStatus* st) {
#ifdef FAULT_INIT
  fault(FAULT_INIT);
#endif
  if (!host || !out) return polyprof_status(st, POLYPROF_ERR_INVALID_ARGUMENT, "NULL host or out");
  if (host->abi_major != POLYPROF_ABI_MAJOR)
    return polyprof_status(st, POLYPROF_ERR_VERSION, "procstat is built for polyprof ABI major 1");
  if (access("/proc/self/task", R_OK) != 0)
    return polyprof_status(st, POLYPROF_ERR_UNAVAILABLE, "/proc/self/task is not readable");
  procstat* p = calloc(1, sizeof *p);
  if (!p) return polyprof_status(st, POLYPROF_ERR_INTERNAL, "out of memory");
  p->host = host;
  /* the profiled process: polyprof runs this plugin in a helper process (ABI 1.2) */
  long long pid = getpid();
#if POLYPROF_ABI_MINOR >= 2
  if (POLYPROF_HAS_FIELD(host, PolyprofHostApi, profiled_pid) && host->profiled_pid > 0) pid = host->profiled_pid;
#endif
  snprintf(p->task_dir, sizeof p->task_dir, "/proc/%lld/task", pid);
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca; /* timed waits on CLOCK_MONOTONIC, immune to wall-clock steps */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  PolyprofPlugin mine;
  memset(&mine, 0, sizeof mine);
  mine.struct_size = sizeof mine;
  mine.abi_major = POLYPROF_ABI_MAJOR;
  mine.abi_minor = POLYPROF_ABI_MINOR;
  mine.name = PLUGIN_NAME;
  mine.device_kinds = "CPU";
  mine.self = p;
  mine.start = ps_start;
  mine.stop = ps_stop;
  mine.collect = ps_collect;
  mine.destroy = ps_destroy;
#ifdef OWN_CLOCK
  mine.clock_domain = POLYPROF_CLOCK_OWN;
  mine.clock_now_ns = ps_clock;
#elif POLYPROF_ABI_MINOR >= 1
  mine.clock_domain = POLYPROF_CLOCK_SESSION;
#endif
#ifdef MISSING_STOP
  mine.stop = NULL;
#endif
#ifdef BAD_MAJOR
  mine.abi_major = POLYPROF_ABI_MAJOR + 1;
#endif
#ifdef FUTURE_ABI
  /* What a plugin compiled against a later header looks like: fields appended. */
  struct {
    PolyprofPlugin known;
    int64_t added_later[6];
  } bigger;
  memset(&bigger, 0, sizeof bigger);
  bigger.known = mine;
  bigger.known.abi_minor = 9;
  bigger.added_later[0] = 42;
  size_t cap = out->struct_size, n = sizeof bigger < cap ? sizeof bigger : cap;
  memcpy((char*)out + sizeof(size_t), (char*)&bigger + sizeof(size_t), n - sizeof(size_t));
  out->struct_size = sizeof bigger;
#else
  polyprof_plugin_fill(out, &mine);
#endif
#ifdef BAD_TABLE_SIZE
  out->struct_size = BAD_TABLE_SIZE;
#endif
  return polyprof_status(st, POLYPROF_OK, "");
}
