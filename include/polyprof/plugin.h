/*
 * polyprof native plugin ABI (DESIGN.md section 4).
 *
 * A native plugin is a shared library exporting one function,
 *
 *     int polyprof_plugin_init(const PolyprofHostApi* host,
 *                              PolyprofPlugin* out, PolyprofStatus* status);
 *
 * which fills a function table. polyprof drives it through exactly one start(),
 * one stop(), then collect(), and finally destroy(). The plugin hands its data back
 * as a serialized XSpace protobuf (the format of TensorFlow/JAX/XProf .xplane.pb
 * files) with a two-call protocol: ask the size, then fill a caller-owned buffer.
 *
 * Versioning. Every struct begins with `size_t struct_size`. A side reads only
 * the fields that lie inside the struct_size the other side declared, so a plugin
 * built against an older (smaller) header still loads, and a plugin built against
 * a newer (larger) header is accepted by an older polyprof. Fields are only ever
 * appended; POLYPROF_ABI_MINOR counts the additions. A different POLYPROF_ABI_MAJOR
 * is incompatible and refused at load time.
 *
 * Process. polyprof loads the library in a helper process and makes every call
 * there (init, start, stop, collect, destroy): a segfault, abort(), _exit() or hang
 * in the plugin is reported as a plugin error and the profiled program goes on.
 * Observe the program through PolyprofHostApi.profiled_pid; a plugin that must live
 * inside the program sets placement = POLYPROF_PLACEMENT_IN_PROCESS, and users may
 * load any plugin in-process (POLYPROF_NATIVE_IN_PROCESS=1, option in_process).
 *
 * Contract (checked by `polyprof plugin check lib.so`):
 *  - init() does no profiling: it fills `out` and may return
 *    POLYPROF_ERR_UNAVAILABLE (with a reason) when its device/runtime is missing.
 *  - start() begins collection; a second start() without stop() returns
 *    POLYPROF_ERR_STATE and leaves the running collection untouched.
 *  - stop() ends all interaction with the hardware, joins the plugin's threads and
 *    is cheap; stop() without start() returns POLYPROF_ERR_STATE. stop() may be
 *    called from a different thread than start() and while other threads of the
 *    process are busy (and calling into the profiled runtime).
 *  - collect() never touches the hardware; before stop() it returns
 *    POLYPROF_ERR_STATE. Call it with buffer == NULL (or capacity too small) to
 *    learn the size: it sets *size and returns POLYPROF_ERR_BUFFER_TOO_SMALL when
 *    buffer is non-NULL but too small, POLYPROF_OK when buffer is NULL. With a large
 *    enough buffer it writes exactly *size bytes and returns POLYPROF_OK. It never
 *    writes past `capacity`. Calling it again returns the same bytes.
 *  - Timestamps are nanoseconds on the session clock (CLOCK_MONOTONIC, see
 *    PolyprofHostApi.session_clock_id / now_ns) unless the plugin declares its
 *    own clock (clock_domain = POLYPROF_CLOCK_OWN and clock_now_ns), in which case
 *    polyprof takes (session, plugin, session) sync pairs at start and stop and
 *    maps the plugin's times onto the session clock.
 *  - XSpace shape: one plane per device (e.g. "/device:GPU:0" or "/host:name"),
 *    one line per thread/stream, XLine.timestamp_ns + XEvent.offset_ps give an
 *    event's start; every metadata_id must be defined in the plane's maps.
 *  - Memory (docs/analysis.md, "Memory"). start() receives "memory": true in its
 *    options_json when the user asked for memory (`polyprof run --memory`,
 *    profile(memory=True)); a plugin that can see allocations then records them.
 *    Each allocation or free is an XEvent with duration 0 on the line of the
 *    thread (or stream) that made it, carrying the XStats named below
 *    (POLYPROF_STAT_*): alloc_bytes (int64, > 0 allocated, < 0 freed) is what
 *    makes it a memory event; addr (int64/uint64) pairs a free with its
 *    allocation; memory_device (str) names the plane of the device the memory is
 *    on (e.g. "/device:GPU:0"; absent: the event's own plane); allocator (str);
 *    total_allocated / total_reserved (int64) are the allocator's totals just
 *    after the event, when it keeps them; memory_category (str) what the block
 *    holds. polyprof derives bytes held over time, the peak, what is live at it
 *    and the memory per section from these; no counters are needed.
 *  - Every function fills `status` (code + message) and returns the same code;
 *    nothing is ever raised/aborted into the host process.
 *  - destroy() frees everything; it is called once, after stop() if start()
 *    succeeded (polyprof stops a started plugin before destroying it).
 * All calls for one plugin instance are made one at a time by polyprof, except
 * that the conformance kit deliberately races stop() against the process's other
 * threads; plugins should still guard their state with a mutex.
 */
#ifndef POLYPROF_PLUGIN_H
#define POLYPROF_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POLYPROF_ABI_MAJOR 1
/* Minor 0: the function table. Minor 1: log callback (host), own clock (plugin).
 * Minor 2: profiled_pid (host), placement (plugin): plugins run in a helper process.
 * Defining POLYPROF_ABI_MINOR lower before including builds against that older
 * (smaller) layout, which is what a plugin compiled with an older header has. */
#ifndef POLYPROF_ABI_MINOR
#define POLYPROF_ABI_MINOR 2
#endif

#if defined(_WIN32)
#define POLYPROF_EXPORT __declspec(dllexport)
#else
#define POLYPROF_EXPORT __attribute__((visibility("default")))
#endif

/* XStat names of memory events (see "Memory" above; src/polyprof/trace/keys.py). */
#define POLYPROF_STAT_ALLOC_BYTES "alloc_bytes"
#define POLYPROF_STAT_ADDR "addr"
#define POLYPROF_STAT_MEMORY_DEVICE "memory_device"
#define POLYPROF_STAT_ALLOCATOR "allocator"
#define POLYPROF_STAT_TOTAL_ALLOCATED "total_allocated"
#define POLYPROF_STAT_TOTAL_RESERVED "total_reserved"
#define POLYPROF_STAT_MEMORY_CATEGORY "memory_category"

/* Error codes returned by every function and stored in PolyprofStatus.code. */
typedef enum PolyprofCode {
  POLYPROF_OK = 0,
  POLYPROF_ERR_STATE = 1,            /* called out of lifecycle order (double start...) */
  POLYPROF_ERR_BUFFER_TOO_SMALL = 2, /* collect(): *size holds the needed size */
  POLYPROF_ERR_INVALID_ARGUMENT = 3, /* bad options, NULL where not allowed */
  POLYPROF_ERR_VERSION = 4,          /* the other side's ABI is not supported */
  POLYPROF_ERR_UNAVAILABLE = 5,      /* device/runtime missing: plugin cannot run here */
  POLYPROF_ERR_INTERNAL = 6          /* anything else; say what in the message */
} PolyprofCode;

#define POLYPROF_STATUS_MESSAGE_SIZE 512

/* The status channel: owned by the caller, filled by the plugin on every call. */
typedef struct PolyprofStatus {
  size_t struct_size;
  int32_t code;                                /* a PolyprofCode */
  char message[POLYPROF_STATUS_MESSAGE_SIZE];  /* NUL-terminated, "" when OK */
} PolyprofStatus;

/* Log levels for PolyprofHostApi.log (values of Python's logging module). */
#define POLYPROF_LOG_DEBUG 10
#define POLYPROF_LOG_INFO 20
#define POLYPROF_LOG_WARNING 30
#define POLYPROF_LOG_ERROR 40

/* What polyprof gives the plugin. Valid from init() until destroy() returns. */
typedef struct PolyprofHostApi {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  void* host_data;            /* pass back to the callbacks */
  /* The session clock, in ns. Safe from any thread, but it enters the host's
   * runtime: prefer clock_gettime(session_clock_id) in hot paths. */
  int64_t (*now_ns)(void* host_data);
  /* POSIX clockid_t of the session clock (CLOCK_MONOTONIC = 1 on Linux), or -1
   * when the session clock is not a POSIX clock (then use now_ns). */
  int32_t session_clock_id;
#if POLYPROF_ABI_MINOR >= 1
  /* Route a message to polyprof's log ("polyprof" logger). Safe from any thread. */
  void (*log)(void* host_data, int32_t level, const char* message);
#endif
#if POLYPROF_ABI_MINOR >= 2
  /* The process being profiled. polyprof runs native plugins in a helper process
   * (a crash there is a reported plugin error, not the program's death), so this
   * differs from getpid(): observe /proc/<profiled_pid>, not /proc/self. */
  int64_t profiled_pid;
#endif
} PolyprofHostApi;

/* Where a plugin may run (PolyprofPlugin.placement, minor 2). */
#define POLYPROF_PLACEMENT_ANY 0        /* in polyprof's helper process (the default) */
#define POLYPROF_PLACEMENT_IN_PROCESS 1 /* must be inside the profiled process (it instruments
                                         * the process itself, e.g. CUPTI callbacks): loaded
                                         * there, without crash isolation */

/* Clock domains a plugin may timestamp in. */
#define POLYPROF_CLOCK_SESSION 0 /* already on the session clock */
#define POLYPROF_CLOCK_OWN 1     /* own clock; polyprof syncs via clock_now_ns */

/* What the plugin gives polyprof. polyprof allocates it zeroed, sets struct_size
 * to the capacity it allocated, and the plugin writes at most that many bytes,
 * then sets struct_size to sizeof(PolyprofPlugin) as the plugin knows it (use
 * polyprof_plugin_fill below). */
typedef struct PolyprofPlugin {
  size_t struct_size;
  uint32_t abi_major;         /* POLYPROF_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;         /* POLYPROF_ABI_MINOR the plugin was built with */
  const char* name;           /* short, unique: "procstat", "cupti" (static string) */
  const char* device_kinds;   /* comma-separated kinds it covers: "GPU", "CPU" */
  void* self;                 /* instance pointer handed back to every call */
  /* options_json: the session's options for this plugin as a JSON object ("{}"). */
  int32_t (*start)(void* self, const char* options_json, PolyprofStatus* status);
  int32_t (*stop)(void* self, PolyprofStatus* status);
  /* Two-call protocol: see the contract above. */
  int32_t (*collect)(void* self, uint8_t* buffer, size_t capacity, size_t* size,
                     PolyprofStatus* status);
  void (*destroy)(void* self);
#if POLYPROF_ABI_MINOR >= 1
  int32_t clock_domain;                  /* POLYPROF_CLOCK_SESSION or _OWN */
  int64_t (*clock_now_ns)(void* self);   /* required when clock_domain is OWN */
#endif
#if POLYPROF_ABI_MINOR >= 2
  int32_t placement;                     /* POLYPROF_PLACEMENT_ANY or _IN_PROCESS */
#endif
} PolyprofPlugin;

/* True when the struct at `ptr` (which begins with struct_size) is large enough to
 * hold `field`: use it before reading fields added in a later minor version. */
#define POLYPROF_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* The one exported symbol. Returns POLYPROF_OK and fills *out, or an error code
 * with a message in *status (POLYPROF_ERR_UNAVAILABLE when it cannot run here). */
typedef int32_t (*PolyprofPluginInitFn)(const PolyprofHostApi* host, PolyprofPlugin* out,
                                        PolyprofStatus* status);
#define POLYPROF_PLUGIN_INIT_SYMBOL "polyprof_plugin_init"

/* Copy a plugin-filled table into polyprof's `out`, honouring out->struct_size
 * (the capacity polyprof allocated), and record the size the plugin knows. */
static inline void polyprof_plugin_fill(PolyprofPlugin* out, const PolyprofPlugin* mine) {
  size_t cap = out->struct_size;
  size_t n = sizeof(PolyprofPlugin) < cap ? sizeof(PolyprofPlugin) : cap;
  const unsigned char* src = (const unsigned char*)mine;
  unsigned char* dst = (unsigned char*)out;
  for (size_t i = sizeof(size_t); i < n; i++) dst[i] = src[i];
  out->struct_size = sizeof(PolyprofPlugin);
}

/* Set a status (message may be NULL). Returns code, for `return polyprof_status(...)`. */
static inline int32_t polyprof_status(PolyprofStatus* st, int32_t code, const char* message) {
  if (st) {
    st->code = code;
    size_t i = 0;
    if (message)
      for (; message[i] && i + 1 < POLYPROF_STATUS_MESSAGE_SIZE; i++) st->message[i] = message[i];
    st->message[i] = '\0';
  }
  return code;
}

#ifdef __cplusplus
}
#endif
#endif /* POLYPROF_PLUGIN_H */
