/* aiprof.trace.kineto._columnar: one pass over a JSON array of Kineto events, straight into columns.
 *
 * The optional native half of the loader (aiprof/trace/kineto/builder.py, Builder.feed_array). It reads
 * the events of one run (~1 MB of text) and fills the columns the pure-Python path fills, without a struct,
 * dict or str per event: strings are interned in a hash table keyed on their bytes, numbers are parsed
 * in place, each kind's args are read with the keys (and the types) of the msgspec struct the pure path
 * decodes them with.
 *
 * Contract: it either returns exactly what the pure path would build from the same text, or returns
 * None and leaves the run to the pure path. Anything it is not sure about gives None: invalid JSON, an
 * event that is not an object, an event field of an unexpected type (a float pid, a null ts), a number
 * too large for a double or an int64 where that matters, non-UTF-8 text in a string it keeps, nesting
 * deeper than 64. An args value of the wrong type is read as absent, as the pure path's key-by-key
 * decode does. String pids, tids and flow ids ("stream 7", "Spans") come back as local string ids for
 * the Python side to number exactly as the pure path does. Nothing is mutated on the Python side, so
 * falling back is always safe. Python exceptions other than a UnicodeError (MemoryError,
 * KeyboardInterrupt raised in the kind callback) propagate.
 *
 * columnize(buffer, kind_of) -> None | tuple, where kind_of(category: str) -> int is the Kind of a
 * complete event's category. The tuple (see columnize's docstring) holds bytearrays that numpy views
 * without a copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef unsigned char u8;

/* Phases (as in builder.py) and kinds (aiprof.trace.model.Kind). */
enum { PH_OTHER = 0, PH_META = 1, PH_FLOW = 2, PH_SPAN = 3, PH_INSTANT = 4 };
enum { K_CPU_OP = 0, K_USER_ANNOTATION = 1, K_DRIVER = 4, K_KERNEL = 5, K_GPU_OTHER = 10, K_MEMORY = 11,
       K_INSTANT = 12, K_OTHER = 14 };
enum { CLS_NONE = 0, CLS_CPU = 1, CLS_DEV = 2, CLS_MEM = 3 };

/* Per-string flags, set when a string is first interned. */
#define SF_ANNOTATION 1 /* ProfilerStep#…, enumerate(DataLoader)…, Optimizer.step#…, Optimizer.zero_grad#… */
#define SF_MEMORY 2     /* "[memory]" */
#define SF_COMMS 4      /* "record_param_comms" */
#define SF_NAMES 8      /* "process_name" / "thread_name" */

#define MAX_DEPTH 64

/* ------------------------------------------------------------------------------------------------ */
/* Columns: bytearrays grown together                                                                 */
/* ------------------------------------------------------------------------------------------------ */
#define MAX_COLS 40
typedef struct {
    int ncols;
    int size[MAX_COLS];
    PyObject *ba[MAX_COLS];
    char *ptr[MAX_COLS];
    Py_ssize_t n, cap;
} Table;

static int table_init(Table *t, int ncols, const int *sizes, Py_ssize_t cap) {
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
    t->cap = cap;
    for (int i = 0; i < ncols; i++) {
        t->size[i] = sizes[i];
        t->ba[i] = PyByteArray_FromStringAndSize(NULL, cap * sizes[i]);
        if (t->ba[i] == NULL) return -1;
        t->ptr[i] = PyByteArray_AS_STRING(t->ba[i]);
    }
    return 0;
}

static void table_free(Table *t) {
    for (int i = 0; i < MAX_COLS; i++) Py_CLEAR(t->ba[i]);
}

static int table_resize(Table *t, Py_ssize_t cap) {
    for (int i = 0; i < t->ncols; i++) {
        if (PyByteArray_Resize(t->ba[i], cap * t->size[i]) < 0) return -1;
        t->ptr[i] = PyByteArray_AS_STRING(t->ba[i]);
    }
    t->cap = cap;
    return 0;
}

/* Index of a new row (-1 on MemoryError). */
static Py_ssize_t table_row(Table *t) {
    if (t->n == t->cap && table_resize(t, t->cap * 2 + 64) < 0) return -1;
    return t->n++;
}

/* The columns, cut to their rows, as a tuple of bytearrays (new reference). */
static PyObject *table_tuple(Table *t) {
    if (table_resize(t, t->n) < 0) return NULL;
    PyObject *out = PyTuple_New(t->ncols);
    if (out == NULL) return NULL;
    for (int i = 0; i < t->ncols; i++) {
        Py_INCREF(t->ba[i]);
        PyTuple_SET_ITEM(out, i, t->ba[i]);
    }
    return out;
}

#define I8(t, c) ((int8_t *)(t)->ptr[c])
#define I32(t, c) ((int32_t *)(t)->ptr[c])
#define I64(t, c) ((int64_t *)(t)->ptr[c])
#define F64(t, c) ((double *)(t)->ptr[c])

/* Timed rows (X and i/I events). */
enum {
    T_KIND, T_INSTANT, T_CAT, T_NAME, T_PID, T_TID, T_TS, T_DUR, T_PID_STR, T_TID_STR,
    /* int args, -1 when absent (the order of A_INT below) */
    T_EXT, T_EXT_LEGACY, T_CORRELATION, T_SEQ, T_FWD_TID, T_PYTHON_ID, T_PYTHON_PARENT, T_DEVICE, T_STREAM,
    T_NBYTES, T_GRID, T_BLOCK, T_REGISTERS, T_SHARED_MEMORY, T_TOTAL_ALLOCATED, T_TOTAL_RESERVED,
    T_DEVICE_TYPE, T_DEVICE_ID,
    /* float args, NaN when absent */
    T_BLOCKS_PER_SM, T_WARPS_PER_SM, T_OCCUPANCY,
    /* grid and block x, y, z (int32), -1 when unknown (as builder._dims3) */
    T_GRID_X, T_GRID_Y, T_GRID_Z, T_BLOCK_X, T_BLOCK_Y, T_BLOCK_Z,
    T_NCOLS
};
#define T_FIRST_INT T_EXT
#define N_INT (T_DEVICE_ID - T_EXT + 1)
#define T_FIRST_FLOAT T_BLOCKS_PER_SM
#define N_FLOAT 3
static const int T_SIZES[T_NCOLS] = {1, 1, 4, 4, 8, 8, 8, 8, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8,
                                     8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4};

/* process_name / thread_name metadata events. *_STR: the local id of a string value, else -1. */
enum { M_NAME, M_PID, M_TID, M_ARGS_AT, M_ARGS_LEN, M_PID_STR, M_TID_STR, M_NCOLS };
static const int M_SIZES[M_NCOLS] = {4, 8, 8, 8, 8, 4, 4};

/* Flow events (s, f, t). */
enum { F_ID, F_HAS_ID, F_START, F_CAT, F_PID, F_TID, F_TS, F_ID_STR, F_PID_STR, F_TID_STR, F_NCOLS };
static const int F_SIZES[F_NCOLS] = {8, 1, 1, 4, 8, 8, 8, 4, 4, 4};

/* ------------------------------------------------------------------------------------------------ */
/* Parser state                                                                                      */
/* ------------------------------------------------------------------------------------------------ */
typedef struct {
    uint64_t hash;
    const char *key; /* into the input, or owned (a string that had escapes) */
    Py_ssize_t len;
    int32_t id; /* -1: empty slot */
} Slot;

typedef struct {
    const char *at; /* NULL: absent */
    Py_ssize_t len;
} Span;

#define N_SHAPE_KEYS 5 /* ShapeArgs' fields, in its order */
typedef struct {
    int64_t row;
    Span part[N_SHAPE_KEYS];
} ShapeRow;

typedef struct {
    const u8 *p, *end, *base;
    int strict; /* skip_value checks as a generic decode would: UTF-8 text, numbers within a double */
    /* strings */
    Slot *slots;
    size_t nslots, nstrings;
    PyObject *strings; /* list[str], by local id */
    u8 *sflags;
    int8_t *catkind; /* per string: its Kind as a category, -1 until asked */
    size_t scap;
    char **owned;
    size_t nowned, owncap;
    char *scratch;
    size_t scratch_cap;
    PyObject *kind_of;
    /* outputs */
    Table timed, meta, flows;
    ShapeRow *shapes;
    size_t nshapes, shapecap;
    PyObject *stacks;   /* list[tuple[int, str]] */
    PyObject *comm_cpu; /* list[bytes] */
    PyObject *comm_dev;
    Table comm_cpu_rows, comm_dev_rows;
} Ctx;

/* ------------------------------------------------------------------------------------------------ */
/* Small helpers                                                                                     */
/* ------------------------------------------------------------------------------------------------ */
static inline void skip_ws(Ctx *c) {
    const u8 *p = c->p, *end = c->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    c->p = p;
}

static inline int expect(Ctx *c, u8 ch) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch) return -1;
    c->p++;
    return 0;
}

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 29;
    return h;
}

static int scratch_reserve(Ctx *c, size_t need) {
    if (need <= c->scratch_cap) return 0;
    size_t cap = c->scratch_cap ? c->scratch_cap : 256;
    while (cap < need) cap *= 2;
    char *p = PyMem_Realloc(c->scratch, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->scratch = p;
    c->scratch_cap = cap;
    return 0;
}

static int hexval(u8 ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex4(const u8 *p, const u8 *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* A JSON string at c->p (the opening quote). On success out and len give its decoded UTF-8 bytes: a view
 * of the input when it has no escapes, else the scratch buffer (valid until the next string). */
static int parse_string(Ctx *c, const char **out, Py_ssize_t *len) {
    const u8 *p = c->p + 1, *end = c->end, *start = p;
    while (p < end) {
        u8 ch = *p;
        if (ch == '"') {
            *out = (const char *)start;
            *len = p - start;
            c->p = p + 1;
            return 0;
        }
        if (ch == '\\') break;
        if (ch < 0x20) return -1;
        p++;
    }
    if (p >= end) return -1;
    size_t n = (size_t)(p - start);
    if (scratch_reserve(c, n + 64) < 0) return -1;
    memcpy(c->scratch, start, n);
    while (p < end) {
        u8 ch = *p;
        if (scratch_reserve(c, n + 8) < 0) return -1;
        char *s = c->scratch;
        if (ch == '"') {
            *out = s;
            *len = (Py_ssize_t)n;
            c->p = p + 1;
            return 0;
        }
        if (ch < 0x20) return -1;
        if (ch != '\\') {
            s[n++] = (char)ch;
            p++;
            continue;
        }
        if (++p >= end) return -1;
        switch (*p) {
            case '"': s[n++] = '"'; break;
            case '\\': s[n++] = '\\'; break;
            case '/': s[n++] = '/'; break;
            case 'b': s[n++] = '\b'; break;
            case 'f': s[n++] = '\f'; break;
            case 'n': s[n++] = '\n'; break;
            case 'r': s[n++] = '\r'; break;
            case 't': s[n++] = '\t'; break;
            case 'u': {
                unsigned cp;
                if (read_hex4(p + 1, end, &cp) < 0) return -1;
                p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair, or give up */
                    unsigned lo;
                    if (end - p < 7 || p[1] != '\\' || p[2] != 'u' || read_hex4(p + 3, end, &lo) < 0) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return -1;
                }
                if (cp < 0x80) {
                    s[n++] = (char)cp;
                } else if (cp < 0x800) {
                    s[n++] = (char)(0xC0 | (cp >> 6));
                    s[n++] = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    s[n++] = (char)(0xE0 | (cp >> 12));
                    s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                    s[n++] = (char)(0x80 | (cp & 0x3F));
                } else {
                    s[n++] = (char)(0xF0 | (cp >> 18));
                    s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                    s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                    s[n++] = (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default:
                return -1;
        }
        p++;
    }
    return -1;
}

/* Whether bytes are UTF-8 as Python's strict decoder accepts it (no overlong forms, no surrogates). */
static int utf8_valid(const u8 *s, Py_ssize_t n) {
    const u8 *end = s + n;
    while (s < end) {
        u8 b = *s;
        if (b < 0x80) {
            s++;
            continue;
        }
        int more;
        unsigned cp;
        if (b >= 0xC2 && b <= 0xDF) more = 1, cp = b & 0x1F;
        else if (b >= 0xE0 && b <= 0xEF) more = 2, cp = b & 0x0F;
        else if (b >= 0xF0 && b <= 0xF4) more = 3, cp = b & 0x07;
        else return 0;
        if (end - s <= more) return 0;
        for (int i = 1; i <= more; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += more + 1;
    }
    return 1;
}

/* Past a JSON string without decoding it. Escapes are checked as msgspec checks them even in values it
 * skips (a lone surrogate fails the whole decode); UTF-8 is not (msgspec does not check skipped text). */
static int skip_string(Ctx *c) {
    const u8 *p = c->p + 1, *end = c->end;
    while (p < end) {
        u8 ch = *p;
        if (ch == '"') {
            if (c->strict && !utf8_valid(c->p + 1, p - (c->p + 1))) return -1;
            c->p = p + 1;
            return 0;
        }
        if (ch < 0x20) return -1;
        if (ch == '\\') {
            if (++p >= end) return -1;
            switch (*p) {
                case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
                case 'u': {
                    unsigned cp, lo;
                    if (read_hex4(p + 1, end, &cp) < 0) return -1;
                    p += 4;
                    if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        if (end - p < 7 || p[1] != '\\' || p[2] != 'u' || read_hex4(p + 3, end, &lo) < 0) return -1;
                        if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                        p += 6;
                    }
                    break;
                }
                default: return -1;
            }
        }
        p++;
    }
    return -1;
}

/* A JSON number at c->p (strict grammar). *is_int: no fraction, no exponent. */
static int scan_number(Ctx *c, const u8 **start, int *is_int) {
    const u8 *p = c->p, *end = c->end;
    *start = p;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    c->p = p;
    return 0;
}

static inline int at_number(Ctx *c) {
    return c->p < c->end && (*c->p == '-' || (*c->p >= '0' && *c->p <= '9'));
}

enum { NUM_INT = 0, NUM_BIG = 1, NUM_FLOAT = 2 };

/* A number: NUM_INT (an integer in int64, in *out), NUM_BIG (an integer outside int64) or NUM_FLOAT
 * (a fraction or an exponent); -1 when c->p is not at a valid number. */
static int parse_number_int(Ctx *c, int64_t *out) {
    const u8 *s;
    int is_int;
    if (!at_number(c) || scan_number(c, &s, &is_int) < 0) return -1;
    if (!is_int) return NUM_FLOAT;
    int neg = *s == '-';
    const u8 *d = s + neg;
    if (c->p - d > 19) return NUM_BIG;
    uint64_t v = 0;
    for (; d < c->p; d++) v = v * 10 + (uint64_t)(*d - '0'); /* 19 digits cannot wrap a uint64 */
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return NUM_BIG;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return NUM_BIG;
        *out = (int64_t)v;
    }
    return NUM_INT;
}

/* An integer that fits int64, or fail (the pure path decides the rest). */
static int parse_int(Ctx *c, int64_t *out) { return parse_number_int(c, out) == NUM_INT ? 0 : -1; }

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number as a double, correctly rounded (as Python's float() and msgspec). */
static int parse_double(Ctx *c, double *out) {
    const u8 *s;
    int is_int;
    if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) return -1;
    if (scan_number(c, &s, &is_int) < 0) return -1;
    const u8 *e = c->p;
    /* Exact fast path (Clinger): at most 15 significant digits and no exponent, so the mantissa and
     * the power of ten are both exact doubles and one correctly rounded division gives the result. */
    int neg = *s == '-';
    const u8 *d = s + neg;
    uint64_t mant = 0;
    int digits = 0, frac = -1, exact = 1;
    for (; d < e; d++) {
        if (*d == '.') {
            frac = 0;
            continue;
        }
        if (*d == 'e' || *d == 'E') {
            exact = 0;
            break;
        }
        mant = mant * 10 + (uint64_t)(*d - '0');
        if (mant) digits++;
        if (frac >= 0) frac++;
        if (digits > 15) {
            exact = 0;
            break;
        }
    }
    if (exact) {
        double v = (double)mant;
        if (frac > 0) v /= POW10[frac > 22 ? 22 : frac];
        if (frac <= 22) {
            *out = neg ? -v : v;
            return 0;
        }
    }
    char buf[72];
    if (e - s >= (Py_ssize_t)sizeof(buf)) return -1;
    memcpy(buf, s, (size_t)(e - s));
    buf[e - s] = 0;
    char *stop;
    double v = PyOS_string_to_double(buf, &stop, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (*stop != 0 || !isfinite(v)) return -1; /* msgspec rejects a number out of a double's range */
    *out = v;
    return 0;
}

static int skip_value(Ctx *c, int depth);

/* After an item of an array or object: 1 when a ',' says another follows, 0 when ``close`` ends it
 * (both consumed), -1 for anything else. */
static int next_item(Ctx *c, u8 close) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    u8 ch = *c->p++;
    return ch == ',' ? 1 : ch == close ? 0 : -1;
}

static int skip_container(Ctx *c, int depth, u8 close) {
    if (depth > MAX_DEPTH) return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        if (close == '}') {
            skip_ws(c);
            if (c->p >= c->end || *c->p != '"' || skip_string(c) < 0) return -1;
            if (expect(c, ':') < 0) return -1;
        }
        if (skip_value(c, depth + 1) < 0) return -1;
        int more = next_item(c, close);
        if (more <= 0) return more;
    }
}

static int skip_literal(Ctx *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

/* Past any JSON value, checking its syntax. */
static int skip_value(Ctx *c, int depth) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    const u8 *s;
    int is_int;
    switch (*c->p) {
        case '"': return skip_string(c);
        case '{': return skip_container(c, depth, '}');
        case '[': return skip_container(c, depth, ']');
        case 't': return skip_literal(c, "true", 4);
        case 'f': return skip_literal(c, "false", 5);
        case 'n': return skip_literal(c, "null", 4);
        default: {
            const u8 *at = c->p;
            if (scan_number(c, &s, &is_int) < 0) return -1;
            if (!c->strict || is_int) return 0;
            const u8 *resume = c->p;
            double v;
            c->p = at;
            int rc = parse_double(c, &v);
            c->p = resume;
            return rc;
        }
    }
}

/* Past any value; its span (from its first byte to its last). */
static int span_value(Ctx *c, Span *out) {
    skip_ws(c);
    const u8 *at = c->p;
    if (skip_value(c, 0) < 0) return -1;
    out->at = (const char *)at;
    out->len = c->p - at;
    return 0;
}

static inline int is_null(Ctx *c) {
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Strings                                                                                           */
/* ------------------------------------------------------------------------------------------------ */
static int has_prefix(const char *s, Py_ssize_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return (size_t)n >= k && memcmp(s, prefix, k) == 0;
}

static int equals(const char *s, Py_ssize_t n, const char *word) {
    size_t k = strlen(word);
    return (size_t)n == k && memcmp(s, word, k) == 0;
}

static int strings_grow(Ctx *c) {
    size_t cap = c->nslots * 2;
    Slot *slots = PyMem_Calloc(cap, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < cap; i++) slots[i].id = -1;
    for (size_t i = 0; i < c->nslots; i++) {
        if (c->slots[i].id < 0) continue;
        size_t j = c->slots[i].hash & (cap - 1);
        while (slots[j].id >= 0) j = (j + 1) & (cap - 1);
        slots[j] = c->slots[i];
    }
    PyMem_Free(c->slots);
    c->slots = slots;
    c->nslots = cap;
    return 0;
}

/* The local id of a string's decoded bytes; ``owned``: the bytes are scratch and must be copied. */
static int32_t intern(Ctx *c, const char *s, Py_ssize_t n, int scratch) {
    uint64_t h = hash_bytes(s, n);
    size_t mask = c->nslots - 1, j = h & mask;
    while (c->slots[j].id >= 0) {
        Slot *slot = &c->slots[j];
        if (slot->hash == h && slot->len == n && memcmp(slot->key, s, (size_t)n) == 0) return slot->id;
        j = (j + 1) & mask;
    }
    /* New: a str (validates UTF-8), its flags, a slot. */
    PyObject *text = PyUnicode_DecodeUTF8(s, n, NULL);
    if (text == NULL) return -1;
    int rc = PyList_Append(c->strings, text);
    Py_DECREF(text);
    if (rc < 0) return -1;
    if (c->nstrings == c->scap) {
        size_t cap = c->scap * 2 + 64;
        u8 *flags = PyMem_Realloc(c->sflags, cap);
        if (flags == NULL) return PyErr_NoMemory(), -1;
        c->sflags = flags;
        int8_t *kinds = PyMem_Realloc(c->catkind, cap);
        if (kinds == NULL) return PyErr_NoMemory(), -1;
        c->catkind = kinds;
        c->scap = cap;
    }
    int32_t id = (int32_t)c->nstrings++;
    u8 flags = 0;
    if (has_prefix(s, n, "ProfilerStep#") || has_prefix(s, n, "enumerate(DataLoader)") ||
        has_prefix(s, n, "Optimizer.step#") || has_prefix(s, n, "Optimizer.zero_grad#"))
        flags |= SF_ANNOTATION;
    if (equals(s, n, "[memory]")) flags |= SF_MEMORY;
    if (equals(s, n, "record_param_comms")) flags |= SF_COMMS;
    if (equals(s, n, "process_name") || equals(s, n, "thread_name")) flags |= SF_NAMES;
    c->sflags[id] = flags;
    c->catkind[id] = -1;
    const char *key = s;
    if (scratch) {
        if (c->nowned == c->owncap) {
            size_t cap = c->owncap * 2 + 16;
            char **owned = PyMem_Realloc(c->owned, cap * sizeof(char *));
            if (owned == NULL) return PyErr_NoMemory(), -1;
            c->owned = owned;
            c->owncap = cap;
        }
        char *copy = PyMem_Malloc((size_t)n + 1);
        if (copy == NULL) return PyErr_NoMemory(), -1;
        memcpy(copy, s, (size_t)n);
        c->owned[c->nowned++] = copy;
        key = copy;
    }
    c->slots[j].hash = h;
    c->slots[j].key = key;
    c->slots[j].len = n;
    c->slots[j].id = id;
    if (c->nstrings * 2 > c->nslots && strings_grow(c) < 0) return -1;
    return id;
}

/* A string value, interned. */
static int32_t intern_value(Ctx *c) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *s;
    Py_ssize_t n;
    if (parse_string(c, &s, &n) < 0) return -1;
    return intern(c, s, n, s == c->scratch);
}

/* The Kind of a category (asked of Python once per distinct category). */
static int category_kind(Ctx *c, int32_t cat) {
    if (c->catkind[cat] >= 0) return c->catkind[cat];
    PyObject *result = PyObject_CallOneArg(c->kind_of, PyList_GET_ITEM(c->strings, cat));
    if (result == NULL) return -1;
    long k = PyLong_AsLong(result);
    Py_DECREF(result);
    if (k == -1 && PyErr_Occurred()) return -1;
    if (k < 0 || k > 127) {
        PyErr_SetString(PyExc_ValueError, "kind_of returned an out-of-range kind");
        return -1;
    }
    c->catkind[cat] = (int8_t)k;
    return (int)k;
}

static int event_kind(Ctx *c, int ph, int32_t cat, int32_t name) {
    if (ph == PH_INSTANT) return (c->sflags[name] & SF_MEMORY) ? K_MEMORY : K_INSTANT;
    int k = category_kind(c, cat);
    if (k == K_CPU_OP && (c->sflags[name] & SF_ANNOTATION)) return K_USER_ANNOTATION;
    return k;
}

static int kind_class(int k) {
    if (k >= K_CPU_OP && k <= K_DRIVER) return CLS_CPU;
    if (k >= K_KERNEL && k <= K_GPU_OTHER) return CLS_DEV;
    if (k == K_MEMORY) return CLS_MEM;
    return CLS_NONE;
}

/* ------------------------------------------------------------------------------------------------ */
/* Args                                                                                              */
/* ------------------------------------------------------------------------------------------------ */
typedef struct {
    int64_t ints[N_INT];
    double floats[N_FLOAT];
    int32_t dims[2][3]; /* grid, block: x, y, z */
    Span shape[N_SHAPE_KEYS];
    int collective; /* "Collective name" is a string */
    PyObject *stack; /* "Call stack", when a non-empty string */
} Args;

static void args_reset(Args *a) {
    for (int i = 0; i < N_INT; i++) a->ints[i] = -1;
    for (int i = 0; i < N_FLOAT; i++) a->floats[i] = NAN;
    for (int i = 0; i < 3; i++) a->dims[0][i] = a->dims[1][i] = -1;
    memset(a->shape, 0, sizeof(a->shape));
    a->collective = 0;
    Py_CLEAR(a->stack);
}

enum {
    V_INT,        /* int -> ints[slot] */
    V_FLOAT,      /* int or float -> floats[slot] */
    V_DIMS,       /* list[int] | null -> product (as builder._prod3) into ints[slot] */
    V_SHAPE,      /* any value, kept as its span in shape[slot] */
    V_STACK,      /* str | null */
    V_COLLECTIVE, /* str | null */
};

typedef struct {
    const char *key;
    int cls_mask; /* which classes have this key in their struct */
    int type;
    int slot;
} ArgKey;

#define MCPU (1 << CLS_CPU)
#define MDEV (1 << CLS_DEV)
#define MMEM (1 << CLS_MEM)
#define SLOT(col) ((col) - T_FIRST_INT)
static const ArgKey ARG_KEYS[] = {
    {"External id", MCPU | MDEV, V_INT, SLOT(T_EXT)},
    {"external id", MCPU | MDEV, V_INT, SLOT(T_EXT_LEGACY)},
    {"correlation", MCPU | MDEV, V_INT, SLOT(T_CORRELATION)},
    {"Sequence number", MCPU, V_INT, SLOT(T_SEQ)},
    {"Fwd thread id", MCPU, V_INT, SLOT(T_FWD_TID)},
    {"Python id", MCPU, V_INT, SLOT(T_PYTHON_ID)},
    {"Python parent id", MCPU, V_INT, SLOT(T_PYTHON_PARENT)},
    {"Call stack", MCPU, V_STACK, 0},
    {"Collective name", MCPU | MDEV, V_COLLECTIVE, 0},
    {"Input Dims", MCPU, V_SHAPE, 0},
    {"Input dims", MCPU, V_SHAPE, 1},
    {"Input type", MCPU, V_SHAPE, 2},
    {"Concrete Inputs", MCPU, V_SHAPE, 3},
    {"Input Strides", MCPU, V_SHAPE, 4},
    {"device", MDEV, V_INT, SLOT(T_DEVICE)},
    {"stream", MDEV, V_INT, SLOT(T_STREAM)},
    {"bytes", MDEV, V_INT, SLOT(T_NBYTES)},
    {"grid", MDEV, V_DIMS, SLOT(T_GRID)},
    {"block", MDEV, V_DIMS, SLOT(T_BLOCK)},
    {"registers per thread", MDEV, V_INT, SLOT(T_REGISTERS)},
    {"shared memory", MDEV, V_INT, SLOT(T_SHARED_MEMORY)},
    {"blocks per SM", MDEV, V_FLOAT, 0},
    {"warps per SM", MDEV, V_FLOAT, 1},
    {"est. achieved occupancy %", MDEV, V_FLOAT, 2},
    {"Bytes", MMEM, V_INT, SLOT(T_NBYTES)},
    {"Total Allocated", MMEM, V_INT, SLOT(T_TOTAL_ALLOCATED)},
    {"Total Reserved", MMEM, V_INT, SLOT(T_TOTAL_RESERVED)},
    {"Device Type", MMEM, V_INT, SLOT(T_DEVICE_TYPE)},
    {"Device Id", MMEM, V_INT, SLOT(T_DEVICE_ID)},
};
#define N_ARG_KEYS ((int)(sizeof(ARG_KEYS) / sizeof(ARG_KEYS[0])))
static const char *SHAPE_KEYS[N_SHAPE_KEYS] = {"Input Dims", "Input dims", "Input type", "Concrete Inputs",
                                               "Input Strides"};

static const ArgKey *find_arg(const char *s, Py_ssize_t n, int cls) {
    for (int i = 0; i < N_ARG_KEYS; i++) {
        const ArgKey *k = &ARG_KEYS[i];
        if ((k->cls_mask & (1 << cls)) && equals(s, n, k->key)) return k;
    }
    return NULL;
}

/* Value readers for args return -1 (invalid JSON, or a case left to the pure path), 0 (read), or
 * MISTYPED: a value of the wrong type for its key, read as absent, as the pure path's key-by-key decode
 * drops it (parse_args then checks the rest of the object as that decode would). */
#define MISTYPED 1

/* A grid/block value as builder._prod3 sees it: the product of a list of ints; -1 for null, [], anything
 * that is not a list of ints (msgspec drops that key), or a product outside [0, 2^63). ``xyz`` as
 * builder._dims3 sees it: the list's 1 to 3 entries (missing ones 1) when each is in [0, 2^31), else -1s. */
static int parse_dims(Ctx *c, int64_t *out, int32_t xyz[3]) {
    *out = -1;
    xyz[0] = xyz[1] = xyz[2] = -1;
    if (is_null(c)) return 0;
    if (c->p >= c->end || *c->p != '[') return skip_value(c, 1) < 0 ? -1 : MISTYPED;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 0;
    }
    int64_t product = 1;
    int not_ints = 0, zero = 0, huge = 0, count = 0, wide = 0;
    int32_t seen[3] = {1, 1, 1};
    for (;;) {
        skip_ws(c);
        int64_t v = 0;
        int rc = at_number(c) ? parse_number_int(c, &v) : (skip_value(c, 2) < 0 ? -1 : NUM_FLOAT);
        if (rc < 0) return -1;
        if (rc == NUM_FLOAT) not_ints = 1;
        else if (rc == NUM_BIG) huge = 1;
        else if (v == 0) zero = 1;
        else if (__builtin_mul_overflow(product, v, &product)) huge = 1;
        if (rc != NUM_INT || v < 0 || v > INT32_MAX || count >= 3) wide = 1;
        else seen[count] = (int32_t)v;
        count++;
        int more = next_item(c, ']');
        if (more < 0) return -1;
        if (!more) break;
    }
    if (not_ints) return MISTYPED;
    if (zero) *out = 0;
    else if (!huge && product >= 0) *out = product;
    if (!wide) memcpy(xyz, seen, sizeof(seen));
    return 0;
}

/* An int arg: its value when an integer in int64, else -1 (wrong type, or out of range: the pure path's
 * _column gives -1 for both). */
static int parse_int_arg(Ctx *c, int64_t *out) {
    *out = -1;
    if (!at_number(c)) return skip_value(c, 1) < 0 ? -1 : MISTYPED;
    int64_t v;
    int rc = parse_number_int(c, &v);
    if (rc < 0) return -1;
    if (rc == NUM_INT) *out = v;
    return rc == NUM_FLOAT ? MISTYPED : 0; /* NUM_BIG: msgspec takes it, _column makes it -1 */
}

/* A float arg: ints and floats, NaN for another type. */
static int parse_float_arg(Ctx *c, double *out) {
    *out = NAN;
    if (!at_number(c)) return skip_value(c, 1) < 0 ? -1 : MISTYPED;
    return parse_double(c, out);
}

/* An optional string: 1 when a string (its bytes in s and n), 0 for null, 2 for another type. */
static int parse_opt_string(Ctx *c, const char **s, Py_ssize_t *n) {
    if (is_null(c)) return 0;
    if (c->p >= c->end || *c->p != '"') return skip_value(c, 1) < 0 ? -1 : 2;
    if (parse_string(c, s, n) < 0) return -1;
    return 1;
}

static int parse_args_object(Ctx *c, int cls, Args *a, int *mistyped);

/* The args object at c->p, read with the keys of its class. With a mistyped key, msgspec's typed decode
 * of the object fails and the pure path decodes it generically, key by key: that fails outright (every
 * arg absent) on a number beyond a double or a string that is not UTF-8 anywhere in the object, so such
 * an object is left to the pure path. */
static int parse_args(Ctx *c, int cls, Args *a) {
    skip_ws(c);
    const u8 *at = c->p;
    int mistyped = 0;
    if (parse_args_object(c, cls, a, &mistyped) < 0) return -1;
    if (mistyped) {
        const u8 *resume = c->p;
        c->p = at;
        c->strict = 1;
        int rc = skip_value(c, 0);
        c->strict = 0;
        if (rc < 0) return -1;
        c->p = resume;
    }
    return 0;
}

static int parse_args_object(Ctx *c, int cls, Args *a, int *mistyped) {
    if (c->p >= c->end || *c->p != '{') return -1; /* the pure path decodes args that are not an object */
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') return -1;
        const char *key;
        Py_ssize_t klen;
        if (parse_string(c, &key, &klen) < 0) return -1;
        if (expect(c, ':') < 0) return -1;
        skip_ws(c);
        const ArgKey *k = find_arg(key, klen, cls);
        int rc = 0;
        if (k == NULL) {
            if (skip_value(c, 1) < 0) return -1;
        } else {
            switch (k->type) {
                case V_INT:
                    rc = parse_int_arg(c, &a->ints[k->slot]);
                    break;
                case V_FLOAT:
                    rc = parse_float_arg(c, &a->floats[k->slot]);
                    break;
                case V_DIMS:
                    rc = parse_dims(c, &a->ints[k->slot], a->dims[k->slot == SLOT(T_GRID) ? 0 : 1]);
                    break;
                case V_SHAPE:
                    if (span_value(c, &a->shape[k->slot]) < 0) return -1;
                    break;
                case V_STACK: {
                    const char *s;
                    Py_ssize_t n;
                    rc = parse_opt_string(c, &s, &n);
                    Py_CLEAR(a->stack);
                    if (rc == 1) {
                        PyObject *text = PyUnicode_DecodeUTF8(s, n, NULL);
                        if (text == NULL) return -1;
                        if (n > 0) a->stack = text;
                        else Py_DECREF(text);
                    }
                    rc = rc == 2 ? MISTYPED : rc < 0 ? -1 : 0;
                    break;
                }
                case V_COLLECTIVE: {
                    const char *s;
                    Py_ssize_t n;
                    rc = parse_opt_string(c, &s, &n);
                    if (rc == 1) { /* msgspec would reject invalid UTF-8 here: so do we */
                        PyObject *text = PyUnicode_DecodeUTF8(s, n, NULL);
                        if (text == NULL) return -1;
                        Py_DECREF(text);
                    }
                    a->collective = rc == 1;
                    rc = rc == 2 ? MISTYPED : rc < 0 ? -1 : 0;
                    break;
                }
            }
        }
        if (rc < 0) return -1;
        if (rc == MISTYPED) *mistyped = 1;
        int more = next_item(c, '}');
        if (more <= 0) return more;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Events                                                                                            */
/* ------------------------------------------------------------------------------------------------ */
enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ID, E_ARGS, E_OTHER };

static int event_key(const char *s, Py_ssize_t n) {
    switch (n) {
        case 2:
            if (s[0] == 'p' && s[1] == 'h') return E_PH;
            if (s[0] == 't' && s[1] == 's') return E_TS;
            if (s[0] == 'i' && s[1] == 'd') return E_ID;
            break;
        case 3:
            if (memcmp(s, "cat", 3) == 0) return E_CAT;
            if (memcmp(s, "pid", 3) == 0) return E_PID;
            if (memcmp(s, "tid", 3) == 0) return E_TID;
            if (memcmp(s, "dur", 3) == 0) return E_DUR;
            break;
        case 4:
            if (memcmp(s, "name", 4) == 0) return E_NAME;
            if (memcmp(s, "args", 4) == 0) return E_ARGS;
            break;
    }
    return E_OTHER;
}

static int phase_of(const char *s, Py_ssize_t n, int *start) {
    *start = 0;
    if (n == 1) {
        switch (s[0]) {
            case 'X': return PH_SPAN;
            case 'i': case 'I': return PH_INSTANT;
            case 'M': return PH_META;
            case 's': *start = 1; return PH_FLOW;
            case 'f': case 't': return PH_FLOW;
        }
    }
    /* Another phase: msgspec still checks that it is UTF-8. */
    PyObject *text = PyUnicode_DecodeUTF8(s, n, NULL);
    if (text == NULL) return -1;
    Py_DECREF(text);
    return PH_OTHER;
}

/* A pid, tid or flow id: an int64 (*str = -1) or a string (*str = its local id, *out = 0). Python
 * turns strings into numbers as Builder._ids does. */
static int id_value(Ctx *c, int64_t *out, int32_t *str) {
    *out = 0;
    *str = -1;
    if (c->p < c->end && *c->p == '"') return (*str = intern_value(c)) < 0 ? -1 : 0;
    return parse_int(c, out);
}

static int add_shape(Ctx *c, int64_t row, const Args *a) {
    if (c->nshapes == c->shapecap) {
        size_t cap = c->shapecap * 2 + 256;
        ShapeRow *rows = PyMem_Realloc(c->shapes, cap * sizeof(ShapeRow));
        if (rows == NULL) return PyErr_NoMemory(), -1;
        c->shapes = rows;
        c->shapecap = cap;
    }
    ShapeRow *r = &c->shapes[c->nshapes++];
    r->row = row;
    memcpy(r->part, a->shape, sizeof(r->part));
    return 0;
}

static int add_comm(Table *rows, PyObject *chunks, int64_t row, Span args) {
    Py_ssize_t i = table_row(rows);
    if (i < 0) return -1;
    I64(rows, 0)[i] = row;
    PyObject *raw = args.at ? PyBytes_FromStringAndSize(args.at, args.len) : PyBytes_FromString("{}");
    if (raw == NULL) return -1;
    int rc = PyList_Append(chunks, raw);
    Py_DECREF(raw);
    return rc;
}

static int parse_event(Ctx *c, Args *a) {
    c->p++; /* '{' */
    int ph = PH_OTHER, start = 0, kind_at_args = -1;
    int32_t cat = -1, name = -1;
    int64_t pid = 0, tid = 0, id = 0;
    int32_t pid_str = -1, tid_str = -1, id_str = -1;
    int has_id = 0;
    double ts = NAN, dur = 0.0;
    Span args = {NULL, 0};
    args_reset(a);
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            skip_ws(c);
            if (c->p >= c->end || *c->p != '"') return -1;
            const char *key;
            Py_ssize_t klen;
            if (parse_string(c, &key, &klen) < 0) return -1;
            if (expect(c, ':') < 0) return -1;
            skip_ws(c);
            switch (event_key(key, klen)) {
                case E_PH: {
                    const char *s;
                    Py_ssize_t n;
                    if (c->p >= c->end || *c->p != '"' || parse_string(c, &s, &n) < 0) return -1;
                    if ((ph = phase_of(s, n, &start)) < 0) return -1;
                    break;
                }
                case E_CAT:
                    if ((cat = intern_value(c)) < 0) return -1;
                    break;
                case E_NAME:
                    if ((name = intern_value(c)) < 0) return -1;
                    break;
                case E_PID:
                    if (id_value(c, &pid, &pid_str) < 0) return -1;
                    break;
                case E_TID:
                    if (id_value(c, &tid, &tid_str) < 0) return -1;
                    break;
                case E_TS:
                    if (parse_double(c, &ts) < 0) return -1;
                    break;
                case E_DUR:
                    if (parse_double(c, &dur) < 0) return -1;
                    break;
                case E_ID:
                    if (is_null(c)) {
                        has_id = 0;
                        id = 0;
                        id_str = -1;
                    } else {
                        if (id_value(c, &id, &id_str) < 0) return -1;
                        has_id = 1;
                    }
                    break;
                case E_ARGS:
                    skip_ws(c);
                    args.at = (const char *)c->p;
                    /* Kineto writes ph, cat and name first: then the args are read right here. */
                    if ((ph == PH_SPAN || ph == PH_INSTANT) && cat >= 0 && name >= 0) {
                        int k = event_kind(c, ph, cat, name);
                        if (k < 0) return -1;
                        int cls = kind_class(k);
                        if (cls != CLS_NONE) {
                            args_reset(a);
                            if (parse_args(c, cls, a) < 0) return -1;
                            kind_at_args = k;
                        } else if (skip_value(c, 0) < 0) {
                            return -1;
                        }
                    } else if (skip_value(c, 0) < 0) {
                        return -1;
                    }
                    args.len = (const char *)c->p - args.at;
                    break;
                default:
                    if (skip_value(c, 0) < 0) return -1;
            }
            int more = next_item(c, '}');
            if (more < 0) return -1;
            if (!more) break;
        }
    }
    if (ph == PH_OTHER) return 0;
    if (cat < 0 && (cat = intern(c, "", 0, 0)) < 0) return -1;
    if (name < 0 && (name = intern(c, "", 0, 0)) < 0) return -1;
    if (ph == PH_META) {
        if (!(c->sflags[name] & SF_NAMES)) return 0;
        Py_ssize_t r = table_row(&c->meta);
        if (r < 0) return -1;
        I32(&c->meta, M_NAME)[r] = name;
        I64(&c->meta, M_PID)[r] = pid;
        I64(&c->meta, M_TID)[r] = tid;
        I64(&c->meta, M_ARGS_AT)[r] = args.at ? (const u8 *)args.at - c->base : -1;
        I64(&c->meta, M_ARGS_LEN)[r] = args.len;
        I32(&c->meta, M_PID_STR)[r] = pid_str;
        I32(&c->meta, M_TID_STR)[r] = tid_str;
        return 0;
    }
    if (ph == PH_FLOW) {
        Py_ssize_t r = table_row(&c->flows);
        if (r < 0) return -1;
        I64(&c->flows, F_ID)[r] = id;
        I8(&c->flows, F_HAS_ID)[r] = (int8_t)has_id;
        I8(&c->flows, F_START)[r] = (int8_t)start;
        I32(&c->flows, F_CAT)[r] = cat;
        I64(&c->flows, F_PID)[r] = pid;
        I64(&c->flows, F_TID)[r] = tid;
        F64(&c->flows, F_TS)[r] = ts;
        I32(&c->flows, F_ID_STR)[r] = id_str;
        I32(&c->flows, F_PID_STR)[r] = pid_str;
        I32(&c->flows, F_TID_STR)[r] = tid_str;
        return 0;
    }
    /* A timed event. */
    int k = event_kind(c, ph, cat, name);
    if (k < 0) return -1;
    int cls = kind_class(k);
    if (kind_at_args >= 0 && kind_at_args != k) return -1; /* a key repeated after args: not ours */
    if (kind_at_args < 0 && cls != CLS_NONE && args.at != NULL) { /* args came before ph/cat/name */
        const u8 *resume = c->p;
        c->p = (const u8 *)args.at;
        args_reset(a);
        if (parse_args(c, cls, a) < 0) return -1;
        c->p = resume;
    }
    Table *t = &c->timed;
    Py_ssize_t r = table_row(t);
    if (r < 0) return -1;
    I8(t, T_KIND)[r] = (int8_t)k;
    I8(t, T_INSTANT)[r] = ph == PH_INSTANT;
    I32(t, T_CAT)[r] = cat;
    I32(t, T_NAME)[r] = name;
    I64(t, T_PID)[r] = pid;
    I64(t, T_TID)[r] = tid;
    F64(t, T_TS)[r] = ts;
    F64(t, T_DUR)[r] = dur;
    I32(t, T_PID_STR)[r] = pid_str;
    I32(t, T_TID_STR)[r] = tid_str;
    for (int i = 0; i < N_INT; i++) I64(t, T_FIRST_INT + i)[r] = cls == CLS_NONE ? -1 : a->ints[i];
    for (int i = 0; i < N_FLOAT; i++) F64(t, T_FIRST_FLOAT + i)[r] = cls == CLS_NONE ? NAN : a->floats[i];
    for (int i = 0; i < 6; i++) I32(t, T_GRID_X + i)[r] = cls == CLS_NONE ? -1 : a->dims[i / 3][i % 3];
    if (cls == CLS_CPU) {
        if ((a->shape[0].at || a->shape[1].at) && add_shape(c, r, a) < 0) return -1;
        if ((a->collective || (c->sflags[name] & SF_COMMS)) && add_comm(&c->comm_cpu_rows, c->comm_cpu, r, args) < 0)
            return -1;
        if (a->stack) {
            PyObject *item = Py_BuildValue("(nO)", r, a->stack);
            if (item == NULL) return -1;
            int rc = PyList_Append(c->stacks, item);
            Py_DECREF(item);
            if (rc < 0) return -1;
        }
    } else if (cls == CLS_DEV && a->collective) {
        if (add_comm(&c->comm_dev_rows, c->comm_dev, r, args) < 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Canonical op inputs (as builder._canonical_shapes)                                               */
/* ------------------------------------------------------------------------------------------------ */
static int has_newline(Span s) { return s.at != NULL && memchr(s.at, '\n', (size_t)s.len) != NULL; }

/* Append ``s`` to the scratch at *n, without the whitespace outside strings when ``minify``. */
static int put_raw(Ctx *c, size_t *n, Span s, int minify) {
    if (scratch_reserve(c, *n + (size_t)s.len + 64) < 0) return -1;
    char *out = c->scratch;
    if (!minify) {
        memcpy(out + *n, s.at, (size_t)s.len);
        *n += (size_t)s.len;
        return 0;
    }
    int in_string = 0;
    for (Py_ssize_t i = 0; i < s.len; i++) {
        char ch = s.at[i];
        if (in_string) {
            out[(*n)++] = ch;
            if (ch == '\\' && i + 1 < s.len) out[(*n)++] = s.at[++i];
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') {
            out[(*n)++] = ch;
            in_string = 1;
        } else if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t') {
            out[(*n)++] = ch;
        }
    }
    return 0;
}

static PyObject *shape_texts(Ctx *c) {
    /* Pretty-printed traces indent shapes over many lines: the pure path minifies every shape of the
     * run when one of its first 16 has a newline. */
    int minify = 0;
    for (size_t i = 0; i < c->nshapes && i < 16; i++)
        for (int j = 0; j < N_SHAPE_KEYS; j++) minify |= has_newline(c->shapes[i].part[j]);
    PyObject *out = PyList_New((Py_ssize_t)c->nshapes);
    if (out == NULL) return NULL;
    for (size_t i = 0; i < c->nshapes; i++) {
        size_t n = 0;
        if (scratch_reserve(c, 2) < 0) goto fail;
        c->scratch[n++] = '{';
        int first = 1;
        for (int j = 0; j < N_SHAPE_KEYS; j++) {
            Span part = c->shapes[i].part[j];
            if (part.at == NULL) continue;
            size_t klen = strlen(SHAPE_KEYS[j]);
            if (scratch_reserve(c, n + klen + 8) < 0) goto fail;
            if (!first) c->scratch[n++] = ',';
            first = 0;
            c->scratch[n++] = '"';
            memcpy(c->scratch + n, SHAPE_KEYS[j], klen);
            n += klen;
            c->scratch[n++] = '"';
            c->scratch[n++] = ':';
            if (put_raw(c, &n, part, minify) < 0) goto fail;
        }
        if (scratch_reserve(c, n + 1) < 0) goto fail;
        c->scratch[n++] = '}';
        PyObject *text = PyBytes_FromStringAndSize(c->scratch, (Py_ssize_t)n);
        if (text == NULL) goto fail;
        PyList_SET_ITEM(out, (Py_ssize_t)i, text);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *shape_rows(Ctx *c) {
    PyObject *rows = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(c->nshapes * sizeof(int64_t)));
    if (rows == NULL) return NULL;
    int64_t *out = (int64_t *)PyByteArray_AS_STRING(rows);
    for (size_t i = 0; i < c->nshapes; i++) out[i] = c->shapes[i].row;
    return rows;
}

/* ------------------------------------------------------------------------------------------------ */
/* Entry point                                                                                       */
/* ------------------------------------------------------------------------------------------------ */
static void ctx_free(Ctx *c) {
    PyMem_Free(c->slots);
    Py_CLEAR(c->strings);
    PyMem_Free(c->sflags);
    PyMem_Free(c->catkind);
    for (size_t i = 0; i < c->nowned; i++) PyMem_Free(c->owned[i]);
    PyMem_Free(c->owned);
    PyMem_Free(c->scratch);
    table_free(&c->timed);
    table_free(&c->meta);
    table_free(&c->flows);
    table_free(&c->comm_cpu_rows);
    table_free(&c->comm_dev_rows);
    PyMem_Free(c->shapes);
    Py_CLEAR(c->stacks);
    Py_CLEAR(c->comm_cpu);
    Py_CLEAR(c->comm_dev);
}

static int parse_array(Ctx *c, Py_ssize_t *count) {
    Args args = {0};
    int rc = -1;
    *count = 0;
    if (expect(c, '[') < 0) goto done;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            skip_ws(c);
            if (c->p >= c->end || *c->p != '{') goto done; /* not an object: the pure path skips it */
            if (parse_event(c, &args) < 0) goto done;
            ++*count;
            int more = next_item(c, ']');
            if (more < 0) goto done;
            if (!more) break;
        }
    }
    skip_ws(c);
    rc = c->p == c->end ? 0 : -1;
done:
    Py_CLEAR(args.stack);
    return rc;
}

PyDoc_STRVAR(columnize_doc,
"columnize(buffer, kind_of, /)\n--\n\n"
"Columns of a JSON array of trace events, or None when the pure-Python path must decode it.\n\n"
"Returns (count, strings, timed, meta, flows, shape_rows, shapes, stacks, comm_cpu_rows, comm_cpu,\n"
"comm_dev_rows, comm_dev): count events in all; strings by local id; timed, meta and flows tuples of\n"
"bytearray columns (see _columnar.c for their order and types); shapes the canonical op inputs of\n"
"the timed rows in shape_rows (int64); stacks (row, call stack) pairs; comm_* the rows (int64) and\n"
"raw args of collective CPU ops and device activities.");

static PyObject *columnize(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "columnize(buffer, kind_of) takes two arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Ctx c;
    memset(&c, 0, sizeof(c));
    PyObject *result = NULL;
    c.base = c.p = (const u8 *)view.buf;
    c.end = c.p + view.len;
    c.kind_of = argv[1];
    Py_ssize_t guess = view.len / 256 + 16;
    c.nslots = 1024;
    c.slots = PyMem_Calloc(c.nslots, sizeof(Slot));
    if (c.slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < c.nslots; i++) c.slots[i].id = -1;
    int one[1] = {8};
    if ((c.strings = PyList_New(0)) == NULL || (c.stacks = PyList_New(0)) == NULL ||
        (c.comm_cpu = PyList_New(0)) == NULL || (c.comm_dev = PyList_New(0)) == NULL ||
        table_init(&c.timed, T_NCOLS, T_SIZES, guess) < 0 || table_init(&c.meta, M_NCOLS, M_SIZES, 16) < 0 ||
        table_init(&c.flows, F_NCOLS, F_SIZES, 16) < 0 || table_init(&c.comm_cpu_rows, 1, one, 16) < 0 ||
        table_init(&c.comm_dev_rows, 1, one, 16) < 0)
        goto done;
    Py_ssize_t count;
    if (parse_array(&c, &count) < 0) {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeError)) goto done;
            PyErr_Clear();
        }
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *timed = table_tuple(&c.timed), *meta = table_tuple(&c.meta), *flows = table_tuple(&c.flows);
    PyObject *rows = shape_rows(&c), *shapes = shape_texts(&c);
    PyObject *cpu_rows = table_tuple(&c.comm_cpu_rows), *dev_rows = table_tuple(&c.comm_dev_rows);
    if (timed && meta && flows && rows && shapes && cpu_rows && dev_rows) {
        result = Py_BuildValue("(nOOOOOOOOOOO)", count, c.strings, timed, meta, flows, rows, shapes, c.stacks,
                               PyTuple_GET_ITEM(cpu_rows, 0), c.comm_cpu, PyTuple_GET_ITEM(dev_rows, 0),
                               c.comm_dev);
    }
    Py_XDECREF(timed);
    Py_XDECREF(meta);
    Py_XDECREF(flows);
    Py_XDECREF(rows);
    Py_XDECREF(shapes);
    Py_XDECREF(cpu_rows);
    Py_XDECREF(dev_rows);
done:
    ctx_free(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"columnize", (PyCFunction)(void (*)(void))columnize, METH_FASTCALL, columnize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "aiprof.trace.kineto._columnar",
    "Kineto trace events straight into columns (the optional native half of aiprof.trace.kineto.builder).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columnar(void) { return PyModule_Create(&module); }
