/* polyprof.formats.xspace._wire: the events of a serialized XSpace, as columns.
 *
 * This file is the module; reading is _wire_read.c, writing _wire_write.c, what they
 * share _wire.h.
 *
 * One pass over the protobuf wire format, the whole XSpace: XSpace.planes (1) ->
 * XPlane.lines (3) -> XLine.events (4) -> XEvent fields and XEvent.stats (4) -> XStat
 * fields as columns; XPlane.event_metadata (4, map entries) -> XEventMetadata fields and
 * stats as columns; the small rest (plane ids, names, stats and stat metadata, line
 * fields, errors, warnings, hostnames) as Python objects. So reading never needs
 * protobuf's Python classes (importing them costs more than this whole walk). The pure-Python reference
 * is `decode.columns_from_messages` (the same columns from protobuf's own objects);
 * tests/test_xspace_decode.py checks the two agree on every shared trace and on
 * generated XSpaces.
 *
 * Protobuf semantics kept: unknown fields (and known fields with another wire type)
 * are skipped, groups included; the last value of a scalar field wins; the oneofs
 * (XEvent.data, XStat.value) end as the member set last; every string field is checked
 * as UTF-8. Anything malformed (a varint or a length running past its message, field
 * number 0, a stray end-group, text that is not UTF-8) raises ValueError (or
 * UnicodeDecodeError), and so does a map entry with two values (protobuf would merge
 * them); the caller then reads through protobuf, whose error it reports.
 *
 * columns(data) returns a tuple of bytes objects holding native-endian arrays, and one list:
 *   plane_lines  int64[planes]   lines per plane
 *   line_events  int64[lines]    events per line
 *   ev_mid, ev_off, ev_dur, ev_nocc  int64[events]  (off 0 where data is num_occurrences)
 *   ev_isnocc    uint8[events]   1 where XEvent.data is num_occurrences
 *   ev_stats     int64[events]   stats per event
 *   st_mid       int64[stats]
 *   st_kind      uint8[stats]    0 unset, 1 double, 2 uint64, 3 int64, 4 str, 5 bytes, 6 ref
 *   st_int       int64[stats]    every value: uint64/int64/ref (uint64 bits as int64), a
 *                                double's bits, a str or bytes value's place in `objs`
 *   st_dbl       empty           (the doubles are in st_int)
 *   plane_mds    int64[planes]   event metadata entries per plane (map entries, in file order)
 *   md_key       int64[entries]  the entry's key; md_stats, md_children int64[entries]: counts
 *   md_child     int64[...]      child ids; ms_mid, ms_kind, ms_int, ms_dbl: metadata stats
 *   objs         list            the distinct str (decoded UTF-8) and bytes values of event
 *                                stats, in the order first seen (one object per value, however
 *                                many stats hold it)
 *   mdtext       list            per entry: name, display name (str), metadata (bytes)
 *   mdobjs       list            the str and bytes values of metadata stats
 *   planes       list            per plane: (id, name, {stat metadata id: name}, [(stat id, kind, value)])
 *   lines        list            per line: (id, display_id, name, display_name, timestamp_ns, duration_ps)
 *   texts        list            [errors, warnings, hostnames]
 *
 * encode(...) is the way back for the writer: the same columns (one line's events, ref
 * values as stat ids, str/bytes values in `objs`) into the bytes of XLine.events entries,
 * field by field as protobuf's own serializer writes them (zero scalars omitted, the
 * XEvent.offset_ps oneof always present), so XLine.MergeFromString takes them in.
 */
#include "_wire.h"

static PyMethodDef methods[] = {
    {"columns", wire_columns, METH_O,
     "columns(data) -> tuple: the events and event stats of a serialized XSpace, as columns."},
    {"encode", wire_encode, METH_VARARGS,
     "encode(mid, off, dur, nstats, st_mid, st_kind, st_int, st_dbl, objs) -> bytes: XLine.events "
     "(field 4) entries, as protobuf writes them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_wire", "The events of a serialized XSpace, as columns.", -1, methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModule_Create(&moduledef);
}
