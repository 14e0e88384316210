/* polyprof's NVTX injection library: NVTX ranges and marks recorded in a bounded buffer.
 *
 * NVTX (NVIDIA's annotation API, header-only since NVTX 3) loads a tool at the first
 * NVTX call of each NVTX instance in a process: it dlopens the library named by
 * NVTX_INJECTION64_PATH and calls its InitializeInjectionNvtx2(getExportTable). This
 * library is that tool (as Nsight Systems' is): it asks the export table for the
 * callback tables of the CORE and CORE2 (domain) modules and puts its own handlers in
 * the slots of the range, mark, domain, registered-string and naming (categories, OS
 * threads) functions. The handlers
 * record (CLOCK_MONOTONIC ns, gettid(), kind, message id, domain id, color, category,
 * range id) into fixed 40-byte slots of a bounded buffer; the messages (ASCII, wide or
 * registered strings) are interned once into a string arena. polyprof reads both
 * through ctypes after recording stops (plugins/nvtx/recorder.py).
 *
 * No Python API is used: the library loads in any process NVTX runs in (a child
 * program started during a session inherits NVTX_INJECTION64_PATH).
 *
 * The ABI below (module ids, callback ids, the export-table id and the layout of
 * nvtxEventAttributes_v2) is NVTX's public one (nvtxDetail/nvtxTypes.h, nvToolsExt.h);
 * it has only ever been appended to.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#define EXPORT __attribute__((visibility("default")))

/* NvtxCallbackModule */
enum { MODULE_CORE = 1, MODULE_CORE2 = 5 };
/* NvtxCallbackIdCore */
enum {
    CORE_MarkEx = 1, CORE_MarkA = 2, CORE_MarkW = 3, CORE_RangeStartEx = 4, CORE_RangeStartA = 5,
    CORE_RangeStartW = 6, CORE_RangeEnd = 7, CORE_RangePushEx = 8, CORE_RangePushA = 9,
    CORE_RangePushW = 10, CORE_RangePop = 11, CORE_NameCategoryA = 12, CORE_NameCategoryW = 13,
    CORE_NameOsThreadA = 14, CORE_NameOsThreadW = 15
};
/* NvtxCallbackIdCore2 */
enum {
    CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx = 2, CORE2_DomainRangeEnd = 3,
    CORE2_DomainRangePushEx = 4, CORE2_DomainRangePop = 5, CORE2_DomainNameCategoryA = 8,
    CORE2_DomainNameCategoryW = 9, CORE2_DomainRegisterStringA = 10,
    CORE2_DomainRegisterStringW = 11, CORE2_DomainCreateA = 12, CORE2_DomainCreateW = 13,
    CORE2_DomainDestroy = 14, CORE2_Initialize = 15
};
enum { ETID_CALLBACKS = 1 };
/* nvtxMessageType_t, nvtxColorType_t */
enum { MESSAGE_ASCII = 1, MESSAGE_UNICODE = 2, MESSAGE_REGISTERED = 3, COLOR_ARGB = 1 };

typedef void (*fn_t)(void);
typedef int (*module_table_fn)(int module, fn_t ***table, unsigned int *size);
typedef struct { size_t struct_size; module_table_fn GetModuleFunctionTable; } export_callbacks;
typedef const void *(*get_export_table_fn)(uint32_t id);

/* nvtxEventAttributes_v2 */
typedef struct {
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type, reserved0;
    uint64_t payload;
    int32_t message_type;
    union { const char *ascii; const wchar_t *unicode; const void *registered; } message;
} attributes;

/* the recorded event: 40 bytes (plugins/nvtx/recorder.py EVENT_DTYPE) */
enum { K_PUSH = 1, K_POP = 2, K_START = 3, K_END = 4, K_MARK = 5 };
typedef struct {
    int64_t t;
    uint64_t range;
    uint32_t tid, name, domain, color, category;
    uint32_t kind; /* written last: 0 means the slot was claimed but not yet filled */
} event;

#define CHUNK_EVENTS (1u << 16)
#define MAX_CHUNKS 4096u /* 2^28 events at most */
static event *chunks[MAX_CHUNKS];
static uint64_t next_slot, dropped, capacity, range_ids, attached, string_overflow;
static int recording;
#define RECORDING __atomic_load_n(&recording, __ATOMIC_RELAXED)

/* ------------------------------------------------------------------ strings */
#define ARENA_LIMIT (64u << 20)
static pthread_mutex_t strings_lock = PTHREAD_MUTEX_INITIALIZER;
static char *arena;
static size_t arena_used, arena_cap;
static uint32_t *table; /* open addressing: string id (arena offset + 1), 0 = empty */
static size_t table_cap, table_used;
static uint32_t overflow_id;

static uint64_t hash_of(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int table_grow(void) {
    size_t cap = table_cap ? table_cap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < table_cap; i++) {
        uint32_t id = table[i];
        if (!id) continue;
        const char *s = arena + id - 1;
        size_t j = hash_of(s, strlen(s)) & (cap - 1);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = id;
    }
    free(table);
    table = t;
    table_cap = cap;
    return 0;
}

/* arena_add: the id of n bytes of s appended with a NUL (0: over limit); the lock held */
static uint32_t arena_add(const char *s, size_t n, size_t limit) {
    if (arena_used + n + 1 > limit) return 0;
    if (arena_used + n + 1 > arena_cap) {
        size_t cap = arena_cap ? arena_cap : 1 << 16;
        while (cap < arena_used + n + 1) cap *= 2;
        char *a = realloc(arena, cap);
        if (!a) return 0;
        arena = a;
        arena_cap = cap;
    }
    memcpy(arena + arena_used, s, n);
    arena[arena_used + n] = 0;
    uint32_t id = (uint32_t)arena_used + 1;
    arena_used += n + 1;
    return id;
}

/* intern: the string id of s (n bytes), 0 only for NULL */
static uint32_t intern(const char *s, size_t n) {
    if (!s) return 0;
    uint64_t h = hash_of(s, n);
    pthread_mutex_lock(&strings_lock);
    if ((table_used + 1) * 2 > table_cap && table_grow() != 0) goto full;
    size_t j = h & (table_cap - 1);
    for (; table[j]; j = (j + 1) & (table_cap - 1)) {
        const char *t = arena + table[j] - 1;
        if (strncmp(t, s, n) == 0 && t[n] == 0) {
            uint32_t id = table[j];
            pthread_mutex_unlock(&strings_lock);
            return id;
        }
    }
    uint32_t id = arena_add(s, n, ARENA_LIMIT);
    if (!id) goto full;
    table[j] = id;
    table_used++;
    pthread_mutex_unlock(&strings_lock);
    return id;
full:
    __atomic_add_fetch(&string_overflow, 1, __ATOMIC_RELAXED);
    if (!overflow_id) {
        static const char text[] = "(NVTX string table full)";
        overflow_id = arena_add(text, sizeof text - 1, ARENA_LIMIT + sizeof text);
    }
    pthread_mutex_unlock(&strings_lock);
    return overflow_id;
}

static uint32_t intern_c(const char *s) { return s ? intern(s, strnlen(s, 1 << 16)) : 0; }

/* wide (UTF-32 on Linux) text as UTF-8, cut at 4 KiB */
static uint32_t intern_w(const wchar_t *w) {
    if (!w) return 0;
    char buf[4096];
    size_t n = 0;
    for (; *w && n + 4 < sizeof buf; w++) {
        uint32_t c = (uint32_t)*w;
        if (c > 0x10FFFF || (c >= 0xD800 && c < 0xE000)) c = 0xFFFD;
        if (c < 0x80) buf[n++] = (char)c;
        else if (c < 0x800) { buf[n++] = (char)(0xC0 | c >> 6); buf[n++] = (char)(0x80 | (c & 0x3F)); }
        else if (c < 0x10000) {
            buf[n++] = (char)(0xE0 | c >> 12); buf[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
            buf[n++] = (char)(0x80 | (c & 0x3F));
        } else {
            buf[n++] = (char)(0xF0 | c >> 18); buf[n++] = (char)(0x80 | ((c >> 12) & 0x3F));
            buf[n++] = (char)(0x80 | ((c >> 6) & 0x3F)); buf[n++] = (char)(0x80 | (c & 0x3F));
        }
    }
    return intern(buf, n);
}

/* ------------------------------------------------------------------ names given to ids */
/* nvtxNameCategory (per domain) and nvtxNameOsThread: (what, domain, key) -> string id,
 * the latest naming kept; polyprof reads them with polyprof_nvtx_namings */
enum { NAMED_CATEGORY = 1, NAMED_THREAD = 2 };
typedef struct { uint32_t what, domain, key, name; } naming;
static naming *namings;
static size_t namings_used, namings_cap;

static void add_naming(uint32_t what, uint32_t domain, uint32_t key, uint32_t name) {
    if (!name) return;
    pthread_mutex_lock(&strings_lock);
    for (size_t i = 0; i < namings_used; i++) {
        if (namings[i].what == what && namings[i].domain == domain && namings[i].key == key) {
            namings[i].name = name;
            pthread_mutex_unlock(&strings_lock);
            return;
        }
    }
    if (namings_used == namings_cap && namings_cap < (1u << 20)) {
        size_t cap = namings_cap ? namings_cap * 2 : 64;
        naming *n = realloc(namings, cap * sizeof *n);
        if (n) { namings = n; namings_cap = cap; }
    }
    if (namings_used < namings_cap) namings[namings_used++] = (naming){what, domain, key, name};
    pthread_mutex_unlock(&strings_lock);
}

/* ------------------------------------------------------------------ events */
static __thread uint32_t my_tid;
static __thread int my_depth;

static void forget_tid(void) { my_tid = 0; }

static uint32_t thread_id(void) {
    if (!my_tid) my_tid = (uint32_t)syscall(SYS_gettid);
    return my_tid;
}

static void record(uint32_t kind, uint32_t name, uint32_t domain, uint64_t range, uint32_t color,
                   uint32_t category) {
    if (!__atomic_load_n(&recording, __ATOMIC_ACQUIRE)) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t i = __atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED);
    if (i >= __atomic_load_n(&capacity, __ATOMIC_RELAXED)) {
        __atomic_add_fetch(&dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    uint64_t c = i / CHUNK_EVENTS;
    event *chunk = __atomic_load_n(&chunks[c], __ATOMIC_ACQUIRE);
    if (!chunk) {
        event *fresh = calloc(CHUNK_EVENTS, sizeof(event));
        if (!fresh) { __atomic_add_fetch(&dropped, 1, __ATOMIC_RELAXED); return; }
        event *expected = NULL;
        if (__atomic_compare_exchange_n(&chunks[c], &expected, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            chunk = fresh;
        } else {
            free(fresh);
            chunk = expected;
        }
    }
    event *e = &chunk[i % CHUNK_EVENTS];
    e->t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    e->range = range;
    e->tid = thread_id();
    e->name = name;
    e->domain = domain;
    e->color = color;
    e->category = category;
    __atomic_store_n(&e->kind, kind, __ATOMIC_RELEASE);
}

/* the message of an attributes struct as a string id; its color and category */
static uint32_t message_of(const attributes *a, uint32_t *color, uint32_t *category) {
    *color = *category = 0;
    if (!a) return 0;
    if (a->size >= offsetof(attributes, color) + sizeof a->color && a->color_type == COLOR_ARGB) *color = a->color;
    if (a->size >= offsetof(attributes, category) + sizeof a->category) *category = a->category;
    if (a->size < offsetof(attributes, message) + sizeof a->message) return 0;
    switch (a->message_type) {
    case MESSAGE_ASCII: return intern_c(a->message.ascii);
    case MESSAGE_UNICODE: return intern_w(a->message.unicode);
    case MESSAGE_REGISTERED: return (uint32_t)(uintptr_t)a->message.registered;
    default: return 0;
    }
}

static uint32_t domain_of(const void *domain) { return (uint32_t)(uintptr_t)domain; }

static int push(uint32_t name, uint32_t domain, uint32_t color, uint32_t category) {
    record(K_PUSH, name, domain, 0, color, category);
    return my_depth++;
}

static int pop(uint32_t domain) {
    record(K_POP, 0, domain, 0, 0, 0);
    return my_depth > 0 ? --my_depth : -1;
}

static uint64_t start(uint32_t name, uint32_t domain, uint32_t color, uint32_t category) {
    uint64_t id = __atomic_add_fetch(&range_ids, 1, __ATOMIC_RELAXED);
    record(K_START, name, domain, id, color, category);
    return id;
}

/* ------------------------------------------------------------------ the NVTX handlers */
static void mark_ex(const attributes *a) {
    if (!RECORDING) return;
    uint32_t c, k, m = message_of(a, &c, &k);
    record(K_MARK, m, 0, 0, c, k);
}
static void mark_a(const char *s) { if (RECORDING) record(K_MARK, intern_c(s), 0, 0, 0, 0); }
static void mark_w(const wchar_t *s) { if (RECORDING) record(K_MARK, intern_w(s), 0, 0, 0, 0); }
static uint64_t start_ex(const attributes *a) {
    uint32_t c = 0, k = 0, m = RECORDING ? message_of(a, &c, &k) : 0;
    return start(m, 0, c, k);
}
static uint64_t start_a(const char *s) { return start(RECORDING ? intern_c(s) : 0, 0, 0, 0); }
static uint64_t start_w(const wchar_t *s) { return start(RECORDING ? intern_w(s) : 0, 0, 0, 0); }
static void range_end(uint64_t id) { record(K_END, 0, 0, id, 0, 0); }
static int push_ex(const attributes *a) {
    uint32_t c = 0, k = 0, m = RECORDING ? message_of(a, &c, &k) : 0;
    return push(m, 0, c, k);
}
static int push_a(const char *s) { return push(RECORDING ? intern_c(s) : 0, 0, 0, 0); }
static int push_w(const wchar_t *s) { return push(RECORDING ? intern_w(s) : 0, 0, 0, 0); }
static int range_pop(void) { return pop(0); }

static void d_mark_ex(const void *d, const attributes *a) {
    if (!RECORDING) return;
    uint32_t c, k, m = message_of(a, &c, &k);
    record(K_MARK, m, domain_of(d), 0, c, k);
}
static uint64_t d_start_ex(const void *d, const attributes *a) {
    uint32_t c = 0, k = 0, m = RECORDING ? message_of(a, &c, &k) : 0;
    return start(m, domain_of(d), c, k);
}
static void d_range_end(const void *d, uint64_t id) { record(K_END, 0, domain_of(d), id, 0, 0); }
static int d_push_ex(const void *d, const attributes *a) {
    uint32_t c = 0, k = 0, m = RECORDING ? message_of(a, &c, &k) : 0;
    return push(m, domain_of(d), c, k);
}
static int d_pop(const void *d) { return pop(domain_of(d)); }
/* handles: a registered string's or a domain's is its string id (never 0) */
static const void *d_register_a(const void *d, const char *s) { (void)d; return (const void *)(uintptr_t)intern_c(s); }
static const void *d_register_w(const void *d, const wchar_t *s) { (void)d; return (const void *)(uintptr_t)intern_w(s); }
static const void *d_create_a(const char *s) { return (const void *)(uintptr_t)intern_c(s); }
static const void *d_create_w(const wchar_t *s) { return (const void *)(uintptr_t)intern_w(s); }
static void d_destroy(const void *d) { (void)d; }
static void name_category_a(uint32_t c, const char *s) { add_naming(NAMED_CATEGORY, 0, c, intern_c(s)); }
static void name_category_w(uint32_t c, const wchar_t *s) { add_naming(NAMED_CATEGORY, 0, c, intern_w(s)); }
static void name_thread_a(uint32_t tid, const char *s) { add_naming(NAMED_THREAD, 0, tid, intern_c(s)); }
static void name_thread_w(uint32_t tid, const wchar_t *s) { add_naming(NAMED_THREAD, 0, tid, intern_w(s)); }
static void d_name_category_a(const void *d, uint32_t c, const char *s) {
    add_naming(NAMED_CATEGORY, domain_of(d), c, intern_c(s));
}
static void d_name_category_w(const void *d, uint32_t c, const wchar_t *s) {
    add_naming(NAMED_CATEGORY, domain_of(d), c, intern_w(s));
}
static void initialize(const void *reserved) { (void)reserved; }

typedef struct { unsigned int id; fn_t fn; } slot;

static const slot core_slots[] = {
    {CORE_MarkEx, (fn_t)mark_ex}, {CORE_MarkA, (fn_t)mark_a}, {CORE_MarkW, (fn_t)mark_w},
    {CORE_RangeStartEx, (fn_t)start_ex}, {CORE_RangeStartA, (fn_t)start_a}, {CORE_RangeStartW, (fn_t)start_w},
    {CORE_RangeEnd, (fn_t)range_end}, {CORE_RangePushEx, (fn_t)push_ex}, {CORE_RangePushA, (fn_t)push_a},
    {CORE_RangePushW, (fn_t)push_w}, {CORE_RangePop, (fn_t)range_pop},
    {CORE_NameCategoryA, (fn_t)name_category_a}, {CORE_NameCategoryW, (fn_t)name_category_w},
    {CORE_NameOsThreadA, (fn_t)name_thread_a}, {CORE_NameOsThreadW, (fn_t)name_thread_w},
};
static const slot core2_slots[] = {
    {CORE2_DomainMarkEx, (fn_t)d_mark_ex}, {CORE2_DomainRangeStartEx, (fn_t)d_start_ex},
    {CORE2_DomainRangeEnd, (fn_t)d_range_end}, {CORE2_DomainRangePushEx, (fn_t)d_push_ex},
    {CORE2_DomainRangePop, (fn_t)d_pop}, {CORE2_DomainNameCategoryA, (fn_t)d_name_category_a},
    {CORE2_DomainNameCategoryW, (fn_t)d_name_category_w}, {CORE2_DomainRegisterStringA, (fn_t)d_register_a},
    {CORE2_DomainRegisterStringW, (fn_t)d_register_w}, {CORE2_DomainCreateA, (fn_t)d_create_a},
    {CORE2_DomainCreateW, (fn_t)d_create_w}, {CORE2_DomainDestroy, (fn_t)d_destroy},
    {CORE2_Initialize, (fn_t)initialize},
};

static int fill(const export_callbacks *cb, int module, const slot *slots, size_t n) {
    fn_t **tbl = NULL;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(module, &tbl, &size) || !tbl) return 0;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id < size && tbl[slots[i].id]) *tbl[slots[i].id] = slots[i].fn;
    return 1;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void install_fork_handler(void) { pthread_atfork(NULL, NULL, forget_tid); }

/* NVTX's entry point: called once per NVTX instance (each library compiled with NVTX) */
EXPORT int InitializeInjectionNvtx2(get_export_table_fn get_export_table) {
    if (!get_export_table) return 0;
    const export_callbacks *cb = (const export_callbacks *)get_export_table(ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable) return 0;
    pthread_once(&fork_once, install_fork_handler);
    if (!fill(cb, MODULE_CORE, core_slots, sizeof core_slots / sizeof *core_slots)) return 0;
    fill(cb, MODULE_CORE2, core2_slots, sizeof core2_slots / sizeof *core2_slots); /* NVTX 1 has no CORE2 */
    __atomic_add_fetch(&attached, 1, __ATOMIC_RELAXED);
    return 1;
}

/* ------------------------------------------------------------------ polyprof's side (ctypes) */

/* start recording up to max_events (the slots of an earlier session are cleared) */
EXPORT int polyprof_nvtx_start(uint64_t max_events) {
    if (max_events > (uint64_t)CHUNK_EVENTS * MAX_CHUNKS) max_events = (uint64_t)CHUNK_EVENTS * MAX_CHUNKS;
    __atomic_store_n(&recording, 0, __ATOMIC_RELEASE);
    uint64_t used = __atomic_load_n(&next_slot, __ATOMIC_RELAXED);
    if (used > capacity) used = capacity;
    for (uint64_t c = 0; c * CHUNK_EVENTS < used; c++)
        if (chunks[c]) memset(chunks[c], 0, sizeof(event) * CHUNK_EVENTS);
    __atomic_store_n(&next_slot, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&dropped, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&capacity, max_events, __ATOMIC_RELAXED);
    __atomic_store_n(&recording, 1, __ATOMIC_RELEASE);
    return 0;
}

EXPORT void polyprof_nvtx_stop(void) { __atomic_store_n(&recording, 0, __ATOMIC_RELEASE); }

/* out: events claimed (at most the capacity), dropped, NVTX instances attached, strings
 * not interned (table full), bytes in the string arena */
EXPORT void polyprof_nvtx_counts(uint64_t out[5]) {
    uint64_t n = __atomic_load_n(&next_slot, __ATOMIC_RELAXED);
    out[0] = n < capacity ? n : capacity;
    out[1] = __atomic_load_n(&dropped, __ATOMIC_RELAXED);
    out[2] = __atomic_load_n(&attached, __ATOMIC_RELAXED);
    out[3] = __atomic_load_n(&string_overflow, __ATOMIC_RELAXED);
    pthread_mutex_lock(&strings_lock);
    out[4] = arena_used;
    pthread_mutex_unlock(&strings_lock);
}

/* copy the first n events (40 bytes each) into dst; slots never filled stay kind 0 */
EXPORT uint64_t polyprof_nvtx_events(void *dst, uint64_t n) {
    uint64_t done = 0;
    char *out = dst;
    while (done < n) {
        uint64_t c = done / CHUNK_EVENTS, take = CHUNK_EVENTS - done % CHUNK_EVENTS;
        if (take > n - done) take = n - done;
        event *chunk = __atomic_load_n(&chunks[c], __ATOMIC_ACQUIRE);
        if (chunk) memcpy(out + done * sizeof(event), chunk + done % CHUNK_EVENTS, take * sizeof(event));
        else memset(out + done * sizeof(event), 0, take * sizeof(event));
        done += take;
    }
    return done;
}

/* copy up to size bytes of the string arena (a string id is its offset + 1) */
EXPORT uint64_t polyprof_nvtx_strings(void *dst, uint64_t size) {
    pthread_mutex_lock(&strings_lock);
    uint64_t n = size < arena_used ? size : arena_used;
    if (n) memcpy(dst, arena, n);
    pthread_mutex_unlock(&strings_lock);
    return n;
}

/* copy up to n namings (16 bytes each: what, domain, key, name); how many there are */
EXPORT uint64_t polyprof_nvtx_namings(void *dst, uint64_t n) {
    pthread_mutex_lock(&strings_lock);
    uint64_t have = namings_used;
    if (dst && n) memcpy(dst, namings, (n < have ? n : have) * sizeof(naming));
    pthread_mutex_unlock(&strings_lock);
    return have;
}
