// forgeviz's gradient hooks, in C++.
//
// Why C++: forgeviz records what every Node of a backward pass receives and sends. Through
// Node.register_hook that is, per Node, a Python hook registered (a RemovableHandle, a dict), a call
// that takes the GIL and wraps every gradient in a Python object, and a summary per gradient: about
// half the time of a small training step. Here a hook is a torch::autograd::FunctionPostHook: it
// summarises float CPU gradients in one pass each (tensor_stats.cpp), without the GIL, and keeps the
// numbers; Python turns them into records when the backward call ends (grads.py). A float gradient
// on the device path (CUDA's by default, every float one with FORGEVIZ_SUMMARIES=device) is summarised
// where it lives by device_summary.py: once per gradient, with the GIL, the hook takes its add()'s common
// cases in C++ (device_path.cpp) or calls add(), and keeps the summary it gets (numbers to come). A
// gradient this cannot summarise (on another device, of another dtype, holding NaN or infinity) and a
// Node whose local derivatives are shown (a small elementwise one) go to the Node's Python hook instead,
// with the same arguments Node.register_hook would give it.
//
// Built as a library of its own (it needs Python's and torch's Python headers, which the CPU ledger
// does not): without it, forgeviz registers Python hooks, as before.
#include "extension.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SequenceNumber.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/python_anomaly_mode.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/object_ptr.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

extern "C" int fv_summarize_tensor(const void* impl, int sample, int bins, int values_cap, double* out,
                                   int64_t* counts);  // tensor_stats.cpp
PyObject* fv_fill_device_rows(PyObject* const* args, Py_ssize_t n);  // device_path.cpp
PyObject* fv_device_add(PyObject* method, const at::Tensor& t, PyObject* grad, int64_t version,
                        PyObject* parameter);  // device_path.cpp
PyObject* fv_device_add_py(PyObject* const* args, Py_ssize_t n);  // device_path.cpp

namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

constexpr int kNone = -2;  // an undefined gradient (None in Python)
constexpr int kFail = -1;  // a gradient the Node's Python hook summarises
constexpr int kSkip = -3;  // a gradient whose device summary failed: the Node goes unrecorded this pass

// Node kinds, as grads.py passes them.
constexpr int kPlain = 0, kChain = 1, kLeafWithGrad = 2, kLeafWithoutGrad = 3;

// Which float gradients go to device_summary.py, as grads.py passes it: none (FORGEVIZ_SUMMARIES=read),
// CUDA's (the default), or CUDA's and the CPU's (FORGEVIZ_SUMMARIES=device).
constexpr int kDeviceNone = 0, kDeviceCuda = 1, kDeviceAll = 2;

// Holds the GIL while in scope. A hook that calls Python takes it before the pass's lock, as every
// function Python calls does (it holds the GIL and then locks): one order, no deadlock.
struct Gil {
  PyGILState_STATE state = PyGILState_Ensure();
  Gil() = default;
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;
  ~Gil() { PyGILState_Release(state); }
};

// The Python error being raised, as "what: Type: message", cleared: a fault's text.
std::string python_error(const char* what) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text(what);
  if (type != nullptr) {
    text += ": ";
    text += reinterpret_cast<PyTypeObject*>(type)->tp_name;
  }
  PyObject* message = value != nullptr ? PyObject_Str(value) : nullptr;
  const char* utf8 = message != nullptr ? PyUnicode_AsUTF8(message) : nullptr;
  if (utf8 != nullptr && *utf8 != '\0') {
    text += ": ";
    text += utf8;
  }
  Py_XDECREF(message);
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text;
}

constexpr int kMaxDims = 16, kMaxValues = 256, kMaxBins = 256;  // what fv_arm accepts

// How a Node is owned changed: torch 2.12 made it an intrusive_ptr_target; before, a shared_ptr
// (enable_shared_from_this). Templates, so that only the branch for the torch at hand is compiled.
template <typename N>
auto weak_node(N* node) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>) {
    return c10::weak_intrusive_ptr<N>(c10::intrusive_ptr<N>::reclaim_copy(node));
  } else {
    return std::weak_ptr<N>(node->shared_from_this());
  }
}

template <typename N>
PyObject* node_object(N* node) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>) {
    return torch::autograd::functionToPyObject(c10::intrusive_ptr<N>::reclaim_copy(node));
  } else {
    return torch::autograd::functionToPyObject(node->shared_from_this());
  }
}

using WeakNode = decltype(weak_node(static_cast<Node*>(nullptr)));

// A Python-defined Node's own pointer: held strongly in torch 2.12 on, by a std::weak_ptr before (the
// graph holds it alive either way while its Python object is in hand).
template <typename P>
auto raw_node(const P& cdata) -> decltype(cdata.get()) {
  return cdata.get();
}
template <typename T>
T* raw_node(const std::weak_ptr<T>& cdata) {
  return cdata.lock().get();
}

// One gradient's numbers. Its values or counts live in the pass's pools: a summary is taken in every
// hook, and vectors of its own would be allocations there.
struct Summary {
  int ndim;
  int dtype;  // 0: float32, 1: float64
  int64_t numel;
  int64_t shape[kMaxDims];
  double stats[4];  // min, max, sum, norm
  int64_t values_at = -1, counts_at = -1;  // where in the pools, or -1
  int values_n = 0, counts_n = 0;
  // On the device path: its index in the pass's externals, the summaries device_summary.py made; the
  // numbers above are then not kept here
  Py_ssize_t external = -1;
};

struct Row {
  int64_t nid;  // the Node's forgeviz id (its metadata's fv_id)
  Py_ssize_t position;  // the Node's index in the pass's order_ids
  int kind;
  c10::SmallVector<int, 4> outs, ins;  // summaries of grad_outputs and grad_inputs
  int leaf;  // the leaf's .grad after the pass (AccumulateGrad); kNone when it has none
  at::Tensor variable;  // an AccumulateGrad's leaf (alive anyway while its Node is), for its history
};

struct Seen {
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;  // keeps the address from being reused, not the tensor alive
  int64_t version;
  int slot;
};

struct Pass {
  std::mutex mu;
  bool closed = false;
  int sample, bins, values_cap, chain_cap;
  // fallback(node, nid, kind, grad_inputs, grad_outputs); owned, released with the GIL
  PyObject* fallback = nullptr;
  // The device path (kDevice*): device_add(grad) and device_add_leaf(grad, parameter) give a gradient's
  // summary, numbers to come (device_summary.DeviceSummaries.add, add_leaf); owned, released with the
  // GIL when the pass closes. externals: the list of the summaries they gave, by Summary::external
  // (owned, released when the capsule goes: rows are read after the pass closed).
  int device = kDeviceNone;
  PyObject* device_add = nullptr;
  PyObject* device_add_leaf = nullptr;
  PyObject* externals = nullptr;
  std::vector<Summary> summaries;
  std::vector<double> values;  // the pools
  std::vector<int64_t> counts;
  std::vector<Row> rows;
  // One gradient is usually one Node's grad_input and the next one's grad_output: summarised once.
  std::unordered_map<const c10::TensorImpl*, Seen> seen;
  // A dense gradient by its first element's address: a transposed view (TBackward0's grad_input of a
  // Linear's weight) holds the same values as the tensor it views, so it has its numbers and histogram,
  // with its own shape. Only for gradients too large to keep their values (those keep them in order).
  std::unordered_map<const void*, Seen> same_values;
  std::vector<std::pair<WeakNode, uintptr_t>> hooks;
  std::vector<std::string> faults;
  // The graph armed, for a recording (fv_shape, fv_order): the signature_of() its Nodes in the walk's
  // order, and their ids in that order
  uint64_t signature = 0;
  std::vector<int64_t> order_ids;
  // Each leaf's .grad as its AccumulateGrad's hook left it, by the leaf's TensorImpl: which tensor, at which
  // version, and the slot of its summary (fv_leaf_stats: a recording's optimizer step finds the same numbers
  // there when .grad is still that tensor at that version)
  struct LeafGrad {
    c10::weak_intrusive_ptr<c10::TensorImpl> grad;
    int64_t version;
    int slot;
  };
  std::unordered_map<const c10::TensorImpl*, LeafGrad> leaf_grads;

  // Whether t goes to device_summary.py (grads.py's on_device): a strided float gradient on CUDA, or on
  // the CPU too with kDeviceAll; not a tensor subclass's (its Python hook reads it with __torch_function__
  // off), nor a sparse one (summarised as it is, read at once).
  bool to_device(const at::Tensor& t) const {
    if (device == kDeviceNone || !t.defined() || t.layout() != c10::kStrided) return false;
    const auto type = t.scalar_type();
    if (type != at::kFloat && type != at::kDouble && type != at::kHalf && type != at::kBFloat16) return false;
    const auto where = t.device().type();
    if (where != c10::DeviceType::CUDA && !(device == kDeviceAll && where == c10::DeviceType::CPU)) return false;
    return !t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python);
  }

  // The slot of t's summary (with mu held, and the GIL for a gradient to_device), kNone for an undefined
  // tensor, kFail for one to hand over, kSkip for one whose device summary failed (a fault). On the
  // device path, `parameter`: the leaf with no .grad that t alone is about to become the .grad of
  // (device_add_leaf summarises that .grad when the pass ends).
  int summarize(const at::Tensor& t, const at::Tensor* parameter = nullptr) {
    if (!t.defined()) return kNone;
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    int64_t version = -1;
    try {
      version = impl->version_counter().current_version();
    } catch (...) {  // an inference tensor keeps no version: summarised each time it is seen
    }
    auto found = seen.find(impl);
    if (found != seen.end() && version >= 0 && found->second.version == version) return found->second.slot;
    if (to_device(t)) return summarize_on_device(t, version, parameter, found);
    const void* first = dense_values(impl, version);
    if (first != nullptr) {
      auto same = same_values.find(first);
      if (same != same_values.end() && same->second.version == version && same->second.impl.lock()) {
        const Summary& from = summaries[static_cast<size_t>(same->second.slot)];
        if (from.numel == impl->numel() && from.dtype == dtype_code(impl) && from.values_at < 0) {
          Summary s = from;  // (a view's version counter is its base's: the same values)
          s.ndim = static_cast<int>(std::min<int64_t>(impl->dim(), kMaxDims));
          std::copy_n(impl->sizes().begin(), s.ndim, s.shape);
          return keep(impl, version, std::move(s), found, nullptr);
        }
      }
    }
    double out[4 + kMaxValues];
    int64_t bin_counts[kMaxBins];
    if (fv_summarize_tensor(impl, sample, bins, values_cap, out, bin_counts) != 0) return kFail;
    Summary s;
    s.ndim = static_cast<int>(impl->dim());  // fv_summarize_tensor read at most kMaxDims
    std::copy_n(impl->sizes().begin(), s.ndim, s.shape);
    s.dtype = dtype_code(impl);
    s.numel = impl->numel();
    std::copy_n(out, 4, s.stats);
    if (s.numel <= values_cap) {
      s.values_at = static_cast<int64_t>(values.size());
      s.values_n = static_cast<int>(s.numel);
      values.insert(values.end(), out + 4, out + 4 + s.numel);
    } else if (bins > 0) {
      s.counts_at = static_cast<int64_t>(counts.size());
      s.counts_n = bins;
      counts.insert(counts.end(), bin_counts, bin_counts + bins);
    }
    const void* shared = s.values_at < 0 ? first : nullptr;
    return keep(impl, version, std::move(s), found, shared);
  }

  // t's summary from device_summary.py (with the GIL held): its views of the same memory share it there.
  int summarize_on_device(const at::Tensor& t, int64_t version, const at::Tensor* parameter,
                          std::unordered_map<const c10::TensorImpl*, Seen>::iterator found) {
    if (device_add == nullptr || device_add_leaf == nullptr || externals == nullptr) return kFail;
    PyObject* made = nullptr;
    PyObject* grad = THPVariable_Wrap(t);
    PyObject* leaf = grad != nullptr && parameter != nullptr ? THPVariable_Wrap(*parameter) : nullptr;
    if (grad != nullptr && (parameter == nullptr || leaf != nullptr)) {
      // Its reads of the gradient are not the user's ops: no torch function mode sees them (as the Python
      // hooks' DisableTorchFunction); device_summary keeps its reductions from dispatch modes itself.
      const auto before = at::impl::PythonTorchFunctionTLS::get_disabled_state();
      at::impl::PythonTorchFunctionTLS::set_disabled_state(at::impl::TorchFunctionDisabledState::ALL_DISABLED);
      // DeviceSummaries.add's and add_leaf's common cases in C++ (device_path.cpp), when they are its methods
      made = fv_device_add(leaf != nullptr ? device_add_leaf : device_add, t, grad, version, leaf);
      if (made == Py_NotImplemented) {
        Py_DECREF(made);
        made = leaf != nullptr ? PyObject_CallFunctionObjArgs(device_add_leaf, grad, leaf, nullptr)
                               : PyObject_CallOneArg(device_add, grad);
      }
      at::impl::PythonTorchFunctionTLS::set_disabled_state(before);
    }
    Py_XDECREF(leaf);
    Py_XDECREF(grad);
    if (made == nullptr || PyList_Append(externals, made) != 0) {
      Py_XDECREF(made);
      fault(python_error("summarising a gradient on its device failed"));
      return kSkip;
    }
    Py_DECREF(made);
    Summary s;
    s.ndim = 0;
    s.dtype = -1;
    s.numel = t.numel();
    s.external = PyList_GET_SIZE(externals) - 1;
    return keep(t.unsafeGetTensorImpl(), version, std::move(s), found, nullptr);
  }

  static int dtype_code(const c10::TensorImpl* impl) {
    return impl->dtype() == caffe2::TypeMeta::Make<float>() ? 0 : 1;
  }

  // The address of a dense gradient's lowest element (torch's strides are never negative), when its
  // values are too many to keep and it has a version: then that address, its numel and dtype name
  // the same values wherever they are seen again in this pass. Else nullptr.
  const void* dense_values(c10::TensorImpl* impl, int64_t version) const {
    if (version < 0 || impl->numel() <= values_cap || impl->layout() != c10::kStrided || !impl->has_storage() ||
        !impl->is_non_overlapping_and_dense())
      return nullptr;
    try {
      return impl->data();
    } catch (...) {
      return nullptr;
    }
  }

  // Summary s is the slot of impl (at version); `first`: also of every view of the same values.
  int keep(c10::TensorImpl* impl, int64_t version, Summary s,
           std::unordered_map<const c10::TensorImpl*, Seen>::iterator found, const void* first) {
    const int slot = static_cast<int>(summaries.size());
    summaries.push_back(std::move(s));
    if (version >= 0) {
      auto weak = [impl] {
        return c10::weak_intrusive_ptr<c10::TensorImpl>(
            c10::intrusive_ptr<c10::TensorImpl>::unsafe_reclaim_from_nonowning(impl));
      };
      if (found != seen.end())
        found->second = Seen{weak(), version, slot};
      else
        seen.emplace(impl, Seen{weak(), version, slot});
      if (first != nullptr) same_values.insert_or_assign(first, Seen{weak(), version, slot});
    }
    return slot;
  }

  void fault(std::string message) {
    if (faults.size() < 20) faults.push_back(std::move(message));
  }

  // The leaf's .grad now (after AccumulateGrad and its post-accumulate hooks) and its summary's slot (on the
  // device path, one whose numbers are still to come: fv_leaf_summaries), when that summary is .grad's: not for
  // a leaf with a post-accumulate hook (one that changed .grad in place leaves the incoming gradient's summary
  // behind it).
  void remember_leaf(const at::Tensor& leaf, const at::Tensor& grad, int slot) {
    if (slot < 0) return;
    if (torch::autograd::impl::post_acc_grad_hooks(leaf) != nullptr) return;
    try {
      const int64_t version = grad.unsafeGetTensorImpl()->version_counter().current_version();
      leaf_grads.insert_or_assign(leaf.unsafeGetTensorImpl(),
                                  LeafGrad{c10::weak_intrusive_ptr<c10::TensorImpl>(grad.getIntrusivePtr()),
                                           version, slot});
    } catch (...) {  // an inference tensor keeps no version: its .grad is read at the step
    }
  }
};

PyObject* wrap_all(const variable_list& tensors) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(tensors.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    PyObject* item = tensors[i].defined() ? THPVariable_Wrap(tensors[i]) : (Py_INCREF(Py_None), Py_None);
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

// (grad_input index, the AccumulateGrad its edge reaches): a leaf with no .grad when the pass was armed,
// fed by that edge alone, so that the gradient becomes its .grad (see Pass::summarize's `parameter`)
using ToLeaves = c10::SmallVector<std::pair<size_t, torch::autograd::AccumulateGrad*>, 2>;

struct Hook : torch::autograd::FunctionPostHook {
  std::shared_ptr<Pass> pass;
  Node* node;  // the Node that owns this hook
  int64_t nid;
  Py_ssize_t position;  // in the pass's order_ids
  int kind;
  torch::autograd::AccumulateGrad* leaf;  // the same Node, for an AccumulateGrad
  ToLeaves to_leaves;  // (the Node's next edges hold those Nodes alive)

  Hook(std::shared_ptr<Pass> p, Node* n, int64_t i, Py_ssize_t at, int k, torch::autograd::AccumulateGrad* l,
       ToLeaves t)
      : pass(std::move(p)), node(n), nid(i), position(at), kind(k), leaf(l), to_leaves(std::move(t)) {}

  variable_list operator()(const variable_list& grad_inputs, const variable_list& grad_outputs) override {
    try {
      if (!record(grad_inputs, grad_outputs)) hand_over(grad_inputs, grad_outputs);
    } catch (const std::exception& e) {  // never into the user's backward
      std::lock_guard<std::mutex> lock(pass->mu);
      pass->fault(std::string("recording gradients failed: ") + e.what());
    } catch (...) {
      std::lock_guard<std::mutex> lock(pass->mu);
      pass->fault("recording gradients failed");
    }
    return grad_inputs;
  }

  // Whether a gradient of this call goes to device_summary.py: then the hook needs the GIL.
  bool calls_python(const variable_list& grad_inputs, const variable_list& grad_outputs) const {
    if (pass->device == kDeviceNone) return false;
    for (const auto& g : grad_outputs)
      if (pass->to_device(g)) return true;
    for (const auto& g : grad_inputs)
      if (pass->to_device(g)) return true;
    return leaf != nullptr && leaf->variable.defined() && pass->to_device(leaf->variable.grad());
  }

  // The leaf whose .grad grad_inputs[i] alone is about to become, when it goes to device_summary.py
  // (grads.py's leaf_summary): else nullptr.
  const at::Tensor* parameter_of(size_t i, const at::Tensor& g) const {
    for (const auto& [index, to] : to_leaves)
      if (index == i && to->variable.defined() && !to->variable.grad().defined() && pass->to_device(g))
        return &to->variable;
    return nullptr;
  }

  // Records the Node's gradients; false when its Python hook is to do it.
  bool record(const variable_list& grad_inputs, const variable_list& grad_outputs) {
    std::optional<Gil> gil;  // (before the lock: see Gil)
    if (calls_python(grad_inputs, grad_outputs)) gil.emplace();
    std::lock_guard<std::mutex> lock(pass->mu);
    if (pass->closed) return true;
    if (kind == kChain && !grad_outputs.empty() && grad_outputs[0].defined() &&
        grad_outputs[0].numel() <= pass->chain_cap && !pass->to_device(grad_outputs[0]))
      return false;  // small and elementwise: its Python hook reads the local derivatives too
    Row row{nid, position, kind, {}, {}, kNone, {}};
    row.outs.reserve(grad_outputs.size());
    row.ins.reserve(grad_inputs.size());
    for (const auto& g : grad_outputs) {
      const int slot = pass->summarize(g);
      if (slot == kFail || slot == kSkip) return slot == kSkip;  // (a skip's fault is reported)
      row.outs.push_back(slot);
    }
    for (size_t i = 0; i < grad_inputs.size(); ++i) {
      const int slot = pass->summarize(grad_inputs[i], to_leaves.empty() ? nullptr : parameter_of(i, grad_inputs[i]));
      if (slot == kFail || slot == kSkip) return slot == kSkip;
      row.ins.push_back(slot);
    }
    if (leaf != nullptr) {
      if (!leaf->variable.defined()) return false;  // released: the Python hook reports what it finds
      // AccumulateGrad has updated .grad (a post-accumulate hook may have reset it). A .grad that
      // was undefined became the incoming gradient: same values, so its summary.
      const at::Tensor& grad = leaf->variable.grad();
      if (grad.defined()) {
        const bool incoming = kind == kLeafWithoutGrad && !row.outs.empty() && row.outs[0] >= 0;
        row.leaf = incoming ? row.outs[0] : pass->summarize(grad);
        if (row.leaf == kFail || row.leaf == kSkip) return row.leaf == kSkip;
        pass->remember_leaf(leaf->variable, grad, row.leaf);
      }
      row.variable = leaf->variable;
    }
    pass->rows.push_back(std::move(row));
    return true;
  }

  void hand_over(const variable_list& grad_inputs, const variable_list& grad_outputs) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* fallback = pass->fallback;  // cleared only with the GIL held
    if (fallback != nullptr) {
      Py_INCREF(fallback);
      PyObject* self = node_object(node);
      PyObject* ins = self != nullptr ? wrap_all(grad_inputs) : nullptr;
      PyObject* outs = ins != nullptr ? wrap_all(grad_outputs) : nullptr;
      PyObject* done = outs != nullptr ? PyObject_CallFunction(fallback, "OLiOO", self, static_cast<long long>(nid),
                                                               kind, ins, outs)
                                       : nullptr;
      if (done == nullptr) PyErr_Clear();  // the Python hook reports its own faults; this is ours failing
      Py_XDECREF(done);
      Py_XDECREF(outs);
      Py_XDECREF(ins);
      Py_XDECREF(self);
      Py_DECREF(fallback);
    }
    PyGILState_Release(gil);
  }
};

// grads.NodeGone in C: kept in a Node's metadata, a dict that dies with the Node, it calls
// append(nid) when it goes (the store's dead deque). One per Node of every backward pass: a Python
// object with __init__ and __del__ cost more than the rest of arming the Node.
struct Gone {
  PyObject_HEAD
  PyObject* append;
  PyObject* nid;
};

void gone_dealloc(PyObject* self) {
  auto* gone = reinterpret_cast<Gone*>(self);
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // a dealloc keeps any error being raised as it was
  if (gone->append != nullptr && gone->nid != nullptr) {
    PyObject* done = PyObject_CallOneArg(gone->append, gone->nid);
    if (done == nullptr) PyErr_Clear();
    Py_XDECREF(done);
  }
  PyErr_Restore(type, value, traceback);
  Py_CLEAR(gone->append);
  Py_CLEAR(gone->nid);
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);  // a heap type's instances hold it
}

PyTypeObject* gone_type() {
  static PyTypeObject* type = [] {
    static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(gone_dealloc)}, {0, nullptr}};
    static PyType_Spec spec = {"forgeviz.NodeGone", sizeof(Gone), 0, Py_TPFLAGS_DEFAULT, slots};
    return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  }();
  return type;
}

PyObject* new_gone(PyObject* append, PyObject* nid) {
  PyTypeObject* type = gone_type();
  if (type == nullptr) return nullptr;
  auto* gone = PyObject_New(Gone, type);
  if (gone == nullptr) return nullptr;
  Py_INCREF(append);
  Py_INCREF(nid);
  gone->append = append;
  gone->nid = nid;
  return reinterpret_cast<PyObject*>(gone);
}

Node* node_of(PyObject* obj) {
  if (torch::autograd::THPCppFunction_Check(obj))
    return reinterpret_cast<torch::autograd::THPCppFunction*>(obj)->cdata.get();
  if (THPFunction_Check(obj)) return raw_node(reinterpret_cast<THPFunction*>(obj)->cdata);
  return nullptr;
}

void close(Pass& pass) {
  std::lock_guard<std::mutex> lock(pass.mu);
  pass.closed = true;
  for (auto& [weak, key] : pass.hooks) {
    auto node = weak.lock();
    if (node) node->del_post_hook(key);
  }
  pass.hooks.clear();
  Py_CLEAR(pass.fallback);
  Py_CLEAR(pass.device_add);
  Py_CLEAR(pass.device_add_leaf);
}

void drop(PyObject* capsule) {
  auto* held = static_cast<std::shared_ptr<Pass>*>(PyCapsule_GetPointer(capsule, "forgeviz.Pass"));
  if (held == nullptr) return;
  close(**held);  // a pass never finished: its hooks go with it
  Py_CLEAR((*held)->externals);  // (no hook runs once closed, and nothing reads a pass without its capsule)
  delete held;
}

Pass* pass_of(PyObject* capsule) {
  auto* held = static_cast<std::shared_ptr<Pass>*>(PyCapsule_GetPointer(capsule, "forgeviz.Pass"));
  return held != nullptr ? held->get() : nullptr;
}

PyObject* summary_tuple(const Pass& pass, const Summary& s) {
  PyObject* shape = PyTuple_New(s.ndim);
  for (int i = 0; i < s.ndim; ++i) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(s.shape[i]));
  PyObject* values = Py_None;
  PyObject* counts = Py_None;
  if (s.values_at >= 0) {
    values = PyList_New(s.values_n);
    for (int i = 0; i < s.values_n; ++i) PyList_SET_ITEM(values, i, PyFloat_FromDouble(pass.values[s.values_at + i]));
  } else {
    Py_INCREF(values);
  }
  if (s.counts_at >= 0) {
    counts = PyList_New(s.counts_n);
    for (int i = 0; i < s.counts_n; ++i) PyList_SET_ITEM(counts, i, PyLong_FromLongLong(pass.counts[s.counts_at + i]));
  } else {
    Py_INCREF(counts);
  }
  return Py_BuildValue("(NiLddddNN)", shape, s.dtype, static_cast<long long>(s.numel), s.stats[0], s.stats[1],
                       s.stats[2], s.stats[3], values, counts);
}

PyObject* slots_tuple(const c10::SmallVector<int, 4>& slots) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(slots.size()));
  for (size_t i = 0; i < slots.size(); ++i) PyTuple_SET_ITEM(tuple, i, PyLong_FromLong(slots[i]));
  return tuple;
}

// The module's functions (Python calls them through the methods table at the end: a ctypes call
// converts its arguments in Python, which costs more than most of what these do).

// The line `frame` (running `code`) is at. Python 3.11 on: kept per (code, instruction), since PyFrame_GetLineNumber
// decodes the code's line table from its start at every call (_PyCode_CheckLineNumber: ~6 us of a small model's
// training step, one call an op), where a loop's ops come from the same few instructions. Each code object is held
// while its lines are kept, so no other code can take its address meanwhile; past kLineCache lines, or kLineCodes
// code objects held (a cell run again compiles new ones, and a code holds its constants), the cache starts over.
// (A frame being traced has its f_lineno set: the line a tracer sees is the line of its instruction, this.) With the
// GIL held, as every caller here.
int frame_line(PyFrameObject* frame, PyCodeObject* code) {
#if PY_VERSION_HEX >= 0x030B0000
  constexpr size_t kLineCache = 16384, kLineCodes = 1024;
  struct KeyHash {
    size_t operator()(const std::pair<PyCodeObject*, int>& key) const noexcept {
      return std::hash<const void*>()(key.first) ^ (static_cast<size_t>(key.second) * 0x9E3779B97F4A7C15ull);
    }
  };
  static std::unordered_map<std::pair<PyCodeObject*, int>, int, KeyHash> lines;
  static std::unordered_set<PyCodeObject*> held;  // (a reference each)
  const int lasti = PyFrame_GetLasti(frame);
  if (lasti < 0) return PyFrame_GetLineNumber(frame);  // (not started yet: Python's own answer)
  const auto key = std::make_pair(code, lasti);
  const auto found = lines.find(key);
  if (found != lines.end()) return found->second;
  if (lines.size() >= kLineCache || held.size() >= kLineCodes) {
    // (emptied before the references go: a code freed here may run a weakref callback, which may come back here)
    std::vector<PyCodeObject*> dropped(held.begin(), held.end());
    lines.clear();
    held.clear();
    for (PyCodeObject* kept : dropped) Py_DECREF(kept);
  }
  const int line = PyCode_Addr2Line(code, lasti);
  if (held.insert(code).second) Py_INCREF(code);
  lines.emplace(key, line);
  return line;
#else
  (void)code;
  return PyFrame_GetLineNumber(frame);
#endif
}

// The user's (filename, line) nearest `frame` (a new reference, which this takes) and up: the first frame whose file
// `known` (a dict: filename -> whether it is the user's) says is the user's, asking `classify(filename)` about one it
// does not hold; (None, None) when there is none. nullptr with a Python error set.
PyObject* walk_user_location(PyFrameObject* frame, PyObject* known_files, PyObject* classify) {
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    PyObject* filename = code->co_filename;
    PyObject* known = PyDict_GetItemWithError(known_files, filename);
    int user;
    if (known != nullptr) {
      user = known == Py_True;
    } else if (PyErr_Occurred()) {
      user = -1;
    } else {
      PyObject* decided = PyObject_CallOneArg(classify, filename);
      user = decided != nullptr ? PyObject_IsTrue(decided) : -1;
      Py_XDECREF(decided);
    }
    if (user != 0) {
      PyObject* found = user > 0 ? Py_BuildValue("(Oi)", filename, frame_line(frame, code)) : nullptr;
      Py_DECREF(code);
      Py_DECREF(frame);
      return found;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return Py_BuildValue("(OO)", Py_None, Py_None);
}

// What an op's tag is made of, for CaptureSession.make_tag's work done here (fv_torch_function's ops): its four
// Python calls an op (make_tag, _op_name, user_location, ModuleStack.current) cost about 1 us an op in a step.
struct TagParts {
  PyObject* op_names;  // session.py's _OP_NAMES: func -> (op, qualified name)
  PyObject* op_name;   // session.py's _op_name(func), which fills it (asked only when it misses)
  PyObject* known;     // source.py's _is_user_file
  PyObject* classify;  // source.py's _user_file
  PyObject* modules;   // the session's ModuleStack: its _stack's top names the running module
};

// make_tag(func, where) as session.py makes it: (op, qualified name, filename, line, the running module), where
// `where` (None: the nearest user frame's) is (filename, line). A new reference, or nullptr with an error set.
PyObject* make_tag_natively(const TagParts& parts, PyObject* func, PyObject* where) {
  static PyObject* const stack_name = PyUnicode_InternFromString("_stack");
  PyObject* names = PyDict_GetItemWithError(parts.op_names, func);
  if (names != nullptr) {
    Py_INCREF(names);
  } else {
    PyErr_Clear();  // (an unhashable callable: _op_name names it without its cache)
    names = PyObject_CallOneArg(parts.op_name, func);
    if (names == nullptr) return nullptr;
  }
  PyObject* location = nullptr;
  if (where != Py_None) {
    location = Py_NewRef(where);
  } else {
    PyFrameObject* frame = PyEval_GetFrame();  // (borrowed) the mode's: forgeviz's file, so the walk passes it
    Py_XINCREF(frame);
    location = walk_user_location(frame, parts.known, parts.classify);
  }
  PyObject* stack = location != nullptr ? PyObject_GetAttr(parts.modules, stack_name) : nullptr;
  PyObject* tag = nullptr;
  if (stack != nullptr) {
    PyObject* current = Py_None;  // ModuleStack.current(): the innermost running module's (root id, root type, ...)
    if (PyList_Check(stack) && PyList_GET_SIZE(stack) > 0) {
      PyObject* top = PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1);
      current = PyTuple_Check(top) && PyTuple_GET_SIZE(top) == 2 ? PyTuple_GET_ITEM(top, 1) : Py_None;
    }
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) != 2 || !PyTuple_Check(location) ||
        PyTuple_GET_SIZE(location) != 2) {
      PyErr_SetString(PyExc_TypeError, "make_tag: _op_name gives (op, qualified name), a location (filename, line)");
    } else {
      tag = PyTuple_Pack(5, PyTuple_GET_ITEM(names, 0), PyTuple_GET_ITEM(names, 1), PyTuple_GET_ITEM(location, 0),
                         PyTuple_GET_ITEM(location, 1), current);
    }
  }
  Py_XDECREF(stack);
  Py_XDECREF(location);
  Py_DECREF(names);
  return tag;
}

// Tags the Nodes an op made, as session.py's CaptureSession.tag() does: the grad_fn of `out` (a tensor,
// or a tuple or list of them) gets "fv_op" = make_tag(func, where) in its metadata unless it has one,
// and so do the untagged Nodes behind it numbered from first_new (a composite op's inner Nodes).
// The tag is made at most once: by make_tag_natively from `native`'s parts (fv_torch_function's ops), else by
// make_tag. Returns 0, or -1 with a Python error set. In C++ because every
// op the user runs while forgeviz captures comes here: in Python, reading grad_fn and its metadata
// makes a Python object for the Node, and the inner walk one for each Node it passes.
int fv_tag(PyObject* out, long long first_new, PyObject* make_tag, PyObject* func, PyObject* where,
           const TagParts* native = nullptr) {
  static PyObject* const key_op = PyUnicode_InternFromString("fv_op");
  PyObject* tag = nullptr;
  int status = 0;
  auto tag_one = [&](PyObject* item) -> bool {  // false: an error is set
    if (!THPVariable_Check(item)) return true;
    const auto& grad_fn = THPVariable_Unpack(item).grad_fn();
    if (!grad_fn) return true;
    PyObject* dict = static_cast<torch::autograd::PyAnomalyMetadata*>(grad_fn->metadata())->dict();
    if (PyDict_GetItemWithError(dict, key_op) != nullptr) return true;
    if (PyErr_Occurred()) return false;
    if (tag == nullptr) {
      tag = native != nullptr ? make_tag_natively(*native, func, where)
                            : PyObject_CallFunctionObjArgs(make_tag, func, where, nullptr);
      if (tag == nullptr) return false;
    }
    if (PyDict_SetItem(dict, key_op, tag) != 0) return false;
    const int64_t end = static_cast<int64_t>(at::sequence_number::peek());
    if (end - first_new <= 1) return true;  // the op made one Node, its output's: the common case
    std::vector<Node*> todo{grad_fn.get()};
    while (!todo.empty()) {
      Node* node = todo.back();
      todo.pop_back();
      for (const auto& edge : node->next_edges()) {
        Node* child = edge.function.get();
        if (child == nullptr) continue;
        const auto number = static_cast<int64_t>(child->sequence_nr());
        if (number < first_new || number >= end) continue;  // made before the op (or a leaf's)
        PyObject* meta = static_cast<torch::autograd::PyAnomalyMetadata*>(child->metadata())->dict();
        if (PyDict_GetItemWithError(meta, key_op) != nullptr) continue;
        if (PyErr_Occurred() || PyDict_SetItem(meta, key_op, tag) != 0) return false;
        todo.push_back(child);
      }
    }
    return true;
  };
  try {
    if (PyTuple_Check(out) || PyList_Check(out)) {
      PyObject* items = PySequence_Fast(out, "fv_tag");
      if (items == nullptr) return -1;
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items) && status == 0; ++i)
        if (!tag_one(PySequence_Fast_GET_ITEM(items, i))) status = -1;
      Py_DECREF(items);
    } else if (!tag_one(out)) {
      status = -1;
    }
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    status = -1;
  }
  Py_XDECREF(tag);
  return status;
}

// The capture mode's __torch_function__ for one op, in C++: session.py's _TagMode.__torch_function__ calls it
// first (with CaptureSession.native_config's config) and runs its own Python body only for what this sends back as `slow`. An op
// through the mode cost about 5 us of Python a call (a 3-layer MLP's step sends about 20): here it is a few
// set lookups, the op and the tag. `config` is a tuple in ConfigSlot's order. What this leaves to Python: a
// backward (its hooks are armed there), an op after Nodes made out of the mode's sight (a custom
// Function's: its line is found there), and, through the session's helpers, a failed op, the memory
// timeline's and the doctor's look after an op. Returns the op's result, `slow`, or nullptr with the op's
// own exception (the helpers' faults never replace it: they are reported where they happen).
enum ConfigSlot { kSession, kNotOps, kBackwardFuncs, kInTransform, kMakeTag, kFailed, kAfterTraces, kAfterDoctor,
                  kTagFailed, kOpNames, kOpName, kKnownFiles, kClassify, kModules, kSlow, kConfigSize };

// Whether `item` is in `set`; an unhashable one is not (as the Python body's `except TypeError`).
bool in_set(PyObject* set, PyObject* item) {
  const int found = PySet_Contains(set, item);
  if (found < 0) PyErr_Clear();
  return found > 0;
}

// Calls helper(args...) with the error being raised (if any) kept aside and put back after: a helper
// that raises anyway is dropped (the op's own error, or its result, is what the user gets).
template <typename... A>
PyObject* call_aside(PyObject* helper, A... args) {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* result = PyObject_CallFunctionObjArgs(helper, args..., nullptr);
  if (result == nullptr) PyErr_Clear();
  PyErr_Restore(type, value, traceback);
  return result;
}

// Hands the Python error being raised, normalised, to helper(args..., the exception), then puts it back (`keep`: the
// user's own error goes on as it is) or drops it (a fault of forgeviz's, reported by the helper). A helper that
// raises in turn is dropped.
template <typename... A>
void tell_error(bool keep, PyObject* helper, A... args) {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value != nullptr && traceback != nullptr) PyException_SetTraceback(value, traceback);
  PyObject* told = PyObject_CallFunctionObjArgs(helper, args..., value != nullptr ? value : Py_None, nullptr);
  if (told == nullptr) PyErr_Clear();
  Py_XDECREF(told);
  if (keep) {
    PyErr_Restore(type, value, traceback);
  } else {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
  }
}

// The window between a recorded backward's end and the optimizer step after it (recording.py): while it is
// open, `exposed` counts the calls the mode sees that may write a .grad without moving its version counter:
// the functions in `exposing`, which hand out a tensor's memory with no version counter to see writes through
// it (Tensor.data, numpy(), data_ptr(), ...), and any in-place op (named with a trailing underscore, an
// augmented assignment, __setitem__, or given out=): some move no version (AMP's
// _amp_foreach_non_finite_check_and_unscale_ does not), so a version that stayed is not enough.
PyObject* exposing = nullptr;
uint64_t exposed = 0;

bool may_write(PyObject* func, PyObject* kwargs) {
  static PyObject* const name_name = PyUnicode_InternFromString("__name__");
  static PyObject* const out_name = PyUnicode_InternFromString("out");
  if (in_set(exposing, func)) return true;
  if (kwargs != nullptr && PyDict_Check(kwargs) && PyDict_GetItemWithError(kwargs, out_name) != nullptr) return true;
  PyObject* name = PyObject_GetAttr(func, name_name);
  if (name == nullptr || !PyUnicode_Check(name)) {
    PyErr_Clear();
    Py_XDECREF(name);
    return true;  // (a callable with no name: counted, as anything it may do)
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(name, &size);
  bool writes = text == nullptr;
  if (text != nullptr) {
    static const std::unordered_set<std::string_view> in_place = {
        "__setitem__", "__iadd__", "__isub__", "__imul__", "__imatmul__", "__itruediv__", "__ifloordiv__",
        "__imod__", "__ipow__", "__ilshift__", "__irshift__", "__iand__", "__ixor__", "__ior__"};
    const std::string_view n(text, static_cast<size_t>(size));
    const bool dunder = n.size() > 4 && n.substr(0, 2) == "__" && n.substr(n.size() - 2) == "__";
    writes = dunder ? in_place.count(n) > 0 : !n.empty() && n.back() == '_';
  }
  PyErr_Clear();
  Py_DECREF(name);
  return writes;
}

PyObject* fv_torch_function(PyObject* config, PyObject* func, PyObject* args, PyObject* kwargs) {
  static PyObject* const seen_name = PyUnicode_InternFromString("seen_seq");
  static PyObject* const traces_name = PyUnicode_InternFromString("traces");
  static PyObject* const doctor_name = PyUnicode_InternFromString("doctor");
  static PyObject* const no_writes_name = PyUnicode_InternFromString("no_writes");
  if (!PyTuple_Check(config) || PyTuple_GET_SIZE(config) != kConfigSize) {
    PyErr_SetString(PyExc_TypeError, "torch_function: the config is a tuple in ConfigSlot's order");
    return nullptr;
  }
  PyObject* const* c = &PyTuple_GET_ITEM(config, 0);
  if (exposing != nullptr && may_write(func, kwargs)) ++exposed;
  if (!PyTuple_Check(args) || (kwargs != nullptr && !PyDict_Check(kwargs))) return Py_NewRef(c[kSlow]);
  if (in_set(c[kNotOps], func)) return PyObject_Call(func, args, kwargs);  // .grad writes, record_function
  PyObject* transform = PyObject_CallNoArgs(c[kInTransform]);
  if (transform == nullptr) return nullptr;
  const int in_transform = PyObject_IsTrue(transform);
  Py_DECREF(transform);
  if (in_transform != 0) return in_transform < 0 ? nullptr : PyObject_Call(func, args, kwargs);
  if (in_set(c[kBackwardFuncs], func)) return Py_NewRef(c[kSlow]);
  PyObject* const session = c[kSession];
  PyObject* seen = PyObject_GetAttr(session, seen_name);
  if (seen == nullptr) return nullptr;
  const long long seen_seq = PyLong_AsLongLong(seen);
  Py_DECREF(seen);
  if (seen_seq == -1 && PyErr_Occurred()) return nullptr;
  const auto first_new = static_cast<long long>(at::sequence_number::peek());
  if (first_new != seen_seq) return Py_NewRef(c[kSlow]);  // a Node made out of sight: a Function's, perhaps
  PyObject* out = PyObject_Call(func, args, kwargs);  // the user's op
  if (out == nullptr) {  // the session's op_failed(func, args, kwargs, exc) hears of it; the error goes on as it is
    tell_error(true, c[kFailed], func, args, kwargs != nullptr ? kwargs : Py_None);
    return nullptr;
  }
  PyObject* next = PyLong_FromLongLong(static_cast<long long>(at::sequence_number::peek()));
  if (next == nullptr || PyObject_SetAttr(session, seen_name, next) != 0) {
    Py_XDECREF(next);
    Py_DECREF(out);
    return nullptr;
  }
  Py_DECREF(next);
  PyObject* traces = PyObject_GetAttr(session, traces_name);
  if (traces == nullptr) {
    Py_DECREF(out);
    return nullptr;
  }
  PyObject* where = (PyList_Check(traces) && PyList_GET_SIZE(traces) == 0) ? nullptr
                                                                          : call_aside(c[kAfterTraces], func, out);
  Py_DECREF(traces);
  const TagParts parts{c[kOpNames], c[kOpName], c[kKnownFiles], c[kClassify], c[kModules]};
  const bool parts_ok = PyDict_Check(parts.op_names) && PyDict_Check(parts.known);  // (else make_tag, in Python)
  if (fv_tag(out, first_new, c[kMakeTag], func, where != nullptr ? where : Py_None, parts_ok ? &parts : nullptr) != 0)
    tell_error(false, c[kTagFailed], func);  // a fault of forgeviz's: reported, the op's result stands
  Py_XDECREF(where);
  PyObject* doctor = PyObject_GetAttr(session, doctor_name);
  if (doctor == nullptr) {
    Py_DECREF(out);
    return nullptr;
  }
  if (doctor != Py_None) {  // in-place writes into tensors a Node saved: a set lookup for any other op
    PyObject* no_writes = PyObject_GetAttr(doctor, no_writes_name);
    const bool skip = no_writes != nullptr && PyAnySet_Check(no_writes) && in_set(no_writes, func);
    if (no_writes == nullptr) PyErr_Clear();
    Py_XDECREF(no_writes);
    if (!skip) Py_XDECREF(call_aside(c[kAfterDoctor], func, args, kwargs != nullptr ? kwargs : Py_None, out));
  }
  Py_DECREF(doctor);
  return out;
}

// The CPU ledger's hot calls (native/cpu_ledger.cpp, a library of its own that Python loads through ctypes),
// made from here: a ctypes call converts each argument in Python, about 2 us a call inside a training step, and
// the memory timeline makes several an op (a claim per tensor a Node saves, the naming of what the op
// allocated). ledger_bind gives the ledger functions' addresses once; the calls take the tensors themselves and
// read their storage here, as Tensor.untyped_storage().data_ptr() does.
struct LedgerCalls {  // in ledger_bind's order
  int64_t (*claim)(void*, uint64_t, uint32_t, uint32_t, int) = nullptr;
  int64_t (*name_fresh)(void*, uint64_t, uint64_t, double) = nullptr;
  int64_t (*sid_of)(void*, uint64_t, double) = nullptr;
  void (*set_context)(void*, uint32_t, uint32_t, uint32_t, uint32_t) = nullptr;
  int64_t (*recategorize)(void*, uint64_t, int, uint32_t, uint32_t) = nullptr;
  int64_t (*recategorize_many)(void*, const uint64_t*, int64_t, int, int64_t*) = nullptr;
  int64_t (*release_many)(void*, const uint64_t*, const int64_t*, int64_t) = nullptr;
  void (*forget_fresh)(void*) = nullptr;
};
constexpr int kLedgerCalls = 8;
LedgerCalls ledger_calls;


// The handle (the first argument) of the ledger call `name`, given `n` arguments where it takes `wanted`, once
// ledger_bind ran; nullptr with a Python error set.
void* ledger_call(const char* name, PyObject* const* args, Py_ssize_t n, Py_ssize_t wanted) {
  if (n != wanted) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, wanted, n);
    return nullptr;
  }
  if (ledger_calls.claim == nullptr) {
    PyErr_Format(PyExc_RuntimeError, "%s: ledger_bind() first", name);
    return nullptr;
  }
  void* handle = PyLong_AsVoidPtr(args[0]);
  if (handle == nullptr && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: a ledger handle, not 0", name);
  return handle;
}

// shapes[sid] = (tuple(tensor.shape), tensor.dtype) unless `shapes` holds sid (NativeLedger._remember_shape: the
// first tensor seen on a storage names its shape and dtype). A plain tuple of ints, not the torch.Size: the
// garbage collector stops tracking a tuple of untracked items, where a Size stays tracked for as long as it is
// remembered (thousands a run, which promoted to the oldest generation made a full collection every few thousand
// steps of a small model, each ~150 ms with torch loaded). False with a Python error set.
bool remember_shape(PyObject* shapes, int64_t sid, PyObject* tensor) {
  static PyObject* const shape_name = PyUnicode_InternFromString("shape");
  static PyObject* const dtype_name = PyUnicode_InternFromString("dtype");
  PyObject* key = PyLong_FromLongLong(sid);
  const int known = key != nullptr ? PyDict_Contains(shapes, key) : -1;
  bool ok = known > 0;
  if (known == 0) {
    PyObject* size = PyObject_GetAttr(tensor, shape_name);
    PyObject* shape = size != nullptr ? PySequence_Tuple(size) : nullptr;
    Py_XDECREF(size);
    PyObject* dtype = shape != nullptr ? PyObject_GetAttr(tensor, dtype_name) : nullptr;
    PyObject* value = dtype != nullptr ? PyTuple_Pack(2, shape, dtype) : nullptr;
    ok = value != nullptr && PyDict_SetItem(shapes, key, value) == 0;
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(value);
  }
  Py_XDECREF(key);
  return ok;
}

// fv_recategorize_many for the storages at `ptrs`: their storage ids (-1: not tracked).
std::vector<int64_t> recategorize_many(void* handle, const std::vector<uint64_t>& ptrs, long category) {
  std::vector<int64_t> sids(ptrs.size(), -1);
  if (!ptrs.empty())
    ledger_calls.recategorize_many(handle, ptrs.data(), static_cast<int64_t>(ptrs.size()), static_cast<int>(category),
                                   sids.data());
  return sids;
}

// The CPU storage `obj` (a tensor) lives in: its data pointer (as Tensor.untyped_storage().data_ptr() gives it) and
// the tensor's own bytes (numel times element size, as the ledger compares them). 1 for a CPU tensor, 0 for
// anything else (not a tensor, not strided, not on the CPU), -1 with a Python error set.
int storage_of(PyObject* obj, uint64_t& ptr, double& bytes) {
  if (!THPVariable_Check(obj)) return 0;
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined() || t.layout() != c10::kStrided || !t.device().is_cpu() || !t.has_storage()) return 0;
    try {
      ptr = reinterpret_cast<uint64_t>(t.storage().mutable_data());
    } catch (const c10::Error&) {
      return 0;  // a fake or functional tensor (a compile's, kept alive by its cache): no memory of its own
    }
    bytes = static_cast<double>(t.numel()) * static_cast<double>(t.element_size());
    return 1;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return -1;
  }
}

// A Node's name() as a Python str, and a hash of it for a graph's signature. name() demangles the Node's C++
// type at each call (microseconds, an allocation), so both are kept per type, except for a PyNode (a Python
// autograd.Function), whose name is its Python class's, made per Node. (PyNode is told by its mangled type
// name: libtorch_python does not export its type_info.) With the GIL held, so one thread at a time.
struct NodeName {
  PyObject* name;  // a new reference; nullptr on a Python error
  uint64_t hash;
};

NodeName node_name(Node* node) {
  struct Known {
    PyObject* name;  // interned, kept for the process; nullptr: a name per Node
    uint64_t hash;
  };
  // Keyed by the type_info's address: std::type_index hashes the mangled name, a strlen and a hash of it per
  // Node. (A type with two type_info objects, one per shared library, is cached twice, under the same name.)
  static std::unordered_map<const std::type_info*, Known> by_type;
  const std::type_info* type = &typeid(*node);
  auto found = by_type.find(type);
  if (found == by_type.end()) {
    Known known{nullptr, 0};
    if (std::strcmp(type->name(), "N5torch8autograd6PyNodeE") != 0) {
      const std::string name = node->name();
      known = {PyUnicode_InternFromString(name.c_str()), std::hash<std::string>()(name) | 1};
      if (known.name == nullptr) return {nullptr, 0};
    }
    found = by_type.emplace(type, known).first;
  }
  if (found->second.name != nullptr) {
    Py_INCREF(found->second.name);
    return {found->second.name, found->second.hash};
  }
  const std::string name = node->name();
  return {PyUnicode_FromString(name.c_str()), std::hash<std::string>()(name)};
}

// Every Node reachable from `roots` (a list of grad_fn objects or None), depth first, each once:
// grads.iter_graph's order, which positions a Node in fv_arm's and fv_walk's ids. False when a root is
// not a Node this knows.
bool walk_graph(PyObject* roots, std::vector<Node*>& order) {
  std::vector<Node*> todo;
  for (Py_ssize_t i = PyList_GET_SIZE(roots) - 1; i >= 0; --i) {
    PyObject* root = PyList_GET_ITEM(roots, i);
    if (root == Py_None) continue;
    Node* node = node_of(root);
    if (node == nullptr) return false;
    todo.push_back(node);
  }
  std::reverse(todo.begin(), todo.end());  // (popped from the back, as iter_graph pops its stack)
  std::unordered_set<Node*> seen;
  while (!todo.empty()) {
    Node* node = todo.back();
    todo.pop_back();
    if (!seen.insert(node).second) continue;
    order.push_back(node);
    for (const auto& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (next != nullptr && !seen.count(next)) todo.push_back(next);
    }
  }
  return true;
}

// The shape of a graph, for a recording that writes each distinct graph once (recording.py): a 64-bit
// FNV-1a hash of each Node's name and number of next edges, in `order`, and for an AccumulateGrad of its
// leaf's TensorImpl (the parameter it reaches). 0 on a Python error.
uint64_t signature_of(const std::vector<Node*>& order) {
  uint64_t signature = 1469598103934665603ULL;
  auto mix = [&signature](uint64_t word) {
    signature ^= word;
    signature *= 1099511628211ULL;
  };
  for (Node* node : order) {
    const NodeName named = node_name(node);
    if (named.name == nullptr) return 0;
    Py_DECREF(named.name);
    mix(named.hash);
    mix(node->next_edges().size());
    auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node);
    if (leaf != nullptr)
      mix(reinterpret_cast<uintptr_t>(leaf->variable.defined() ? leaf->variable.unsafeGetTensorImpl() : nullptr));
  }
  return signature;
}

// Adds a hook to every Node reachable from `roots` (a list of grad_fn objects), first giving each its
// forgeviz id in its metadata as grads.py's node_id() and GradStore.watch() would: "fv_id" from
// next(ids), and "fv_gone", which calls dead_append(nid) when the Node dies. A Node named in `chain` (a set) or an AccumulateGrad is
// recorded as grads.py's Python hooks record it. `fallback(node, nid, kind, grad_inputs,
// grad_outputs)` is called, with the GIL, for a Node whose gradients the hook hands over: one it cannot
// summarise, or a chain Node whose output has at most chain_cap elements. Summaries are
// fv_summarize_tensor's with `sample`, `bins` and `values_cap`, and on the device path (`device`, a
// kDevice* code) device_add(grad)'s or device_add_leaf(grad, parameter)'s. Returns the pass, None when a
// root is not a Node it knows (Python hooks then do it all), or NULL with a Python error set.
PyObject* fv_arm(PyObject* roots, PyObject* chain, PyObject* ids, PyObject* dead_append, PyObject* fallback,
                 int sample, int bins, int values_cap, int chain_cap, int device, PyObject* device_add,
                 PyObject* device_add_leaf) {
  static PyObject* const key_id = PyUnicode_InternFromString("fv_id");
  static PyObject* const key_gone = PyUnicode_InternFromString("fv_gone");
  static PyObject* const key_fed = PyUnicode_InternFromString("fv_fed");
  if (!PyList_Check(roots) || !PyAnySet_Check(chain)) {
    PyErr_SetString(PyExc_TypeError, "fv_arm: roots is a list and chain a set");
    return nullptr;
  }
  if (values_cap < 0 || values_cap > kMaxValues || bins < 0 || bins > kMaxBins) {
    PyErr_SetString(PyExc_ValueError, "fv_arm: values_cap and bins are at most 256");
    return nullptr;
  }
  if (device < kDeviceNone || device > kDeviceAll) {
    PyErr_Format(PyExc_ValueError, "fv_arm: expected a device path code 0, 1 or 2, got %d", device);
    return nullptr;
  }
  std::vector<Node*> order;
  if (!walk_graph(roots, order)) Py_RETURN_NONE;
  // How many edges reach each Node with none of its own (an AccumulateGrad): a leaf fed once is given
  // that one gradient as its .grad, so grads.py may summarise the gradient as the .grad when the pass ends
  std::unordered_map<Node*, int> fed;
  for (Node* node : order)
    for (const auto& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (next != nullptr && next->next_edges().empty()) ++fed[next];
    }
  auto pass = std::make_shared<Pass>();
  pass->signature = signature_of(order);
  if (pass->signature == 0 && PyErr_Occurred()) return nullptr;
  pass->order_ids.reserve(order.size());
  pass->sample = sample;
  pass->bins = bins;
  pass->values_cap = values_cap;
  pass->chain_cap = chain_cap;
  pass->summaries.reserve(64);
  pass->rows.reserve(64);
  Py_INCREF(fallback);
  pass->fallback = fallback;
  pass->device = device;
  Py_INCREF(device_add);
  pass->device_add = device_add;
  Py_INCREF(device_add_leaf);
  pass->device_add_leaf = device_add_leaf;
  pass->externals = PyList_New(0);
  PyObject* capsule =
      pass->externals != nullptr ? PyCapsule_New(new std::shared_ptr<Pass>(pass), "forgeviz.Pass", drop) : nullptr;
  if (capsule == nullptr) {
    close(*pass);
    Py_CLEAR(pass->externals);
    return nullptr;
  }
  try {
    pass->hooks.reserve(order.size());
    for (Node* node : order) {
      // Under Python every Node's metadata is a PyAnomalyMetadata (the Python engine makes them):
      // torch's own grad_fn.metadata casts it so, and its type is not exported for a dynamic_cast.
      PyObject* dict = static_cast<torch::autograd::PyAnomalyMetadata*>(node->metadata())->dict();
      PyObject* nid_obj = PyDict_GetItemWithError(dict, key_id);  // borrowed
      if (nid_obj == nullptr) {
        PyObject* fresh = PyErr_Occurred() ? nullptr : PyIter_Next(ids);
        if (fresh == nullptr || PyDict_SetItem(dict, key_id, fresh) != 0) {
          Py_XDECREF(fresh);
          throw std::runtime_error("giving a Node its id failed");
        }
        Py_DECREF(fresh);
        nid_obj = PyDict_GetItemWithError(dict, key_id);
      }
      const int64_t nid = PyLong_AsLongLong(nid_obj);
      pass->order_ids.push_back(nid);
      if (PyDict_GetItemWithError(dict, key_gone) == nullptr) {
        PyObject* watch = PyErr_Occurred() ? nullptr : new_gone(dead_append, nid_obj);
        if (watch == nullptr || PyDict_SetItem(dict, key_gone, watch) != 0) {
          Py_XDECREF(watch);
          throw std::runtime_error("watching a Node failed");
        }
        Py_DECREF(watch);
      }
      auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node);
      int kind = kPlain;
      if (leaf != nullptr && leaf->variable.defined()) {
        kind = leaf->variable.grad().defined() ? kLeafWithGrad : kLeafWithoutGrad;
        if (kind == kLeafWithoutGrad) {  // "fv_fed", as grads.BackwardRecorder.arm writes it without this library
          PyObject* count = PyLong_FromLong(fed[node]);
          const int set = count != nullptr ? PyDict_SetItem(dict, key_fed, count) : -1;
          Py_XDECREF(count);
          if (set != 0) throw std::runtime_error("counting a leaf's gradients failed");
        }
      } else {
        leaf = nullptr;  // released: a plain Node (its Python hook reports what it finds)
        const NodeName name = node_name(node);
        const int named = name.name != nullptr ? PySet_Contains(chain, name.name) : -1;
        Py_XDECREF(name.name);
        if (named < 0) throw std::runtime_error("reading a Node's name failed");
        if (named) kind = kChain;
      }
      ToLeaves to_leaves;  // on the device path, its edges to leaves that it alone feeds, with no .grad yet
      const auto& edges = node->next_edges();
      for (size_t i = 0; device != kDeviceNone && i < edges.size(); ++i) {
        auto* to = dynamic_cast<torch::autograd::AccumulateGrad*>(edges[i].function.get());
        if (to != nullptr && fed[to] == 1 && to->variable.defined() && !to->variable.grad().defined())
          to_leaves.emplace_back(i, to);
      }
      const uintptr_t key =
          node->add_post_hook(std::make_unique<Hook>(pass, node, nid, static_cast<Py_ssize_t>(pass->order_ids.size()) - 1,
                                                     kind, leaf, std::move(to_leaves)));
      pass->hooks.emplace_back(weak_node(node), key);
    }
  } catch (const std::exception& e) {
    Py_DECREF(capsule);  // closes the pass: no hook stays
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return capsule;
}

// Removes the pass's hooks and returns (nids, leaves, faults): the set of the ids of the Nodes it
// recorded, and for each AccumulateGrad recorded, in the order they ran, (kind, its .grad's summary
// slot, its leaf, the summary if the device path made it, else None); a slot -2 stands for None. (The leaf itself,
// not a weakref: the list lives as long as the caller's call to GradStore.add_unread, which keeps weakrefs of
// its own, made once per leaf.) What the Nodes recorded stays here until
// Python reads it: fv_rows and fv_summary.
PyObject* fv_finish(PyObject* capsule) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  close(*pass);
  std::lock_guard<std::mutex> lock(pass->mu);
  pass->seen.clear();
  pass->same_values.clear();
  PyObject* leaves = PyList_New(0);
  for (Row& row : pass->rows) {
    if (!row.variable.defined()) continue;
    PyObject* leaf = THPVariable_Wrap(row.variable);
    row.variable = at::Tensor();
    if (leaf == nullptr) {
      PyErr_Clear();
      continue;
    }
    // A summary the device path made is given as it is: a leaf's history keeping it needs nothing of the
    // pass (whose capsule holds every summary of the pass while anything refers to it)
    PyObject* made = Py_None;
    if (row.leaf >= 0 && pass->externals != nullptr) {
      const Summary& s = pass->summaries[static_cast<size_t>(row.leaf)];
      if (s.external >= 0) made = PyList_GET_ITEM(pass->externals, s.external);
    }
    PyObject* entry = Py_BuildValue("(iiNO)", row.kind, row.leaf, leaf, made);
    PyList_Append(leaves, entry);
    Py_DECREF(entry);
  }
  PyObject* nids = PySet_New(nullptr);
  for (const Row& row : pass->rows) {
    PyObject* nid = PyLong_FromLongLong(row.nid);
    PySet_Add(nids, nid);
    Py_DECREF(nid);
  }
  PyObject* faults = PyList_New(static_cast<Py_ssize_t>(pass->faults.size()));
  for (size_t i = 0; i < pass->faults.size(); ++i)
    PyList_SET_ITEM(faults, i, PyUnicode_FromString(pass->faults[i].c_str()));
  return Py_BuildValue("(NNN)", nids, leaves, faults);
}

// The rows of a finished pass that fv_forget left: (nid, grad_outputs' slots, grad_inputs' slots), in
// the order the Nodes ran, a slot -2 standing for None.
PyObject* fv_rows(PyObject* capsule) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(pass->mu);
  PyObject* rows = PyList_New(static_cast<Py_ssize_t>(pass->rows.size()));
  for (size_t i = 0; i < pass->rows.size(); ++i) {
    const Row& row = pass->rows[i];
    PyList_SET_ITEM(rows, i, Py_BuildValue("(LNN)", static_cast<long long>(row.nid), slots_tuple(row.outs),
                                           slots_tuple(row.ins)));
  }
  return rows;
}

// The numbers a recording keeps of a finished pass, in one call (recording.py's node rows): `ids` is a
// graph's Node ids by position (a list of ints, None where a Node has none; None: the pass's own, fv_order's); for each position whose Node
// ran and received a gradient, (position, numel, min, max, sum, norm) of its first grad_output, in
// position order, as six native doubles each in one bytes object (a tuple of six numbers per Node cost the
// training thread ~5 us a step on a 15-Node MLP; the recording's writer thread unpacks them). Reading
// rows() and summary() per Node instead builds every row's and summary's Python objects to keep five numbers.
// Returns (those bytes, [(position, summary)]): the second for the Nodes whose gradient device_summary.py
// summarised (numbers to come: on CUDA after the pass's read-back).
PyObject* fv_node_stats(PyObject* capsule, PyObject* ids) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  if (ids != Py_None && !PyList_Check(ids)) {
    PyErr_SetString(PyExc_TypeError, "node_stats: expected a list of Node ids, or None");
    return nullptr;
  }
  std::unordered_map<int64_t, Py_ssize_t> position;
  const bool armed = ids == Py_None;  // positions in the pass's own order (fv_order's): each row knows its own
  const Py_ssize_t n = armed ? static_cast<Py_ssize_t>(pass->order_ids.size()) : PyList_GET_SIZE(ids);
  for (Py_ssize_t k = 0; !armed && k < n; ++k) {
    PyObject* nid = PyList_GET_ITEM(ids, k);
    if (nid == Py_None) continue;
    const long long value = PyLong_AsLongLong(nid);
    if (value == -1 && PyErr_Occurred()) return nullptr;
    position[value] = k;  // (ids are unique in a walk)
  }
  std::vector<int> slot_at(static_cast<size_t>(n), -1);  // a Node that ran twice in one pass: its last row
  std::lock_guard<std::mutex> lock(pass->mu);
  for (const Row& row : pass->rows) {
    if (row.outs.empty() || row.outs[0] < 0) continue;
    if (armed) {
      slot_at[static_cast<size_t>(row.position)] = row.outs[0];
      continue;
    }
    auto at = position.find(row.nid);
    if (at != position.end()) slot_at[static_cast<size_t>(at->second)] = row.outs[0];
  }
  Py_ssize_t found = 0;  // the Nodes whose numbers are here
  for (const int slot : slot_at) found += slot >= 0 && pass->summaries[static_cast<size_t>(slot)].external < 0;
  PyObject* out = PyBytes_FromStringAndSize(nullptr, found * 6 * static_cast<Py_ssize_t>(sizeof(double)));
  PyObject* external = PyList_New(0);
  if (out == nullptr || external == nullptr) {
    Py_XDECREF(out);
    Py_XDECREF(external);
    return nullptr;
  }
  double* at = reinterpret_cast<double*>(PyBytes_AS_STRING(out));
  for (Py_ssize_t k = 0; k < n; ++k) {
    const int slot = slot_at[static_cast<size_t>(k)];
    if (slot < 0) continue;
    const Summary& s = pass->summaries[static_cast<size_t>(slot)];
    if (s.external >= 0) {
      PyObject* item = pass->externals != nullptr
                           ? Py_BuildValue("(nO)", k, PyList_GET_ITEM(pass->externals, s.external))
                           : nullptr;
      if (item == nullptr || PyList_Append(external, item) != 0) {
        Py_XDECREF(item);
        Py_DECREF(out);
        Py_DECREF(external);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "node_stats: the pass's device summaries are gone");
        return nullptr;
      }
      Py_DECREF(item);
      continue;
    }
    const double numbers[6] = {static_cast<double>(k), static_cast<double>(s.numel), s.stats[0], s.stats[1],
                               s.stats[2], s.stats[3]};
    std::memcpy(at, numbers, sizeof numbers);
    at += 6;
  }
  return Py_BuildValue("(NN)", out, external);
}

// Drops the rows of a finished pass whose nid is in `gone` (a set); returns how many are left. (Python is asked
// with the pass unlocked: a set's comparisons may run Python code.)
Py_ssize_t fv_forget(PyObject* capsule, PyObject* gone) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr || !PyAnySet_Check(gone)) return -1;
  std::vector<int64_t> row_ids;
  {
    std::lock_guard<std::mutex> lock(pass->mu);
    for (const Row& row : pass->rows) row_ids.push_back(row.nid);
  }
  std::unordered_set<int64_t> ids;  // those to drop
  if (PySet_GET_SIZE(gone) > static_cast<Py_ssize_t>(row_ids.size())) {
    // A prune's dead Nodes (hundreds, and each unread pass is asked): each row's id looked up in the set, not the
    // set copied into a C++ one for each pass (about 10 us for 260 ids)
    for (const int64_t nid : row_ids) {
      PyObject* key = PyLong_FromLongLong(nid);
      if (key != nullptr && PySet_Contains(gone, key) > 0) ids.insert(nid);
      Py_XDECREF(key);
      PyErr_Clear();  // (an id that could not be asked: its row stays)
    }
  } else {
    // the ids once (a handful a training step: its parameters' AccumulateGrad), not a Python int per row tested
    PyObject* each = PyObject_GetIter(gone);
    for (PyObject* nid = each != nullptr ? PyIter_Next(each) : nullptr; nid != nullptr; nid = PyIter_Next(each)) {
      const long long value = PyLong_AsLongLong(nid);
      Py_DECREF(nid);
      if (value != -1 || !PyErr_Occurred()) ids.insert(value);
      PyErr_Clear();  // (not an id: no row has it)
    }
    Py_XDECREF(each);
    PyErr_Clear();
  }
  std::lock_guard<std::mutex> lock(pass->mu);
  auto& rows = pass->rows;
  if (!ids.empty())
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&ids](const Row& row) { return ids.count(row.nid) > 0; }),
               rows.end());
  return static_cast<Py_ssize_t>(rows.size());
}

// The summary slot this pass's AccumulateGrad hook left for `item`'s .grad (a parameter), when that .grad is
// still the tensor it summarised, at the same version: kNone for a parameter with no .grad, kFail otherwise
// (not a tensor, or a .grad that changed since).
int leaf_slot(const Pass& pass, PyObject* item) {
  if (!THPVariable_Check(item)) return kFail;
  const at::Tensor& leaf = THPVariable_Unpack(item);
  const at::Tensor& grad = leaf.grad();
  if (!grad.defined()) return kNone;
  auto found = pass.leaf_grads.find(leaf.unsafeGetTensorImpl());
  if (found == pass.leaf_grads.end() || found->second.grad.lock().get() != grad.unsafeGetTensorImpl()) return kFail;
  try {
    if (grad.unsafeGetTensorImpl()->version_counter().current_version() != found->second.version) return kFail;
  } catch (...) {
    return kFail;
  }
  return found->second.slot;
}

// Whether `functions` is what the window can watch: a set of functions, or None (else a TypeError naming `what`).
bool watchable(PyObject* functions, const char* what) {
  if (functions == Py_None || PyAnySet_Check(functions)) return true;
  PyErr_Format(PyExc_TypeError, "%s: expected a set of functions to watch, or None", what);
  return false;
}

// The window watches `functions` (a set) and in-place ops from now on, or nothing (None), its count reset.
void watch(PyObject* functions) {
  exposed = 0;
  Py_XSETREF(exposing, functions == Py_None ? nullptr : Py_NewRef(functions));
}

// Closes the window (py_window) as a step takes a pass's leaf summaries: whether a call that may have written a
// .grad unseen came while it was open.
bool window_closes() {
  const bool written = exposed > 0;
  watch(Py_None);
  return written;
}

// What fv_leaf_stats and fv_leaf_summaries share: the pass of `capsule` and `params` (a list) checked, the
// window closed, and `out` (made by make(n) for n parameters) filled by take(pass, out, k, slot) for each
// parameter k, with the leaf_slot of its .grad and the pass's lock held. None where the window saw a call that
// may have written a .grad unseen, or where take says false.
template <typename Make, typename Take>
PyObject* take_leaves(PyObject* capsule, PyObject* params, const char* what, Make make, Take take) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  if (!PyList_Check(params)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a list of parameters", what);
    return nullptr;
  }
  if (window_closes()) Py_RETURN_NONE;
  const Py_ssize_t n = PyList_GET_SIZE(params);
  PyObject* out = make(n);
  if (out == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(pass->mu);
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (!take(*pass, out, k, leaf_slot(*pass, PyList_GET_ITEM(params, k)))) {
      Py_DECREF(out);
      Py_RETURN_NONE;
    }
  }
  return out;
}

// For each parameter of `params` (a list), the numbers of its .grad this pass summarised: min, max, sum, norm
// and numel, five native doubles each in one bytes object (numel -1: a parameter with no .grad). Closes the
// window first. None if a call in it may have written a .grad unseen, or unless every .grad is still the tensor
// the pass's AccumulateGrad hook summarised here (not on the device path: fv_leaf_summaries), at the same
// version: a recording's optimizer step then reads nothing again (recording.py's Recorder._step_begins).
PyObject* fv_leaf_stats(PyObject* capsule, PyObject* params) {
  const auto make = [](Py_ssize_t n) {
    return PyBytes_FromStringAndSize(nullptr, n * 5 * static_cast<Py_ssize_t>(sizeof(double)));
  };
  return take_leaves(capsule, params, "leaf_stats", make, [](const Pass& pass, PyObject* out, Py_ssize_t k, int slot) {
    double* at = reinterpret_cast<double*>(PyBytes_AS_STRING(out)) + 5 * k;
    if (slot == kNone) {
      const double none[5] = {0, 0, 0, 0, -1};
      std::memcpy(at, none, sizeof none);
      return true;
    }
    if (slot < 0 || pass.summaries[static_cast<size_t>(slot)].external >= 0) return false;
    const Summary& s = pass.summaries[static_cast<size_t>(slot)];
    const double numbers[5] = {s.stats[0], s.stats[1], s.stats[2], s.stats[3], static_cast<double>(s.numel)};
    std::memcpy(at, numbers, sizeof numbers);
    return true;
  });
}

// fv_leaf_stats on the device path: for each parameter of `params`, the summary device_summary.py made of its
// .grad in this pass (its numbers come with the pass's read-back), or None for one with no .grad. Closes the
// window first; None as fv_leaf_stats gives it, and where a .grad was summarised here, not on the device.
PyObject* fv_leaf_summaries(PyObject* capsule, PyObject* params) {
  const auto make = [](Py_ssize_t n) { return PyList_New(n); };
  return take_leaves(capsule, params, "leaf_summaries", make, [](const Pass& pass, PyObject* out, Py_ssize_t k,
                                                                 int slot) {
    if (slot == kNone) {
      PyList_SET_ITEM(out, k, Py_NewRef(Py_None));
      return true;
    }
    const Py_ssize_t external = slot >= 0 ? pass.summaries[static_cast<size_t>(slot)].external : -1;
    if (external < 0 || pass.externals == nullptr) return false;  // (a list's unset items are NULL: freed as such)
    PyList_SET_ITEM(out, k, Py_NewRef(PyList_GET_ITEM(pass.externals, external)));
    return true;
  });
}

// Summary `slot` of a finished pass: (shape, dtype 0 float32 / 1 float64, numel, min, max, sum, norm,
// values or None, counts or None); on the device path, the summary device_summary.py made.
PyObject* fv_summary(PyObject* capsule, Py_ssize_t slot) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(pass->mu);
  if (slot < 0 || static_cast<size_t>(slot) >= pass->summaries.size()) {
    PyErr_SetString(PyExc_IndexError, "fv_summary: no such slot");
    return nullptr;
  }
  const Summary& s = pass->summaries[slot];
  if (s.external >= 0) {
    if (pass->externals == nullptr) {
      PyErr_SetString(PyExc_RuntimeError, "fv_summary: the pass's device summaries are gone");
      return nullptr;
    }
    PyObject* made = PyList_GET_ITEM(pass->externals, s.external);
    Py_INCREF(made);
    return made;
  }
  return summary_tuple(*pass, s);
}

// The shape of the graph behind `roots` (a list of grad_fn objects or None) as fv_arm records it for a pass,
// for a pass armed without it (Python hooks): (signature, found, ids): signature_of() its Nodes in
// walk_graph()'s order, how many Nodes there are, and each one's "fv_id" in that order (None without one).
// None when a root is not a Node it knows. In C++ because in Python the walk makes an object per Node.
PyObject* fv_walk(PyObject* roots) {
  static PyObject* const key_id = PyUnicode_InternFromString("fv_id");
  if (!PyList_Check(roots)) {
    PyErr_SetString(PyExc_TypeError, "walk: roots is a list");
    return nullptr;
  }
  std::vector<Node*> order;
  uint64_t signature = 0;
  try {
    if (!walk_graph(roots, order)) Py_RETURN_NONE;
    signature = signature_of(order);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  if (signature == 0 && PyErr_Occurred()) return nullptr;
  PyObject* ids = PyList_New(static_cast<Py_ssize_t>(order.size()));
  if (ids == nullptr) return nullptr;
  for (size_t i = 0; i < order.size(); ++i) {
    PyObject* dict = static_cast<torch::autograd::PyAnomalyMetadata*>(order[i]->metadata())->dict();
    PyObject* nid = PyDict_GetItemWithError(dict, key_id);  // borrowed
    if (nid == nullptr && PyErr_Occurred()) {
      Py_DECREF(ids);
      return nullptr;
    }
    if (nid == nullptr) nid = Py_None;
    Py_INCREF(nid);
    PyList_SET_ITEM(ids, static_cast<Py_ssize_t>(i), nid);
  }
  return Py_BuildValue("(KnN)", static_cast<unsigned long long>(signature), static_cast<Py_ssize_t>(order.size()),
                       ids);
}

// A pass's graph as fv_walk gives it, from what fv_arm recorded (no second walk): (signature, found).
PyObject* fv_shape(PyObject* capsule) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  return Py_BuildValue("(Kn)", static_cast<unsigned long long>(pass->signature),
                       static_cast<Py_ssize_t>(pass->order_ids.size()));
}

// What a recording reads of a finished pass, in one call: ((signature, found), and fv_node_stats by the
// pass's own order).
PyObject* fv_recorded(PyObject* capsule) {
  PyObject* shape = fv_shape(capsule);
  PyObject* stats = shape != nullptr ? fv_node_stats(capsule, Py_None) : nullptr;
  if (stats == nullptr) {
    Py_XDECREF(shape);
    return nullptr;
  }
  PyObject* out = PyTuple_Pack(3, shape, PyTuple_GET_ITEM(stats, 0), PyTuple_GET_ITEM(stats, 1));
  Py_DECREF(shape);
  Py_DECREF(stats);
  return out;
}

// A pass's Node ids in fv_walk's order: a Node's position in a recording's rows.
PyObject* fv_order(PyObject* capsule) {
  Pass* pass = pass_of(capsule);
  if (pass == nullptr) return nullptr;
  PyObject* ids = PyList_New(static_cast<Py_ssize_t>(pass->order_ids.size()));
  for (size_t i = 0; ids != nullptr && i < pass->order_ids.size(); ++i) {
    PyObject* nid = PyLong_FromLongLong(pass->order_ids[i]);
    if (nid == nullptr) {
      Py_CLEAR(ids);
      break;
    }
    PyList_SET_ITEM(ids, static_cast<Py_ssize_t>(i), nid);
  }
  return ids;
}

// Python's view: the module forgeviz._capture.native._grad_hooks, loaded from the built library.
template <typename T>
bool args_ok(const char* name, Py_ssize_t given, Py_ssize_t wanted) {
  if (given == wanted) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, wanted, given);
  return false;
}

PyObject* py_tag(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("tag", n, 5)) return nullptr;
  const long long first_new = PyLong_AsLongLong(args[1]);
  if (first_new == -1 && PyErr_Occurred()) return nullptr;
  if (fv_tag(args[0], first_new, args[2], args[3], args[4]) != 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* py_fill_device_rows(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return fv_fill_device_rows(args, n);
}

PyObject* py_device_add(PyObject*, PyObject* const* args, Py_ssize_t n) { return fv_device_add_py(args, n); }

PyObject* py_torch_function(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("torch_function", n, 4)) return nullptr;
  return fv_torch_function(args[0], args[1], args[2], args[3] == Py_None ? nullptr : args[3]);
}

// user_location(depth, known, classify) -> (filename, line) of the nearest frame whose file is the user's, from
// the one `depth` frames above the Python function that called this (sys._getframe(depth) there) up, else
// (None, None): source.py's user_location, asked once per op that makes a Node (its walk of about ten frames of
// torch's and forgeviz's code, in Python, cost more than the rest of tagging the op). `known`: a dict, filename
// -> whether it is the user's (source.py's, shared); `classify(filename)` decides one it does not hold (and
// records it there).
PyObject* py_user_location(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("user_location", n, 3)) return nullptr;
  const long depth = PyLong_AsLong(args[0]);
  if (depth == -1 && PyErr_Occurred()) return nullptr;
  PyObject* const known_files = args[1];
  PyObject* const classify = args[2];
  if (!PyDict_Check(known_files)) {
    PyErr_SetString(PyExc_TypeError, "user_location(depth, known, classify): expected a dict of filenames");
    return nullptr;
  }
  PyFrameObject* frame = PyEval_GetFrame();  // (borrowed) the Python frame that called this
  Py_XINCREF(frame);
  for (long up = 0; up < depth && frame != nullptr; ++up) {
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return walk_user_location(frame, known_files, classify);
}

// ledger_bind(addresses): the addresses of cpu_ledger.cpp's fv_claim, fv_name_fresh, fv_sid_of, fv_set_context,
// fv_recategorize, fv_recategorize_many, fv_release_many and fv_forget_fresh, in that order (a tuple of ints:
// ctypes.cast(lib.fv_claim, c_void_p).value ...), kept for the calls below.
PyObject* py_ledger_bind(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("ledger_bind", n, 1)) return nullptr;
  if (!PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != kLedgerCalls) {
    PyErr_Format(PyExc_TypeError, "ledger_bind: a tuple of %d function addresses", kLedgerCalls);
    return nullptr;
  }
  void* found[kLedgerCalls];
  for (int i = 0; i < kLedgerCalls; ++i) {
    found[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args[0], i));
    if (found[i] == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "ledger_bind: a function's address, not 0");
      return nullptr;
    }
  }
  LedgerCalls calls;
  calls.claim = reinterpret_cast<decltype(calls.claim)>(found[0]);
  calls.name_fresh = reinterpret_cast<decltype(calls.name_fresh)>(found[1]);
  calls.sid_of = reinterpret_cast<decltype(calls.sid_of)>(found[2]);
  calls.set_context = reinterpret_cast<decltype(calls.set_context)>(found[3]);
  calls.recategorize = reinterpret_cast<decltype(calls.recategorize)>(found[4]);
  calls.recategorize_many = reinterpret_cast<decltype(calls.recategorize_many)>(found[5]);
  calls.release_many = reinterpret_cast<decltype(calls.release_many)>(found[6]);
  calls.forget_fresh = reinterpret_cast<decltype(calls.forget_fresh)>(found[7]);
  ledger_calls = calls;
  Py_RETURN_NONE;
}

// ledger_claim(handle, tensor, node, claimable, activation) -> (storage pointer, storage id), or None: fv_claim
// for the CPU storage the tensor lives in (None too for a tensor elsewhere, and for one the ledger did not claim).
PyObject* py_ledger_claim(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_claim", args, n, 5);
  if (handle == nullptr) return nullptr;
  const unsigned long node = PyLong_AsUnsignedLongMask(args[2]);
  const unsigned long claimable = PyLong_AsUnsignedLongMask(args[3]);
  const long activation = PyLong_AsLong(args[4]);
  if (PyErr_Occurred()) return nullptr;
  uint64_t ptr = 0;
  double bytes = 0;
  const int cpu = storage_of(args[1], ptr, bytes);
  if (cpu < 0) return nullptr;
  if (cpu == 0) Py_RETURN_NONE;
  const int64_t sid = ledger_calls.claim(handle, ptr, static_cast<uint32_t>(node), static_cast<uint32_t>(claimable),
                                         static_cast<int>(activation));
  if (sid < 0) Py_RETURN_NONE;
  return Py_BuildValue("(KL)", static_cast<unsigned long long>(ptr), static_cast<long long>(sid));
}

// ledger_name_fresh(handle, site, out, shapes): NativeLedger.after_op's calls into the ledger for an op that
// returned `out` (a tensor, or a tuple or list with tensors): fv_name_fresh with its first strided tensor, then
// fv_sid_of for its other CPU ones; each output the ledger holds has its shape remembered in `shapes`.
PyObject* py_ledger_name_fresh(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_name_fresh", args, n, 4);
  if (handle == nullptr) return nullptr;
  const unsigned long long site = PyLong_AsUnsignedLongLongMask(args[1]);
  if (PyErr_Occurred()) return nullptr;
  PyObject *const out = args[2], *const shapes = args[3];
  if (!PyDict_Check(shapes)) {
    PyErr_SetString(PyExc_TypeError, "ledger_name_fresh: a dict of shapes");
    return nullptr;
  }
  PyObject* items = (PyTuple_Check(out) || PyList_Check(out)) ? PySequence_Fast(out, "outputs") : nullptr;
  if (items == nullptr && PyErr_Occurred()) return nullptr;
  PyObject* const* each = items != nullptr ? PySequence_Fast_ITEMS(items) : &out;
  const Py_ssize_t count = items != nullptr ? PySequence_Fast_GET_SIZE(items) : 1;
  bool first = true, ok = true;
  try {
    for (Py_ssize_t i = 0; i < count && ok; ++i) {
      if (!THPVariable_Check(each[i]) || THPVariable_Unpack(each[i]).layout() != c10::kStrided) continue;
      uint64_t ptr = 0;
      double bytes = 0;
      const int cpu = storage_of(each[i], ptr, bytes);
      if (cpu < 0) {
        ok = false;
        break;
      }
      int64_t sid = -1;
      if (first) {  // (a CUDA or meta output's pointer is simply not in this CPU ledger)
        sid = ledger_calls.name_fresh(handle, site, cpu ? ptr : 0, cpu ? bytes : 0);
        first = false;
      } else if (cpu) {
        sid = ledger_calls.sid_of(handle, ptr, bytes);
      }
      if (sid >= 0) ok = remember_shape(shapes, sid, each[i]);
    }
    if (first) ledger_calls.name_fresh(handle, site, 0, 0);  // no tensor: what the op allocated is named all the same
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    ok = false;
  }
  Py_XDECREF(items);
  if (!ok) return nullptr;
  Py_RETURN_NONE;
}

// ledger_set_context(handle, cell, module, line, op): fv_set_context.
PyObject* py_ledger_set_context(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_set_context", args, n, 5);
  if (handle == nullptr) return nullptr;
  uint32_t numbers[4];
  for (int i = 0; i < 4; ++i) numbers[i] = static_cast<uint32_t>(PyLong_AsUnsignedLongMask(args[1 + i]));
  if (PyErr_Occurred()) return nullptr;
  ledger_calls.set_context(handle, numbers[0], numbers[1], numbers[2], numbers[3]);
  Py_RETURN_NONE;
}

// ledger_recategorize(handle, tensor, category, node, only_from) -> fv_recategorize's storage id (-1: not
// tracked), or -2 for a tensor that is not a CPU one (this ledger's memory).
PyObject* py_ledger_recategorize(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_recategorize", args, n, 5);
  if (handle == nullptr) return nullptr;
  const long category = PyLong_AsLong(args[2]);
  const unsigned long node = PyLong_AsUnsignedLongMask(args[3]);
  const unsigned long only_from = PyLong_AsUnsignedLongMask(args[4]);
  if (PyErr_Occurred()) return nullptr;
  uint64_t ptr = 0;
  double bytes = 0;
  const int cpu = storage_of(args[1], ptr, bytes);
  if (cpu < 0) return nullptr;
  if (cpu == 0) return PyLong_FromLong(-2);
  return PyLong_FromLongLong(ledger_calls.recategorize(handle, ptr, static_cast<int>(category),
                                                       static_cast<uint32_t>(node), static_cast<uint32_t>(only_from)));
}

// ledger_recategorize_many(handle, tensors, category) -> a list of storage ids, one a tensor: fv_recategorize_many
// for the CPU ones (-1: not tracked), -2 for the others. One call for every parameter's .grad after a backward.
PyObject* py_ledger_recategorize_many(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_recategorize_many", args, n, 3);
  if (handle == nullptr) return nullptr;
  const long category = PyLong_AsLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  PyObject* items = PySequence_Fast(args[1], "ledger_recategorize_many: a list of tensors");
  if (items == nullptr) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
  std::vector<uint64_t> ptrs;
  std::vector<Py_ssize_t> at;  // the item each pointer is of
  ptrs.reserve(count);
  at.reserve(count);
  for (Py_ssize_t i = 0; i < count; ++i) {
    uint64_t ptr = 0;
    double bytes = 0;
    const int cpu = storage_of(PySequence_Fast_GET_ITEM(items, i), ptr, bytes);
    if (cpu < 0) {
      Py_DECREF(items);
      return nullptr;
    }
    if (cpu > 0) {
      ptrs.push_back(ptr);
      at.push_back(i);
    }
  }
  const std::vector<int64_t> sids = recategorize_many(handle, ptrs, category);
  Py_DECREF(items);
  PyObject* out = PyList_New(count);
  if (out == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < count; ++i) PyList_SET_ITEM(out, i, PyLong_FromLong(-2));
  for (size_t k = 0; k < at.size(); ++k) {
    PyObject* sid = PyLong_FromLongLong(sids[k]);
    if (sid == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    Py_SETREF(PyList_GET_ITEM(out, at[k]), sid);
  }
  return out;
}

// ledger_release_many(handle, claims): fv_release_many for the (storage pointer, storage id) pairs in `claims`.
PyObject* py_ledger_release_many(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_release_many", args, n, 2);
  if (handle == nullptr) return nullptr;
  PyObject* items = PySequence_Fast(args[1], "ledger_release_many: a list of (pointer, storage id) pairs");
  if (items == nullptr) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
  std::vector<uint64_t> ptrs(static_cast<size_t>(count));
  std::vector<int64_t> sids(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* pair = PySequence_Fast_GET_ITEM(items, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      Py_DECREF(items);
      PyErr_SetString(PyExc_TypeError, "ledger_release_many: each claim is a (pointer, storage id) pair");
      return nullptr;
    }
    ptrs[i] = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(pair, 0));
    sids[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
  }
  Py_DECREF(items);
  if (PyErr_Occurred()) return nullptr;
  return PyLong_FromLongLong(count ? ledger_calls.release_many(handle, ptrs.data(), sids.data(), count) : 0);
}

// ledger_claim_saved(handle, grad_fn, names, ids, claims, gone_append, gone_key, claimable, activation, shapes,
// node_names) -> whether it claimed: memory.py's MemoryTracker.claim_saved in one call, for a Node an op just made.
// Each CPU tensor among grad_fn's saved `names` (attributes such as "_saved_self"; a tuple or list of tensors too;
// one already freed is skipped) is claimed with fv_claim as the Node's (its "fv_id", given from `ids`, an
// itertools.count, when it has none). When one was: claims[nid] = (the first name claimed from, [(pointer, storage
// id)]), the Node's metadata[gone_key] = a NodeGone that calls gone_append(nid) when the Node dies, the claimed
// storages' shapes in `shapes` and the Node's name in node_names[nid & 0xFFFFFFFF] (NativeLedger's tables).
// False when nothing was claimed, or the Node had claimed already (an op that returned an older tensor).
PyObject* py_ledger_claim_saved(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const key_id = PyUnicode_InternFromString("fv_id");
  void* handle = ledger_call("ledger_claim_saved", args, n, 11);
  if (handle == nullptr) return nullptr;
  PyObject *const grad_fn = args[1], *const names = args[2], *const ids = args[3], *const claims = args[4];
  const unsigned long claimable = PyLong_AsUnsignedLongMask(args[7]);
  const long activation = PyLong_AsLong(args[8]);
  if (PyErr_Occurred()) return nullptr;
  Node* node = node_of(grad_fn);
  PyObject *const shapes = args[9], *const node_names = args[10];
  if (node == nullptr || !(PyTuple_Check(names) || PyList_Check(names)) || !PyDict_Check(claims) ||
      !PyDict_Check(shapes) || !PyDict_Check(node_names)) {
    PyErr_SetString(PyExc_TypeError, "ledger_claim_saved: a Node, a list of names, and dicts of claims, shapes and names");
    return nullptr;
  }
  PyObject* meta = static_cast<torch::autograd::PyAnomalyMetadata*>(node->metadata())->dict();
  PyObject* nid = nullptr;  // (a new reference once known)
  PyObject* claimed = nullptr;  // [(pointer, storage id)]
  PyObject* probe = nullptr;  // (borrowed) the first name claimed from
  bool failed = false, already = false;  // already: the Node claimed before
  auto claim_one = [&](PyObject* item, PyObject* name) -> bool {  // false: a Python error is set
    if (!THPVariable_Check(item)) return true;
    const at::Tensor& t = THPVariable_Unpack(item);
    if (!t.defined() || t.layout() != c10::kStrided || t.is_meta()) return true;
    if (nid == nullptr) {
      nid = PyDict_GetItemWithError(meta, key_id);
      if (nid != nullptr) {
        Py_INCREF(nid);
      } else {
        if (PyErr_Occurred()) return false;
        nid = PyIter_Next(ids);
        if (nid == nullptr) {
          if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "ledger_claim_saved: the ids ran out");
          return false;
        }
        if (PyDict_SetItem(meta, key_id, nid) != 0) return false;
      }
      const int known = PyDict_Contains(claims, nid);
      if (known < 0) return false;
      already = known > 0;
    }
    if (already || !t.device().is_cpu() || !t.has_storage()) return true;
    const auto ptr = reinterpret_cast<uint64_t>(t.storage().mutable_data());
    const unsigned long long number = PyLong_AsUnsignedLongLongMask(nid);
    if (number == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
    const int64_t sid = ledger_calls.claim(handle, ptr, static_cast<uint32_t>(number & 0xFFFFFFFFu),
                                           static_cast<uint32_t>(claimable), static_cast<int>(activation));
    if (sid < 0) return true;
    if (claimed == nullptr && (claimed = PyList_New(0)) == nullptr) return false;
    PyObject* pair = Py_BuildValue("(KL)", static_cast<unsigned long long>(ptr), static_cast<long long>(sid));
    const bool ok = pair != nullptr && PyList_Append(claimed, pair) == 0 && remember_shape(shapes, sid, item);
    Py_XDECREF(pair);
    if (ok && probe == nullptr) probe = name;
    return ok;
  };
  try {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(names) && !failed && !already; ++i) {
      PyObject* name = PySequence_Fast_GET_ITEM(names, i);
      PyObject* value = PyObject_GetAttr(grad_fn, name);
      if (value == nullptr) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) {  // (RuntimeError: freed already)
          failed = true;
          break;
        }
        PyErr_Clear();
        continue;
      }
      if (PyTuple_Check(value) || PyList_Check(value)) {
        PyObject* items = PySequence_Fast(value, "saved tensors");
        for (Py_ssize_t k = 0; items != nullptr && k < PySequence_Fast_GET_SIZE(items) && !failed; ++k)
          failed = !claim_one(PySequence_Fast_GET_ITEM(items, k), name);
        failed = failed || items == nullptr;
        Py_XDECREF(items);
      } else {
        failed = !claim_one(value, name);
      }
      Py_DECREF(value);
    }
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    failed = true;
  }
  PyObject* result = nullptr;
  if (!failed && !already && claimed != nullptr) {
    PyObject* entry = Py_BuildValue("(OO)", probe, claimed);
    PyObject* gone = entry != nullptr ? new_gone(args[5], nid) : nullptr;
    const unsigned long long number = PyLong_AsUnsignedLongLongMask(nid);
    PyObject* short_id = PyErr_Occurred() ? nullptr : PyLong_FromUnsignedLongLong(number & 0xFFFFFFFFull);
    const int named = short_id != nullptr ? PyDict_Contains(node_names, short_id) : -1;
    NodeName name = named == 0 ? node_name(node) : NodeName{nullptr, 0};
    if (gone != nullptr && named >= 0 && (named == 1 || name.name != nullptr) &&
        PyDict_SetItem(claims, nid, entry) == 0 && PyDict_SetItem(meta, args[6], gone) == 0 &&
        (named == 1 || PyDict_SetItem(node_names, short_id, name.name) == 0)) {
      result = Py_NewRef(Py_True);
    }
    Py_XDECREF(name.name);
    Py_XDECREF(short_id);
    Py_XDECREF(entry);
    Py_XDECREF(gone);
  } else if (!failed) {
    result = Py_NewRef(Py_False);
  }
  Py_XDECREF(nid);
  Py_XDECREF(claimed);
  return result;
}

// ledger_recategorize_grads(handle, params, category, shapes) -> [(storage id, grad)]: after a backward, the
// `.grad` of each parameter still alive among `params` (a dict's values: weakrefs to them) made `category` in one
// fv_recategorize_many; returns the gradients Python still has to look at: one the ledger does not track yet
// (storage id -1) and one whose storage id `shapes` does not hold (its shape to remember). memory.py's
// _sync_grads and NativeLedger.recategorize_all in one call (a list of the parameters, of their .grad, of their
// storages' pointers, each Python-built, were most of a small step's memory timeline after its backward).
PyObject* py_ledger_recategorize_grads(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const grad_name = PyUnicode_InternFromString("grad");
  void* handle = ledger_call("ledger_recategorize_grads", args, n, 4);
  if (handle == nullptr) return nullptr;
  PyObject *const params = args[1], *const shapes = args[3];
  const long category = PyLong_AsLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  if (!PyDict_Check(params) || !PyDict_Check(shapes)) {
    PyErr_SetString(PyExc_TypeError, "ledger_recategorize_grads: a dict of weakrefs and a dict of shapes");
    return nullptr;
  }
  std::vector<PyObject*> grads;  // (new references)
  std::vector<uint64_t> ptrs;
  auto release = [&grads] {
    for (PyObject* grad : grads) Py_DECREF(grad);
  };
  Py_ssize_t position = 0;
  PyObject *key = nullptr, *ref = nullptr;
  while (PyDict_Next(params, &position, &key, &ref)) {
    if (!PyWeakref_Check(ref)) continue;
    PyObject* param = PyWeakref_GetObject(ref);  // (borrowed; None once it died)
    if (param == Py_None) continue;
    Py_INCREF(param);
    PyObject* grad = PyObject_GetAttr(param, grad_name);  // as Python reads it (a subclass's too)
    Py_DECREF(param);
    if (grad == nullptr) {
      release();
      return nullptr;
    }
    uint64_t ptr = 0;
    double bytes = 0;
    const int cpu = grad == Py_None ? 0 : storage_of(grad, ptr, bytes);
    if (cpu <= 0) {
      Py_DECREF(grad);
      if (cpu < 0) {
        release();
        return nullptr;
      }
      continue;
    }
    grads.push_back(grad);
    ptrs.push_back(ptr);
  }
  const std::vector<int64_t> sids = recategorize_many(handle, ptrs, category);
  PyObject* out = PyList_New(0);
  for (size_t k = 0; out != nullptr && k < grads.size(); ++k) {
    PyObject* sid = PyLong_FromLongLong(sids[k]);
    const int known = sid == nullptr ? -1 : sids[k] < 0 ? 0 : PyDict_Contains(shapes, sid);
    PyObject* pair = known == 0 ? PyTuple_Pack(2, sid, grads[k]) : nullptr;
    if (known < 0 || (known == 0 && (pair == nullptr || PyList_Append(out, pair) != 0))) Py_CLEAR(out);
    Py_XDECREF(pair);
    Py_XDECREF(sid);
  }
  release();
  return out;
}

// unseen_state(state, seen) -> [tensor]: the optimizer state tensors (the values of each dict among `state`'s
// values: an Optimizer's state, parameter -> {name: value}) with more than one element that `seen` does not know
// as they are: seen[id(tensor)] == (a weakref to that tensor, its data_ptr()). memory.py's _after_step loop, for
// every step (most state is updated in place: each tensor is categorised once, and again if its memory moved).
PyObject* py_unseen_state(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("unseen_state", n, 2)) return nullptr;
  PyObject *const state = args[0], *const seen = args[1];
  if (!PyDict_Check(state) || !PyDict_Check(seen)) {
    PyErr_SetString(PyExc_TypeError, "unseen_state: an optimizer's state (a dict of dicts) and a dict");
    return nullptr;
  }
  PyObject* out = PyList_New(0);
  Py_ssize_t outer = 0;
  PyObject *param = nullptr, *values = nullptr;
  try {
    while (out != nullptr && PyDict_Next(state, &outer, &param, &values)) {
      if (!PyDict_Check(values)) continue;
      Py_ssize_t inner = 0;
      PyObject *name = nullptr, *value = nullptr;
      while (out != nullptr && PyDict_Next(values, &inner, &name, &value)) {
        if (!THPVariable_Check(value)) continue;
        const at::Tensor& t = THPVariable_Unpack(value);
        if (!t.defined() || t.numel() <= 1) continue;
        PyObject* id = PyLong_FromVoidPtr(value);
        PyObject* known = id != nullptr ? PyDict_GetItemWithError(seen, id) : nullptr;  // (borrowed)
        Py_XDECREF(id);
        if (known == nullptr && PyErr_Occurred()) {
          Py_CLEAR(out);
          break;
        }
        bool same = false;
        if (known != nullptr && PyTuple_Check(known) && PyTuple_GET_SIZE(known) == 2 &&
            PyWeakref_Check(PyTuple_GET_ITEM(known, 0)) &&
            PyWeakref_GetObject(PyTuple_GET_ITEM(known, 0)) == value) {
          const unsigned long long ptr = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(known, 1));
          if (ptr == static_cast<unsigned long long>(-1) && PyErr_Occurred()) PyErr_Clear();
          same = ptr == reinterpret_cast<uint64_t>(t.data_ptr());
        }
        if (!same && PyList_Append(out, value) != 0) Py_CLEAR(out);
      }
    }
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    Py_CLEAR(out);
  }
  return out;
}

// ledger_forget_fresh(handle): fv_forget_fresh.
PyObject* py_ledger_forget_fresh(PyObject*, PyObject* const* args, Py_ssize_t n) {
  void* handle = ledger_call("ledger_forget_fresh", args, n, 1);
  if (handle == nullptr) return nullptr;
  ledger_calls.forget_fresh(handle);
  Py_RETURN_NONE;
}

PyObject* py_arm(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("arm", n, 12)) return nullptr;
  int numbers[5];
  for (int i = 0; i < 5; ++i) {
    numbers[i] = static_cast<int>(PyLong_AsLong(args[5 + i]));
    if (numbers[i] == -1 && PyErr_Occurred()) return nullptr;
  }
  return fv_arm(args[0], args[1], args[2], args[3], args[4], numbers[0], numbers[1], numbers[2], numbers[3],
                numbers[4], args[10], args[11]);
}

PyObject* py_finish(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("finish", n, 1) ? fv_finish(args[0]) : nullptr;
}

PyObject* py_rows(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("rows", n, 1) ? fv_rows(args[0]) : nullptr;
}

PyObject* py_forget(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("forget", n, 2)) return nullptr;
  const Py_ssize_t left = fv_forget(args[0], args[1]);
  return left < 0 ? (PyErr_Occurred() ? nullptr : (PyErr_SetString(PyExc_TypeError, "forget: a pass and a set"), nullptr))
                  : PyLong_FromSsize_t(left);
}

PyObject* py_summary(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("summary", n, 2)) return nullptr;
  const Py_ssize_t slot = PyLong_AsSsize_t(args[1]);
  if (slot == -1 && PyErr_Occurred()) return nullptr;
  return fv_summary(args[0], slot);
}

PyObject* py_leaf_stats(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("leaf_stats", n, 2) ? fv_leaf_stats(args[0], args[1]) : nullptr;
}

PyObject* py_leaf_summaries(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("leaf_summaries", n, 2) ? fv_leaf_summaries(args[0], args[1]) : nullptr;
}

// window(functions or None) -> how many calls the mode saw since the last call that may write a .grad unseen
// (may_write's: in-place ops, and the `functions` watched until now); then watches with `functions` (a set:
// exposing), or not at all (None).
PyObject* py_window(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("window", n, 1) || !watchable(args[0], "window")) return nullptr;
  PyObject* seen = PyLong_FromUnsignedLongLong(exposed);
  if (seen != nullptr) watch(args[0]);
  return seen;
}

PyObject* py_node_stats(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("node_stats", n, 2)) return nullptr;
  return fv_node_stats(args[0], args[1]);
}

PyObject* py_walk(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("walk", n, 1) ? fv_walk(args[0]) : nullptr;
}

PyObject* py_shape(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("shape", n, 1) ? fv_shape(args[0]) : nullptr;
}

// recorded(pass, functions or None): fv_recorded; with a set of functions, the window (py_window) opened in the
// same call, watching them: a recording's step may then take the pass's leaf summaries (one call less in the
// hook after each backward).
PyObject* py_recorded(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>("recorded", n, 2) || !watchable(args[1], "recorded")) return nullptr;
  PyObject* out = fv_recorded(args[0]);
  if (out != nullptr && args[1] != Py_None) watch(args[1]);
  return out;
}

PyObject* py_order(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return args_ok<void>("order", n, 1) ? fv_order(args[0]) : nullptr;
}

// ModuleStack's push and pop (modules.py) for a module called inside another, while no compiled module lives (its
// hooks are torch's global ones): in Python, the push and pop cost about 0.95 us a module call, warm, and here
// half that (torch's hooks and ModuleHooks' own Python frames stay). The push is the entry ModuleStack._pre made
// for this module under the running root (stack._entries: id(module) -> (the stack's entry, a weak reference to
// the module)). Whatever else happens, the outermost call, a module not met under this root yet, hooks on each
// module, an error here, goes to the Python hook.

bool per_module_hooks(PyObject* hooks) {
  static PyObject* const per_module_name = PyUnicode_InternFromString("per_module");
  PyObject* per_module = PyObject_GetAttr(hooks, per_module_name);
  const bool per = per_module != Py_False;
  if (per_module == nullptr) PyErr_Clear();
  Py_XDECREF(per_module);
  return per;
}

// The running modules' list (a new reference) while it holds at least `least`; else nullptr, with no error set.
PyObject* running_modules(PyObject* stack, Py_ssize_t least) {
  static PyObject* const stack_name = PyUnicode_InternFromString("_stack");
  PyObject* running = PyObject_GetAttr(stack, stack_name);
  if (running != nullptr && PyList_Check(running) && PyList_GET_SIZE(running) >= least) return running;
  Py_XDECREF(running);
  PyErr_Clear();
  return nullptr;
}

bool module_pushed(PyObject* stack, PyObject* hooks, PyObject* module) {
  static PyObject* const entries_name = PyUnicode_InternFromString("_entries");
  if (per_module_hooks(hooks)) return false;
  PyObject* running = running_modules(stack, 1);
  if (running == nullptr) return false;
  PyObject* entries = PyObject_GetAttr(stack, entries_name);
  PyObject* key = entries != nullptr && PyDict_Check(entries) ? PyLong_FromVoidPtr(module) : nullptr;
  PyObject* known = key != nullptr ? PyDict_GetItemWithError(entries, key) : nullptr;  // (borrowed)
  bool pushed = false;
  if (known != nullptr && PyTuple_Check(known) && PyTuple_GET_SIZE(known) == 2 &&
      PyWeakref_Check(PyTuple_GET_ITEM(known, 1)) && PyWeakref_GetObject(PyTuple_GET_ITEM(known, 1)) == module)
    pushed = PyList_Append(running, PyTuple_GET_ITEM(known, 0)) == 0;  // (another module at a dead one's id: not)
  Py_XDECREF(key);
  Py_XDECREF(entries);
  Py_DECREF(running);
  if (!pushed) PyErr_Clear();
  return pushed;
}

bool module_popped(PyObject* stack, PyObject* hooks, PyObject* module) {
  if (per_module_hooks(hooks)) return false;
  PyObject* running = running_modules(stack, 2);  // (the outermost's pop tells its listeners: Python's)
  if (running == nullptr) return false;
  const Py_ssize_t size = PyList_GET_SIZE(running);
  PyObject* top = PyList_GET_ITEM(running, size - 1);
  bool popped = PyTuple_Check(top) && PyTuple_GET_SIZE(top) == 2 && PyLong_Check(PyTuple_GET_ITEM(top, 0)) &&
                PyLong_AsVoidPtr(PyTuple_GET_ITEM(top, 0)) == module &&
                PyList_SetSlice(running, size - 1, size, nullptr) == 0;  // (else an inner call raised: Python pops)
  Py_DECREF(running);
  if (!popped) PyErr_Clear();
  return popped;
}

// module_pre(stack, hooks, module, args): ModuleStack._pre's push, else stack._pre(module, args).
PyObject* py_module_pre(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const slow_name = PyUnicode_InternFromString("_pre");
  if (!args_ok<void>("module_pre", n, 4)) return nullptr;
  if (module_pushed(args[0], args[1], args[2])) Py_RETURN_NONE;
  return PyObject_CallMethodObjArgs(args[0], slow_name, args[2], args[3], nullptr);
}

// module_post(stack, hooks, module, args, output): ModuleStack._post's pop, else stack._post(module, args, output).
PyObject* py_module_post(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const slow_name = PyUnicode_InternFromString("_post");
  if (!args_ok<void>("module_post", n, 5)) return nullptr;
  if (module_popped(args[0], args[1], args[2])) Py_RETURN_NONE;
  return PyObject_CallMethodObjArgs(args[0], slow_name, args[2], args[3], args[4], nullptr);
}

// --- A recording's hooks of a training step (recording.py's Recorder), their common case ------------------------
// Each training step runs three Recorder hooks: _after_backward, _step_begins and _step_ends. In the common case, one
// rank, gradients on the CPU, each .grad as the backward before it summarised it, no segment to write, they only take
// the pass's numbers and append a row builder (as a rank of several: the pre-hook hands every .grad to the native
// reader, grad_reader.cpp, and the post-hook waits for its job and appends that row builder). In Python that is most of what recording adds to a 1.4 ms MLP step
// (37-43 us, against a 2% budget of 28), and here 3-5 us less. The same work, on the Recorder's own attributes:
// nothing is kept in C++. Each first checks everything it needs, changing nothing; any
// other case, or an error while checking, goes to the Python method, which does it all as without this.
// What costs here is reading memory the step's kernels cooled, about 0.2 us an attribute: what changes only in the
// Python methods (an open writer, every step recorded, no memory or CUDA history, ...) is one attribute,
// the Recorder's _plain, which its _plain_now() sets after each call handed to Python (and install()).

struct RecorderNames {
  PyObject* const stepping = PyUnicode_InternFromString("_stepping");
  PyObject* const args = PyUnicode_InternFromString("args");  // (a functools.partial's)
  PyObject* const nested = PyUnicode_InternFromString("_nested");
  PyObject* const counting = PyUnicode_InternFromString("_counting");
  PyObject* const records = PyUnicode_InternFromString("_records");
  PyObject* const default_pg = PyUnicode_InternFromString("_default_pg");
  PyObject* const c10d_world = PyUnicode_InternFromString("_world");
  PyObject* const last_plan = PyUnicode_InternFromString("_last_plan");
  PyObject* const param_groups = PyUnicode_InternFromString("param_groups");
  PyObject* const params = PyUnicode_InternFromString("params");
  PyObject* const leaf_pass = PyUnicode_InternFromString("_leaf_pass");
  PyObject* const capsule = PyUnicode_InternFromString("_capsule");
  PyObject* const rows = PyUnicode_InternFromString("_rows");
  PyObject* const later_rows = PyUnicode_InternFromString("_later_rows");
  PyObject* const later = PyUnicode_InternFromString("_later");
  PyObject* const later_on_device = PyUnicode_InternFromString("_later_on_device");
  PyObject* const reused = PyUnicode_InternFromString("reused");
  PyObject* const step = PyUnicode_InternFromString("step");
  PyObject* const reading = PyUnicode_InternFromString("_reading");
  PyObject* const session = PyUnicode_InternFromString("session");
  PyObject* const traces = PyUnicode_InternFromString("traces");
  PyObject* const t0 = PyUnicode_InternFromString("_t0");
  PyObject* const last_flush = PyUnicode_InternFromString("_last_flush");
  PyObject* const segment_seconds = PyUnicode_InternFromString("segment_seconds");
  PyObject* const record_grads = PyUnicode_InternFromString("record_grads");
  PyObject* const store = PyUnicode_InternFromString("store");
  PyObject* const recorded = PyUnicode_InternFromString("recorded");
  PyObject* const passes = PyUnicode_InternFromString("passes");
  PyObject* const nonfinite_found = PyUnicode_InternFromString("nonfinite_found");
  PyObject* const unread = PyUnicode_InternFromString("_unread");
  PyObject* const newest_handed = PyUnicode_InternFromString("_newest_handed");
  PyObject* const recorder = PyUnicode_InternFromString("recorder");
  PyObject* const device = PyUnicode_InternFromString("device");
  PyObject* const device_reading = PyUnicode_InternFromString("reading");
  PyObject* const graphs = PyUnicode_InternFromString("_graphs");
  PyObject* const fault = PyUnicode_InternFromString("fault");
  PyObject* const plain = PyUnicode_InternFromString("_plain");
  PyObject* const plain_now = PyUnicode_InternFromString("_plain_now");
  PyObject* const world = PyUnicode_InternFromString("world");
  PyObject* const native_reader = PyUnicode_InternFromString("_native_reader");
  PyObject* const poll = PyUnicode_InternFromString("_poll");
  PyObject* const in_place = PyUnicode_InternFromString("_in_place");
  PyObject* const read = PyUnicode_InternFromString("read");
  PyObject* const wait = PyUnicode_InternFromString("wait");
};

const RecorderNames& recorder_names() {
  static const RecorderNames names;
  return names;
}

// recording.py's _native_steps_config(): what the hooks need of that module, in this order.
struct RecorderConfig {
  PyObject* grads;           // GRADS: the key of the gradient rows in Recorder._rows
  PyObject* steps;           // STEPS
  Py_ssize_t segment_rows;   // SEGMENT_ROWS
  PyObject* leaf_rows;       // _leaf_rows
  PyObject* node_rows;       // _node_rows
  PyObject* exposing;        // _EXPOSING: what the window watches
  PyObject* c10d;            // torch.distributed.distributed_c10d, or None
  PyObject* world_type;      // its _World, or None
  PyObject* partial;         // functools.partial
  Py_ssize_t node_stats_size;  // NODE_STATS_SIZE
  PyObject* report;          // fault.report
  PyObject* native_rows;     // _native_rows
};

bool recorder_config(PyObject* config, RecorderConfig& c) {
  if (!PyTuple_Check(config) || PyTuple_GET_SIZE(config) != 12) return false;
  PyObject* const* item = &PyTuple_GET_ITEM(config, 0);
  c = RecorderConfig{item[0], item[1], PyLong_AsSsize_t(item[2]), item[3], item[4], item[5], item[6], item[7],
                     item[8], PyLong_AsSsize_t(item[9]), item[10], item[11]};
  return !PyErr_Occurred() && PyAnySet_Check(c.exposing) && c.node_stats_size > 0;
}

// obj.name (a new reference), nullptr with no error set when it cannot be read.
PyObject* read_attr(PyObject* obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj, name);
  if (value == nullptr) PyErr_Clear();
  return value;
}

bool attr_is(PyObject* obj, PyObject* name, PyObject* expected) {
  THPObjectPtr value(read_attr(obj, name));
  return value && value.get() == expected;
}

bool attr_equals(PyObject* obj, PyObject* name, long expected) {
  THPObjectPtr value(read_attr(obj, name));
  if (!value || !PyLong_CheckExact(value)) return false;
  const long got = PyLong_AsLong(value);
  if (got == -1 && PyErr_Occurred()) PyErr_Clear();
  return got == expected;
}

double attr_double(PyObject* obj, PyObject* name) {  // NaN where it is not a number
  THPObjectPtr value(read_attr(obj, name));
  const double got = value ? PyFloat_AsDouble(value) : NAN;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return NAN;
  }
  return got;
}

// The Recorder's world: its ranks (1: one), or 0 where it cannot be read (then Python's methods run).
long world_of(PyObject* rec) {
  THPObjectPtr value(read_attr(rec, recorder_names().world));
  const long got = value && PyLong_CheckExact(value) ? PyLong_AsLong(value) : 0;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return got < 1 ? 0 : got;
}

bool add_to(PyObject* obj, PyObject* name, Py_ssize_t more) {
  THPObjectPtr value(PyObject_GetAttr(obj, name));
  THPObjectPtr by(value ? PyLong_FromSsize_t(more) : nullptr);
  THPObjectPtr sum(by ? PyNumber_Add(value, by) : nullptr);
  return sum && PyObject_SetAttr(obj, name, sum) == 0;
}

// time.perf_counter(), the Recorder's clock, without a call into Python (NaN where it cannot be read).
double perf_counter() {
#if PY_VERSION_HEX >= 0x030D0000
  PyTime_t ticks;
  if (PyTime_PerfCounterRaw(&ticks) != 0) return NAN;
  return PyTime_AsSecondsDouble(ticks);
#else
  _PyTime_t ticks;
  if (_PyTime_GetPerfCounterWithInfo(&ticks, nullptr) != 0) return NAN;
  return _PyTime_AsSecondsDouble(ticks);
#endif
}

// Whether torch.distributed may have started (recording.py's _distributed(); unsure: yes, and Python asks).
bool maybe_distributed(const RecorderConfig& c) {
  if (c.c10d == Py_None) return false;
  THPObjectPtr world(read_attr(c.c10d, recorder_names().c10d_world));
  if (!world || reinterpret_cast<PyObject*>(Py_TYPE(world.get())) != c.world_type) return true;
  return !attr_is(world, recorder_names().default_pg, Py_None);
}

// The plan (recording.py's Recorder._plan, a new reference) of `optimizer` where it stepped last and its param_groups
// are as the plan has them; else nullptr, no error set.
PyObject* current_plan(PyObject* rec, PyObject* optimizer) {
  const RecorderNames& n = recorder_names();
  THPObjectPtr last(read_attr(rec, n.last_plan));
  if (!last || !PyTuple_Check(last) || PyTuple_GET_SIZE(last) != 2) return nullptr;
  PyObject* ref = PyTuple_GET_ITEM(last.get(), 0);
  PyObject* plan = PyTuple_GET_ITEM(last.get(), 1);
  if (!PyWeakref_CheckRef(ref) || PyWeakref_GetObject(ref) != optimizer || !PyTuple_Check(plan) ||
      PyTuple_GET_SIZE(plan) != 6)
    return nullptr;
  PyObject* lists = PyTuple_GET_ITEM(plan, 0);
  PyObject* lengths = PyTuple_GET_ITEM(plan, 1);
  THPObjectPtr groups(read_attr(optimizer, n.param_groups));
  if (!groups || !PyList_Check(groups) || !PyList_Check(lists) || !PyList_Check(lengths) ||
      PyList_GET_SIZE(groups.get()) != PyList_GET_SIZE(lists) || PyList_GET_SIZE(lengths) != PyList_GET_SIZE(lists))
    return nullptr;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(groups.get()); ++i) {
    PyObject* group = PyList_GET_ITEM(groups.get(), i);
    PyObject* params = PyDict_CheckExact(group) ? PyDict_GetItemWithError(group, n.params) : nullptr;
    if (params == nullptr || params != PyList_GET_ITEM(lists, i) || !PyList_Check(params) ||
        PyList_GET_SIZE(params) != PyLong_AsSsize_t(PyList_GET_ITEM(lengths, i))) {
      PyErr_Clear();
      return nullptr;
    }
  }
  return Py_NewRef(plan);
}

// A row, or a row builder (a functools.partial of a module-level function and the step's numbers), waits for its
// segment, hundreds of steps: kept out of the cyclic GC, which would promote each one to its oldest generation as it
// waited, where a few per step (with the writer's row tuples) set off a full collection every ~7,000 steps of MLP-256
// (~160 ms under the GIL with torch loaded, the training thread waiting: bench_record.py writer). They hold no cycle;
// reference counts free them once the segment is made.
void untrack_waiting(PyObject* row) {
  if (PyObject_GC_IsTracked(row)) PyObject_GC_UnTrack(row);
  if (PyTuple_Check(row)) return;
  THPObjectPtr args(PyObject_GetAttr(row, recorder_names().args));
  if (args && PyTuple_Check(args.get()) && PyObject_GC_IsTracked(args.get())) PyObject_GC_UnTrack(args.get());
  PyErr_Clear();
}

// Appends `row` to the Recorder's rows of `key`, untracked.
bool append_row(PyObject* rec, PyObject* key, PyObject* row) {
  THPObjectPtr rows(PyObject_GetAttr(rec, recorder_names().rows));
  PyObject* list = rows && PyDict_Check(rows) ? PyDict_GetItemWithError(rows, key) : nullptr;
  if (list == nullptr && !PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "the recorder's rows");
  if (list == nullptr || PyList_Append(list, row) != 0) return false;
  untrack_waiting(row);
  return true;
}

// A fault while a hook changed the Recorder: reported through its fault boundary (fault.report), as the Python
// method's own `except` would; never raised.
void recorder_fault(PyObject* rec, const RecorderConfig& c, const char* what) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  THPObjectPtr fault(read_attr(rec, recorder_names().fault));
  THPObjectPtr text(PyUnicode_FromString(what));
  if (fault && text && value != nullptr)
    Py_XDECREF(PyObject_CallFunctionObjArgs(c.report, fault.get(), text.get(), value, nullptr));
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
}

// Recorder._step_begins's common case as a rank of several: every .grad, as the all-reduce left it, handed to the
// native reader in one call (summarised and fingerprinted: at once, or beside step()), its job kept for the step's
// end. 1: done; 0: the Python method's to do.
int ranks_step_begins(PyObject* rec, const RecorderConfig& c, PyObject* optimizer, PyObject* plan) {
  const RecorderNames& n = recorder_names();
  THPObjectPtr reader(read_attr(rec, n.native_reader));
  THPObjectPtr in_place(read_attr(rec, n.in_place));
  THPObjectPtr poll(read_attr(rec, n.poll));
  THPObjectPtr reading(read_attr(rec, n.reading));
  if (!reader || reader.get() == Py_None || !in_place || !PyAnySet_Check(in_place) || !poll || !PyBool_Check(poll) ||
      !reading || !PyList_Check(reading) || !attr_is(rec, n.leaf_pass, Py_None))
    return 0;
  // (an optimizer seen changing .grad while it was read is read by Python before step() runs)
  if (PySet_Contains(in_place, reinterpret_cast<PyObject*>(Py_TYPE(optimizer))) != 0) {
    PyErr_Clear();
    return 0;
  }
  // changes from here
  const char* const what = "recording the gradients the optimizer applies";
  THPObjectPtr id(PyLong_FromVoidPtr(optimizer));
  if (!id || PyObject_SetAttr(rec, n.stepping, id) != 0) {
    recorder_fault(rec, c, what);
    return 1;
  }
  THPObjectPtr handle(
      PyObject_CallMethodObjArgs(reader, n.read, PyTuple_GET_ITEM(plan, 2), Py_True, poll.get(), Py_True, nullptr));
  if (!handle) {
    recorder_fault(rec, c, what);
    return 1;
  }
  if (handle.get() == Py_None) return 1;  // no gradient to read
  THPObjectPtr step(PyObject_GetAttr(rec, n.step));
  THPObjectPtr job(step ? PyTuple_Pack(5, reader.get(), handle.get(), step.get(), PyTuple_GET_ITEM(plan, 3), Py_True)
                        : nullptr);
  if (!job || PyList_Append(reading, job) != 0) recorder_fault(rec, c, what);
  return 1;
}

// Recorder._step_begins's common case: one rank, a step whose .grad are as the backward before it summarised them
// (its window closed as they are taken); or a rank of several (ranks_step_begins). 1: done; 0: the Python method's
// to do.
int step_begins_natively(PyObject* rec, const RecorderConfig& c, PyObject* optimizer) {
  const RecorderNames& n = recorder_names();
  if (!attr_is(rec, n.plain, Py_True) || !attr_is(rec, n.stepping, Py_None) || !attr_is(rec, n.records, Py_True))
    return 0;
  const long world = world_of(rec);
  if (world == 0 || (world == 1 && maybe_distributed(c))) return 0;
  THPObjectPtr plan(current_plan(rec, optimizer));  // (lists, lengths, params, described, off the CPU, sharded)
  if (!plan || PyTuple_GET_ITEM(plan.get(), 4) != Py_False || PyTuple_GET_ITEM(plan.get(), 5) != Py_False ||
      !PyList_Check(PyTuple_GET_ITEM(plan.get(), 3)))
    return 0;
  if (world > 1) return ranks_step_begins(rec, c, optimizer, plan.get());
  THPObjectPtr leaf_pass(read_attr(rec, n.leaf_pass));
  THPObjectPtr capsule(leaf_pass && leaf_pass.get() != Py_None ? read_attr(leaf_pass, n.capsule) : nullptr);
  if (!capsule || pass_of(capsule) == nullptr) {
    PyErr_Clear();
    return 0;
  }
  // changes from here: the window closes, and the pass is the step's no more
  const char* const what = "recording the gradients the optimizer applies";
  THPObjectPtr stats(fv_leaf_stats(capsule, PyTuple_GET_ITEM(plan.get(), 2)));
  if (!stats) {  // (the Python method's boundary would report it, the step under way)
    recorder_fault(rec, c, what);
    THPObjectPtr id(PyLong_FromVoidPtr(optimizer));
    if (!id || PyObject_SetAttr(rec, n.stepping, id) != 0 || PyObject_SetAttr(rec, n.leaf_pass, Py_None) != 0)
      PyErr_Clear();
    return 1;
  }
  if (PyObject_SetAttr(rec, n.leaf_pass, Py_None) != 0 || stats.get() == Py_None) {
    PyErr_Clear();
    return 0;  // .grad may have changed since: the Python method reads it
  }
  THPObjectPtr id(PyLong_FromVoidPtr(optimizer));
  if (!id || PyObject_SetAttr(rec, n.stepping, id) != 0) {
    recorder_fault(rec, c, what);
    return 1;
  }
  PyObject* described = PyTuple_GET_ITEM(plan.get(), 3);
  THPObjectPtr step(PyObject_GetAttr(rec, n.step));
  THPObjectPtr row(step ? PyObject_CallFunctionObjArgs(c.partial, c.leaf_rows, step.get(), described, stats.get(),
                                                       nullptr)
                        : nullptr);
  if (!row || !append_row(rec, c.grads, row) || !add_to(rec, n.later_rows, PyList_GET_SIZE(described)) ||
      PyObject_SetAttr(rec, n.later, Py_True) != 0 || !add_to(rec, n.reused, 1))
    recorder_fault(rec, c, what);
  return 1;
}

// Recorder._step_ends's common case: the step counted and its row made, every step recorded, no memory to read, no
// segment to write yet; and no reader's job to wait for, or (a rank of several) the step's one, read whole and
// finite with no .grad changed meanwhile, whose rows the writer's thread then builds (_native_rows).
int step_ends_natively(PyObject* rec, const RecorderConfig& c, PyObject* optimizer) {
  const RecorderNames& n = recorder_names();
  if (!attr_is(rec, n.plain, Py_True) || !attr_equals(rec, n.nested, 0)) return 0;
  THPObjectPtr reading(read_attr(rec, n.reading));
  THPObjectPtr counting(read_attr(rec, n.counting));
  THPObjectPtr session(read_attr(rec, n.session));
  THPObjectPtr traces(session ? read_attr(session, n.traces) : nullptr);
  if (!reading || !PyList_Check(reading) || PyList_GET_SIZE(reading.get()) > 1 || !counting ||
      !PyWeakref_CheckRef(counting) || PyWeakref_GetObject(counting) != optimizer || !traces || !PyList_Check(traces) ||
      PyList_GET_SIZE(traces.get()) != 0)
    return 0;
  // (reader, job, step, described, fingerprinted): ranks_step_begins's
  PyObject* job = PyList_GET_SIZE(reading.get()) == 1 ? PyList_GET_ITEM(reading.get(), 0) : nullptr;
  if (job != nullptr &&
      (!PyTuple_CheckExact(job) || PyTuple_GET_SIZE(job) != 5 || !PyList_Check(PyTuple_GET_ITEM(job, 3))))
    return 0;
  const Py_ssize_t job_rows = job != nullptr ? PyList_GET_SIZE(PyTuple_GET_ITEM(job, 3)) : 0;
  const double now_s = perf_counter();
  const double t0 = attr_double(rec, n.t0);
  THPObjectPtr rows(read_attr(rec, n.rows));
  PyObject* grads = rows && PyDict_Check(rows) ? PyDict_GetItemWithError(rows, c.grads) : nullptr;
  THPObjectPtr later_rows(read_attr(rec, n.later_rows));
  // (with the job's rows: its row builder, and the rows it makes)
  const Py_ssize_t waiting = grads != nullptr && PyList_Check(grads) && later_rows && PyLong_CheckExact(later_rows)
                                 ? PyList_GET_SIZE(grads) + PyLong_AsSsize_t(later_rows) +
                                       (job != nullptr ? 1 + job_rows : 0)
                                 : PY_SSIZE_T_MAX;
  // (a comparison with NaN is false: an unreadable number goes to Python)
  if (PyErr_Occurred() || !(now_s - attr_double(rec, n.last_flush) < attr_double(rec, n.segment_seconds)) ||
      !(waiting < c.segment_rows) || !(now_s >= t0)) {
    PyErr_Clear();
    return 0;
  }
  if (job != nullptr) {  // (False, 0) or Python's _collect, which asks the job again and gets the same answer
    THPObjectPtr got(PyObject_CallMethodObjArgs(PyTuple_GET_ITEM(job, 0), n.wait, PyTuple_GET_ITEM(job, 1), nullptr));
    if (!got || !PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2 || PyTuple_GET_ITEM(got.get(), 0) != Py_False ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(got.get(), 1)) || PyLong_AsSsize_t(PyTuple_GET_ITEM(got.get(), 1)) != 0) {
      PyErr_Clear();
      return 0;
    }
  }
  // changes from here
  if (job != nullptr) {
    THPObjectPtr none_left(PyList_New(0));
    THPObjectPtr row(PyObject_CallFunctionObjArgs(c.partial, c.native_rows, PyTuple_GET_ITEM(job, 2),
                                                  PyTuple_GET_ITEM(job, 3), PyTuple_GET_ITEM(job, 0),
                                                  PyTuple_GET_ITEM(job, 1), nullptr));
    if (!none_left || !row || PyObject_SetAttr(rec, n.reading, none_left) != 0 || !append_row(rec, c.grads, row) ||
        !add_to(rec, n.later_rows, job_rows) || PyObject_SetAttr(rec, n.later, Py_True) != 0)
      recorder_fault(rec, c, "counting an optimizer step");
  }
  THPObjectPtr step(PyObject_GetAttr(rec, n.step));
  THPObjectPtr row(step ? Py_BuildValue("(OdOO)", step.get(), now_s - t0, Py_None, Py_None) : nullptr);
  THPObjectPtr one(row ? PyLong_FromLong(1) : nullptr);
  THPObjectPtr next(one ? PyNumber_Add(step, one) : nullptr);
  if (!next || PyObject_SetAttr(rec, n.stepping, Py_None) != 0 || !append_row(rec, c.steps, row) ||
      PyObject_SetAttr(rec, n.step, next) != 0 || PyObject_SetAttr(rec, n.records, Py_True) != 0)
    recorder_fault(rec, c, "counting an optimizer step");
  return 1;
}

// Recorder._after_backward's common case: a recorded pass of a graph written before, its numbers taken from the
// native hooks' pass, and (one rank) the window to the next step opened.
int after_backward_natively(PyObject* rec, const RecorderConfig& c) {
  const RecorderNames& n = recorder_names();
  const long world = world_of(rec);
  if (world == 0 || !attr_is(rec, n.plain, Py_True) || !attr_is(rec, n.stepping, Py_None) ||
      !attr_is(rec, n.leaf_pass, Py_None) || !attr_is(rec, n.records, Py_True))
    return 0;
  THPObjectPtr session(read_attr(rec, n.session));
  if (!session || !attr_is(session, n.record_grads, Py_True)) return 0;
  THPObjectPtr store(read_attr(session, n.store));
  THPObjectPtr recorded(store ? read_attr(store, n.recorded) : nullptr);
  THPObjectPtr passes(store ? read_attr(store, n.passes) : nullptr);
  THPObjectPtr found(store ? read_attr(store, n.nonfinite_found) : nullptr);
  THPObjectPtr unread(store ? read_attr(store, n.unread) : nullptr);
  if (!recorded || !passes || !found || !unread || !PyLong_CheckExact(recorded) ||
      PyObject_RichCompareBool(recorded, passes, Py_EQ) != 1 || PyObject_Length(found) != 0 || !PyList_Check(unread) ||
      PyList_GET_SIZE(unread.get()) == 0 || !attr_is(store, n.newest_handed, Py_False)) {
    PyErr_Clear();
    return 0;
  }
  // (index, NativePass, made, nids)
  PyObject* newest = PyList_GET_ITEM(unread.get(), PyList_GET_SIZE(unread.get()) - 1);
  if (!PyTuple_Check(newest) || PyTuple_GET_SIZE(newest) < 2 ||
      PyObject_RichCompareBool(PyTuple_GET_ITEM(newest, 0), recorded, Py_EQ) != 1) {
    PyErr_Clear();
    return 0;
  }
  PyObject* source = PyTuple_GET_ITEM(newest, 1);
  THPObjectPtr recorder(read_attr(session, n.recorder));
  THPObjectPtr device(recorder ? read_attr(recorder, n.device) : nullptr);
  THPObjectPtr capsule(read_attr(source, n.capsule));
  if (!device || !attr_is(device, n.device_reading, Py_False) || !capsule || pass_of(capsule) == nullptr) {
    PyErr_Clear();
    return 0;
  }
  THPObjectPtr shape(fv_shape(capsule));
  THPObjectPtr graphs(read_attr(rec, n.graphs));
  THPObjectPtr known(shape && graphs && PyDict_Check(graphs) ? Py_XNewRef(PyDict_GetItemWithError(graphs, shape))
                                                              : nullptr);
  if (!known || !PyTuple_Check(known) || PyTuple_GET_SIZE(known.get()) != 2 ||
      PyTuple_GET_ITEM(known.get(), 0) == Py_None) {
    PyErr_Clear();
    return 0;  // a graph not written yet (or not written at all)
  }
  // changes from here
  THPObjectPtr stats(fv_node_stats(capsule, Py_None));  // (bytes, [(position, summary)])
  if (!stats) {
    recorder_fault(rec, c, "reading the graph after backward");
    return 1;
  }
  if (world == 1) {  // one rank: the window to the step opens (a rank of several reads .grad at the step)
    if (PyObject_SetAttr(rec, n.leaf_pass, source) != 0) {
      recorder_fault(rec, c, "reading the graph after backward");
      return 1;
    }
    watch(c.exposing);
  }
  PyObject* numbers = PyTuple_GET_ITEM(stats.get(), 0);
  PyObject* on_device = PyTuple_GET_ITEM(stats.get(), 1);  // (node_stats's own list: empty, it waits untracked too)
  if (PyList_GET_SIZE(on_device) == 0 && PyObject_GC_IsTracked(on_device)) PyObject_GC_UnTrack(on_device);
  const Py_ssize_t count = PyBytes_GET_SIZE(numbers) / c.node_stats_size + PyList_GET_SIZE(on_device);
  THPObjectPtr step(PyObject_GetAttr(rec, n.step));
  PyObject* graph = PyTuple_GET_ITEM(known.get(), 0);
  PyObject* described = PyTuple_GET_ITEM(known.get(), 1);
  THPObjectPtr row(step ? PyObject_CallFunctionObjArgs(c.partial, c.node_rows, step.get(), graph, described, numbers,
                                                       on_device, nullptr)
                        : nullptr);
  if (!row || !append_row(rec, c.grads, row) ||
      (PyList_GET_SIZE(on_device) > 0 && PyObject_SetAttr(rec, n.later_on_device, Py_True) != 0) ||
      !add_to(rec, n.later_rows, count) || PyObject_SetAttr(rec, n.later, Py_True) != 0)
    recorder_fault(rec, c, "reading the graph after backward");
  return 1;
}

// The Recorder's method `name` called with `args` (the case C++ leaves to Python), then its _plain as _plain_now()
// says: the attributes it covers change only in such calls. A fault there leaves _plain false, and its error as it was.
template <typename... A>
PyObject* in_python(PyObject* rec, PyObject* name, A... args) {
  PyErr_Clear();
  PyObject* out = PyObject_CallMethodObjArgs(rec, name, args..., nullptr);
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  THPObjectPtr plain(PyObject_CallMethodNoArgs(rec, recorder_names().plain_now));
  if (!plain || PyObject_SetAttr(rec, recorder_names().plain, plain) != 0) {
    PyErr_Clear();
    if (PyObject_SetAttr(rec, recorder_names().plain, Py_False) != 0) PyErr_Clear();
  }
  PyErr_Restore(type, value, traceback);
  return out;
}

// An optimizer step hook (torch's global one, bound to a Recorder and its config with functools.partial: args are
// recorder, config, optimizer, args, kwargs): what `natively` does not do, the Recorder's method `slow_name` does.
template <int (*natively)(PyObject*, const RecorderConfig&, PyObject*)>
PyObject* record_step(const char* what, PyObject* slow_name, PyObject* const* args, Py_ssize_t n) {
  if (!args_ok<void>(what, n, 5)) return nullptr;
  RecorderConfig c;
  if (recorder_config(args[1], c) && natively(args[0], c, args[2]) == 1) Py_RETURN_NONE;
  return in_python(args[0], slow_name, args[2], args[3], args[4]);
}

// record_step_begins(recorder, config, optimizer, args, kwargs): the pre-hook, step_begins_natively or _step_begins.
PyObject* py_record_step_begins(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const slow_name = PyUnicode_InternFromString("_step_begins");
  return record_step<step_begins_natively>("record_step_begins", slow_name, args, n);
}

// record_step_ends(recorder, config, optimizer, args, kwargs): the post-hook, step_ends_natively or _step_ends.
PyObject* py_record_step_ends(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const slow_name = PyUnicode_InternFromString("_step_ends");
  return record_step<step_ends_natively>("record_step_ends", slow_name, args, n);
}

// record_after_backward(recorder, config, roots): the session's after_backward_of callback, after_backward_natively
// or _after_backward.
PyObject* py_record_after_backward(PyObject*, PyObject* const* args, Py_ssize_t n) {
  static PyObject* const slow_name = PyUnicode_InternFromString("_after_backward");
  if (!args_ok<void>("record_after_backward", n, 3)) return nullptr;
  RecorderConfig c;
  if (recorder_config(args[1], c) && after_backward_natively(args[0], c) == 1) Py_RETURN_NONE;
  return in_python(args[0], slow_name, args[2]);
}

PyMethodDef methods[] = {
    FV_METHOD(tag, "tag(out, first_new, make_tag, func, where): fv_tag"),
    FV_METHOD(torch_function, "torch_function(config, func, args, kwargs) -> the op's result, or config's slow: "
                              "fv_torch_function"),
    FV_METHOD(ledger_bind, "ledger_bind(addresses): cpu_ledger.cpp's functions' addresses, in LedgerCalls' order"),
    FV_METHOD(ledger_claim, "ledger_claim(handle, tensor, node, claimable, activation) -> (pointer, sid) or None"),
    FV_METHOD(ledger_name_fresh, "ledger_name_fresh(handle, site, out, shapes): NativeLedger.after_op's ledger calls"),
    FV_METHOD(ledger_set_context, "ledger_set_context(handle, cell, module, line, op)"),
    FV_METHOD(ledger_recategorize, "ledger_recategorize(handle, tensor, category, node, only_from) -> sid, -1 or -2"),
    FV_METHOD(ledger_recategorize_many, "ledger_recategorize_many(handle, tensors, category) -> [sid, -1 or -2]"),
    FV_METHOD(ledger_release_many, "ledger_release_many(handle, [(pointer, sid)]) -> how many went back"),
    FV_METHOD(ledger_forget_fresh, "ledger_forget_fresh(handle)"),
    FV_METHOD(ledger_recategorize_grads, "ledger_recategorize_grads(handle, params, category, shapes) -> [(sid, grad)]"),
    FV_METHOD(unseen_state, "unseen_state(state, seen) -> [tensor]: optimizer state not seen as it is"),
    FV_METHOD(ledger_claim_saved, "ledger_claim_saved(handle, grad_fn, names, ids, claims, gone_append, gone_key, "
                                  "claimable, activation, shapes, node_names) -> whether it claimed"),
    FV_METHOD(user_location, "user_location(depth, known, classify) -> (filename, line): source.user_location's walk"),
    FV_METHOD(module_pre, "module_pre(stack, hooks, module, args): ModuleStack._pre's common push"),
    FV_METHOD(module_post, "module_post(stack, hooks, module, args, output): ModuleStack._post's common pop"),
    FV_METHOD(arm, "arm(roots, chain, ids, dead_append, fallback, sample, bins, values_cap, chain_cap, device, "
                   "device_add, device_add_leaf): fv_arm"),
    FV_METHOD(finish, "finish(pass) -> (nids, leaves, faults): fv_finish"),
    FV_METHOD(rows, "rows(pass) -> rows: fv_rows"),
    FV_METHOD(forget, "forget(pass, gone) -> rows left: fv_forget"),
    FV_METHOD(summary, "summary(pass, slot) -> summary: fv_summary"),
    FV_METHOD(walk, "walk(roots) -> (signature, found, ids): fv_walk"),
    FV_METHOD(shape, "shape(pass) -> (signature, found): fv_shape"),
    FV_METHOD(order, "order(pass) -> ids: fv_order"),
    FV_METHOD(recorded, "recorded(pass, functions or None) -> ((signature, found), bytes, [(position, summary)]): "
                        "fv_recorded, and with functions the window opened, watching them"),
    FV_METHOD(node_stats, "node_stats(pass, ids) -> (bytes, [(position, summary)]): fv_node_stats"),
    FV_METHOD(leaf_stats, "leaf_stats(pass, params) -> bytes or None, the window closed: fv_leaf_stats"),
    FV_METHOD(leaf_summaries, "leaf_summaries(pass, params) -> [summary or None] or None, the window closed: "
                              "fv_leaf_summaries"),
    FV_METHOD(window, "window(functions or None) -> calls that may write a .grad unseen, since the last call"),
    FV_METHOD(record_step_begins,
              "record_step_begins(recorder, config, optimizer, args, kwargs): Recorder._step_begins"),
    FV_METHOD(record_step_ends, "record_step_ends(recorder, config, optimizer, args, kwargs): Recorder._step_ends"),
    FV_METHOD(record_after_backward, "record_after_backward(recorder, config, roots): Recorder._after_backward"),
    FV_METHOD(device_add, "device_add(pending, grad, parameter or None) -> summary, or NotImplemented where "
                          "DeviceSummaries.add or add_leaf takes it (device_path.cpp)"),
    FV_METHOD(fill_device_rows, "fill_device_rows(items, rows, layout, histogram, wire_edges) -> whether one counted "
                                "NaN or infinity: device_summary._fill_rows (device_path.cpp)"),
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

FV_MODULE(_grad_hooks, "forgeviz's gradient hooks and op tags in C++ (forgeviz/_capture/native/grad_hooks.cpp)", 17)
