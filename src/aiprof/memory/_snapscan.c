/* Native window scan for the streaming snapshot reader (aiprof.memory.stream, optional).
 *
 * scan(buf, start, stop, limit, learn, shapes, known, columns...) does, for the bytes buf[start:stop], what stream._Window's
 * NumPy loop does: every position p < limit with "} \x94 (" at p is a candidate; candidates are taken in
 * order, each is checked against the layouts learned so far (in learning order; the first whose fixed bytes
 * all agree wins), and one that matches none is given to learn(p - start) (at most MAX_SHAPES times), which
 * returns None or (shape, spec): the layout parsed in Python. Before calling learn, the layouts of earlier
 * windows (known: a list of (shape, spec)) are tried: one whose fixed bytes agree at p is exactly the layout
 * learn(p) would parse (the parse reads only bytes that are fixed in its result), so it is taken instead, in
 * the same place in the learning order and counting as an attempt as learn would. The values are read from the matched bytes
 * into columns. It only compares and copies bytes: no object of the pickle is ever built here.
 *
 * spec = (length, mask, want, slots, frames, frame_at, memo_inc, list_off, has_list): mask and want are the
 * fixed bytes as little-endian 8-byte words over span = (length + 15) // 8 * 8 bytes; slots a list of
 * (offset, width, signed) per key (width 0: nothing to read); frames a list of (offset, width).
 *
 * count(buf, start, stop, limit) is the number m of candidates; the caller allocates the columns (NumPy,
 * filled with their defaults) and scan(...) writes them: cand, end, memo_inc, list_off, inner_pos, inner_len,
 * stack_of (int64, m each), shape_id (int32, m) and ival (int64, MAX_KEYS rows of m: only the matched
 * candidates' slots are written, so the rows no layout uses stay untouched zero pages). Positions are
 * relative to start. scan returns (stack_flat, stack_offs) as bytes: stack ids number the distinct
 * frames-reference tuples (stack_flat[stack_offs[k]:stack_offs[k + 1]] is tuple k, int64).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS 16
#define MAX_FRAMES_C 300
#define MAX_SHAPES 1024

typedef struct {
    char *p;
    Py_ssize_t len, cap; /* bytes */
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *v, Py_ssize_t n) {
    if (n == 0) return 0;
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, v, (size_t)n);
    b->len += n;
    return 0;
}

static int put64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }

typedef struct {
    Py_ssize_t length, span, nwords;
    uint64_t *mask, *want;
    int nslots;
    Py_ssize_t soff[MAX_KEYS];
    int swidth[MAX_KEYS], ssigned[MAX_KEYS];
    int nframes;
    Py_ssize_t foff[MAX_FRAMES_C];
    int fwidth[MAX_FRAMES_C];
    Py_ssize_t frame_at;
    int64_t memo_inc, list_off;
    int has_list;
} Shape;

static uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v; /* little-endian hosts only: checked at import */
}

/* the little-endian integer of width (1..8) bytes at p; 8 bytes from p must be readable (they are: a value
   lies inside its layout, and a layout is only matched with span >= length + 8 bytes in the window) */
static int64_t read_int(const unsigned char *p, int width, int sgn) {
    uint64_t v = load64(p);
    if (width < 8) {
        v &= ((uint64_t)1 << (8 * width)) - 1;
        if (sgn && (v >> (8 * width - 1)) & 1) v |= ~(uint64_t)0 << (8 * width);
    }
    return (int64_t)v;
}

static void shape_free(Shape *s) {
    free(s->mask);
    free(s->want);
}

static int parse_spec(PyObject *spec, Shape *s) {
    PyObject *slots, *frames;
    const char *mask, *want;
    Py_ssize_t mlen, wlen, length, frame_at;
    long long memo_inc, list_off;
    int has_list;
    memset(s, 0, sizeof(*s));
    if (!PyArg_ParseTuple(spec, "ny#y#OOnLLp", &length, &mask, &mlen, &want, &wlen, &slots, &frames, &frame_at,
                          &memo_inc, &list_off, &has_list))
        return -1;
    if (length <= 0 || mlen != wlen || mlen % 8 || mlen != (length + 15) / 8 * 8 || !PyList_Check(slots) ||
        !PyList_Check(frames) || PyList_GET_SIZE(slots) > MAX_KEYS || PyList_GET_SIZE(frames) > MAX_FRAMES_C) {
        PyErr_SetString(PyExc_ValueError, "bad shape spec");
        return -1;
    }
    s->length = length;
    s->span = mlen;
    s->nwords = mlen / 8;
    s->mask = malloc((size_t)mlen);
    s->want = malloc((size_t)mlen);
    if (!s->mask || !s->want) { shape_free(s); PyErr_NoMemory(); return -1; }
    memcpy(s->mask, mask, (size_t)mlen);
    memcpy(s->want, want, (size_t)mlen);
    s->nslots = (int)PyList_GET_SIZE(slots);
    for (int k = 0; k < s->nslots; k++) {
        Py_ssize_t off;
        int width, sgn;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(slots, k), "nip", &off, &width, &sgn)) { shape_free(s); return -1; }
        if (off < 0 || width < 0 || width > 8 || off + width > length) {
            shape_free(s);
            PyErr_SetString(PyExc_ValueError, "bad slot");
            return -1;
        }
        s->soff[k] = off; s->swidth[k] = width; s->ssigned[k] = sgn;
    }
    s->nframes = (int)PyList_GET_SIZE(frames);
    for (int k = 0; k < s->nframes; k++) {
        Py_ssize_t off;
        int width;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(frames, k), "ni", &off, &width)) { shape_free(s); return -1; }
        if (off < 0 || width < 1 || width > 8 || off + width > length) {
            shape_free(s);
            PyErr_SetString(PyExc_ValueError, "bad frame ref");
            return -1;
        }
        s->foff[k] = off; s->fwidth[k] = width;
    }
    if (frame_at >= 0 && frame_at + 9 > length) {
        shape_free(s);
        PyErr_SetString(PyExc_ValueError, "bad frame");
        return -1;
    }
    s->frame_at = frame_at;
    s->memo_inc = memo_inc;
    s->list_off = list_off;
    s->has_list = has_list;
    return 0;
}

static int matches(const Shape *s, const unsigned char *a, Py_ssize_t n, Py_ssize_t c) {
    if (c + s->span > n) return 0;
    const unsigned char *e = a + c;
    for (Py_ssize_t k = s->nwords - 1; k >= 0; k--)
        if ((load64(e + 8 * k) & s->mask[k]) != s->want[k]) return 0;
    return 1;
}

/* distinct frames-reference tuples: open addressing over ids into (flat, offs) */
typedef struct {
    Buf flat, offs; /* int64 */
    int64_t *table; /* id + 1, 0 empty */
    Py_ssize_t cap, count;
} Stacks;

static uint64_t hash_refs(const int64_t *r, int n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int k = 0; k < n; k++) {
        h ^= (uint64_t)r[k];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return h;
}

static int64_t stack_id(Stacks *st, const int64_t *r, int n) {
    if ((st->count + 1) * 2 > st->cap) {
        Py_ssize_t cap = st->cap ? st->cap * 2 : 1024;
        int64_t *t = calloc((size_t)cap, sizeof(int64_t));
        if (!t) { PyErr_NoMemory(); return -1; }
        const int64_t *offs = (const int64_t *)st->offs.p, *flat = (const int64_t *)st->flat.p;
        for (Py_ssize_t id = 0; id < st->count; id++) {
            uint64_t h = hash_refs(flat + offs[id], (int)(offs[id + 1] - offs[id]));
            Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(cap - 1));
            while (t[i]) i = (i + 1) & (cap - 1);
            t[i] = id + 1;
        }
        free(st->table);
        st->table = t;
        st->cap = cap;
    }
    uint64_t h = hash_refs(r, n);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(st->cap - 1));
    const int64_t *offs = (const int64_t *)st->offs.p, *flat = (const int64_t *)st->flat.p;
    while (st->table[i]) {
        int64_t id = st->table[i] - 1;
        if (offs[id + 1] - offs[id] == n && (n == 0 || !memcmp(flat + offs[id], r, (size_t)n * 8))) return id;
        i = (i + 1) & (st->cap - 1);
    }
    int64_t id = st->count;
    if (buf_put(&st->flat, r, (Py_ssize_t)n * 8) < 0) return -1;
    if (put64(&st->offs, (int64_t)(st->flat.len / 8)) < 0) return -1;
    st->table[i] = id + 1;
    st->count++;
    return id;
}

static PyObject *as_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

/* the next candidate at or after c (c < top, "} \x94 (" there), or -1 */
static Py_ssize_t next_cand(const unsigned char *a, Py_ssize_t c, Py_ssize_t top) {
    while (c < top) {
        const unsigned char *p = memchr(a + c, 0x7D, (size_t)(top - c));
        if (!p) return -1;
        c = p - a;
        if (a[c + 1] == 0x94 && a[c + 2] == 0x28) return c;
        c++;
    }
    return -1;
}

static int window(Py_buffer *view, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t limit, Py_ssize_t *n,
                  Py_ssize_t *top) {
    if (start < 0 || stop > view->len || start > stop || limit < start || limit > stop) {
        PyErr_SetString(PyExc_ValueError, "bad window");
        return -1;
    }
    *n = stop - start;
    Py_ssize_t lim = limit - start;
    *top = *n > 3 ? (lim < *n - 2 ? lim : *n - 2) : 0; /* candidates: c < lim and c + 2 < n */
    return 0;
}

static PyObject *count(PyObject *self, PyObject *args) {
    PyObject *bufobj;
    Py_ssize_t start, stop, limit, n, top, m = 0;
    if (!PyArg_ParseTuple(args, "Onnn", &bufobj, &start, &stop, &limit)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (window(&view, start, stop, limit, &n, &top) < 0) { PyBuffer_Release(&view); return NULL; }
    const unsigned char *a = (const unsigned char *)view.buf + start;
    for (Py_ssize_t c = next_cand(a, 0, top); c >= 0; c = next_cand(a, c + 1, top)) m++;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(m);
}

enum { O_CAND, O_END, O_MINC, O_LOFF, O_IPOS, O_ILEN, O_SOF, O_SID, O_IVAL, NOUT };

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *bufobj, *learn, *shapes, *known, *outobj[NOUT];
    Py_ssize_t start, stop, limit, n, top;
    if (!PyArg_ParseTuple(args, "OnnnOO!O!OOOOOOOOO", &bufobj, &start, &stop, &limit, &learn, &PyList_Type, &shapes,
                          &PyList_Type, &known, &outobj[0], &outobj[1], &outobj[2], &outobj[3], &outobj[4], &outobj[5], &outobj[6],
                          &outobj[7], &outobj[8]))
        return NULL;
    Py_buffer view, out[NOUT];
    int nout = 0;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    Shape *pool = NULL, *shape[MAX_SHAPES];
    int npool = 0, nshape = 0, attempts = 0, nknown = -1, last = -1;
    Py_ssize_t known_len = PyList_GET_SIZE(known) < MAX_SHAPES ? PyList_GET_SIZE(known) : MAX_SHAPES;
    Stacks st = {0};
    int64_t refs[MAX_FRAMES_C];
    if (window(&view, start, stop, limit, &n, &top) < 0) goto done;
    const unsigned char *a = (const unsigned char *)view.buf + start;
    Py_ssize_t m = 0;
    for (Py_ssize_t c = next_cand(a, 0, top); c >= 0; c = next_cand(a, c + 1, top)) m++;
    for (; nout < NOUT; nout++) {
        if (PyObject_GetBuffer(outobj[nout], &out[nout], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
        Py_ssize_t want = nout == O_SID ? 4 * m : nout == O_IVAL ? 8 * MAX_KEYS * m : 8 * m;
        if (out[nout].len != want) {
            nout++;
            PyErr_SetString(PyExc_ValueError, "output column of the wrong size");
            goto done;
        }
    }
    int64_t *cand = out[O_CAND].buf, *end = out[O_END].buf, *minc = out[O_MINC].buf, *loff = out[O_LOFF].buf,
            *ipos = out[O_IPOS].buf, *ilen = out[O_ILEN].buf, *sof = out[O_SOF].buf, *ival = out[O_IVAL].buf;
    int32_t *sid = out[O_SID].buf;
    if (put64(&st.offs, 0) < 0) goto done;
    pool = malloc((size_t)(MAX_SHAPES + known_len) * sizeof(Shape)); /* each filled by parse_spec */
    if (!pool) { PyErr_NoMemory(); goto done; }
    Py_ssize_t i = 0;
    for (Py_ssize_t c = next_cand(a, 0, top); c >= 0 && i < m; c = next_cand(a, c + 1, top), i++) {
        cand[i] = c;
        /* at most one layout matches a candidate (a match is the candidate's own parse, and a window never
           learns the same layout twice), so the order they are tried in does not matter: the last one
           matched first (entries mostly repeat the layout before them) */
        int got = -1;
        if (last >= 0 && matches(shape[last], a, n, c))
            got = last;
        else
            for (int k = 0; k < nshape; k++)
                if (k != last && matches(shape[k], a, n, c)) { got = k; break; }
        int learning = got < 0 && attempts < MAX_SHAPES;
        if (learning) {
            attempts++;
            /* a layout learned in an earlier window that matches is the one learn(c) would parse: every byte
               the parse reads is a fixed byte of that layout */
            if (nknown < 0) {
                for (nknown = 0; nknown < known_len; nknown++) {
                    PyObject *kv = PyList_GET_ITEM(known, nknown), *spec;
                    if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2 || !PyTuple_Check(spec = PyTuple_GET_ITEM(kv, 1))) {
                        PyErr_SetString(PyExc_TypeError, "known: (shape, spec) pairs");
                        goto done;
                    }
                    if (parse_spec(spec, &pool[npool]) < 0) goto done;
                    npool++;
                }
            }
            for (int k = 0; k < nknown; k++)
                if (matches(&pool[k], a, n, c)) {
                    if (PyList_Append(shapes, PyTuple_GET_ITEM(PyList_GET_ITEM(known, k), 0)) < 0) goto done;
                    shape[nshape] = &pool[k];
                    got = nshape++;
                    break;
                }
        }
        if (got < 0 && learning) {
            PyObject *r = PyObject_CallFunction(learn, "n", c);
            if (!r) goto done;
            if (r != Py_None) {
                PyObject *obj, *spec;
                Shape *ns = &pool[npool];
                if (!PyArg_ParseTuple(r, "OO!", &obj, &PyTuple_Type, &spec) || parse_spec(spec, ns) < 0) {
                    Py_DECREF(r);
                    goto done;
                }
                npool++;
                if (matches(ns, a, n, c)) {
                    if (PyList_Append(shapes, obj) < 0) { Py_DECREF(r); goto done; }
                    shape[nshape] = ns;
                    got = nshape++;
                }
            }
            Py_DECREF(r);
        }
        if (got < 0) continue;
        last = got;
        const Shape *s = shape[got];
        const unsigned char *q = a + c;
        sid[i] = got;
        end[i] = c + s->length;
        minc[i] = s->memo_inc;
        loff[i] = s->list_off;
        if (s->frame_at >= 0) {
            ipos[i] = c + s->frame_at;
            ilen[i] = read_int(q + s->frame_at + 1, 8, 0);
        }
        for (int k = 0; k < s->nslots; k++)
            if (s->swidth[k]) ival[k * m + i] = read_int(q + s->soff[k], s->swidth[k], s->ssigned[k]);
        if (s->nframes || s->has_list) {
            for (int k = 0; k < s->nframes; k++) refs[k] = read_int(q + s->foff[k], s->fwidth[k], 0);
            int64_t so = stack_id(&st, refs, s->nframes);
            if (so < 0) goto done;
            sof[i] = so;
        }
    }
    result = Py_BuildValue("(NN)", as_bytes(&st.flat), as_bytes(&st.offs));
done:
    if (pool) {
        for (int k = 0; k < npool; k++) shape_free(&pool[k]);
        free(pool);
    }
    free(st.flat.p); free(st.offs.p); free(st.table);
    for (int k = 0; k < nout; k++) PyBuffer_Release(&out[k]);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS, "The number of candidate entries in a window."},
    {"scan", scan, METH_VARARGS, "Candidates of one window matched against learned entry layouts (see stream.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_snapscan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__snapscan(void) {
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "_snapscan needs a little-endian host");
        return NULL;
    }
    return PyModule_Create(&module);
}
