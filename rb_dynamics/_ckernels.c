// SPDX-License-Identifier: Apache-2.0
/*
 * rb_dynamics._ckernels: the fixed trampoline between Python and per-model C kernels.
 *
 * The kernels themselves are generated per model (rb_dynamics/codegen_c.py), compiled into a
 * shared library and loaded by rb_dynamics/kernel_cache.py, which hands their addresses to
 * Kernels.__init__. This file never changes with the model: it validates the inputs exactly
 * like the Python kernels (same ValueError messages, same order of checks), allocates the
 * result, calls the kernel and refuses a non-finite result. ctypes or cffi on the call path
 * would cost more than the kernels themselves; a METH_FASTCALL method costs ~0.1 µs.
 *
 * Per-model library ABI (RB_KERNEL_ABI; codegen_c.ABI must match):
 *   void rb_<kernel>(const double *const *in, double *out);
 *   void rb_<kernel>_n(long n, const double *const *in, const long *stride, double *out);
 * in[j] points at input j (one state, or row 0 of a batch); stride[j] is the distance in
 * doubles between the rows of input j (0: one state broadcast over the batch); out holds the
 * n results one after the other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <math.h>

#define RB_KERNEL_ABI 1
#define N_KERNELS 5 /* rnea, gravity, nle, crba, aba: the order of the methods below */
#define MAX_IN 3

typedef void (*one_fn)(const double *const *in, double *out);
typedef void (*batch_fn)(long n, const double *const *in, const long *stride, double *out);

typedef struct {
    one_fn one; /* NULL when the kernel is undefined for the model (see undefined) */
    batch_fn batch;
    int n_in;
    Py_ssize_t size[MAX_IN];
    PyObject *names[MAX_IN + 1]; /* argument names; names[n_in] = "f_ext" when accepted */
    int out_ndim;                /* 1: (nv,)   2: (nv, nv) */
    Py_ssize_t out_n;            /* nv */
    PyObject *undefined;         /* ValueError message when there is no kernel, or NULL */
    PyObject *nonfinite;         /* ValueError message for a non-finite result */
    PyObject *fallback;          /* method called with f_ext (reference dynamics), or NULL */
} Kernel;

typedef struct {
    PyObject_HEAD
    int ready;
    Kernel k[N_KERNELS];
} KernelsObject;

static void kernels_clear(KernelsObject *self)
{
    self->ready = 0;
    for (int i = 0; i < N_KERNELS; i++) {
        Kernel *k = &self->k[i];
        for (int j = 0; j <= MAX_IN; j++)
            Py_CLEAR(k->names[j]);
        Py_CLEAR(k->undefined);
        Py_CLEAR(k->nonfinite);
        Py_CLEAR(k->fallback);
        memset(k, 0, sizeof(*k));
    }
}

static void kernels_dealloc(KernelsObject *self)
{
    kernels_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One spec: (one, batch, names, sizes, out_ndim, out_n, undefined, nonfinite, fallback). */
static int bind_kernel(Kernel *k, PyObject *spec)
{
    PyObject *one, *batch, *names, *sizes, *undefined, *nonfinite, *fallback;
    if (!PyArg_ParseTuple(spec, "OOO!O!inOUO", &one, &batch, &PyTuple_Type, &names,
                          &PyTuple_Type, &sizes, &k->out_ndim, &k->out_n, &undefined,
                          &nonfinite, &fallback))
        return -1;
    Py_ssize_t n_in = PyTuple_GET_SIZE(sizes);
    if (n_in < 1 || n_in > MAX_IN || PyTuple_GET_SIZE(names) != n_in + (fallback != Py_None) ||
        k->out_ndim < 1 || k->out_ndim > 2 || k->out_n < 0) {
        PyErr_SetString(PyExc_ValueError, "malformed kernel spec");
        return -1;
    }
    k->n_in = (int)n_in;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(names); j++) {
        k->names[j] = Py_NewRef(PyTuple_GET_ITEM(names, j));
        if (!PyUnicode_Check(k->names[j])) {
            PyErr_SetString(PyExc_TypeError, "argument names must be str");
            return -1;
        }
    }
    for (int j = 0; j < k->n_in; j++) {
        k->size[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, j));
        if (k->size[j] < 0)
            return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "size < 0"), -1);
    }
    k->one = (one_fn)(one == Py_None ? NULL : PyLong_AsVoidPtr(one));
    k->batch = (batch_fn)(batch == Py_None ? NULL : PyLong_AsVoidPtr(batch));
    if (PyErr_Occurred())
        return -1;
    if ((k->one == NULL) != (undefined != Py_None) || (k->one == NULL) != (k->batch == NULL)) {
        PyErr_SetString(PyExc_ValueError, "a kernel needs both entry points or a message");
        return -1;
    }
    k->undefined = undefined == Py_None ? NULL : Py_NewRef(undefined);
    k->nonfinite = Py_NewRef(nonfinite);
    k->fallback = fallback == Py_None ? NULL : Py_NewRef(fallback);
    return 0;
}

/* Kernels(specs): specs is a tuple of N_KERNELS specs. The addresses must come from a loaded
 * library that stays loaded as long as this object lives (kernel_cache keeps it). */
static int kernels_init(KernelsObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *specs;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Kernels() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &specs))
        return -1;
    kernels_clear(self);
    if (PyTuple_GET_SIZE(specs) != N_KERNELS) {
        PyErr_Format(PyExc_ValueError, "expected %d kernel specs", N_KERNELS);
        return -1;
    }
    for (int i = 0; i < N_KERNELS; i++)
        if (bind_kernel(&self->k[i], PyTuple_GET_ITEM(specs, i)) < 0) {
            kernels_clear(self);
            return -1;
        }
    self->ready = 1;
    return 0;
}

/* ---------------------------------------------------------------- argument checks */

static int all_finite(const double *x, Py_ssize_t n)
{
    /* a sum is the cheap test (NaN and inf propagate); only an overflowing sum of finite
     * values needs a second look, as in codegen._all_finite */
    double s = 0.0;
    for (Py_ssize_t i = 0; i < n; i++)
        s += x[i];
    if (isfinite(s))
        return 1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* An input as a C-contiguous float64 array of shape (n,) or (N, n), or NULL with the same
 * ValueError as codegen._check_single / dynamics.check_vector. */
static PyArrayObject *as_input(PyObject *obj, PyObject *name, Py_ssize_t n)
{
    PyArrayObject *arr;
    if (PyArray_Check(obj) && PyArray_TYPE((PyArrayObject *)obj) == NPY_DOUBLE &&
        PyArray_ISCARRAY_RO((PyArrayObject *)obj)) {
        arr = (PyArrayObject *)Py_NewRef(obj);
    }
    else {
        /* FORCECAST: the same conversion as np.asarray(x, dtype=float) */
        arr = (PyArrayObject *)PyArray_FromAny(obj, PyArray_DescrFromType(NPY_DOUBLE), 0, 0,
                                               NPY_ARRAY_CARRAY_RO | NPY_ARRAY_FORCECAST, NULL);
        if (arr == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
                !PyErr_ExceptionMatches(PyExc_ValueError))
                return NULL;
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%U must be an array of numbers", name);
            return NULL;
        }
    }
    int nd = PyArray_NDIM(arr);
    if ((nd == 1 || nd == 2) && PyArray_DIM(arr, nd - 1) == n)
        return arr;
    PyObject *shape = PyTuple_New(nd);
    for (int d = 0; shape && d < nd; d++)
        PyTuple_SET_ITEM(shape, d, PyLong_FromSsize_t(PyArray_DIM(arr, d)));
    if (shape)
        PyErr_Format(PyExc_ValueError, "%U must have length %zd (or shape (N, %zd)), got shape %R",
                     name, n, n, shape);
    Py_XDECREF(shape);
    Py_DECREF(arr);
    return NULL;
}

static int check_finite(PyArrayObject *arr, PyObject *name)
{
    if (all_finite((const double *)PyArray_DATA(arr), PyArray_SIZE(arr)))
        return 0;
    PyErr_Format(PyExc_ValueError, "%U contains NaN or inf", name);
    return -1;
}

/* Positional and keyword arguments into slots[0..n_params), like a Python signature. */
static int parse_args(Kernel *k, const char *func, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, PyObject **slots)
{
    int n_params = k->n_in + (k->fallback != NULL);
    if (nargs > n_params) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", func,
                     n_params, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        slots[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        int j = 0;
        while (j < n_params && PyUnicode_Compare(kw, k->names[j]) != 0)
            j++;
        if (j == n_params) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", func, kw);
            return -1;
        }
        if (slots[j] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument %R", func, kw);
            return -1;
        }
        slots[j] = args[nargs + i];
    }
    for (int j = 0; j < k->n_in; j++)
        if (slots[j] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument %R", func,
                         k->names[j]);
            return -1;
        }
    return 0;
}

/* ---------------------------------------------------------------- the call */

static PyObject *run_batch(Kernel *k, PyArrayObject **in)
{
    npy_intp N = -1;
    for (int j = 0; j < k->n_in; j++)
        if (PyArray_NDIM(in[j]) == 2 && check_finite(in[j], k->names[j]) < 0)
            return NULL;
    for (int j = 0; j < k->n_in; j++)
        if (PyArray_NDIM(in[j]) == 2 && PyArray_DIM(in[j], 0) > N)
            N = PyArray_DIM(in[j], 0);
    const double *ptr[MAX_IN];
    long stride[MAX_IN];
    for (int j = 0; j < k->n_in; j++) {
        if (PyArray_NDIM(in[j]) == 2 && PyArray_DIM(in[j], 0) != N) {
            PyErr_Format(PyExc_ValueError, "%U has %zd rows, expected %zd", k->names[j],
                         (Py_ssize_t)PyArray_DIM(in[j], 0), (Py_ssize_t)N);
            return NULL;
        }
        ptr[j] = (const double *)PyArray_DATA(in[j]);
        stride[j] = PyArray_NDIM(in[j]) == 2 ? (long)k->size[j] : 0;
    }
    npy_intp dims[3] = {N, k->out_n, k->out_n};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(k->out_ndim + 1, dims, NPY_DOUBLE);
    if (out == NULL)
        return NULL;
    double *o = (double *)PyArray_DATA(out);
    int finite;
    /* the inputs are referenced by the caller's frame; the kernels touch no Python object */
    Py_BEGIN_ALLOW_THREADS
    k->batch((long)N, ptr, stride, o);
    finite = all_finite(o, PyArray_SIZE(out));
    Py_END_ALLOW_THREADS
    if (!finite) {
        Py_DECREF(out);
        PyErr_SetObject(PyExc_ValueError, k->nonfinite);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *run(Kernel *k, PyArrayObject **in)
{
    int batched = 0;
    for (int j = 0; j < k->n_in; j++)
        batched |= PyArray_NDIM(in[j]) == 2;
    if (batched)
        return run_batch(k, in);
    const double *ptr[MAX_IN];
    for (int j = 0; j < k->n_in; j++)
        ptr[j] = (const double *)PyArray_DATA(in[j]);
    npy_intp dims[2] = {k->out_n, k->out_n};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(k->out_ndim, dims, NPY_DOUBLE);
    if (out == NULL)
        return NULL;
    k->one(ptr, (double *)PyArray_DATA(out));
    if (!all_finite((const double *)PyArray_DATA(out), PyArray_SIZE(out))) {
        Py_DECREF(out);
        PyErr_SetObject(PyExc_ValueError, k->nonfinite);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *call(PyObject *op, int which, const char *func, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    KernelsObject *self = (KernelsObject *)op;
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Kernels object is not initialised");
        return NULL;
    }
    Kernel *k = &self->k[which];
    PyObject *slots[MAX_IN + 1] = {NULL};
    if (parse_args(k, func, args, nargs, kwnames, slots) < 0)
        return NULL;
    if (k->undefined) {
        PyErr_SetObject(PyExc_ValueError, k->undefined);
        return NULL;
    }
    PyObject *f_ext = k->fallback ? slots[k->n_in] : NULL;
    if (f_ext != NULL && f_ext != Py_None) {
        int truth = PyObject_IsTrue(f_ext);
        if (truth < 0)
            return NULL;
        if (truth) /* external wrenches: the reference dynamics, as the Python kernels do */
            return PyObject_Vectorcall(k->fallback, slots, k->n_in + 1, NULL);
    }
    PyArrayObject *in[MAX_IN] = {NULL};
    PyObject *result = NULL;
    int j;
    /* checks in the Python kernels' order: each input's type, shape and (one state)
     * finiteness; then the batched inputs' finiteness, then their row counts */
    for (j = 0; j < k->n_in; j++) {
        in[j] = as_input(slots[j], k->names[j], k->size[j]);
        if (in[j] == NULL ||
            (PyArray_NDIM(in[j]) == 1 && check_finite(in[j], k->names[j]) < 0))
            goto done;
    }
    result = run(k, in);
done:
    for (j = 0; j < k->n_in; j++)
        Py_XDECREF(in[j]);
    return result;
}

#define KERNEL_METHOD(NAME, INDEX)                                                             \
    static PyObject *m_##NAME(PyObject *self, PyObject *const *args, Py_ssize_t nargs,        \
                              PyObject *kwnames)                                               \
    {                                                                                          \
        return call(self, INDEX, #NAME, args, nargs, kwnames);                                 \
    }
KERNEL_METHOD(rnea, 0)
KERNEL_METHOD(gravity, 1)
KERNEL_METHOD(nonlinear_effects, 2)
KERNEL_METHOD(crba, 3)
KERNEL_METHOD(aba, 4)

static PyMethodDef kernels_methods[] = {
    {"rnea", (PyCFunction)(void (*)(void))m_rnea, METH_FASTCALL | METH_KEYWORDS,
     "rnea(q, v, a, f_ext=None): inverse dynamics tau = M a + C v + g."},
    {"gravity", (PyCFunction)(void (*)(void))m_gravity, METH_FASTCALL | METH_KEYWORDS,
     "gravity(q): generalized gravity g(q)."},
    {"nonlinear_effects", (PyCFunction)(void (*)(void))m_nonlinear_effects,
     METH_FASTCALL | METH_KEYWORDS, "nonlinear_effects(q, v): C(q, v) v + g(q)."},
    {"crba", (PyCFunction)(void (*)(void))m_crba, METH_FASTCALL | METH_KEYWORDS,
     "crba(q): joint-space inertia matrix M(q)."},
    {"aba", (PyCFunction)(void (*)(void))m_aba, METH_FASTCALL | METH_KEYWORDS,
     "aba(q, v, tau, f_ext=None): forward dynamics."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rb_dynamics._ckernels.Kernels",
    .tp_doc = "Calls into one model's compiled kernels; built by rb_dynamics.kernel_cache.",
    .tp_basicsize = sizeof(KernelsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)kernels_init,
    .tp_dealloc = (destructor)kernels_dealloc,
    .tp_methods = kernels_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rb_dynamics._ckernels",
    .m_doc = "Trampoline from Python into per-model compiled dynamics kernels.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__ckernels(void)
{
    import_array();
    if (PyType_Ready(&KernelsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "ABI", RB_KERNEL_ABI) < 0 ||
        PyModule_AddObjectRef(m, "Kernels", (PyObject *)&KernelsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
