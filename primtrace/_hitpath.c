/* primtrace._hitpath: the hit path of primtrace.jit in C (see jit._hit_path, its Python twin).

Why C: a cached call of a small op (a * b on 2^14 float32 elements: ~2.5 us in eager) paid
~0.4 us in the Python hit path, 0.2 us of it the Python frame and bytecode around the three
checks; this object runs the same checks from a vectorcall, with no frame of its own.

HitPath(is_grad_enabled, get_default_dtype, any_autocast) is called like the jitted function.
It checks the entry it was last pointed at -- a tuple (check, grad_mode, dtype, fn, guard)
given to remember() -- and, outside autocast (calls under it take the keyed path, whose key holds autocast's state), calls fn(*args) (or fn(*args, *guard(args)) when the entry reads state);
any other call, keyword arguments included, goes to slow(args, kwargs) (the attribute `slow`,
set once the jitted function exists). The entry is one
tuple read once per call, so a remember() from another thread swaps it atomically.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *recent;            /* (check, grad_mode, dtype, fn, guard), or None */
    PyObject *slow;              /* slow(args_tuple, kwargs_dict) */
    PyObject *is_grad_enabled;   /* torch.is_grad_enabled */
    PyObject *get_default_dtype; /* torch.get_default_dtype */
    PyObject *any_autocast;      /* torch._C._is_any_autocast_enabled */
    Py_ssize_t hits;             /* calls served here */
} HitPath;

/* fn(*args, *state): the compiled function of an entry that reads module state */
static PyObject *
call_with_state(PyObject *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *state)
{
    PyObject *seq = PySequence_Fast(state, "a guard returns a sequence of state inputs");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nstate = PySequence_Fast_GET_SIZE(seq);
    PyObject **all = PyMem_Malloc((size_t)(nargs + nstate + 1) * sizeof(PyObject *));
    if (all == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        all[i] = args[i];
    for (Py_ssize_t i = 0; i < nstate; i++)
        all[nargs + i] = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *out = PyObject_Vectorcall(fn, all, (size_t)(nargs + nstate), NULL);
    PyMem_Free(all);
    Py_DECREF(seq);
    return out;
}

/* 1: the entry serves this call, 0: it does not, -1: an error was raised */
static int
entry_accepts(HitPath *self, PyObject *entry, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *ok = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), args, (size_t)nargs, NULL);
    if (ok == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))   /* TypeError: another arity */
            return -1;
        PyErr_Clear();
        return 0;
    }
    int hit = PyObject_IsTrue(ok);
    Py_DECREF(ok);
    if (hit != 1)
        return hit;
    PyObject *grad = PyObject_CallNoArgs(self->is_grad_enabled);
    if (grad == NULL)
        return -1;
    Py_DECREF(grad);   /* a bool singleton: compared by identity below */
    if (grad != PyTuple_GET_ITEM(entry, 1))
        return 0;
    PyObject *dtype = PyObject_CallNoArgs(self->get_default_dtype);
    if (dtype == NULL)
        return -1;
    hit = dtype == PyTuple_GET_ITEM(entry, 2);   /* torch.dtype objects are singletons */
    Py_DECREF(dtype);
    if (hit != 1)
        return hit;
    PyObject *autocast = PyObject_CallNoArgs(self->any_autocast);
    if (autocast == NULL)
        return -1;
    Py_DECREF(autocast);   /* a bool singleton */
    return autocast == Py_False;
}

static PyObject *
call_slow(HitPath *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->slow == NULL) {   /* cleared by the garbage collector */
        PyErr_SetString(PyExc_RuntimeError, "this jitted function is being destroyed");
        return NULL;
    }
    PyObject *tuple = PyTuple_New(nargs);
    PyObject *kwargs = PyDict_New();
    PyObject *out = NULL;
    if (tuple == NULL || kwargs == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto done;
    out = PyObject_CallFunctionObjArgs(self->slow, tuple, kwargs, NULL);
done:
    Py_XDECREF(tuple);
    Py_XDECREF(kwargs);
    return out;
}

static PyObject *
hitpath_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    HitPath *self = (HitPath *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *entry = self->recent;
    if (entry != NULL && entry != Py_None && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0)) {
        Py_INCREF(entry);   /* the checks may run Python code that calls remember() */
        int hit = entry_accepts(self, entry, args, nargs);
        PyObject *out = NULL;
        if (hit == 1) {
            PyObject *fn = PyTuple_GET_ITEM(entry, 3), *guard = PyTuple_GET_ITEM(entry, 4);
            if (guard == Py_None) {
                self->hits++;
                out = PyObject_Vectorcall(fn, args, (size_t)nargs, NULL);
            } else {
                PyObject *tuple = PyTuple_New(nargs);
                PyObject *state = NULL;
                if (tuple != NULL) {
                    for (Py_ssize_t i = 0; i < nargs; i++) {
                        Py_INCREF(args[i]);
                        PyTuple_SET_ITEM(tuple, i, args[i]);
                    }
                    state = PyObject_CallOneArg(guard, tuple);
                    Py_DECREF(tuple);
                }
                if (state == NULL) {
                    hit = -1;
                } else if (state == Py_None) {
                    hit = 0;
                } else {
                    self->hits++;
                    out = call_with_state(fn, args, nargs, state);
                }
                Py_XDECREF(state);
            }
        }
        Py_DECREF(entry);
        if (hit != 0)
            return out;   /* the result, or NULL with the error set */
    }
    return call_slow(self, args, nargsf, kwnames);
}

static PyObject *
hitpath_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *is_grad_enabled, *get_default_dtype, *any_autocast;
    static char *names[] = {"is_grad_enabled", "get_default_dtype", "any_autocast", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:HitPath", names, &is_grad_enabled,
                                     &get_default_dtype, &any_autocast))
        return NULL;
    HitPath *self = (HitPath *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = hitpath_vectorcall;
    Py_INCREF(Py_None);
    self->recent = Py_None;
    Py_INCREF(Py_None);
    self->slow = Py_None;
    Py_INCREF(is_grad_enabled);
    self->is_grad_enabled = is_grad_enabled;
    Py_INCREF(get_default_dtype);
    self->get_default_dtype = get_default_dtype;
    Py_INCREF(any_autocast);
    self->any_autocast = any_autocast;
    self->hits = 0;
    return (PyObject *)self;
}

static PyObject *
hitpath_remember(HitPath *self, PyObject *entry)
{
    if (entry != Py_None && !(PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 5)) {
        PyErr_SetString(PyExc_TypeError,
                        "remember() takes None or a tuple (check, grad_mode, dtype, fn, guard)");
        return NULL;
    }
    PyObject *old = self->recent;
    Py_INCREF(entry);
    self->recent = entry;
    Py_DECREF(old);
    Py_RETURN_NONE;
}

static int
hitpath_traverse(HitPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->recent);
    Py_VISIT(self->slow);
    Py_VISIT(self->is_grad_enabled);
    Py_VISIT(self->get_default_dtype);
    Py_VISIT(self->any_autocast);
    return 0;
}

static int
hitpath_clear(HitPath *self)
{
    Py_CLEAR(self->recent);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->is_grad_enabled);
    Py_CLEAR(self->get_default_dtype);
    Py_CLEAR(self->any_autocast);
    return 0;
}

static void
hitpath_dealloc(HitPath *self)
{
    PyObject_GC_UnTrack(self);
    hitpath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
hitpath_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call(self, args, kwargs);
}

static PyObject *
hitpath_get_hits(HitPath *self, void *closure)
{
    return PyLong_FromSsize_t(self->hits);
}

static PyObject *
hitpath_get_slow(HitPath *self, void *closure)
{
    Py_INCREF(self->slow);
    return self->slow;
}

static int
hitpath_set_slow(HitPath *self, PyObject *value, void *closure)
{
    if (value == NULL || !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "slow must be a callable");
        return -1;
    }
    PyObject *old = self->slow;
    Py_INCREF(value);
    self->slow = value;
    Py_DECREF(old);
    return 0;
}

static PyMethodDef hitpath_methods[] = {
    {"remember", (PyCFunction)hitpath_remember, METH_O,
     "Check this entry (check, grad_mode, dtype, fn, guard) first from now on; None: nothing."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hitpath_getset[] = {
    {"hits", (getter)hitpath_get_hits, NULL, "calls the remembered entry served", NULL},
    {"slow", (getter)hitpath_get_slow, (setter)hitpath_set_slow,
     "slow(args, kwargs): runs the calls the remembered entry does not serve", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HitPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "primtrace._hitpath.HitPath",
    .tp_basicsize = sizeof(HitPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The checks of a cached primtrace.jit call, run from C.",
    .tp_new = hitpath_new,
    .tp_call = hitpath_call,
    .tp_vectorcall_offset = offsetof(HitPath, vectorcall),
    .tp_traverse = (traverseproc)hitpath_traverse,
    .tp_clear = (inquiry)hitpath_clear,
    .tp_dealloc = (destructor)hitpath_dealloc,
    .tp_methods = hitpath_methods,
    .tp_getset = hitpath_getset,
};

static struct PyModuleDef hitpath_module = {
    PyModuleDef_HEAD_INIT, "_hitpath", "primtrace.jit's hit path in C.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__hitpath(void)
{
    if (PyType_Ready(&HitPathType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&hitpath_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HitPathType);
    if (PyModule_AddObject(m, "HitPath", (PyObject *)&HitPathType) < 0) {
        Py_DECREF(&HitPathType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
