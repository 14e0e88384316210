/* polyprof.formats.perfetto_read._walk, parsing: the fields of a packet, a track event,
 * its debug annotations and interned data read from the wire, with no side effect; a
 * shape the walk does not read exactly as collector.py would is SLOW (see _walk.c). */
#include "_walk.h"

int
pw_parse_packet(const uint8_t *p, const uint8_t *end, packet_t *k)
{
    memset(k, 0, sizeof *k);
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        switch (f) {
        case 8: case 58: case 10: case 13: case 41: case 42: case 79: case 87:
            if (wt != 0 || rd_varint(&p, end, &v) < 0)
                return SLOW;
            if (f == 8) {
                k->has_ts = 1;
                k->ts = v;
            } else if (f == 58) {
                k->has_clock = 1;
                k->clock = (uint32_t)v;
            } else if (f == 10) {
                k->seq = (uint32_t)v;
            } else if (f == 13) {
                k->flags = (uint32_t)v;
            } else if (f == 41) {
                k->cleared = v != 0;
            } else if (f == 42) {
                k->dropped = (uint32_t)v;
            }
            break;
        case 11:
            if (wt != 2 || rd_span(&p, end, &k->te, &k->te_end) < 0 || ++k->n_te > 1)
                return SLOW;
            break;
        case 12:
            if (wt != 2 || rd_span(&p, end, &k->in, &k->in_end) < 0 || ++k->n_interned > 1)
                return SLOW;
            break;
        case 2: case 5: case 6: case 43: case 44: case 52: case 53: case 54: case 59: case 60:
            return SLOW; /* read by collector.py */
        default:
            if (rd_skip(&p, end, wt) < 0)
                return SLOW;
        }
    }
    return FAST;
}

int
pw_parse_annotation(const uint8_t *p, const uint8_t *end, annotation_t *a)
{
    memset(a, 0, sizeof *a);
    a->kind = -1;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        switch (f) {
        case 1: case 2: case 3: case 4: case 7: case 17:
            if (wt != 0 || rd_varint(&p, end, &v) < 0)
                return SLOW;
            if (f == 1) {
                a->name_which = 1;
                a->name_iid = v;
            } else {
                a->kind = f == 2 ? KIND_B : f == 4 ? KIND_I : f == 17 ? KIND_S : KIND_U;
                a->value_how = 1;
                a->u = v;
            }
            break;
        case 5:
            if (wt != 1 || end - p < 8)
                return SLOW;
            v = rd_fixed64(p);
            memcpy(&a->d, &v, 8);
            p += 8;
            a->kind = KIND_F;
            break;
        case 6: case 9: case 10:
            if (wt != 2)
                return SLOW;
            if (f == 10) {
                if (rd_span(&p, end, &a->name_s, &a->name_e) < 0)
                    return SLOW;
                a->name_which = 2;
            } else {
                if (rd_span(&p, end, &a->str_s, &a->str_e) < 0)
                    return SLOW;
                a->kind = KIND_S;
                a->value_how = 0;
            }
            break;
        case 11: case 12:
            return SLOW; /* nested: collector.py */
        default:
            if (rd_skip(&p, end, wt) < 0)
                return SLOW;
        }
    }
    return FAST;
}

/* The fields of a TrackEvent this walk reads; SLOW for any it leaves to collector.py. */
int
pw_parse_event(Walker *w, const uint8_t *p, const uint8_t *end, event_t *e)
{
    memset(e, 0, sizeof *e);
    w->cat_iids.n = w->cats.n = w->flows.n = w->anns.n = 0;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        const uint8_t *s, *se;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        switch (f) {
        case 9: case 11: case 10: case 30: case 1: case 16:
            if (wt != 0 || rd_varint(&p, end, &v) < 0)
                return SLOW;
            if (f == 9) {
                e->has_type = 1;
                e->type = (int32_t)(uint32_t)v;
            } else if (f == 11) {
                e->has_track = 1;
                e->track = v;
            } else if (f == 10) {
                e->name_which = 1;
                e->name_iid = v;
            } else if (f == 30) {
                e->value_which = 1;
                e->ivalue = (int64_t)v;
            } else {
                e->has_time_us = 1;
            }
            break;
        case 44:
            if (wt != 1 || end - p < 8)
                return SLOW;
            v = rd_fixed64(p);
            memcpy(&e->dvalue, &v, 8);
            p += 8;
            e->value_which = 2;
            break;
        case 23:
            if (wt != 2 || rd_span(&p, end, &e->name_s, &e->name_e) < 0)
                return SLOW;
            e->name_which = 2;
            break;
        case 22:
            if (wt != 2 || rd_span(&p, end, &s, &se) < 0)
                return SLOW;
            if (vec_push(&w->cats, &s, sizeof s) < 0 || vec_push(&w->cats, &se, sizeof se) < 0)
                return FAIL;
            break;
        case 3:
            if (rd_repeated(&p, end, wt, 0, 0, &w->cat_iids) < 0)
                return PyErr_Occurred() ? FAIL : SLOW;
            break;
        case 47: case 48: case 36: case 42: {
            uint64_t which = f == 47 ? 0 : f == 48 ? 1 : f == 36 ? 2 : 3;
            if (rd_repeated(&p, end, wt, f >= 47, which, &w->flows) < 0)
                return PyErr_Occurred() ? FAIL : SLOW;
            break;
        }
        case 4: {
            annotation_t a;
            if (wt != 2 || rd_span(&p, end, &s, &se) < 0 || pw_parse_annotation(s, se, &a) != FAST)
                return SLOW;
            if (vec_push(&w->anns, &a, sizeof a) < 0)
                return FAIL;
            break;
        }
        case 2: case 17: case 8: case 20: case 31: case 12: case 45: case 46: case 6:
            return SLOW; /* thread time and instructions, extra counters, legacy events */
        default:
            if (rd_skip(&p, end, wt) < 0)
                return SLOW;
        }
    }
    if (!e->has_type || e->type < 1 || e->type > 4)
        return SLOW; /* untyped, legacy or unknown types: collector.py (and its counts) */
    if (e->type == 4 && !e->value_which)
        return SLOW;
    return FAST;
}

/* InternedData: only the tables this walk keeps (names, categories, annotation names,
 * string values); each entry {iid = 1, name or str = 2} must read plainly. */
int
pw_check_interned(const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        uint32_t f;
        int wt;
        const uint8_t *s, *e;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        if (f == 1 || f == 2 || f == 3 || f == 29) {
            if (wt != 2 || rd_span(&p, end, &s, &e) < 0)
                return SLOW;
            while (s < e) {
                uint32_t g;
                int gw;
                uint64_t v;
                const uint8_t *a, *b;
                if (rd_tag(&s, e, &g, &gw) < 0)
                    return SLOW;
                if (g == 1) {
                    if (gw != 0 || rd_varint(&s, e, &v) < 0)
                        return SLOW;
                } else if (g == 2) {
                    if (gw != 2 || rd_span(&s, e, &a, &b) < 0)
                        return SLOW;
                } else if (rd_skip(&s, e, gw) < 0) {
                    return SLOW;
                }
            }
        } else if (f == 23 || f == 24 || f == 47) {
            return SLOW; /* graphics contexts, GPU specifications, GPU counter descriptors: collector.py */
        } else if (rd_skip(&p, end, wt) < 0) {
            return SLOW;
        }
    }
    return FAST;
}
