/* primtrace._dictwatch: has any of these dicts changed since the last record()?

Why: a trace's state guard (tracer/state.py) checks what the traced code read from modules'
and configs' __dict__s item by item, every call: 400-1150 checks, 30-90 us a call on the
transformers models (a config's 39 attributes, four hook dicts per module). CPython gives
every dict a version tag that changes whenever the dict is written (PEP 509; the field is
there in 3.11). A guard whose dicts all carry the tags it recorded after its last full check
skips those checks; any write to one of them runs them all again, then records the tags.

DictWatch(dicts) takes a tuple of dicts. unchanged(): True when record() ran and no dict
has been written since. record(): stores the current tags, returns True (so it can end an
`and` chain). SUPPORTED is False where the tag is missing (other Python versions): there
unchanged() is always False and every call runs the full checks.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define HAVE_VERSION_TAG 1
#else
#define HAVE_VERSION_TAG 0
#endif

typedef struct {
    PyObject_HEAD
    PyObject *dicts;       /* tuple of dicts */
    uint64_t *versions;    /* per dict, its tag at the last record() */
    int recorded;
} DictWatch;

static uint64_t
version_of(PyObject *d)
{
#if HAVE_VERSION_TAG
    _Py_COMP_DIAG_PUSH
    _Py_COMP_DIAG_IGNORE_DEPR_DECLS
    return ((PyDictObject *)d)->ma_version_tag;
    _Py_COMP_DIAG_POP
#else
    (void)d;
    return 0;
#endif
}

static PyObject *
watch_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *dicts;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "DictWatch takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!:DictWatch", &PyTuple_Type, &dicts))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(dicts);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(dicts, i))) {
            PyErr_SetString(PyExc_TypeError, "DictWatch watches dicts only");
            return NULL;
        }
    }
    DictWatch *self = (DictWatch *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->versions = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(uint64_t));
    if (self->versions == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    Py_INCREF(dicts);
    self->dicts = dicts;
    self->recorded = 0;
    return (PyObject *)self;
}

static PyObject *
watch_unchanged(DictWatch *self, PyObject *Py_UNUSED(ignored))
{
    if (!HAVE_VERSION_TAG || !self->recorded)
        Py_RETURN_FALSE;
    Py_ssize_t n = PyTuple_GET_SIZE(self->dicts);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (version_of(PyTuple_GET_ITEM(self->dicts, i)) != self->versions[i])
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyObject *
watch_record(DictWatch *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = PyTuple_GET_SIZE(self->dicts);
    for (Py_ssize_t i = 0; i < n; i++)
        self->versions[i] = version_of(PyTuple_GET_ITEM(self->dicts, i));
    self->recorded = 1;
    Py_RETURN_TRUE;
}

static int
watch_traverse(DictWatch *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dicts);
    return 0;
}

static int
watch_clear(DictWatch *self)
{
    Py_CLEAR(self->dicts);
    return 0;
}

static void
watch_dealloc(DictWatch *self)
{
    PyObject_GC_UnTrack(self);
    watch_clear(self);
    PyMem_Free(self->versions);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef watch_methods[] = {
    {"unchanged", (PyCFunction)watch_unchanged, METH_NOARGS,
     "True when record() ran and none of the dicts has been written since."},
    {"record", (PyCFunction)watch_record, METH_NOARGS,
     "Remember the dicts' current version tags; returns True."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DictWatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "primtrace._dictwatch.DictWatch",
    .tp_basicsize = sizeof(DictWatch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Whether any of a tuple of dicts has been written since the last record().",
    .tp_new = watch_new,
    .tp_traverse = (traverseproc)watch_traverse,
    .tp_clear = (inquiry)watch_clear,
    .tp_dealloc = (destructor)watch_dealloc,
    .tp_methods = watch_methods,
};

static struct PyModuleDef dictwatch_module = {
    PyModuleDef_HEAD_INIT, "_dictwatch", "Dict version tags for primtrace's state guards.", -1,
    NULL,
};

PyMODINIT_FUNC
PyInit__dictwatch(void)
{
    if (PyType_Ready(&DictWatchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&dictwatch_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&DictWatchType);
    if (PyModule_AddObject(m, "DictWatch", (PyObject *)&DictWatchType) < 0) {
        Py_DECREF(&DictWatchType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "SUPPORTED", PyBool_FromLong(HAVE_VERSION_TAG)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
