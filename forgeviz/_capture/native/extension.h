// What forgeviz's Python extension modules (grad_hooks.cpp, grad_reader.cpp) share: their methods
// tables' entries and how the module object is made. Part of each one's source key (native/__init__.py):
// a change here rebuilds both.
#pragma once

#include <Python.h>

// A methods table entry for py_<name>, called with METH_FASTCALL (no tuple made per call).
#define FV_METHOD(name, doc) \
  {#name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_##name)), METH_FASTCALL, doc}

// The module `name` of `methods`, with ABI_VERSION = abi (which Python checks before it uses the
// module); nullptr with a Python error set when it cannot be made. Called once, from its PyInit.
inline PyObject* fv_create_module(const char* name, const char* doc, PyMethodDef* methods, long abi) {
  // (a module's definition must outlive it: this one lives as long as the process)
  auto* def = new PyModuleDef{PyModuleDef_HEAD_INIT, name, doc, -1, methods, nullptr, nullptr, nullptr, nullptr};
  PyObject* module = PyModule_Create(def);
  if (module != nullptr && PyModule_AddIntConstant(module, "ABI_VERSION", abi) != 0) Py_CLEAR(module);
  return module;
}

// The module's PyInit function: `name` (an identifier: _grad_hooks) made of the `methods` table in scope.
#define FV_MODULE(name, doc, abi) \
  PyMODINIT_FUNC PyInit_##name() { return fv_create_module(#name, doc, methods, abi); }
