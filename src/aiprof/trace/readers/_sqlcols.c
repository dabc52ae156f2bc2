/* Optional native reader of SQLite query results into packed int64 rows (aiprof.trace.readers._sqlcols).
 *
 * query(name, sql, width, null, params) opens ``name`` (bytes: a ``file:`` URI, percent-encoded, or a plain
 * file name) read-only (its own connection), runs ``sql`` with the
 * integer ``params`` bound to ?1, ?2 ..., and returns (rows, buffer): ``buffer`` is a bytearray of
 * rows * width native int64 values, row-major (numpy.frombuffer(...).reshape(rows, width)). Each value is
 * sqlite3_column_int64 of the column (SQLite's own conversion of REAL/TEXT), NULL becomes ``null``. The query
 * steps without the GIL; no Python object is built per value. Errors raise _sqlcols.Error with SQLite's
 * message (the same text Python's sqlite3 reports) and its primary result code as ``args[1]``. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static PyObject *SqlError;

static PyObject *fail(sqlite3 *db, int rc) {
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    PyObject *value = Py_BuildValue("(si)", msg, rc & 0xFF);
    if (value) {
        PyErr_SetObject(SqlError, value);
        Py_DECREF(value);
    }
    return NULL;
}

static PyObject *query(PyObject *self, PyObject *args) {
    const char *path, *sql;
    int width;
    long long null_value;
    PyObject *params = NULL;
    if (!PyArg_ParseTuple(args, "ysiL|O", &path, &sql, &width, &null_value, &params))
        return NULL;
    if (width <= 0) {
        PyErr_SetString(PyExc_ValueError, "width must be positive");
        return NULL;
    }
    Py_ssize_t nparams = 0;
    long long bound[8];
    if (params && params != Py_None) {
        if (!PyTuple_Check(params) || PyTuple_GET_SIZE(params) > 8) {
            PyErr_SetString(PyExc_TypeError, "params must be a tuple of at most 8 ints");
            return NULL;
        }
        nparams = PyTuple_GET_SIZE(params);
        for (Py_ssize_t i = 0; i < nparams; i++) {
            bound[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(params, i));
            if (bound[i] == -1 && PyErr_Occurred())
                return NULL;
        }
    }
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK) /* pages mapped, not copied in by read(); best effort (SQLite caps the size) */
        sqlite3_exec(db, "PRAGMA mmap_size = 17179869184", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    for (Py_ssize_t i = 0; rc == SQLITE_OK && i < nparams; i++)
        rc = sqlite3_bind_int64(stmt, (int)i + 1, bound[i]);
    Py_END_ALLOW_THREADS
    if (rc == SQLITE_OK && sqlite3_column_count(stmt) != width) {
        PyErr_Format(PyExc_ValueError, "the query gives %d columns, not %d", sqlite3_column_count(stmt), width);
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        return NULL;
    }
    if (rc != SQLITE_OK) {
        fail(db, rc);
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        return NULL;
    }
    Py_ssize_t row_bytes = (Py_ssize_t)width * 8, capacity = 4096, rows = 0;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, capacity * row_bytes);
    if (!out) {
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        return NULL;
    }
    for (;;) {
        int64_t *cell = (int64_t *)PyByteArray_AS_STRING(out) + rows * width;
        Py_ssize_t room = capacity - rows;
        Py_BEGIN_ALLOW_THREADS
        while (room > 0 && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
            for (int c = 0; c < width; c++) { /* NULL reads as 0: its type is asked only then */
                int64_t value = (int64_t)sqlite3_column_int64(stmt, c);
                cell[c] = value == 0 && sqlite3_column_type(stmt, c) == SQLITE_NULL ? (int64_t)null_value : value;
            }
            cell += width;
            rows++;
            room--;
        }
        Py_END_ALLOW_THREADS
        if (room > 0)
            break; /* done (SQLITE_DONE) or an error */
        capacity *= 2;
        if (PyByteArray_Resize(out, capacity * row_bytes) < 0) {
            Py_DECREF(out);
            sqlite3_finalize(stmt);
            sqlite3_close(db);
            return NULL;
        }
    }
    if (rc != SQLITE_DONE) {
        Py_DECREF(out);
        fail(db, rc);
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    if (PyByteArray_Resize(out, rows * row_bytes) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(nN)", rows, out);
    return result;
}


/* ---- scan(fd, rootpage, columns, capacity): a rowid table's integer columns straight from its b-tree ----
 * The database file (``fd``: a descriptor open for reading, left open; the caller's one open of the file, so
 * the file scanned is the file the caller checked) is mapped read-only and the table's b-tree walked in rowid order (the order of a plain
 * ``SELECT ... FROM table``); each leaf cell's record header is decoded up to the last wanted column. No
 * SQLite call, no VDBE: a value costs a few byte reads. Anything this reader does not handle exactly as
 * SQLite would (a WAL-mode file, a record spilling onto overflow pages, a REAL/TEXT/BLOB value in a wanted
 * column, a page that does not parse, more rows than ``capacity``) returns None: the caller then runs the
 * query through SQLite, which gives the same values (or SQLite's own error). A page reached twice raises
 * Error (SQLITE_CORRUPT): SQLite would read its rows once per reference. Returns
 * (rows, values bytearray k*rows int64 column-major, nulls bytearray k*rows uint8: 1 = NULL, value 0, texts).
 * ``texts`` (optional): output slots whose TEXT values are interned instead (UTF-8 databases only): the value
 * is the index of the distinct text in the returned list of bytes; a non-TEXT value there reads as NULL. */
typedef struct {
    const uint8_t *base;
    size_t size;
    uint32_t page_size, usable;
    size_t pages;
} Mapped;

static int read_varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end)
            return 0;
        v = (v << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end)
        return 0;
    *out = (v << 8) | p[8];
    return 9;
}

static const int INT_SIZE[7] = {0, 1, 2, 3, 4, 6, 8};

typedef struct {
    uint64_t hash;
    const uint8_t *text;
    uint32_t size;
    int64_t id;
} Entry;

typedef struct { /* distinct TEXT values (pointers into the mapped file), by FNV-1a hash */
    Entry *table;
    size_t capacity, count;
    const uint8_t **texts;
    uint32_t *sizes;
} Interned;

typedef struct {
    int ncols, maxcol;
    const int *slot;  /* record column -> output slot, or -1 */
    const uint8_t *is_text; /* output slot -> 1: its TEXT values are interned (value = distinct index) */
    int64_t *values;
    uint8_t *nulls;
    Py_ssize_t rows, capacity;
    Interned *interned;
} Out;

static int64_t intern(Interned *in, const uint8_t *text, uint32_t size) {
    uint64_t h = 1469598103934665603ULL;
    for (uint32_t i = 0; i < size; i++)
        h = (h ^ text[i]) * 1099511628211ULL;
    if (2 * (in->count + 1) > in->capacity) { /* grow: load at most one half */
        size_t cap = in->capacity ? in->capacity * 2 : 1024;
        Entry *grown = calloc(cap, sizeof(Entry));
        const uint8_t **texts = realloc(in->texts, cap / 2 * sizeof(*texts));
        uint32_t *sizes = realloc(in->sizes, cap / 2 * sizeof(*sizes));
        if (texts)
            in->texts = texts;
        if (sizes)
            in->sizes = sizes;
        if (!grown || !texts || !sizes) {
            free(grown);
            return -1;
        }
        for (size_t i = 0; i < in->capacity; i++)
            if (in->table[i].text) {
                size_t j = in->table[i].hash & (cap - 1);
                while (grown[j].text)
                    j = (j + 1) & (cap - 1);
                grown[j] = in->table[i];
            }
        free(in->table);
        in->table = grown;
        in->capacity = cap;
    }
    size_t j = h & (in->capacity - 1);
    static const uint8_t empty = 0;
    const uint8_t *key = size ? text : &empty; /* a non-NULL pointer marks a used slot */
    while (in->table[j].text) {
        Entry *e = &in->table[j];
        if (e->hash == h && e->size == size && memcmp(e->text, key, size) == 0)
            return e->id;
        j = (j + 1) & (in->capacity - 1);
    }
    Entry *e = &in->table[j];
    e->hash = h;
    e->text = key;
    e->size = size;
    e->id = (int64_t)in->count;
    in->texts[in->count] = key;
    in->sizes[in->count] = size;
    return (int64_t)in->count++;
}

/* One leaf cell's record; 0 = ok, -1 = not handled. */
static int record(const uint8_t *p, const uint8_t *end, Out *o) {
    if (o->rows >= o->capacity)
        return -1;
    uint64_t hsize, st;
    int n = read_varint(p, end, &hsize);
    if (!n || hsize > (uint64_t)(end - p))
        return -1;
    const uint8_t *h = p + n, *hend = p + hsize, *body = p + hsize;
    /* column-major: column s of row r at s * capacity + r */
    int64_t *vals = o->values + o->rows;
    uint8_t *nul = o->nulls + o->rows;
    const Py_ssize_t stride = o->capacity;
    for (int s = 0; s < o->ncols; s++) { /* columns past the record's end: NULL (their default) */
        nul[s * stride] = 1;
        vals[s * stride] = 0;
    }
    for (int c = 0; c <= o->maxcol && h < hend; c++) {
        n = read_varint(h, hend, &st);
        if (!n)
            return -1;
        h += n;
        size_t size;
        if (st <= 6)
            size = (size_t)INT_SIZE[st];
        else if (st == 7)
            size = 8;
        else if (st == 8 || st == 9)
            size = 0;
        else if (st >= 12)
            size = (size_t)((st - 12) / 2);
        else
            return -1;
        if (size > (size_t)(end - body))
            return -1;
        int s = o->slot[c];
        if (s >= 0) {
            if (st == 0) {
                /* NULL: already marked */
            } else if (st <= 6) {
                int64_t v = (int8_t)body[0]; /* sign from the first byte */
                for (size_t i = 1; i < size; i++)
                    v = (int64_t)(((uint64_t)v << 8) | body[i]);
                vals[s * stride] = v;
                nul[s * stride] = 0;
            } else if (o->is_text[s]) { /* an interned column: TEXT values only, anything else NULL */
                if (st >= 13 && (st & 1)) {
                    int64_t id = intern(o->interned, body, (uint32_t)size);
                    if (id < 0)
                        return -1;
                    vals[s * stride] = id;
                    nul[s * stride] = 0;
                }
            } else if (st == 8 || st == 9) {
                vals[s * stride] = (int64_t)(st - 8);
                nul[s * stride] = 0;
            } else {
                return -1; /* REAL, TEXT, BLOB: SQLite's conversions are left to SQLite */
            }
        }
        body += size;
    }
    o->rows++;
    return 0;
}

/* The walk: 0 = ok, -1 = not handled (SQLite decides), WALK_TWICE = a page reached a second time (a b-tree
 * is a tree: a page referenced twice is a damaged or crafted file, whose rows SQLite would read again and
 * again, up to millions from a few pages; refused, not left to SQLite). */
#define WALK_TWICE (-2)

static int walk(const Mapped *m, uint32_t root, Out *o) {
    size_t cap = 256, top = 0;
    uint32_t *stack = malloc(cap * sizeof(uint32_t));
    uint8_t *seen = calloc(m->pages / 8 + 1, 1); /* one bit per page */
    if (!stack || !seen) {
        free(stack);
        free(seen);
        return -1;
    }
    stack[top++] = root;
    int rc = 0;
    while (top && rc == 0) {
        uint32_t pgno = stack[--top];
        if (pgno < 1 || pgno > m->pages) {
            rc = -1;
            break;
        }
        if (seen[(pgno - 1) >> 3] & (1u << ((pgno - 1) & 7))) {
            rc = WALK_TWICE;
            break;
        }
        seen[(pgno - 1) >> 3] |= (uint8_t)(1u << ((pgno - 1) & 7));
        const uint8_t *page = m->base + (size_t)(pgno - 1) * m->page_size;
        const uint8_t *end = page + m->usable;
        size_t hdr = pgno == 1 ? 100 : 0;
        uint8_t type = page[hdr];
        unsigned ncells = ((unsigned)page[hdr + 3] << 8) | page[hdr + 4];
        if (type == 0x05) { /* interior: children left to right (pushed right to left) */
            size_t ptrs = hdr + 12;
            if (ptrs + 2 * (size_t)ncells > m->usable) {
                rc = -1;
                break;
            }
            if (top + ncells + 1 > cap) {
                while (top + ncells + 1 > cap)
                    cap *= 2;
                uint32_t *grown = realloc(stack, cap * sizeof(uint32_t));
                if (!grown) {
                    rc = -1;
                    break;
                }
                stack = grown;
            }
            const uint8_t *q = page + hdr + 8;
            stack[top++] = ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3];
            for (unsigned i = ncells; i-- > 0;) {
                size_t off = ((size_t)page[ptrs + 2 * i] << 8) | page[ptrs + 2 * i + 1];
                if (off + 4 > m->usable) {
                    rc = -1;
                    break;
                }
                q = page + off;
                stack[top++] = ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3];
            }
        } else if (type == 0x0D) { /* leaf */
            size_t ptrs = hdr + 8;
            if (ptrs + 2 * (size_t)ncells > m->usable) {
                rc = -1;
                break;
            }
            for (unsigned i = 0; i < ncells && rc == 0; i++) {
                size_t off = ((size_t)page[ptrs + 2 * i] << 8) | page[ptrs + 2 * i + 1];
                if (off >= m->usable) {
                    rc = -1;
                    break;
                }
                const uint8_t *p = page + off;
                uint64_t payload, rowid;
                int n = read_varint(p, end, &payload);
                if (!n) {
                    rc = -1;
                    break;
                }
                p += n;
                n = read_varint(p, end, &rowid);
                if (!n || payload > (uint64_t)(m->usable - 35) || payload > (uint64_t)(end - p - n)) {
                    rc = -1; /* overflow pages: left to SQLite */
                    break;
                }
                p += n;
                rc = record(p, p + payload, o);
            }
        } else {
            rc = -1;
        }
    }
    free(stack);
    free(seen);
    return rc;
}

/* Large output buffers on transparent huge pages where the system offers them (THP "madvise" mode): one
 * fault per 2 MiB instead of one per 4 KiB page (numpy does the same for its large arrays). */
static void huge_pages(void *start, size_t size) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)start + huge - 1) & ~(huge - 1), hi = ((uintptr_t)start + size) & ~(huge - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)start;
    (void)size;
#endif
}

static PyObject *scan(PyObject *self, PyObject *args) {
    int fd;
    unsigned int root;
    PyObject *columns, *text_slots = NULL;
    Py_ssize_t capacity;
    if (!PyArg_ParseTuple(args, "iIO!n|O!", &fd, &root, &PyTuple_Type, &columns, &capacity, &PyTuple_Type,
                          &text_slots))
        return NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(columns);
    if (ncols <= 0 || ncols > 64 || capacity < 0) {
        PyErr_SetString(PyExc_ValueError, "1 to 64 columns and a capacity >= 0");
        return NULL;
    }
    int slot[256];
    for (int i = 0; i < 256; i++)
        slot[i] = -1;
    int maxcol = -1;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        long c = PyLong_AsLong(PyTuple_GET_ITEM(columns, i));
        if (c == -1 && PyErr_Occurred())
            return NULL;
        if (c < 0 || c >= 256 || slot[c] >= 0) {
            PyErr_SetString(PyExc_ValueError, "columns: distinct record positions below 256");
            return NULL;
        }
        slot[c] = (int)i;
        if (c > maxcol)
            maxcol = (int)c;
    }
    uint8_t is_text[64] = {0};
    int any_text = 0;
    for (Py_ssize_t i = 0; text_slots && i < PyTuple_GET_SIZE(text_slots); i++) {
        long t = PyLong_AsLong(PyTuple_GET_ITEM(text_slots, i));
        if (t == -1 && PyErr_Occurred())
            return NULL;
        if (t < 0 || t >= ncols) {
            PyErr_SetString(PyExc_ValueError, "texts: output slots of the columns");
            return NULL;
        }
        is_text[t] = 1;
        any_text = 1;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 512)
        Py_RETURN_NONE;
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        Py_RETURN_NONE;
    const uint8_t *b = map;
    Mapped m = {b, (size_t)st.st_size, 0, 0, 0};
    m.page_size = ((uint32_t)b[16] << 8) | b[17];
    if (m.page_size == 1)
        m.page_size = 65536;
    int ok = memcmp(b, "SQLite format 3", 16) == 0 && m.page_size >= 512 && (m.page_size & (m.page_size - 1)) == 0
             && b[18] == 1 && b[19] == 1 && b[20] < m.page_size - 480
             && (!any_text || (b[56] == 0 && b[57] == 0 && b[58] == 0 && b[59] == 1)); /* texts: UTF-8 only */
    PyObject *values = NULL, *nulls = NULL, *result = NULL;
    if (ok) {
        m.usable = m.page_size - b[20];
        m.pages = m.size / m.page_size;
        values = PyByteArray_FromStringAndSize(NULL, capacity * ncols * 8);
        nulls = PyByteArray_FromStringAndSize(NULL, capacity * ncols);
    }
    if (ok && values && nulls) {
        huge_pages(PyByteArray_AS_STRING(values), (size_t)(capacity * ncols * 8));
        huge_pages(PyByteArray_AS_STRING(nulls), (size_t)(capacity * ncols));
        Interned interned = {NULL, 0, 0, NULL, NULL};
        Out o = {(int)ncols, maxcol, slot, is_text, (int64_t *)PyByteArray_AS_STRING(values),
                 (uint8_t *)PyByteArray_AS_STRING(nulls), 0, capacity, &interned};
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = walk(&m, root, &o);
        Py_END_ALLOW_THREADS
        PyObject *texts = NULL;
        if (rc == 0 && o.rows == capacity) { /* column-major with capacity rows: exactly that many */
            texts = PyList_New((Py_ssize_t)interned.count);
            for (size_t i = 0; texts && i < interned.count; i++) {
                PyObject *text = PyBytes_FromStringAndSize((const char *)interned.texts[i], interned.sizes[i]);
                if (!text) {
                    Py_CLEAR(texts);
                    break;
                }
                PyList_SET_ITEM(texts, (Py_ssize_t)i, text);
            }
            if (texts)
                result = Py_BuildValue("(nOON)", o.rows, values, nulls, texts);
        } else if (rc == WALK_TWICE && !PyErr_Occurred()) {
            PyObject *value = Py_BuildValue("(si)", "database disk image is malformed (a b-tree page is referenced "
                                            "twice)", SQLITE_CORRUPT);
            if (value) {
                PyErr_SetObject(SqlError, value);
                Py_DECREF(value);
            }
        } else if (!PyErr_Occurred()) {
            result = Py_None;
            Py_INCREF(Py_None);
        }
        free(interned.table);
        free(interned.texts);
        free(interned.sizes);
    } else if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(Py_None);
    }
    Py_XDECREF(values);
    Py_XDECREF(nulls);
    munmap(map, (size_t)st.st_size);
    return result;
}

static PyMethodDef methods[] = {
    {"query", query, METH_VARARGS,
     "query(path, sql, width, null, params=()) -> (rows, bytearray of rows*width int64, row-major)"},
    {"scan", scan, METH_VARARGS,
     "scan(fd, rootpage, columns, capacity, texts=()) -> (rows, int64 values, uint8 nulls, distinct texts) "
     "column-major, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sqlcols", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__sqlcols(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    SqlError = PyErr_NewException("aiprof.trace.readers._sqlcols.Error", NULL, NULL);
    if (!SqlError || PyModule_AddObject(m, "Error", SqlError) < 0) {
        Py_XDECREF(SqlError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(SqlError);
    return m;
}
