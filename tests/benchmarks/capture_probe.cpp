// A probe, not part of forgeviz: what tagging ops would cost without forgeviz's TorchFunctionMode and module hooks
// (bench_capture.py's `mechanism` arms, issue 27's CPU target). Built by that benchmark into forgeviz's cache folder.
//
// A thread-local RecordFunction callback sees every aten call on this thread. The outermost call of each nest that
// made a Node gets a tag in the Node's metadata ("fv_probe": op, filename, line, module path), as forgeviz's mode
// tags "fv_op": the GIL taken (torch's Python bindings let it go around the op), the user's line from a walk of the
// Python frames (the files the caller named as the user's), and with mode 2 the module from the nearest `forward`
// frame's `self`, looked up in a dict of id(module) -> path, instead of a stack kept by module hooks.
//
// What a product would do differently: PyFrame_GetLocals snapshots every local of the frame into its f_locals
// dict (which then keeps them alive until the frame ends); reading the first fast local directly would be cheaper
// and hold nothing. Ops under no_grad, the backward's and the optimizer's would be left out by the callback's own
// switches (these arms time the forward only).
#include <Python.h>
#include <frameobject.h>

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/python_anomaly_mode.h>

#include <memory>

namespace {

enum Mode { kCount = 0, kTag = 1, kTagWithModule = 2 };

thread_local int depth = 0;  // aten calls open on this thread: only the outermost tags
at::CallbackHandle handle = 0;
int mode = kCount;
PyObject* user_files = nullptr;  // filename -> True for the user's files
PyObject* module_paths = nullptr;  // id(module) -> its path under the root
long long calls = 0, tagged = 0;

struct First : at::ObserverContext {
  int64_t sequence_nr = 0;  // the number the first Node made inside the call gets
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  ++calls;
  if (depth++ != 0) return nullptr;
  auto first = std::make_unique<First>();
  first->sequence_nr = static_cast<int64_t>(at::sequence_number::peek());
  return first;
}

// The first frame up from `frame` (a new reference, taken) that passes `found(frame, code)`, or nullptr.
template <typename Found>
PyFrameObject* frame_up(PyFrameObject* frame, Found found) {
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const bool hit = found(frame, code);
    Py_DECREF(code);
    if (hit) return frame;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return nullptr;
}

PyFrameObject* current_frame() {
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  return frame;
}

// The path of the module whose forward runs nearest the op (borrowed), or None.
PyObject* running_module() {
  static PyObject* const forward = PyUnicode_InternFromString("forward");
  static PyObject* const self_name = PyUnicode_InternFromString("self");
  PyObject* path = Py_None;
  PyFrameObject* frame = frame_up(current_frame(), [&](PyFrameObject* at, PyCodeObject* code) {
    if (code->co_name != forward || code->co_argcount < 1) return false;
    PyObject* locals = PyFrame_GetLocals(at);
    PyObject* self = locals != nullptr ? PyDict_GetItem(locals, self_name) : nullptr;
    PyObject* key = self != nullptr ? PyLong_FromVoidPtr(self) : nullptr;
    PyObject* known = key != nullptr ? PyDict_GetItem(module_paths, key) : nullptr;
    Py_XDECREF(key);
    Py_XDECREF(locals);
    if (known == nullptr) return false;
    path = known;
    return true;
  });
  Py_XDECREF(frame);
  PyErr_Clear();
  return path;
}

// (op, filename, line, module path or None): a new reference.
PyObject* make_tag(const at::RecordFunction& fn) {
  PyFrameObject* user = frame_up(current_frame(), [](PyFrameObject*, PyCodeObject* code) {
    return PyDict_GetItem(user_files, code->co_filename) == Py_True;
  });
  PyObject* filename = Py_None;
  int line = -1;
  if (user != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(user);
    filename = code->co_filename;
    line = PyFrame_GetLineNumber(user);
    Py_DECREF(code);  // (the frame holds its code, and the code its filename, while the tag is built)
  }
  PyObject* tag = Py_BuildValue("(sOiO)", fn.name(), filename, line, mode == kTagWithModule ? running_module()
                                                                                              : Py_None);
  Py_XDECREF(user);
  return tag;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  static PyObject* const key = PyUnicode_InternFromString("fv_probe");
  --depth;
  if (context == nullptr || mode == kCount) return;
  if (static_cast<int64_t>(at::sequence_number::peek()) == static_cast<First*>(context)->sequence_nr) return;
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* tag = nullptr;
  for (const auto& out : fn.outputs()) {
    if (!out.isTensor()) continue;
    const auto& grad_fn = out.toTensor().grad_fn();
    if (!grad_fn) continue;
    PyObject* meta = static_cast<torch::autograd::PyAnomalyMetadata*>(grad_fn->metadata())->dict();
    if (PyDict_GetItem(meta, key) != nullptr) continue;
    if (tag == nullptr && (tag = make_tag(fn)) == nullptr) break;
    if (PyDict_SetItem(meta, key, tag) == 0) ++tagged;
  }
  Py_XDECREF(tag);
  PyErr_Clear();
  PyGILState_Release(gil);
}

// start(mode, user_files, module_paths): the callback on this thread until stop().
PyObject* start(PyObject*, PyObject* args) {
  int given = 0;
  PyObject *files = nullptr, *paths = nullptr;
  if (!PyArg_ParseTuple(args, "iO!O!", &given, &PyDict_Type, &files, &PyDict_Type, &paths)) return nullptr;
  if (handle != 0) {
    PyErr_SetString(PyExc_RuntimeError, "capture_probe: started already");
    return nullptr;
  }
  mode = given;
  Py_XSETREF(user_files, Py_NewRef(files));
  Py_XSETREF(module_paths, Py_NewRef(paths));
  handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                          .needsOutputs(mode != kCount)
                                          .scopes({at::RecordScope::FUNCTION}));
  Py_RETURN_NONE;
}

// stop() -> (aten calls seen, Nodes tagged) since the module loaded.
PyObject* stop(PyObject*, PyObject*) {
  if (handle != 0) at::removeCallback(handle);
  handle = 0;
  return Py_BuildValue("(LL)", calls, tagged);
}

PyMethodDef methods[] = {{"start", start, METH_VARARGS, "start(mode, user_files, module_paths)"},
                         {"stop", stop, METH_NOARGS, "stop() -> (aten calls, Nodes tagged)"},
                         {nullptr, nullptr, 0, nullptr}};
PyModuleDef module = {PyModuleDef_HEAD_INIT, "_capture_probe", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__capture_probe() { return PyModule_Create(&module); }
