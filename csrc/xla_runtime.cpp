// Loads torch_xla's backend into a process without Python code of its own
// (src/accelerators/xla_runtime.rs).
//
// torch_xla ships its kernels in one Python extension, _XLAC, which links
// libpython, libtorch_python and libtorch, and registers the XLA backend
// only when its module is initialised: loading the library alone leaves a
// device guard without kernels. So the backend starts here as Python would
// start it: libpython and libtorch_python are opened with RTLD_GLOBAL, the
// interpreter is initialised (without signal handlers: the host keeps its
// own), `import _XLAC` runs with _XLAC's directory on sys.path, the lazy
// backend and the PJRT client start, and the GIL is released. Nothing is
// linked against Python: every Python function is looked up with dlsym,
// so this file builds and loads where no Python exists, and starting
// fails there with the loader's message.
//
// Once started, plain ATen runs on c10::Device(kXLA, i). Each step's lazy
// graph ends with torch_xla's step marker (Lightning's `xm.mark_step()`),
// called through the interpreter under the GIL, from any thread.
#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "fulmen_cxx.h"

namespace {

struct PyObj;  // PyObject, opaque here.

// The few CPython functions used, looked up in the libpython opened.
struct Python {
  int (*is_initialized)() = nullptr;
  void (*initialize_ex)(int) = nullptr;
  void (*set_python_home)(const wchar_t*) = nullptr;
  wchar_t* (*decode_locale)(const char*, size_t*) = nullptr;
  int* no_site_flag = nullptr;
  int* ignore_environment_flag = nullptr;
  int* no_user_site_flag = nullptr;
  void* (*save_thread)() = nullptr;
  int (*gil_ensure)() = nullptr;
  void (*gil_release)(int) = nullptr;
  PyObj* (*run_string)(const char*, int, PyObj*, PyObj*) = nullptr;
  PyObj* (*compile_string)(const char*, const char*, int) = nullptr;
  PyObj* (*eval_code)(PyObj*, PyObj*, PyObj*) = nullptr;
  PyObj* (*dict_new)() = nullptr;
  int (*dict_set_item_string)(PyObj*, const char*, PyObj*) = nullptr;
  PyObj* (*dict_get_item_string)(PyObj*, const char*) = nullptr;
  PyObj* (*eval_get_builtins)() = nullptr;
  PyObj* (*long_from_long_long)(long long) = nullptr;
  long long (*long_as_long_long)(PyObj*) = nullptr;
  void (*err_fetch)(PyObj**, PyObj**, PyObj**) = nullptr;
  void (*err_clear)() = nullptr;
  PyObj* (*object_str)(PyObj*) = nullptr;
  const char* (*unicode_as_utf8)(PyObj*) = nullptr;
  void (*dec_ref)(PyObj*) = nullptr;
};

constexpr int kPyFileInput = 257;  // Py_file_input

// The backend's state: started once per process; a failed start is kept
// and reported again (a second attempt cannot undo the first's loading).
struct Backend {
  std::mutex mu;
  bool tried = false;
  std::string failure;
  Python py;
  PyObj* globals = nullptr;  // holds _XLAC and the marker's argument
  PyObj* marker = nullptr;   // compiled `_XLAC._xla_step_marker(...)`
  int64_t devices = 0;         // this process's (addressable) devices
  int64_t global_devices = 0;  // the devices of every process of the PJRT job
};

Backend& backend() {
  static Backend* b = new Backend();  // never destroyed: Python outlives static destructors
  return *b;
}

template <typename F>
void lookup(void* lib, const char* name, F& slot) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  TORCH_CHECK(slot != nullptr, "xla: libpython has no ", name, " (", dlerror(), ")");
}

void load_python(Python& py, void* lib) {
  lookup(lib, "Py_IsInitialized", py.is_initialized);
  lookup(lib, "Py_InitializeEx", py.initialize_ex);
  lookup(lib, "Py_SetPythonHome", py.set_python_home);
  lookup(lib, "Py_DecodeLocale", py.decode_locale);
  lookup(lib, "Py_NoSiteFlag", py.no_site_flag);
  lookup(lib, "Py_IgnoreEnvironmentFlag", py.ignore_environment_flag);
  lookup(lib, "Py_NoUserSiteDirectory", py.no_user_site_flag);
  lookup(lib, "PyEval_SaveThread", py.save_thread);
  lookup(lib, "PyGILState_Ensure", py.gil_ensure);
  lookup(lib, "PyGILState_Release", py.gil_release);
  lookup(lib, "PyRun_String", py.run_string);
  lookup(lib, "Py_CompileString", py.compile_string);
  lookup(lib, "PyEval_EvalCode", py.eval_code);
  lookup(lib, "PyDict_New", py.dict_new);
  lookup(lib, "PyDict_SetItemString", py.dict_set_item_string);
  lookup(lib, "PyDict_GetItemString", py.dict_get_item_string);
  lookup(lib, "PyEval_GetBuiltins", py.eval_get_builtins);
  lookup(lib, "PyLong_FromLongLong", py.long_from_long_long);
  lookup(lib, "PyLong_AsLongLong", py.long_as_long_long);
  lookup(lib, "PyErr_Fetch", py.err_fetch);
  lookup(lib, "PyErr_Clear", py.err_clear);
  lookup(lib, "PyObject_Str", py.object_str);
  lookup(lib, "PyUnicode_AsUTF8", py.unicode_as_utf8);
  lookup(lib, "Py_DecRef", py.dec_ref);
}

// The pending Python exception as text (cleared); holds the GIL.
std::string python_error(const Python& py) {
  PyObj *type = nullptr, *value = nullptr, *trace = nullptr;
  py.err_fetch(&type, &value, &trace);
  std::string text = "unknown Python error";
  PyObj* shown = value != nullptr ? value : type;
  if (shown != nullptr) {
    PyObj* s = py.object_str(shown);
    if (s != nullptr) {
      const char* utf8 = py.unicode_as_utf8(s);
      if (utf8 != nullptr) {
        text = utf8;
      }
      py.dec_ref(s);
    }
    py.err_clear();
  }
  for (PyObj* o : {type, value, trace}) {
    if (o != nullptr) {
      py.dec_ref(o);
    }
  }
  return text;
}

// Runs `code` in the backend's globals under the GIL the caller holds.
void run(Backend& b, const std::string& code, const char* what) {
  PyObj* r = b.py.run_string(code.c_str(), kPyFileInput, b.globals, b.globals);
  TORCH_CHECK(r != nullptr, "xla: ", what, " failed: ", python_error(b.py));
  b.py.dec_ref(r);
}

// A Python string literal of `s` (a path), escaped.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') {
      out += '\\';
    }
    TORCH_CHECK(c != '\n' && c != '\r' && c != '\0', "xla: the library directory's name holds a line break");
    out += c;
  }
  return out + "'";
}

// Holds the GIL for a scope (any thread, once the interpreter runs).
class Gil {
 public:
  explicit Gil(const Python& py) : py_(py), state_(py.gil_ensure()) {}
  ~Gil() { py_.gil_release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  const Python& py_;
  int state_;
};

void start_module(Backend& b, const std::string& lib_dir);

// Whether `<prefix>/lib/python3.11` or `<prefix>/lib64/python3.11` (Fedora's)
// holds the standard library.
bool has_stdlib(const std::string& prefix) {
  for (const char* lib : {"/lib/python3.11/os.py", "/lib64/python3.11/os.py"}) {
    if (access((prefix + lib).c_str(), R_OK) == 0) {
      return true;
    }
  }
  return false;
}

// The interpreter's home (Py_SetPythonHome's string): PYTHONHOME when set
// (`prefix[:exec_prefix]`, passed whole), else the prefix of the libpython
// loaded (`<prefix>/lib/libpython3.11.so.1.0`, Debian's
// `<prefix>/lib/<multiarch>/...`, or `<prefix>/lib64/...`). Its prefix is
// checked to hold the standard library, without which Py_InitializeEx
// would abort the process.
std::string python_home(const Python& py) {
  const char* env = std::getenv("PYTHONHOME");
  std::string home, prefix;
  if (env != nullptr && env[0] != '\0') {
    home = env;
    prefix = home.substr(0, home.find(':'));
  } else {
    Dl_info info{};
    TORCH_CHECK(dladdr(reinterpret_cast<void*>(py.initialize_ex), &info) != 0 && info.dli_fname != nullptr,
                "xla: dladdr found no file for libpython");
    std::string path = info.dli_fname;
    auto lib = path.rfind("/lib/");
    auto lib64 = path.rfind("/lib64/");
    if (lib == std::string::npos || (lib64 != std::string::npos && lib64 > lib)) {
      lib = lib64;
    }
    TORCH_CHECK(lib != std::string::npos, "xla: cannot tell Python's prefix from ", path, ": set PYTHONHOME");
    prefix = lib == 0 ? "/" : path.substr(0, lib);
    home = prefix;
  }
  TORCH_CHECK(has_stdlib(prefix), "xla: CPython 3.11's standard library is not under ", prefix,
              " (no lib/python3.11/os.py); install it (Debian: libpython3.11-stdlib) or set PYTHONHOME");
  return home;
}

// The CPython functions of an interpreter the process already runs (a
// Python host, even one whose executable holds Python itself), or NULL.
void* running_python() {
  auto is_initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  return is_initialized != nullptr && is_initialized() != 0 ? RTLD_DEFAULT : nullptr;
}

void start(Backend& b, const std::string& lib_dir, const std::string& libpython) {
  void* py_lib = running_python();
  if (py_lib != nullptr) {
    auto version = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "Py_GetVersion"));
    std::string v = version != nullptr ? version() : "unknown";
    TORCH_CHECK(v.rfind("3.11.", 0) == 0, "xla: this process runs Python ", v.substr(0, v.find(' ')),
                "; torch_xla 2.9's _XLAC needs CPython 3.11");
  } else {
    py_lib = dlopen(libpython.c_str(), RTLD_NOW | RTLD_GLOBAL);
    TORCH_CHECK(py_lib != nullptr, "xla: cannot load ", libpython,
                " (torch_xla's _XLAC needs CPython 3.11's shared library; install libpython3.11 or set "
                "FULMEN_XLA_LIBPYTHON to its path): ",
                dlerror());
  }
  load_python(b.py, py_lib);
  const std::string torch_python = lib_dir + "/libtorch_python.so";
  TORCH_CHECK(dlopen(torch_python.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr, "xla: cannot load ", torch_python,
              ": ", dlerror());
  bool own_interpreter = b.py.is_initialized() == 0;
  if (own_interpreter) {
    // An interpreter of its own, isolated from the host's environment: its
    // home checked (a missing standard library would abort), no site
    // module (no .pth files run), no PYTHONPATH, no signal handlers (the
    // host keeps SIGINT).
    static std::string home;
    home = python_home(b.py);
    static wchar_t* wide_home = nullptr;
    wide_home = b.py.decode_locale(home.c_str(), nullptr);
    TORCH_CHECK(wide_home != nullptr, "xla: cannot decode Python's home ", home);
    b.py.set_python_home(wide_home);
    *b.py.no_site_flag = 1;
    *b.py.ignore_environment_flag = 1;
    *b.py.no_user_site_flag = 1;
    b.py.initialize_ex(0);
  }
  std::string failure;
  {
    Gil gil(b.py);
    try {
      start_module(b, lib_dir);
    } catch (const c10::Error& e) {
      failure = e.what_without_backtrace();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (own_interpreter) {
    // Release the GIL the interpreter's start took, also after a failure:
    // every later call (from any thread) takes it with PyGILState_Ensure.
    b.py.save_thread();
  }
  TORCH_CHECK(failure.empty(), failure);
}

// Imports _XLAC from `lib_dir` and starts its backend; holds the GIL.
void start_module(Backend& b, const std::string& lib_dir) {
  b.globals = b.py.dict_new();
  TORCH_CHECK(b.globals != nullptr, "xla: PyDict_New failed");
  TORCH_CHECK(b.py.dict_set_item_string(b.globals, "__builtins__", b.py.eval_get_builtins()) == 0,
              "xla: setting __builtins__ failed");
  run(b,
      "import sys\n"
      "sys.path.insert(0, " +
          quoted(lib_dir) +
          ")\n"
          "import _XLAC\n"
          "_XLAC._init_xla_lazy_backend()\n"
          "_fulmen_devices = len(_XLAC._xla_get_devices())\n"
          "_fulmen_global_devices = len(_XLAC._xla_get_all_devices())\n",
      "starting torch_xla's backend (import _XLAC)");
  for (auto [name, slot] : {std::pair<const char*, int64_t*>{"_fulmen_devices", &b.devices},
                            std::pair<const char*, int64_t*>{"_fulmen_global_devices", &b.global_devices}}) {
    PyObj* n = b.py.dict_get_item_string(b.globals, name);  // borrowed
    TORCH_CHECK(n != nullptr, "xla: the backend reported no device list");
    *slot = b.py.long_as_long_long(n);
  }
  b.marker = b.py.compile_string("_XLAC._xla_step_marker('xla:%d' % _fulmen_index, [], _fulmen_wait)\n",
                                 "<fulmen xla step marker>", kPyFileInput);
  TORCH_CHECK(b.marker != nullptr, "xla: compiling the step marker failed: ", python_error(b.py));
}

// Releases the GIL for a scope when the calling thread holds it (a Python
// host calling in), and takes it back after.
class HostGilReleased {
 public:
  HostGilReleased() {
    auto check = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Check"));
    auto save = reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "PyEval_SaveThread"));
    restore_ = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_DEFAULT, "PyEval_RestoreThread"));
    if (running_python() != nullptr && check != nullptr && save != nullptr && restore_ != nullptr && check() != 0) {
      state_ = save();
    }
  }
  ~HostGilReleased() {
    if (state_ != nullptr) {
      restore_(state_);
    }
  }
  HostGilReleased(const HostGilReleased&) = delete;
  HostGilReleased& operator=(const HostGilReleased&) = delete;

 private:
  void (*restore_)(void*) = nullptr;
  void* state_ = nullptr;
};

}  // namespace

extern "C" {

// Starts the XLA backend once per process from `lib_dir` (holding
// _XLAC.cpython-311-*.so and libtorch_python.so) and `libpython` (a path
// or soname); *devices = the PJRT client's devices in this process (xla:0
// ..), *global_devices = those of every process of its job (on TPUs, every
// chip of the slice). A later call returns the first call's result without
// loading anything again.
int fulmen_cxx_xla_start(const char* lib_dir, const char* libpython, int64_t* devices, int64_t* global_devices,
                         char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(lib_dir != nullptr && libpython != nullptr && devices != nullptr && global_devices != nullptr,
              "xla_start: NULL argument");
  // A host thread holding the GIL of its own interpreter lets it go while
  // it waits for the start (another thread may be starting and need it).
  HostGilReleased host_gil;
  Backend& b = backend();
  std::lock_guard<std::mutex> lock(b.mu);
  if (!b.tried) {
    b.tried = true;
    try {
      start(b, lib_dir, libpython);
    } catch (const c10::Error& e) {
      b.failure = e.what_without_backtrace();
    } catch (const std::exception& e) {
      b.failure = e.what();
    }
  }
  TORCH_CHECK(b.failure.empty(), b.failure);
  *devices = b.devices;
  *global_devices = b.global_devices;
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends device `index`'s pending lazy graph and starts running it
// (torch_xla's step marker; `wait` blocks until it has run). Needs a
// started backend.
int fulmen_cxx_xla_step_marker(int64_t index, int wait, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Backend& b = backend();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    TORCH_CHECK(b.tried && b.failure.empty() && b.marker != nullptr, "xla step marker: the XLA backend is not started");
  }
  TORCH_CHECK(index >= 0 && index < b.devices, "xla step marker: device ", index, " of ", b.devices);
  Gil gil(b.py);
  // The arguments in locals of this call's own: threads marking steps at
  // once do not see each other's.
  PyObj* locals = b.py.dict_new();
  TORCH_CHECK(locals != nullptr, "xla step marker: ", python_error(b.py));
  bool set = true;
  for (auto [key, value] : {std::pair<const char*, long long>{"_fulmen_index", index},
                            std::pair<const char*, long long>{"_fulmen_wait", wait != 0 ? 1 : 0}}) {
    PyObj* v = b.py.long_from_long_long(value);
    set = set && v != nullptr && b.py.dict_set_item_string(locals, key, v) == 0;
    if (v != nullptr) {
      b.py.dec_ref(v);
    }
  }
  PyObj* r = set ? b.py.eval_code(b.marker, b.globals, locals) : nullptr;
  b.py.dec_ref(locals);
  TORCH_CHECK(r != nullptr, "xla step marker: ", python_error(b.py));
  b.py.dec_ref(r);
  FULMEN_CXX_CATCH(err, err_len)
}

// Writes the directory of the libtorch_cpu.so this process runs (where a
// torch_xla build keeps _XLAC), NUL-terminated, into `buf`.
int fulmen_cxx_libtorch_dir(char* buf, size_t buf_len, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(buf != nullptr && buf_len > 0, "libtorch_dir: no buffer");
  Dl_info info{};
  TORCH_CHECK(dladdr(reinterpret_cast<void*>(&at::globalContext), &info) != 0 && info.dli_fname != nullptr,
              "libtorch_dir: dladdr found no library for libtorch_cpu");
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  TORCH_CHECK(dir.size() < buf_len, "libtorch_dir: the path is longer than ", buf_len - 1, " bytes");
  dir.copy(buf, dir.size());
  buf[dir.size()] = '\0';
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"
