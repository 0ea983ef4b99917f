/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rb_dynamics.dynamics.trampoline._ckernels: the fixed trampoline between Python and per-model
 * C kernels.
 *
 * The kernels themselves are generated per model (rb_dynamics/dynamics/codegen_c.py), compiled
 * into a shared library and loaded by rb_dynamics/dynamics/kernel_cache.py, which hands their
 * addresses to Kernels.__init__. This file never changes with the model: it validates the
 * inputs exactly like the Python kernels (same ValueError messages, same order of checks),
 * allocates the result, calls the kernel and refuses a non-finite result. ctypes or cffi on
 * the call path would cost more than the kernels themselves; a METH_FASTCALL method adds
 * only the argument checks to the kernel's own time.
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

#include <float.h>
#include <math.h>

#define RB_KERNEL_ABI 4
#define N_KERNELS 6 /* rnea, gravity, nle, crba, aba, momentum: the order of the methods */
#define MAX_IN 3

typedef void (*one_fn)(const double *const *in, double *out);
typedef void (*batch_fn)(long n, const double *const *in, const long *stride, double *out);

typedef struct {
    one_fn one; /* NULL when the kernel is undefined for the model (see undefined) */
    batch_fn batch;
    int n_in;
    Py_ssize_t size[MAX_IN];
    PyObject *names[MAX_IN + 1]; /* argument names; names[n_in] = "f_ext" when accepted */
    int out_ndim;                /* 1: (nv,)   2: (out_rows, nv) */
    Py_ssize_t out_n;            /* nv */
    Py_ssize_t out_rows;         /* rows of a matrix result: nv for crba, 3 for momentum */
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

/* One spec: (one, batch, names, sizes, out_ndim, out_n, out_rows, undefined, nonfinite,
 * fallback). */
static int bind_kernel(Kernel *k, PyObject *spec)
{
    PyObject *one, *batch, *names, *sizes, *undefined, *nonfinite, *fallback;
    if (!PyArg_ParseTuple(spec, "OOO!O!innOUO", &one, &batch, &PyTuple_Type, &names,
                          &PyTuple_Type, &sizes, &k->out_ndim, &k->out_n, &k->out_rows,
                          &undefined, &nonfinite, &fallback))
        return -1;
    Py_ssize_t n_in = PyTuple_GET_SIZE(sizes);
    if (n_in < 1 || n_in > MAX_IN || PyTuple_GET_SIZE(names) != n_in + (fallback != Py_None) ||
        k->out_ndim < 1 || k->out_ndim > 2 || k->out_n < 0 ||
        (k->out_ndim == 2 && k->out_rows < 1)) {
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
    npy_intp dims[3] = {N, k->out_ndim == 2 ? k->out_rows : k->out_n, k->out_n};
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
    npy_intp dims[2] = {k->out_ndim == 2 ? k->out_rows : k->out_n, k->out_n};
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
KERNEL_METHOD(momentum_terms, 5)

/* ---------------------------------------------------------------- roll-outs
 *
 * rollout() advances a fixed-base model whose joints all have one coordinate (nq == nv,
 * q ⊕ v·dt = q + v·dt) by many steps in one call, each step computed as
 * rb_dynamics.simulation.step computes it, in the same order of operations: the joint losses
 * (rb_dynamics.dynamics.friction: viscous, Coulomb and Stribeck), semi-implicit Euler with
 * viscous damping and Coulomb friction implicit in the velocity, set-valued or smooth
 * (rb_dynamics.simulation.friction_step: A = M + dt·diag(viscous) solved here by Cholesky where
 * the reference uses an LU solve, then the same sweeps for the set-valued law, the same Newton
 * iterations for the smooth one), RK4 on the model's ABA with the smooth law, the inelastic
 * position stops. It stops before any step that would need a non-finite kernel input
 * or give a non-finite output, or whose matrix is not positive definite, so that the caller
 * (simulation.CompiledSteps) can hand that step to the reference, which then raises or answers
 * exactly as it always does. The loop runs without the GIL.
 */

#define COULOMB_SMOOTHING 0.1 /* rb_dynamics.model.COULOMB_SMOOTHING */
/* rb_dynamics.simulation.friction_step's STICK_SLIP_SWEEPS, STICK_SLIP_TOLERANCE,
 * NEWTON_ITERATIONS, ARMIJO and ROUNDING */
#define STICK_SLIP_SWEEPS 100
#define STICK_SLIP_TOLERANCE 1e-14
#define NEWTON_ITERATIONS 100
#define ARMIJO 1e-4
#define ROUNDING (16.0 * DBL_EPSILON)
/* 0: semi-implicit Euler, Coulomb friction set-valued (friction_law "stick_slip");
 * 2: the same with the smooth law (friction_law "smooth") */
enum { SEMI_IMPLICIT_EULER = 0, RK4 = 1, SEMI_IMPLICIT_SMOOTH = 2 };
enum { NLE = 2, CRBA = 3, ABA = 4 }; /* indices into KernelsObject.k */

typedef struct {
    one_fn nle, crba, aba;
    Py_ssize_t n;
    double dt;
    /* viscous, Coulomb, Stribeck and its velocity (NULL: no joint losses) */
    const double *damping, *friction, *stribeck, *stribeck_velocity;
    const double *lower, *upper;      /* NULL: no position stops */
    int implicit;                     /* joint losses: semi-implicit Euler's friction step */
    double *M, *A, *h, *rhs, *applied, *qs, *a[4], *vs[3], *bound; /* scratch */
} Stepper;

/* Coordinate i's friction effort f(q̇): the expression of rb_dynamics.dynamics.friction
 * (friction_effort), in its order */
static double friction_of(const Stepper *s, Py_ssize_t i, double v)
{
    double vs = s->stribeck_velocity[i], fs = s->stribeck[i];
    int on = vs > 0.0 && fs > 0.0;
    double inv_vs2 = on ? 1.0 / (vs * vs) : 0.0;
    double decay = on ? fs * exp(-(v * v) * inv_vs2) : 0.0; /* Python: 0·exp(0) = 0 */
    double th = tanh(v / COULOMB_SMOOTHING);
    return s->damping[i] * v + (s->friction[i] + decay) * th;
}

/* c(q̇) of coordinate i, rb_dynamics.dynamics.friction.coulomb_bound: coulomb + stribeck·
 * exp(−(q̇/v_s)²), in its order */
static double coulomb_bound_of(const Stepper *s, Py_ssize_t i, double v)
{
    double vs = s->stribeck_velocity[i], fs = s->stribeck[i];
    int on = vs > 0.0 && fs > 0.0;
    double inv_vs2 = on ? 1.0 / (vs * vs) : 0.0;
    double decay = on ? fs * exp(-(v * v) * inv_vs2) : 0.0;
    return s->friction[i] + decay;
}

/* applied = τ + losses(v) = τ − f(q̇), simulation.joint_losses */
static void add_losses(const Stepper *s, const double *tau, const double *v, double *applied)
{
    for (Py_ssize_t i = 0; i < s->n; i++)
        applied[i] = s->damping ? tau[i] + -friction_of(s, i, v[i]) : tau[i];
}

/* q̈ = ABA(q, q̇, τ + losses); 0 when an input or the result is not finite */
static int accel(const Stepper *s, const double *q, const double *v, const double *tau,
                 double *a)
{
    add_losses(s, tau, v, s->applied);
    if (!all_finite(s->applied, s->n))
        return 0;
    const double *in[3] = {q, v, s->applied};
    s->aba(in, a);
    return all_finite(a, s->n);
}

/* In place: A = L Lᵀ (lower triangle, row major) and x = A⁻¹ b; 0 when A is not positive
 * definite */
static int cholesky_solve(double *A, double *x, Py_ssize_t n)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (Py_ssize_t k = 0; k < j; k++)
            d -= A[j * n + k] * A[j * n + k];
        if (!(d > 0.0))
            return 0;
        A[j * n + j] = sqrt(d);
        for (Py_ssize_t i = j + 1; i < n; i++) {
            double e = A[i * n + j];
            for (Py_ssize_t k = 0; k < j; k++)
                e -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = e / A[j * n + j];
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* L y = b */
        for (Py_ssize_t k = 0; k < i; k++)
            x[i] -= A[i * n + k] * x[k];
        x[i] /= A[i * n + i];
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) { /* Lᵀ x = y */
        for (Py_ssize_t k = i + 1; k < n; k++)
            x[i] -= A[k * n + i] * x[k];
        x[i] /= A[i * n + i];
    }
    return 1;
}

/* friction_step._log_cosh: ln cosh(y) to full relative precision */
static double log_cosh(double y)
{
    double a = fabs(y);
    if (a < 20.0) {
        double h = sinh(0.5 * a);
        return log1p(2.0 * h * h);
    }
    return a - 0.69314718055994530942 + log1p(exp(-2.0 * a)); /* ln 2 */
}

/* friction_step.smooth_friction_velocity's objective ½ (x − w)ᵀ A (x − w) + Σ b_i ε ln cosh(x_i/ε) */
static double smooth_objective(const double *A, const double *w, const double *b,
                               const double *x, Py_ssize_t n, double smoothing)
{
    double quadratic = 0.0, losses = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double row = 0.0;
        for (Py_ssize_t j = 0; j < n; j++)
            row += A[i * n + j] * (x[j] - w[j]);
        quadratic += (x[i] - w[i]) * row;
        losses += b[i] * log_cosh(x[i] / smoothing);
    }
    return 0.5 * quadratic + smoothing * losses;
}

/* friction_step.smooth_friction_velocity: argmin_x ½ (x − w)ᵀ A (x − w) + Σ b_i ε ln cosh(x_i/ε)
 * by Newton's method from w with a backtracking line search; H, g, d, trial are scratch (n·n,
 * n, n, n). 0 when a Hessian is not positive definite */
static int smooth_friction(const double *A, const double *w, const double *b, double *x,
                           Py_ssize_t n, double smoothing, double *H, double *g, double *d,
                           double *trial)
{
    double scale = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        x[i] = w[i];
        if (fabs(w[i]) > scale)
            scale = fabs(w[i]);
    }
    double tolerance = STICK_SLIP_TOLERANCE * (1.0 + scale);
    double value = smooth_objective(A, w, b, x, n, smoothing);
    for (int k = 0; k < NEWTON_ITERATIONS; k++) {
        for (Py_ssize_t i = 0; i < n; i++) {
            double th = tanh(x[i] / smoothing), row = 0.0;
            for (Py_ssize_t j = 0; j < n; j++) {
                row += A[i * n + j] * (x[j] - w[j]);
                H[i * n + j] = A[i * n + j];
            }
            g[i] = row + b[i] * th;
            H[i * n + i] += b[i] / smoothing * (1.0 - th * th);
            d[i] = -g[i];
        }
        if (!cholesky_solve(H, d, n))
            return 0;
        double size = 0.0, slope = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (fabs(d[i]) > size)
                size = fabs(d[i]);
            slope += g[i] * d[i];
        }
        if (!(size > tolerance)) { /* converged (or not finite: the caller refuses it) */
            for (Py_ssize_t i = 0; i < n; i++)
                x[i] += d[i];
            return 1;
        }
        double alpha = 1.0, trial_value;
        for (;;) {
            for (Py_ssize_t i = 0; i < n; i++)
                trial[i] = x[i] + alpha * d[i];
            trial_value = smooth_objective(A, w, b, trial, n, smoothing);
            if (trial_value <= value + ARMIJO * alpha * slope + ROUNDING * value)
                break;
            alpha *= 0.5;
            if (!(alpha * size > tolerance))
                return 1;
        }
        memcpy(x, trial, sizeof(double) * (size_t)n);
        value = trial_value;
    }
    return 1;
}

/* friction_step.implicit_friction_velocity with the set-valued law: argmin_x ½ (x − w)ᵀ A (x − w)
 * + Σ b_i |x_i| by coordinate descent (soft thresholding), the same scalar operations in the
 * same order */
static void implicit_friction(const double *A, const double *w, const double *b, double *x,
                              Py_ssize_t n)
{
    double scale = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        x[i] = w[i];
        if (fabs(w[i]) > scale)
            scale = fabs(w[i]);
    }
    double tolerance = STICK_SLIP_TOLERANCE * (1.0 + scale);
    for (int sweep = 0; sweep < STICK_SLIP_SWEEPS; sweep++) {
        double change = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            const double *row = A + i * n;
            double coupled = 0.0;
            for (Py_ssize_t j = 0; j < n; j++)
                if (j != i)
                    coupled += row[j] * (x[j] - w[j]);
            double z = w[i] - coupled / row[i];
            double t = b[i] / row[i];
            double next = z > t ? z - t : (z < -t ? z + t : 0.0);
            if (fabs(next - x[i]) > change)
                change = fabs(next - x[i]);
            x[i] = next;
        }
        if (change <= tolerance)
            break;
    }
}

/* friction_step.friction_step_velocity: v1 after a semi-implicit step with viscous damping and
 * Coulomb friction implicit, set-valued (smoothing 0) or smooth (smoothing ε); 0 when an input or
 * the result is not finite or A is not positive definite */
static int friction_step(const Stepper *s, const double *q, const double *v, const double *tau,
                         double *v1, double smoothing)
{
    Py_ssize_t n = s->n;
    const double *in[2] = {q, v};
    s->crba(in, s->M);
    s->nle(in, s->h);
    if (!all_finite(s->M, n * n) || !all_finite(s->h, n))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        s->M[i * n + i] += s->dt * s->damping[i];
        s->rhs[i] = tau[i] - s->damping[i] * v[i] - s->h[i];
    }
    memcpy(s->A, s->M, sizeof(double) * (size_t)(n * n)); /* the Cholesky overwrites M */
    if (!cholesky_solve(s->M, s->rhs, n) || !all_finite(s->rhs, n))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        s->rhs[i] = v[i] + s->dt * s->rhs[i]; /* v_free */
        s->bound[i] = s->dt * coulomb_bound_of(s, i, v[i]);
    }
    if (!all_finite(s->bound, n))
        return 0;
    if (smoothing > 0.0) {
        /* M is free again (the Cholesky above is done with it); h, applied and qs are not
         * used by the semi-implicit step */
        if (!smooth_friction(s->A, s->rhs, s->bound, v1, n, smoothing, s->M, s->h, s->applied,
                             s->qs))
            return 0;
    } else {
        implicit_friction(s->A, s->rhs, s->bound, v1, n);
    }
    return all_finite(v1, n);
}

/* The next RK4 stage's state from the previous stage's velocity vp and acceleration kp:
   (q + vp·h, v + kp·h) */
static void rk4_stage(Py_ssize_t n, double h, const double *q, const double *v, const double *vp,
                      const double *kp, double *qs, double *vs)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        vs[i] = v[i] + h * kp[i];
        qs[i] = q[i] + vp[i] * h;
    }
}

/* One step from (q, v) into (q1, v1); a is the acceleration at the start of the step */
static int one_step(const Stepper *s, int method, const double *q, const double *v,
                    const double *tau, double *q1, double *v1, double *a)
{
    Py_ssize_t n = s->n;
    double dt = s->dt, half = 0.5 * dt;
    if (method != RK4) {
        if (s->implicit) { /* simulation.step: v1 from the friction step, a = (v1 − v)/dt */
            double smoothing = method == SEMI_IMPLICIT_SMOOTH ? COULOMB_SMOOTHING : 0.0;
            if (!friction_step(s, q, v, tau, v1, smoothing))
                return 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                a[i] = (v1[i] - v[i]) / dt;
                q1[i] = q[i] + v1[i] * dt;
            }
            return 1;
        }
        if (!accel(s, q, v, tau, a))
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            v1[i] = v[i] + a[i] * dt;
            q1[i] = q[i] + v1[i] * dt;
        }
        return 1;
    }
    /* classical RK4 with the stage configurations q + k·dt (simulation.step) */
    double *const *k = s->a, *v2 = s->vs[0], *v3 = s->vs[1], *v4 = s->vs[2], *qs = s->qs;
    if (!accel(s, q, v, tau, k[0]))
        return 0;
    rk4_stage(n, half, q, v, v, k[0], qs, v2);
    if (!accel(s, qs, v2, tau, k[1]))
        return 0;
    rk4_stage(n, half, q, v, v2, k[1], qs, v3);
    if (!accel(s, qs, v3, tau, k[2]))
        return 0;
    rk4_stage(n, dt, q, v, v3, k[2], qs, v4);
    if (!accel(s, qs, v4, tau, k[3]))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        v1[i] = v[i] + dt / 6.0 * (k[0][i] + 2 * k[1][i] + 2 * k[2][i] + k[3][i]);
        q1[i] = q[i] + (v[i] + 2 * v2[i] + 2 * v3[i] + v4[i]) / 6.0 * dt;
        a[i] = k[0][i];
    }
    return 1;
}

/* simulation.apply_position_limits: inelastic stops, velocity into the stop zeroed */
static void position_stops(const Stepper *s, double *q, double *v, npy_bool *hit)
{
    for (Py_ssize_t i = 0; i < s->n; i++) {
        hit[i] = 0;
        if (s->lower == NULL)
            continue;
        if (q[i] < s->lower[i]) {
            q[i] = s->lower[i];
            v[i] = 0.0 > v[i] ? 0.0 : v[i]; /* Python's max(v, 0.0) */
            hit[i] = 1;
        }
        else if (q[i] > s->upper[i]) {
            q[i] = s->upper[i];
            v[i] = 0.0 < v[i] ? 0.0 : v[i]; /* min(v, 0.0) */
            hit[i] = 1;
        }
    }
}

/* Row k of tau = law(k), with the GIL (the loop releases it); 0 on an error (set) */
static int call_law(PyObject *law, Py_ssize_t k, double *tau, Py_ssize_t n)
{
    PyObject *index = PyLong_FromSsize_t(k), *row = NULL;
    PyArrayObject *arr = NULL;
    if (index != NULL)
        row = PyObject_CallOneArg(law, index);
    if (row != NULL)
        arr = (PyArrayObject *)PyArray_FromAny(row, PyArray_DescrFromType(NPY_DOUBLE), 1, 1,
                                               NPY_ARRAY_CARRAY_RO, NULL);
    int ok = arr != NULL && PyArray_DIM(arr, 0) == n;
    if (arr != NULL && !ok)
        PyErr_Format(PyExc_ValueError, "rollout: the law gave %zd efforts, expected %zd",
                     (Py_ssize_t)PyArray_DIM(arr, 0), n);
    if (ok)
        memcpy(tau, PyArray_DATA(arr), sizeof(double) * (size_t)n);
    Py_XDECREF(arr);
    Py_XDECREF(row);
    Py_XDECREF(index);
    return ok;
}

/* Steps 0..N−1 from row 0 of Q, V, called without the GIL; the number of steps taken, or −1
 * when the law raised (the GIL is then held again, *thread is NULL) */
static Py_ssize_t run_steps(const Stepper *s, int method, Py_ssize_t N, double *Q, double *V,
                            double *A, npy_bool *hit, double *tau, Py_ssize_t tau_stride,
                            PyObject *law, PyThreadState **thread)
{
    Py_ssize_t n = s->n, k;
    for (k = 0; k < N; k++) {
        double *q = Q + k * n, *v = V + k * n, *t = tau + k * tau_stride;
        if (law != NULL) {
            PyEval_RestoreThread(*thread);
            int ok = call_law(law, k, t, n);
            *thread = ok ? PyEval_SaveThread() : NULL;
            if (!ok)
                return -1;
        }
        if (!all_finite(q, n) || !all_finite(v, n) || !all_finite(t, n) ||
            !one_step(s, method, q, v, t, q + n, v + n, A + k * n))
            break;
        position_stops(s, q + n, v + n, hit + k * n);
        if (!all_finite(q + n, n) || !all_finite(v + n, n))
            break;
    }
    return k;
}

/* A float64 C-contiguous array of the given shape (rows < 0: one dimension), or NULL with a
 * ValueError; writable when asked */
static PyArrayObject *rollout_array(PyObject *obj, const char *name, Py_ssize_t rows,
                                    Py_ssize_t cols, int type, int writable)
{
    int nd = rows < 0 ? 1 : 2;
    PyArrayObject *arr = (PyArrayObject *)obj;
    if (!PyArray_Check(obj) || PyArray_TYPE(arr) != type || PyArray_NDIM(arr) != nd ||
        !PyArray_IS_C_CONTIGUOUS(arr) || (writable && !PyArray_ISWRITEABLE(arr)) ||
        PyArray_DIM(arr, nd - 1) != cols || (rows >= 0 && PyArray_DIM(arr, 0) != rows)) {
        const char *what = type == NPY_BOOL ? "bool" : "float64";
        if (rows < 0)
            PyErr_Format(PyExc_ValueError, "rollout: %s must be a C-contiguous %s array of "
                         "shape (%zd,)", name, what, cols);
        else
            PyErr_Format(PyExc_ValueError, "rollout: %s must be a C-contiguous%s %s array of "
                         "shape (%zd, %zd)", name, writable ? " writable" : "", what, rows, cols);
        return NULL;
    }
    return arr;
}

/* count (nv,) float64 arrays at args, all given or all None (then every pointer is NULL) */
static int optional_arrays(PyObject *const *args, int count, const char *const *names,
                           Py_ssize_t n, const double **out)
{
    int none = 1;
    for (int j = 0; j < count; j++) {
        out[j] = NULL;
        none &= args[j] == Py_None;
    }
    if (none)
        return 0;
    for (int j = 0; j < count; j++) {
        if (rollout_array(args[j], names[j], -1, n, NPY_DOUBLE, 0) == NULL)
            return -1;
        out[j] = PyArray_DATA((PyArrayObject *)args[j]);
    }
    return 0;
}

static PyObject *m_rollout(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    KernelsObject *self = (KernelsObject *)op;
    if (nargs != 14) {
        PyErr_Format(PyExc_TypeError, "rollout() takes 14 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!self->ready || !self->k[NLE].one || !self->k[CRBA].one || !self->k[ABA].one)
        return PyLong_FromLong(0); /* no forward dynamics: the reference says why */
    Py_ssize_t n = self->k[ABA].out_n;
    if (self->k[CRBA].size[0] != n) {
        PyErr_SetString(PyExc_ValueError, "rollout: needs nq == nv (1-DoF joints only)");
        return NULL;
    }
    /* the number of steps is the rows of A */
    Py_ssize_t N = PyArray_Check(args[2]) && PyArray_NDIM((PyArrayObject *)args[2]) == 2
                       ? PyArray_DIM((PyArrayObject *)args[2], 0) : 0;
    PyObject *law = args[13] == Py_None ? NULL : args[13];
    if (law != NULL && !PyCallable_Check(law)) {
        PyErr_SetString(PyExc_TypeError, "rollout: law must be callable or None");
        return NULL;
    }
    int per_step = PyArray_Check(args[4]) && PyArray_NDIM((PyArrayObject *)args[4]) == 2;
    PyArrayObject *Q, *V, *A, *hit, *tau;
    if (!(A = rollout_array(args[2], "A", N, n, NPY_DOUBLE, 1)) ||
        !(Q = rollout_array(args[0], "Q", N + 1, n, NPY_DOUBLE, 1)) ||
        !(V = rollout_array(args[1], "V", N + 1, n, NPY_DOUBLE, 1)) ||
        !(hit = rollout_array(args[3], "hit", N, n, NPY_BOOL, 1)) ||
        !(tau = rollout_array(args[4], "tau", per_step || law ? N : -1, n, NPY_DOUBLE,
                              law != NULL)))
        return NULL;
    double dt = PyFloat_AsDouble(args[5]);
    long method = PyLong_AsLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (!(dt > 0.0 && isfinite(dt)) ||
        (method != SEMI_IMPLICIT_EULER && method != RK4 && method != SEMI_IMPLICIT_SMOOTH)) {
        PyErr_SetString(PyExc_ValueError, "rollout: dt must be positive and finite, the "
                        "integrator 0 (semi-implicit Euler), 1 (RK4) or 2 (semi-implicit "
                        "Euler, smooth friction)");
        return NULL;
    }
    Stepper s = {.nle = self->k[NLE].one, .crba = self->k[CRBA].one, .aba = self->k[ABA].one,
                 .n = n, .dt = dt};
    const char *const loss_names[4] = {"damping", "friction", "stribeck",
                                       "stribeck_velocity"};
    const char *const stop_names[2] = {"lower", "upper"};
    const double *losses[4], *stops[2];
    if (optional_arrays(args + 7, 4, loss_names, n, losses) < 0 ||
        optional_arrays(args + 11, 2, stop_names, n, stops) < 0)
        return NULL;
    s.damping = losses[0], s.friction = losses[1];
    s.stribeck = losses[2], s.stribeck_velocity = losses[3];
    s.lower = stops[0], s.upper = stops[1];
    for (Py_ssize_t i = 0; s.damping && i < n; i++)
        s.implicit |= s.damping[i] != 0.0 || s.friction[i] != 0.0 || s.stribeck[i] != 0.0;
    double *scratch = PyMem_RawMalloc(sizeof(double) * (size_t)(2 * n * n + 12 * n + 1));
    if (scratch == NULL)
        return PyErr_NoMemory();
    double **slots[] = {&s.h, &s.rhs, &s.applied, &s.qs, &s.a[0], &s.a[1], &s.a[2], &s.a[3],
                        &s.vs[0], &s.vs[1], &s.vs[2], &s.bound};
    s.M = scratch, s.A = scratch + n * n;
    for (size_t j = 0; j < sizeof(slots) / sizeof(slots[0]); j++)
        *slots[j] = scratch + 2 * n * n + (Py_ssize_t)j * n;
    /* the arrays are referenced by the caller's frame; the kernels touch no Python object,
     * the law is called with the GIL */
    PyThreadState *thread = PyEval_SaveThread();
    Py_ssize_t done = run_steps(&s, (int)method, N, PyArray_DATA(Q), PyArray_DATA(V),
                                PyArray_DATA(A), PyArray_DATA(hit), PyArray_DATA(tau),
                                per_step || law ? n : 0, law, &thread);
    if (thread != NULL)
        PyEval_RestoreThread(thread);
    PyMem_RawFree(scratch);
    return done < 0 ? NULL : PyLong_FromSsize_t(done);
}

/* ---------------------------------------------------------------- the momentum observer
 *
 * observe() is one step of rb_dynamics.control.MomentumObserver (see its docstring), its
 * arithmetic in C: the numpy form costs a dozen array operations per joint state, this one
 * call. rows (10, nv) holds [p, C^T v, g, tau_f, tau_m] of this state (rows 0-4) and of the
 * previous one (5-9). It fills rows 0-2 from the momentum kernel at (q, v), row 3 with the
 * joint friction f(v) (friction_of: rb_dynamics.dynamics.friction's law) when losses, a
 * (4, nv) array [damping; friction; stribeck; stribeck_velocity], is not None, and row 4 =
 * effort - offset; then, unless
 * coefficients is None (a first state), e dt = coefficients . rows and
 * r = a * r + b * (e dt), in place. Returns -1 when r is not finite (rows not rolled: the
 * caller restarts), else rolls rows 0-4 into 5-9 and returns 0 (first state), 1, or 2 when some
 * |r_j| > thresholds_j. Each array must be float64, C-contiguous, of its size.
 */

enum { MOMENTUM = 5 }; /* index into KernelsObject.k */

static double *observe_vector(PyObject *obj, const char *name, Py_ssize_t n, int writable)
{
    PyArrayObject *arr = (PyArrayObject *)obj;
    if (!PyArray_Check(obj) || PyArray_TYPE(arr) != NPY_DOUBLE ||
        !PyArray_IS_C_CONTIGUOUS(arr) || PyArray_SIZE(arr) != n ||
        (writable && !PyArray_ISWRITEABLE(arr))) {
        PyErr_Format(PyExc_ValueError, "observe: %s must be a C-contiguous%s float64 array of "
                     "%zd values", name, writable ? " writable" : "", n);
        return NULL;
    }
    return (double *)PyArray_DATA(arr);
}

static PyObject *m_observe(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    KernelsObject *self = (KernelsObject *)op;
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "observe() takes 11 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!self->ready || !self->k[MOMENTUM].one) {
        PyErr_SetString(PyExc_ValueError, "observe: no momentum kernel");
        return NULL;
    }
    Kernel *k = &self->k[MOMENTUM];
    Py_ssize_t n = k->out_n;
    double *q, *v, *effort, *offset, *losses = NULL, *rows, *c = NULL, *a, *b, *r, *thresholds;
    if (!(q = observe_vector(args[0], "q", k->size[0], 0)) ||
        !(v = observe_vector(args[1], "v", n, 0)) ||
        !(effort = observe_vector(args[2], "effort", n, 0)) ||
        !(offset = observe_vector(args[3], "offset", n, 0)) ||
        (args[4] != Py_None && !(losses = observe_vector(args[4], "losses", 4 * n, 0))) ||
        !(rows = observe_vector(args[5], "rows", 10 * n, 1)) ||
        (args[6] != Py_None && !(c = observe_vector(args[6], "coefficients", 10, 0))) ||
        !(a = observe_vector(args[7], "a", n, 0)) || !(b = observe_vector(args[8], "b", n, 0)) ||
        !(r = observe_vector(args[9], "r", n, 1)) ||
        !(thresholds = observe_vector(args[10], "thresholds", n, 0)))
        return NULL;
    const double *in[2] = {q, v};
    k->one(in, rows);
    if (losses != NULL) {
        Stepper f = {.n = n, .damping = losses, .friction = losses + n,
                     .stribeck = losses + 2 * n, .stribeck_velocity = losses + 3 * n};
        for (Py_ssize_t j = 0; j < n; j++)
            rows[3 * n + j] = friction_of(&f, j, v[j]);
    }
    for (Py_ssize_t j = 0; j < n; j++)
        rows[4 * n + j] = effort[j] - offset[j];
    int over = 0;
    if (c != NULL) {
        for (Py_ssize_t j = 0; j < n; j++) {
            double w = 0.0;
            for (int i = 0; i < 10; i++)
                w += c[i] * rows[i * n + j];
            r[j] = a[j] * r[j] + b[j] * w;
        }
        if (!all_finite(r, n))
            return PyLong_FromLong(-1);
        for (Py_ssize_t j = 0; j < n; j++)
            over |= fabs(r[j]) > thresholds[j];
    }
    memcpy(rows + 5 * n, rows, sizeof(double) * (size_t)(5 * n));
    return PyLong_FromLong(c == NULL ? 0 : 1 + over);
}

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
    {"momentum_terms", (PyCFunction)(void (*)(void))m_momentum_terms,
     METH_FASTCALL | METH_KEYWORDS, "momentum_terms(q, v): rows M v, C^T v, g (3, nv)."},
    {"observe", (PyCFunction)(void (*)(void))m_observe, METH_FASTCALL,
     "observe(q, v, effort, offset, losses, rows, coefficients, a, b, r, thresholds)\n"
     "One momentum observer step in place (rb_dynamics.control.MomentumObserver): -1 when r\n"
     "is not finite, else 0 (a first state: coefficients None), 1, or 2 (a threshold passed)."},
    {"rollout", (PyCFunction)(void (*)(void))m_rollout, METH_FASTCALL,
     "rollout(Q, V, A, hit, tau, dt, integrator, damping, friction, stribeck,\n"
     "        stribeck_velocity, lower, upper, law)\n"
     "N = len(A) steps from Q[0], V[0] into the rows of Q, V (N+1, nv), A and hit (N, nv);\n"
     "tau (nv,) held or (N, nv) per step; law: None, or law(k) -> the efforts of step k,\n"
     "called before it and written to tau[k]; integrator 0: semi-implicit Euler (friction\n"
     "implicit, stick-slip), 1: RK4, 2: semi-implicit Euler (friction implicit, smooth);\n"
     "damping, friction, stribeck, stribeck_velocity (the joint losses) and lower, upper:\n"
     "(nv,) arrays, or all of a group None (no losses, no stops).\n"
     "Returns the steps taken: it stops before a step that is not finite (see the source)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rb_dynamics.dynamics.trampoline._ckernels.Kernels",
    .tp_doc = "Calls into one model's compiled kernels; built by rb_dynamics.dynamics.kernel_cache.",
    .tp_basicsize = sizeof(KernelsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)kernels_init,
    .tp_dealloc = (destructor)kernels_dealloc,
    .tp_methods = kernels_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rb_dynamics.dynamics.trampoline._ckernels",
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
