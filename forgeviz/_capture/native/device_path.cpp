// The device path's bookkeeping in C++: a gradient's summary made and its reduction queued or launched
// (device_summary.py's DeviceSummaries.add and add_leaf, their common cases), and the summaries filled from their
// read-back rows (device_summary.py's _fill_rows).
//
// Why C++, add: the native hooks call it once per gradient of every backward pass (GPT-2's shape: ~550 a step).
// In Python each call read a dozen facts of the tensor, made a TensorSummary, a weakref, tuples and dict entries,
// and, cold after the backward's own kernels, cost 17-24 us of CPU (kernels stubbed): the GPU waits on that thread.
// Here the common cases (a dense gradient seen again, queued in a batch, or launched into a row made already) take
// no Python frame; anything else goes to the Python method, as before.
//
// Why C++, fill: once per backward pass, device_summary.py turns each gradient's row of the read-back buffer (min,
// max, sum, sum of squares, the bucket counts, a small tensor's values) into its TensorSummary's numbers. In
// numpy, for a training step's dozen gradients, that was about 25 array calls whose own costs, cold after a
// backward, came to about 90 us a step on the 256-wide MLP: more than every other piece of a pass's end. Here
// it is one call and a loop over the rows, the same float64 arithmetic (sum / numel, sqrt), the same Python
// objects as a result (floats, or a wire string where a number is not finite; ints; a Histogram).
//
// Part of the gradient hooks' extension module (grad_hooks.cpp registers it and calls fv_device_add).
#include <Python.h>

#include <ATen/ATen.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/object_ptr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace {

// The strings this file hands Python (the wire's names of non-finite numbers, summary.wire_float's) and the
// attributes it reads and sets, interned once: g_names[kName].
constexpr const char* kNameTexts[] = {
    "NaN", "Infinity", "-Infinity", "min", "max", "mean", "norm", "nan_count", "inf_count", "values", "histogram",
    "numel", "dtype", "_seen", "_views", "_dense", "_batches", "_rows", "_leaves", "_buffers", "used", "views",
    "_triton", "_triton_many", "_interpreted", "_kernels_on_cpu", "_batched", "summarised", "_native_config",
    "shape", "_reduce_batches", "_launch", "device"};
enum Name {
    kNan, kInf, kNegInf, kMin, kMax, kMean, kNorm, kNanCount, kInfCount, kValues, kHistogram, kNumel, kDtype, kSeen,
    kViews, kDense, kBatches, kRows, kLeaves, kBuffers, kUsed, kViewsAttr, kTriton, kTritonMany, kInterpreted,
    kKernelsOnCpu, kBatched, kSummarised, kConfig, kShape, kReduceBatches, kLaunch, kDevice, kNames
};
static_assert(sizeof(kNameTexts) / sizeof(kNameTexts[0]) == kNames);
PyObject* g_names[kNames] = {};

bool ready() {
  if (g_names[kNames - 1] != nullptr) return true;
  for (int k = 0; k < kNames; ++k)
    if ((g_names[k] = PyUnicode_InternFromString(kNameTexts[k])) == nullptr) return false;
  return true;
}

// summary.wire_float: the float, or "NaN", "Infinity", "-Infinity". A new reference.
PyObject* wire(double value) {
  if (std::isnan(value)) return Py_NewRef(g_names[kNan]);
  if (std::isinf(value)) return Py_NewRef(value > 0 ? g_names[kInf] : g_names[kNegInf]);
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
  PyObject* numel_object = PyObject_GetAttr(summary, g_names[kNumel]);
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
  if (!set(summary, g_names[kMin], wire(lo)) || !set(summary, g_names[kMax], wire(hi)) ||
      !set(summary, g_names[kMean], wire(mean)) || !set(summary, g_names[kNorm], wire(norm)) ||
      !set(summary, g_names[kNanCount], PyLong_FromLongLong(nan_count)) ||
      !set(summary, g_names[kInfCount], PyLong_FromLongLong(inf_count)))
    return false;
  if (numel <= at.small) {  // its values, as they are (a wire string for each non-finite one)
    const double* values = row + at.values;
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(numel));
    if (list == nullptr) return false;
    for (long long k = 0; k < numel; ++k) {
      PyObject* value = wire(values[k]);
      if (value == nullptr) {
        Py_DECREF(list);
        return false;
      }
      PyList_SET_ITEM(list, k, value);
    }
    return set(summary, g_names[kValues], list);
  }
  const Py_ssize_t bins = counts - 3;
  bool any = false;
  for (Py_ssize_t b = 1; b <= bins; ++b) any = any || bucket[b] != 0;
  if (!any) return true;  // no finite value: no histogram
  PyObject* dtype = PyObject_GetAttr(summary, g_names[kDtype]);
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
  PyObject* lo_object = wire(lo);
  PyObject* hi_object = wire(hi);
  PyObject* made = nullptr;
  if (lo_object != nullptr && hi_object != nullptr) {
    PyObject* args[] = {lo_object, hi_object, list, edges};
    made = PyObject_Vectorcall(histogram, args, 4, nullptr);
  }
  Py_XDECREF(lo_object);
  Py_XDECREF(hi_object);
  Py_DECREF(list);
  return set(summary, g_names[kHistogram], made);
}

}  // namespace

// fill_device_rows(items, rows, layout, histogram, wire_edges) -> whether one counted NaN or infinity:
// device_summary._fill_rows for items none of which has a side buffer (the per-gradient torch path's rows hold a
// norm and, in a side buffer, extremes: Python fills those). rows: a C-contiguous float64 buffer of the read-back rows;
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

// --- add ------------------------------------------------------------------------------------------------
namespace {

// device_summary.py's constants, read from DeviceSummaries._native_config.
struct Config {
  THPObjectPtr tuple;  // (held while the call runs)
  PyObject* summary_class = nullptr;  // TensorSummary (borrowed from the tuple, as the two below)
  PyObject* add = nullptr;  // the functions DeviceSummaries.add and add_leaf: what this stands for
  PyObject* add_leaf = nullptr;
  long long small = 0, batch_numel = 0, batch_elements = 0, batch_tensors = 0;
};

bool read_config(PyObject* pending, Config& config) {
  THPObjectPtr& tuple = config.tuple;
  tuple = PyObject_GetAttr(pending, g_names[kConfig]);
  if (!tuple) return false;
  if (!PyTuple_Check(tuple.get()) || PyTuple_GET_SIZE(tuple.get()) != 7) {
    PyErr_SetString(PyExc_TypeError, "device_add: _native_config is (TensorSummary, SMALL_NUMEL, BATCH_NUMEL, "
                                     "BATCH_ELEMENTS, BATCH_TENSORS, DeviceSummaries.add, DeviceSummaries.add_leaf)");
    return false;
  }
  config.summary_class = PyTuple_GET_ITEM(tuple.get(), 0);
  config.add = PyTuple_GET_ITEM(tuple.get(), 5);
  config.add_leaf = PyTuple_GET_ITEM(tuple.get(), 6);
  config.small = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple.get(), 1));
  config.batch_numel = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple.get(), 2));
  config.batch_elements = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple.get(), 3));
  config.batch_tensors = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple.get(), 4));
  return !PyErr_Occurred();
}

// summary.dtype_name's names of the dtypes the device path takes; nullptr for any other.
const char* dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    default:
      return nullptr;
  }
}

// device_summary._is_dense: the strides, smallest first, each the product of the sizes before (size-1 dims aside).
bool is_dense(const at::Tensor& t) {
  if (t.is_contiguous()) return true;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size), sorted as Python sorts those tuples
  for (int64_t d = 0; d < t.dim(); ++d) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (size != 1 && stride != expected) return false;
    expected *= size;
  }
  return true;
}

PyObject* shape_list(const at::Tensor& t) {
  PyObject* list = PyList_New(t.dim());
  for (int64_t d = 0; list != nullptr && d < t.dim(); ++d) {
    PyObject* size = PyLong_FromLongLong(t.size(d));
    if (size == nullptr) Py_CLEAR(list);
    else PyList_SET_ITEM(list, d, size);
  }
  return list;
}

// Whether summary.shape (a list of ints) equals t's sizes; -1 with a Python error.
int same_shape(PyObject* summary, const at::Tensor& t) {
  THPObjectPtr shape(PyObject_GetAttr(summary, g_names[kShape]));
  if (!shape) return -1;
  if (!PyList_Check(shape.get()) || PyList_GET_SIZE(shape.get()) != t.dim()) return 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const long long size = PyLong_AsLongLong(PyList_GET_ITEM(shape.get(), d));
    if (size == -1 && PyErr_Occurred()) return -1;
    if (size != t.size(d)) return 0;
  }
  return 1;
}

// pending.<name> += by; false with a Python error.
bool add_to(PyObject* pending, PyObject* name, long long by) {
  THPObjectPtr now(PyObject_GetAttr(pending, name));
  if (!now) return false;
  THPObjectPtr by_object(PyLong_FromLongLong(by));
  THPObjectPtr sum(by_object ? PyNumber_Add(now.get(), by_object.get()) : nullptr);
  return sum && PyObject_SetAttr(pending, name, sum.get()) == 0;
}

// dict.setdefault(key, []) as a borrowed reference, or nullptr with a Python error.
PyObject* list_at(PyObject* owner, PyObject* name, PyObject* key) {
  THPObjectPtr dict(PyObject_GetAttr(owner, name));
  if (!dict) return nullptr;
  if (!PyDict_Check(dict.get())) {
    PyErr_SetString(PyExc_TypeError, "device_add: a batch table is not a dict");
    return nullptr;
  }
  THPObjectPtr fresh(PyList_New(0));
  // (borrowed: the dict, which its owner keeps, holds it)
  return fresh ? PyDict_SetDefault(dict.get(), key, fresh.get()) : nullptr;
}

// list.append(a tuple of the given items, each a borrowed reference); false with a Python error.
bool append_to(PyObject* list, std::initializer_list<PyObject*> items) {
  THPObjectPtr tuple(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  if (!tuple) return false;
  Py_ssize_t k = 0;
  for (PyObject* item : items) PyTuple_SET_ITEM(tuple.get(), k++, Py_NewRef(item));
  return PyList_Append(list, tuple.get()) == 0;
}

// pending.<list>.append(item) for a tuple of the given items (each a borrowed reference); false with an error.
bool append_tuple(PyObject* pending, PyObject* list_name, std::initializer_list<PyObject*> items) {
  THPObjectPtr list(PyObject_GetAttr(pending, list_name));
  return list && PyList_Check(list.get()) && append_to(list.get(), items);
}

bool truthy(PyObject* pending, PyObject* name, int& out) {
  THPObjectPtr value(PyObject_GetAttr(pending, name));
  out = value ? PyObject_IsTrue(value.get()) : -1;
  return out >= 0;
}

}  // namespace

namespace {

// DeviceSummaries.add(grad) (parameter nullptr) or .add_leaf(grad, parameter) for `pending`, a DeviceSummaries, in
// their common cases: a dense gradient (contiguous, or past SMALL_NUMEL filling its memory) seen again this pass
// (its summary, or a view's sharing its numbers), or new: its summary made and its reduction queued in a batch, or
// launched by Triton into a row its buffer has already; a leaf's summary queued for the pass's end. `grad`: t as
// Python has it; `version`: t's version now. Returns a new reference to the summary; Py_NotImplemented (a new
// reference) where Python's method must take it, before anything changed; nullptr with a Python error (what the
// Python method would have raised). Called with the GIL, and __torch_function__ off (as the Python method is).
PyObject* device_add(PyObject* pending, const Config& config, const at::Tensor& t, PyObject* grad, int64_t version,
                     PyObject* parameter) {
  const char* dtype = t.defined() && t.layout() == c10::kStrided && version >= 0 && t.has_storage()
                          ? dtype_name(t.scalar_type())
                          : nullptr;
  if (dtype == nullptr) return Py_NewRef(Py_NotImplemented);
  const int64_t numel = t.numel();
  const bool contiguous = t.is_contiguous();
  if (!(contiguous || (numel > config.small && is_dense(t)))) return Py_NewRef(Py_NotImplemented);  // keyed by shape
  PyObject* dtype_object = reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type()));  // (borrowed)
  THPObjectPtr key(Py_BuildValue("(KLO)", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(t.data_ptr())),
                                 static_cast<long long>(numel), dtype_object));
  THPObjectPtr seen(PyObject_GetAttr(pending, g_names[kSeen]));
  THPObjectPtr version_object(PyLong_FromLongLong(version));
  if (!key || !seen || !version_object) return nullptr;
  if (!PyDict_Check(seen.get())) {
    PyErr_SetString(PyExc_TypeError, "device_add: _seen is not a dict");
    return nullptr;
  }
  PyObject* hit = PyDict_GetItemWithError(seen.get(), key.get());  // (borrowed)
  if (hit == nullptr && PyErr_Occurred()) return nullptr;
  // The first tensor still alive means its memory was not reused by another gradient.
  if (hit != nullptr && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 3 && PyWeakref_Check(PyTuple_GET_ITEM(hit, 0)) &&
      PyWeakref_GetObject(PyTuple_GET_ITEM(hit, 0)) != Py_None) {
    const int same_version = PyObject_RichCompareBool(PyTuple_GET_ITEM(hit, 1), version_object.get(), Py_EQ);
    if (same_version < 0) return nullptr;
    if (same_version) {
      THPObjectPtr first_ref(Py_NewRef(PyTuple_GET_ITEM(hit, 2)));  // (held: Python code runs below)
      PyObject* first = first_ref.get();
      const int same = same_shape(first, t);
      if (same < 0) return nullptr;
      if (same) return Py_NewRef(first);
      THPObjectPtr shape(shape_list(t));
      THPObjectPtr first_dtype(PyObject_GetAttr(first, g_names[kDtype]));
      THPObjectPtr first_device(PyObject_GetAttr(first, g_names[kDevice]));
      THPObjectPtr first_numel(PyObject_GetAttr(first, g_names[kNumel]));
      if (!shape || !first_dtype || !first_device || !first_numel) return nullptr;
      PyObject* args[] = {shape.get(), first_dtype.get(), first_device.get(), first_numel.get()};
      THPObjectPtr view(PyObject_Vectorcall(config.summary_class, args, 4, nullptr));
      if (!view || !append_tuple(pending, g_names[kViews], {first, view.get()})) return nullptr;
      return view.release();
    }
  }
  // A new summary, numbers to come
  THPObjectPtr shape(shape_list(t));
  THPObjectPtr dtype_string(PyUnicode_FromString(dtype));
  THPObjectPtr device_string(PyUnicode_FromString(t.device().str().c_str()));
  THPObjectPtr numel_object(PyLong_FromLongLong(numel));
  if (!shape || !dtype_string || !device_string || !numel_object) return nullptr;
  PyObject* args[] = {shape.get(), dtype_string.get(), device_string.get(), numel_object.get()};
  THPObjectPtr summary(PyObject_Vectorcall(config.summary_class, args, 4, nullptr));
  THPObjectPtr grad_ref(summary ? PyWeakref_NewRef(grad, nullptr) : nullptr);
  THPObjectPtr entry(grad_ref ? PyTuple_Pack(3, grad_ref.get(), version_object.get(), summary.get()) : nullptr);
  if (!entry || PyDict_SetItem(seen.get(), key.get(), entry.get()) != 0) return nullptr;
  if (parameter != nullptr) {  // add_leaf: summarised as the parameter's .grad when the pass ends
    THPObjectPtr parameter_ref(PyWeakref_NewRef(parameter, nullptr));
    THPObjectPtr grad_shape(PyObject_GetAttr(grad, g_names[kShape]));
    if (!parameter_ref || !grad_shape ||
        !append_tuple(pending, g_names[kLeaves],
                      {summary.get(), parameter_ref.get(), grad_shape.get(), dtype_object, grad_ref.get(),
                       version_object.get()}))
      return nullptr;
    return summary.release();
  }
  if (numel == 0) return summary.release();  // nothing to reduce
  // Which path (DeviceSummaries._launch's): Triton's, reading memory flat, or the torch ops' batch
  THPObjectPtr triton(PyObject_GetAttr(pending, g_names[kTriton]));
  THPObjectPtr triton_many(PyObject_GetAttr(pending, g_names[kTritonMany]));
  int interpreted = 0, kernels_on_cpu = 0;
  if (!triton || !triton_many || !truthy(pending, g_names[kInterpreted], interpreted) ||
      !truthy(pending, g_names[kKernelsOnCpu], kernels_on_cpu))
    return nullptr;
  THPObjectPtr flat;
  if (triton.get() != Py_None && (t.is_cuda() || interpreted) && (numel > config.small || contiguous)) {
    // (dense here: a contiguous gradient is its own flat view, another its memory as one)
    flat = contiguous ? Py_NewRef(grad) : THPVariable_Wrap(t.as_strided({numel}, {1}));
    if (!flat) return nullptr;
  }
  THPObjectPtr device_object(THPDevice_New(t.device()));
  THPObjectPtr batch_key(device_object ? PyTuple_Pack(2, device_object.get(), dtype_object) : nullptr);
  if (!batch_key) return nullptr;
  PyObject* batch = nullptr;  // (borrowed: its table holds it)
  if (numel <= config.batch_numel) {
    if (flat && triton_many.get() != Py_None) {
      // Held until its batch's one launch (a launch costs the CPU more than such a gradient costs the GPU to
      // read): the kernel reads its memory then
      batch = list_at(pending, g_names[kDense], batch_key.get());
      if (batch == nullptr || !append_to(batch, {flat.get(), summary.get(), version_object.get(), grad}))
        return nullptr;
    } else if (!flat && t.scalar_type() != at::kDouble) {
      // Held as it is (the batch gathers any layout); a 0-d one needs a dimension to be gathered
      THPObjectPtr held(t.dim() == 0 ? THPVariable_Wrap(t.view({1})) : Py_NewRef(grad));
      batch = held ? list_at(pending, g_names[kBatches], batch_key.get()) : nullptr;
      if (batch == nullptr || !append_to(batch, {held.get(), summary.get(), version_object.get(), grad}))
        return nullptr;
    }
  }
  if (batch != nullptr) {
    if (!add_to(pending, g_names[kBatched], numel) || !add_to(pending, g_names[kSummarised], 1)) return nullptr;
    THPObjectPtr batched(PyObject_GetAttr(pending, g_names[kBatched]));
    const long long held = batched ? PyLong_AsLongLong(batched.get()) : -1;
    if (held == -1 && PyErr_Occurred()) return nullptr;
    if (held >= config.batch_elements || PyList_GET_SIZE(batch) >= config.batch_tensors) {
      THPObjectPtr done(PyObject_CallMethodNoArgs(pending, g_names[kReduceBatches]));
      if (!done) return nullptr;
    }
    return summary.release();
  }
  if (flat && !kernels_on_cpu) {
    // One Triton launch into a row made already (no op of torch's, nothing allocated: no switch needed)
    THPObjectPtr buffers(PyObject_GetAttr(pending, g_names[kBuffers]));
    THPObjectPtr buffer_ref(buffers && PyDict_Check(buffers.get())
                                ? Py_XNewRef(PyDict_GetItemWithError(buffers.get(), device_object.get()))
                                : nullptr);
    PyObject* buffer = buffer_ref.get();  // (held: the launch is Python code)
    if (buffer == nullptr && PyErr_Occurred()) return nullptr;
    THPObjectPtr used(buffer != nullptr ? PyObject_GetAttr(buffer, g_names[kUsed]) : nullptr);
    THPObjectPtr views(buffer != nullptr ? PyObject_GetAttr(buffer, g_names[kViewsAttr]) : nullptr);
    if (buffer != nullptr && (!used || !views)) return nullptr;
    const Py_ssize_t index = used ? PyLong_AsSsize_t(used.get()) : -1;
    if (index == -1 && PyErr_Occurred()) return nullptr;
    if (buffer != nullptr && PyTuple_Check(views.get()) && index >= 0 && index < PyTuple_GET_SIZE(views.get())) {
      THPObjectPtr next(PyLong_FromSsize_t(index + 1));
      if (!next || PyObject_SetAttr(buffer, g_names[kUsed], next.get()) != 0) return nullptr;
      PyObject* row = PyTuple_GET_ITEM(views.get(), index);
      THPObjectPtr launched(PyObject_CallFunctionObjArgs(triton.get(), flat.get(), row, nullptr));
      if (!launched || !append_tuple(pending, g_names[kRows], {summary.get(), buffer, used.get(), Py_None}) ||
          !add_to(pending, g_names[kSummarised], 1))
        return nullptr;
      return summary.release();
    }
  }
  // Any other launch (a buffer to grow, the torch ops' own reductions): Python's, under its switches
  THPObjectPtr launched(PyObject_CallMethodObjArgs(pending, g_names[kLaunch], grad, summary.get(), numel_object.get(),
                                                   contiguous ? Py_True : Py_False, Py_True, nullptr));
  if (!launched) return nullptr;
  return summary.release();
}

}  // namespace

// `method(grad)` (parameter nullptr) or `method(grad, parameter)` where method is DeviceSummaries.add or add_leaf
// bound to a DeviceSummaries (not one replaced on the class or the instance), in their common cases: device_add.
// `grad`: t as Python has it; `version`: t's version now. Returns a new reference to the summary; Py_NotImplemented (a
// new reference) where the method itself must be called, before anything changed; nullptr with a Python error.
PyObject* fv_device_add(PyObject* method, const at::Tensor& t, PyObject* grad, int64_t version, PyObject* parameter) {
  if (!ready()) return nullptr;
  if (!PyMethod_Check(method)) return Py_NewRef(Py_NotImplemented);
  PyObject* pending = PyMethod_GET_SELF(method);
  Config config;
  if (!read_config(pending, config)) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return nullptr;
    PyErr_Clear();  // (not a DeviceSummaries)
    return Py_NewRef(Py_NotImplemented);
  }
  if (PyMethod_GET_FUNCTION(method) != (parameter == nullptr ? config.add : config.add_leaf))
    return Py_NewRef(Py_NotImplemented);
  return device_add(pending, config, t, grad, version, parameter);
}

// device_add(pending, grad, parameter or None): device_add for Python (tests): the summary, or NotImplemented where
// DeviceSummaries.add (parameter None) or add_leaf must take it.
PyObject* fv_device_add_py(PyObject* const* args, Py_ssize_t n) {
  if (n != 3) {
    PyErr_Format(PyExc_TypeError, "device_add takes 3 arguments (%zd given)", n);
    return nullptr;
  }
  if (!THPVariable_Check(args[1]) || (args[2] != Py_None && !THPVariable_Check(args[2]))) {
    PyErr_SetString(PyExc_TypeError, "device_add: expected (pending, a tensor, a tensor or None)");
    return nullptr;
  }
  const at::Tensor& t = THPVariable_Unpack(args[1]);
  int64_t version = -1;
  try {
    version = t.unsafeGetTensorImpl()->version_counter().current_version();
  } catch (...) {  // an inference tensor keeps no version: Python's method takes it
  }
  if (!ready()) return nullptr;
  Config config;
  if (!read_config(args[0], config)) return nullptr;
  return device_add(args[0], config, t, args[1], version, args[2] == Py_None ? nullptr : args[2]);
}
