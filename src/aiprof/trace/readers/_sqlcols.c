/* Optional native reader of SQLite query results into packed int64 rows (aiprof.trace.readers._sqlcols).
 *
 * query(path, sql, width, null, params) opens ``path`` (bytes, os.fsencode) read-only (its own connection), runs ``sql`` with the
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
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
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

static PyMethodDef methods[] = {
    {"query", query, METH_VARARGS,
     "query(path, sql, width, null, params=()) -> (rows, bytearray of rows*width int64, row-major)"},
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
