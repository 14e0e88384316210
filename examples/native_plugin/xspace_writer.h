/*
 * A tiny protobuf encoder for the few XSpace messages a polyprof native plugin
 * needs (field numbers from xplane.proto: XSpace, XPlane, XLine, XEvent, XStat,
 * XEventMetadata, XStatMetadata). Header-only, no dependencies: copy it into your
 * plugin. Nested messages are encoded into their own buffer and then appended
 * with a length prefix, which is simple and fast enough for a profile's worth of
 * events.
 */
#ifndef POLYPROF_XSPACE_WRITER_H
#define POLYPROF_XSPACE_WRITER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pb_buf {
  uint8_t* data;
  size_t len, cap;
  int failed; /* set when an allocation failed; the buffer is then unusable */
} pb_buf;

static int pb_reserve(pb_buf* b, size_t extra) {
  if (b->failed) return 0;
  if (b->len + extra <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra) cap *= 2;
  uint8_t* d = (uint8_t*)realloc(b->data, cap);
  if (!d) { b->failed = 1; return 0; }
  b->data = d;
  b->cap = cap;
  return 1;
}

static void pb_free(pb_buf* b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

static void pb_varint(pb_buf* b, uint64_t v) {
  if (!pb_reserve(b, 10)) return;
  while (v >= 0x80) { b->data[b->len++] = (uint8_t)(v | 0x80); v >>= 7; }
  b->data[b->len++] = (uint8_t)v;
}

/* wire types: 0 varint, 1 fixed64, 2 length-delimited */
static void pb_tag(pb_buf* b, uint32_t field, uint32_t wire) { pb_varint(b, ((uint64_t)field << 3) | wire); }

static void pb_uint(pb_buf* b, uint32_t field, uint64_t v) { pb_tag(b, field, 0); pb_varint(b, v); }
static void pb_int(pb_buf* b, uint32_t field, int64_t v) { pb_uint(b, field, (uint64_t)v); }

static void pb_double(pb_buf* b, uint32_t field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  pb_tag(b, field, 1);
  if (!pb_reserve(b, 8)) return;
  for (int i = 0; i < 8; i++) b->data[b->len++] = (uint8_t)(bits >> (8 * i));
}

static void pb_bytes(pb_buf* b, uint32_t field, const void* data, size_t n) {
  pb_tag(b, field, 2);
  pb_varint(b, n);
  if (!pb_reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, data, n);
  b->len += n;
}

static void pb_str(pb_buf* b, uint32_t field, const char* s) { pb_bytes(b, field, s, strlen(s)); }

/* Append `child` as a nested message and reset it for reuse. */
static void pb_msg(pb_buf* b, uint32_t field, pb_buf* child) {
  if (child->failed) b->failed = 1;
  pb_bytes(b, field, child->data, child->len);
  child->len = 0;
}

/* ---- XSpace field numbers -------------------------------------------------- */
enum { XSPACE_PLANES = 1, XSPACE_ERRORS = 2, XSPACE_WARNINGS = 3, XSPACE_HOSTNAMES = 4 };
enum { XPLANE_ID = 1, XPLANE_NAME = 2, XPLANE_LINES = 3, XPLANE_EVENT_METADATA = 4,
       XPLANE_STAT_METADATA = 5, XPLANE_STATS = 6 };
enum { XLINE_ID = 1, XLINE_NAME = 2, XLINE_TIMESTAMP_NS = 3, XLINE_EVENTS = 4,
       XLINE_DURATION_PS = 9, XLINE_DISPLAY_ID = 10, XLINE_DISPLAY_NAME = 11 };
enum { XEVENT_METADATA_ID = 1, XEVENT_OFFSET_PS = 2, XEVENT_DURATION_PS = 3, XEVENT_STATS = 4 };
enum { XSTAT_METADATA_ID = 1, XSTAT_DOUBLE = 2, XSTAT_UINT64 = 3, XSTAT_INT64 = 4, XSTAT_STR = 5 };
enum { XEVENTMETA_ID = 1, XEVENTMETA_NAME = 2, XEVENTMETA_DISPLAY_NAME = 4 };
enum { XSTATMETA_ID = 1, XSTATMETA_NAME = 2, XSTATMETA_DESCRIPTION = 3 };

/* An XStat with a uint64 / int64 / double / string value, appended to `parent`
 * (an XEvent or XPlane being built) under `field`. `tmp` is scratch space. */
static void xstat_uint(pb_buf* parent, uint32_t field, pb_buf* tmp, int64_t meta, uint64_t v) {
  pb_int(tmp, XSTAT_METADATA_ID, meta);
  pb_uint(tmp, XSTAT_UINT64, v);
  pb_msg(parent, field, tmp);
}
static void xstat_int(pb_buf* parent, uint32_t field, pb_buf* tmp, int64_t meta, int64_t v) {
  pb_int(tmp, XSTAT_METADATA_ID, meta);
  pb_int(tmp, XSTAT_INT64, v);
  pb_msg(parent, field, tmp);
}
static void xstat_double(pb_buf* parent, uint32_t field, pb_buf* tmp, int64_t meta, double v) {
  pb_int(tmp, XSTAT_METADATA_ID, meta);
  pb_double(tmp, XSTAT_DOUBLE, v);
  pb_msg(parent, field, tmp);
}
static void xstat_str(pb_buf* parent, uint32_t field, pb_buf* tmp, int64_t meta, const char* v) {
  pb_int(tmp, XSTAT_METADATA_ID, meta);
  pb_str(tmp, XSTAT_STR, v);
  pb_msg(parent, field, tmp);
}

/* One entry of XPlane.event_metadata (map<int64, XEventMetadata>). */
static void xplane_event_metadata(pb_buf* plane, pb_buf* tmp, pb_buf* tmp2, int64_t id, const char* name) {
  pb_int(tmp2, XEVENTMETA_ID, id);
  pb_str(tmp2, XEVENTMETA_NAME, name);
  pb_int(tmp, 1, id);   /* map entry key */
  pb_msg(tmp, 2, tmp2); /* map entry value */
  pb_msg(plane, XPLANE_EVENT_METADATA, tmp);
}

/* One entry of XPlane.stat_metadata (map<int64, XStatMetadata>). */
static void xplane_stat_metadata(pb_buf* plane, pb_buf* tmp, pb_buf* tmp2, int64_t id, const char* name,
                                 const char* description) {
  pb_int(tmp2, XSTATMETA_ID, id);
  pb_str(tmp2, XSTATMETA_NAME, name);
  if (description) pb_str(tmp2, XSTATMETA_DESCRIPTION, description);
  pb_int(tmp, 1, id);
  pb_msg(tmp, 2, tmp2);
  pb_msg(plane, XPLANE_STAT_METADATA, tmp);
}

#endif /* POLYPROF_XSPACE_WRITER_H */
