// The device path's summaries filled from their read-back rows (device_summary.py's _fill_rows), in C++.
//
// Why C++: once per backward pass, device_summary.py turns each gradient's row of the read-back buffer (min,
// max, sum, sum of squares, the bucket counts, a small tensor's values) into its TensorSummary's numbers. In
// numpy, for a training step's dozen gradients, that was about 25 array calls whose own costs, cold after a
// backward, came to about 90 us a step on the 256-wide MLP: more than every other piece of a pass's end. Here
// it is one call and a loop over the rows, the same float64 arithmetic (sum / numel, sqrt), the same Python
// objects as a result (floats, or a wire string where a number is not finite; ints; a Histogram).
//
// Part of the gradient hooks' extension module (grad_hooks.cpp registers it): it needs Python's headers only.
#include <Python.h>

#include <cmath>
#include <cstdint>

namespace {

// The wire's names of non-finite numbers (summary.wire_float's), made once.
PyObject* g_nan = nullptr;
PyObject* g_inf = nullptr;
PyObject* g_neg_inf = nullptr;
// The attributes set, as interned strings.
PyObject *g_min, *g_max, *g_mean, *g_norm, *g_nan_count, *g_inf_count, *g_values, *g_histogram, *g_numel, *g_dtype;

bool ready() {
  if (g_nan != nullptr) return true;
  g_nan = PyUnicode_InternFromString("NaN");
  g_inf = PyUnicode_InternFromString("Infinity");
  g_neg_inf = PyUnicode_InternFromString("-Infinity");
  g_min = PyUnicode_InternFromString("min");
  g_max = PyUnicode_InternFromString("max");
  g_mean = PyUnicode_InternFromString("mean");
  g_norm = PyUnicode_InternFromString("norm");
  g_nan_count = PyUnicode_InternFromString("nan_count");
  g_inf_count = PyUnicode_InternFromString("inf_count");
  g_values = PyUnicode_InternFromString("values");
  g_histogram = PyUnicode_InternFromString("histogram");
  g_numel = PyUnicode_InternFromString("numel");
  g_dtype = PyUnicode_InternFromString("dtype");
  return g_dtype != nullptr;
}

// summary.wire_float: the float, or "NaN", "Infinity", "-Infinity". A new reference.
PyObject* wire(double value) {
  if (std::isnan(value)) return Py_NewRef(g_nan);
  if (std::isinf(value)) return Py_NewRef(value > 0 ? g_inf : g_neg_inf);
  return PyFloat_FromDouble(value);
}

// Sets summary.name to value (stolen); false with a Python error set.
bool set(PyObject* summary, PyObject* name, PyObject* value) {
  if (value == nullptr) return false;
  const int failed = PyObject_SetAttr(summary, name, value);
  Py_DECREF(value);
  return failed == 0;
}

struct Layout {
  Py_ssize_t row = 0, buckets = 0, values = 0, small = 0;  // a row's width; where its counts and values start
};

// One item's (summary, buffer, row index, side) numbers from `rows`; false with a Python error set. *nonfinite
// is set when the row counted NaN or infinity.
bool fill_one(PyObject* item, const double* rows, Py_ssize_t used, const Layout& at, PyObject* histogram,
              PyObject* wire_edges, bool* nonfinite) {
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 3) {
    PyErr_SetString(PyExc_TypeError, "fill_device_rows: each item is (summary, buffer, row index, side)");
    return false;
  }
  PyObject* summary = PyTuple_GET_ITEM(item, 0);
  const Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
  if (index == -1 && PyErr_Occurred()) return false;
  if (index < 0 || index >= used) {
    PyErr_Format(PyExc_IndexError, "fill_device_rows: row %zd of %zd", index, used);
    return false;
  }
  PyObject* numel_object = PyObject_GetAttr(summary, g_numel);
  if (numel_object == nullptr) return false;
  const long long numel = PyLong_AsLongLong(numel_object);
  Py_DECREF(numel_object);
  if (numel == -1 && PyErr_Occurred()) return false;
  const double* row = rows + index * at.row;
  double lo = row[0], hi = row[1];
  const double mean = row[2] / static_cast<double>(numel), norm = std::sqrt(row[3]);
  if (!std::isfinite(lo)) lo = hi = NAN;  // no finite value at all: min and max NaN
  const Py_ssize_t counts = at.values - at.buckets;  // -inf, the bins, +inf, NaN
  const double* bucket = row + at.buckets;
  const long long nan_count = static_cast<long long>(bucket[counts - 1]);
  const long long inf_count = static_cast<long long>(bucket[0]) + static_cast<long long>(bucket[counts - 2]);
  if (nan_count != 0 || inf_count != 0) *nonfinite = true;
  const bool finite = std::isfinite(lo) && std::isfinite(hi) && std::isfinite(mean) && std::isfinite(norm);
  if (!set(summary, g_min, finite ? PyFloat_FromDouble(lo) : wire(lo)) ||
      !set(summary, g_max, finite ? PyFloat_FromDouble(hi) : wire(hi)) ||
      !set(summary, g_mean, finite ? PyFloat_FromDouble(mean) : wire(mean)) ||
      !set(summary, g_norm, finite ? PyFloat_FromDouble(norm) : wire(norm)) ||
      !set(summary, g_nan_count, PyLong_FromLongLong(nan_count)) ||
      !set(summary, g_inf_count, PyLong_FromLongLong(inf_count)))
    return false;
  if (numel <= at.small) {  // its values, as they are (a wire string for each non-finite one, if any)
    const double* values = row + at.values;
    bool all_finite = true;
    for (long long k = 0; k < numel; ++k) all_finite = all_finite && std::isfinite(values[k]);
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(numel));
    if (list == nullptr) return false;
    for (long long k = 0; k < numel; ++k) {
      PyObject* value = all_finite ? PyFloat_FromDouble(values[k]) : wire(values[k]);
      if (value == nullptr) {
        Py_DECREF(list);
        return false;
      }
      PyList_SET_ITEM(list, k, value);
    }
    return set(summary, g_values, list);
  }
  const Py_ssize_t bins = counts - 3;
  bool any = false;
  for (Py_ssize_t b = 1; b <= bins; ++b) any = any || bucket[b] != 0;
  if (!any) return true;  // no finite value: no histogram
  PyObject* dtype = PyObject_GetAttr(summary, g_dtype);
  if (dtype == nullptr) return false;
  PyObject* edges = PyDict_GetItemWithError(wire_edges, dtype);  // (borrowed)
  Py_DECREF(dtype);
  if (edges == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "fill_device_rows: no edges for this dtype");
    return false;
  }
  PyObject* list = PyList_New(bins);
  if (list == nullptr) return false;
  for (Py_ssize_t b = 0; b < bins; ++b) {
    PyObject* count = PyLong_FromLongLong(static_cast<long long>(bucket[b + 1]));
    if (count == nullptr) {
      Py_DECREF(list);
      return false;
    }
    PyList_SET_ITEM(list, b, count);
  }
  PyObject* lo_object = finite ? PyFloat_FromDouble(lo) : wire(lo);
  PyObject* hi_object = finite ? PyFloat_FromDouble(hi) : wire(hi);
  PyObject* made = nullptr;
  if (lo_object != nullptr && hi_object != nullptr) {
    PyObject* args[] = {lo_object, hi_object, list, edges};
    made = PyObject_Vectorcall(histogram, args, 4, nullptr);
  }
  Py_XDECREF(lo_object);
  Py_XDECREF(hi_object);
  Py_DECREF(list);
  return set(summary, g_histogram, made);
}

}  // namespace

// fill_device_rows(items, rows, layout, histogram, wire_edges) -> whether one counted NaN or infinity:
// device_summary._fill_rows for items none of which has a side buffer (the per-gradient torch path's rows hold a
// norm and per-bucket extremes: Python fills those). rows: a C-contiguous float64 buffer of the read-back rows;
// layout: (a row's width, where its counts start, where its values start, SMALL_NUMEL); histogram: the Histogram
// class; wire_edges: dtype name -> its edges as the wire has them.
PyObject* fv_fill_device_rows(PyObject* const* args, Py_ssize_t n) {
  if (n != 5) {
    PyErr_Format(PyExc_TypeError, "fill_device_rows takes 5 arguments (%zd given)", n);
    return nullptr;
  }
  if (!ready()) return nullptr;
  if (!PyDict_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError, "fill_device_rows: wire_edges must be a dict");
    return nullptr;
  }
  Layout at;
  if (!PyArg_ParseTuple(args[2], "nnnn", &at.row, &at.buckets, &at.values, &at.small)) return nullptr;
  if (at.row <= at.values || at.values - at.buckets < 4 || at.values + at.small > at.row) {
    PyErr_SetString(PyExc_ValueError, "fill_device_rows: the layout does not fit a row");
    return nullptr;
  }
  PyObject* items = PySequence_Fast(args[0], "fill_device_rows: items must be a list");
  if (items == nullptr) return nullptr;
  Py_buffer view;
  if (PyObject_GetBuffer(args[1], &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    Py_DECREF(items);
    return nullptr;
  }
  bool ok = view.itemsize == 8 && view.format != nullptr && view.format[0] == 'd' && view.format[1] == '\0' &&
            view.len % (at.row * 8) == 0;
  if (!ok) PyErr_SetString(PyExc_TypeError, "fill_device_rows: rows must be C-contiguous float64 rows of the layout");
  const Py_ssize_t used = ok ? view.len / (at.row * 8) : 0;
  bool nonfinite = false;
  for (Py_ssize_t k = 0; ok && k < PySequence_Fast_GET_SIZE(items); ++k)
    ok = fill_one(PySequence_Fast_GET_ITEM(items, k), static_cast<const double*>(view.buf), used, at, args[3],
                  args[4], &nonfinite);
  PyBuffer_Release(&view);
  Py_DECREF(items);
  if (!ok) return nullptr;
  return PyBool_FromLong(nonfinite);
}
