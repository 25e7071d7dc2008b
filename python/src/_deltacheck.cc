// deltacheck._deltacheck: the Python extension over deltacheck's public C++ API (deltacheck.h).
// It selects cases, runs them on a backend whose run() calls a Python function, and hands back the
// C++ results and reports; the Python package (deltacheck/*.py) turns the call into the user's
// convention. Nothing here judges: the runner does, exactly as for `deltacheck run`.
//
// A call's tensors cross as DLPack arrays whose memory the arrays own (share ownership of), so
// that a callable may keep them as long as it likes (a cache, a lazily evaluated tensor): the
// inputs are copies in a block the arrays hold (compared with deltacheck's own after the call:
// a write is the verdict error), the outputs deltacheck's poisoned, guarded buffers, handed over
// to the arrays when any of them outlives the call (deltacheck keeps a copy). With isolation each
// call runs in a forked child (harness/isolation.h, deltacheck::isolated_backend).
#include <deltacheck/deltacheck.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace nb = nanobind;
using deltacheck::Case;
using deltacheck::CaseResult;
using deltacheck::DType;
using deltacheck::Status;
using deltacheck::Tensor;
using deltacheck::TensorMap;

namespace {

nb::dlpack::dtype dl_dtype(DType t) {
  using Code = nb::dlpack::dtype_code;
  switch (t) {
    case DType::kF32:
      return nb::dtype<float>();
    case DType::kF64:
      return nb::dtype<double>();
    case DType::kBF16:
      return {static_cast<uint8_t>(Code::Bfloat), 16, 1};
    case DType::kF16:
      return {static_cast<uint8_t>(Code::Float), 16, 1};
    case DType::kI32:
      return nb::dtype<int32_t>();
    case DType::kI64:
      return nb::dtype<int64_t>();
    case DType::kU8:
      return nb::dtype<uint8_t>();
  }
  throw std::logic_error("unknown dtype");
}

// A DLPack array over `data` (a tensor's body, or its copy) whose memory `owner` keeps alive;
// bf16 as uint16 bit patterns when `bf16_bits` (NumPy has no bfloat16).
nb::object view(const Tensor& t, void* data, nb::handle owner, bool bf16_bits) {
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  const nb::dlpack::dtype dtype =
      bf16_bits && t.dtype() == DType::kBF16 ? nb::dtype<uint16_t>() : dl_dtype(t.dtype());
  // array_api: an object with __dlpack__ / __dlpack_device__ (and the buffer protocol), which
  // torch.from_dlpack, numpy.from_dlpack, cupy and jax take. Every array made from it (a torch
  // tensor, a NumPy view) holds a reference to `owner` until it is freed.
  nb::ndarray<nb::array_api> a(data, shape.size(), shape.data(), owner, nullptr, dtype,
                               nb::device::cpu::value);
  return nb::cast(a, nb::rv_policy::reference);
}

// True when only the caller still holds `owner`: no array of the call is alive.
bool sole_owner(const nb::object& owner) { return Py_REFCNT(owner.ptr()) == 1; }

// The memory of a call's input copies: one block, reused by the next call when no array of the
// call before it is alive (so that the steady state allocates nothing), else left to the arrays
// that hold it (a capsule frees it with the last of them).
struct InputBlock {
  void* data = nullptr;
  size_t bytes = 0;
  ~InputBlock() { std::free(data); }
};
constexpr size_t kAlign = 64;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Deltacheck's output tensors whose arrays outlived their call, kept alive by a capsule the
// arrays hold; the runner goes on with copies.
struct KeptOutputs {
  std::vector<Tensor> tensors;
};

template <typename T>
nb::capsule owning_capsule(T* p) {
  return nb::capsule(p, [](void* q) noexcept { delete static_cast<T*>(q); });
}

// A Python object as UTF-8 text whatever it holds: str() of it, lone surrogates and other
// unencodable characters as backslash escapes ("\udcff"), never an exception.
std::string utf8(nb::handle o) {
  PyObject* s = PyObject_Str(o.ptr());
  if (!s) {
    PyErr_Clear();
    return "<" + std::string(Py_TYPE(o.ptr())->tp_name) + " whose str() raised>";
  }
  PyObject* b = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
  Py_DECREF(s);
  if (!b) {
    PyErr_Clear();
    return "<text that cannot be encoded>";
  }
  std::string out(PyBytes_AS_STRING(b), static_cast<size_t>(PyBytes_GET_SIZE(b)));
  Py_DECREF(b);
  return out;
}

// "" when `copy` holds t's bytes, else the input check's reason (harness/input_check.h's words).
std::string input_changed(const Tensor& t, const uint8_t* copy) {
  const size_t n = t.nbytes();
  const auto* now = static_cast<const uint8_t*>(t.data());
  if (n == 0 || std::memcmp(copy, now, n) == 0) return "";
  size_t byte = 0;
  while (copy[byte] == now[byte]) ++byte;
  const size_t element = byte / (n / static_cast<size_t>(t.numel()));
  return "the backend wrote into its input '" + t.name() + "' (element " + std::to_string(element) +
         " of " + std::to_string(t.numel()) + " changed; inputs are read-only)";
}

// What a call in an isolated child reports back to the parent beside its outputs: a page of
// shared memory (the child's own counters die with it).
struct CallStats {
  double seconds_callable = 0.0;
  int64_t calls = 0;
};

// The Python side of a backend: `call(case_id, inputs, outputs)` writes the outputs (dicts of
// name -> DLPack array) and returns the seconds spent in the user's function;
// `supports(case_id, op, params)` returns None or the reason it cannot run the case. It raises
// deltacheck.Unsupported for a case it declines while running.
struct PyBackend {
  std::string name;
  nb::object call, supports, unsupported_type;
  bool deterministic = true;
  bool bf16_bits = false;
  // The callable's declared precision profile (deltacheck.check(profile=...)).
  deltacheck::PrecisionProfile profile;
  // Seconds inside the user's function (what the Python side reports back), summed.
  double seconds_callable = 0.0;
  double seconds_calls = 0.0;  // in run_python: the callable plus the route to it and back
  int64_t calls = 0;
  std::atomic<bool> interrupted{false};
  // The block of the last call's input copies and the capsule that owns it.
  nb::object input_owner;
  InputBlock* input_block = nullptr;
  // Isolated: where the child puts its call's counters (shared with the parent), else null.
  CallStats* child_stats = nullptr;
};

// Adds the wall time of its scope to a counter.
class ScopeTimer {
 public:
  explicit ScopeTimer(double& into) : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~ScopeTimer() {
    into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double& into_;
  std::chrono::steady_clock::time_point start_;
};

// In an isolated child: torch's operations on one thread. GNU OpenMP's worker threads do not
// survive the fork, and a parallel region would wait for them forever (gomp_team_barrier_wait_end).
void one_torch_thread() {
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (!torch) return;
  try {
    nb::handle(torch).attr("set_num_threads")(1);
  } catch (nb::python_error&) {
  }
}

// The block for `bytes` of input copies: the last call's when no array of it is alive, else new.
uint8_t* input_memory(PyBackend& b, size_t bytes) {
  const bool reusable = b.input_owner.is_valid() && sole_owner(b.input_owner);
  if (!reusable || b.input_block->bytes < bytes) {
    auto block = std::make_unique<InputBlock>();
    block->bytes = std::max(bytes, kAlign);  // a multiple of kAlign, as aligned_alloc wants
    block->data = std::aligned_alloc(kAlign, block->bytes);
    if (!block->data) throw std::bad_alloc();
    b.input_block = block.get();
    b.input_owner = owning_capsule(block.release());
  }
  return static_cast<uint8_t*>(b.input_block->data);
}

// The call itself, under the GIL: the Python side's result as a Status (an exception's text kept
// whatever characters it holds). The exception is gone when this returns, and with it the
// references its traceback held to the call's arrays.
Status call_python(PyBackend& b, const Case& c, nb::dict& in, nb::dict& out) {
  try {
    nb::object seconds = b.call(c.id(), in, out);
    const double s = nb::cast<double>(seconds);
    if (b.child_stats) {
      b.child_stats->seconds_callable = s;
      b.child_stats->calls = 1;
    } else {
      b.seconds_callable += s;
      ++b.calls;
    }
  } catch (nb::python_error& e) {
    if (e.matches(PyExc_KeyboardInterrupt)) {
      b.interrupted = true;
      return Status::Unsupported("interrupted (KeyboardInterrupt)");
    }
    if (e.matches(b.unsupported_type)) return Status::Unsupported(utf8(e.value()));
    // The exception's message (the Python side puts the type and the callable's frame in it).
    return Status::Internal(utf8(e.value()));
  } catch (std::exception& e) {
    return Status::Internal(e.what());
  }
  return Status::Ok();
}

Status run_python(PyBackend& b, const Case& c, const TensorMap& inputs, TensorMap& outputs) {
  if (b.interrupted) return Status::Unsupported("interrupted (KeyboardInterrupt)");
  ScopeTimer timer(b.seconds_calls);
  nb::gil_scoped_acquire gil;
  if (b.child_stats) one_torch_thread();
  size_t bytes = 0;
  for (const Tensor& t : inputs.all()) bytes += aligned(t.nbytes());
  uint8_t* copies = input_memory(b, bytes);
  nb::capsule kept_owner = owning_capsule(new KeptOutputs());
  Status st;
  {
    nb::dict in, out;
    size_t at = 0;
    for (const Tensor& t : inputs.all()) {
      if (t.nbytes() > 0) std::memcpy(copies + at, t.data(), t.nbytes());
      in[t.name().c_str()] = view(t, copies + at, b.input_owner, b.bf16_bits);
      at += aligned(t.nbytes());
    }
    for (Tensor& t : outputs.all())
      out[t.name().c_str()] = view(t, t.data(), kept_owner, b.bf16_bits);
    st = call_python(b, c, in, out);
  }
  if (b.child_stats) {  // a child's printed lines reach the parent only if flushed before _exit()
    try {
      nb::module_ sys = nb::module_::import_("sys");
      for (const char* name : {"stdout", "stderr"})
        if (nb::object f = sys.attr(name); !f.is_none()) f.attr("flush")();
    } catch (nb::python_error&) {
    }
  }
  // An output array that outlives the call keeps its memory; the runner goes on with a copy.
  if (!sole_owner(kept_owner)) {
    auto* kept = static_cast<KeptOutputs*>(kept_owner.data());
    for (Tensor& t : outputs.all()) {
      Tensor handed = std::move(t);
      t = handed;
      kept->tensors.push_back(std::move(handed));
    }
  }
  if (!st.ok()) return st;
  size_t at = 0;
  for (const Tensor& t : inputs.all()) {
    if (std::string why = input_changed(t, copies + at); !why.empty()) return Status::Internal(why);
    at += aligned(t.nbytes());
  }
  return st;
}

// Isolation (dc.check(isolate=True)): each call in a child forked by deltacheck's isolation
// (harness/isolation.h), on this thread while it holds the GIL, and Python told of the fork as
// os.fork tells it (PyOS_BeforeFork / PyOS_AfterFork_*, from pthread_atfork handlers armed for
// that fork alone): the child's one thread holds the GIL of an interpreter whose other threads'
// states are gone, its `os.register_at_fork` hooks run. Other forks in the process are left alone.
thread_local bool t_python_fork = false;
void before_fork() {
  if (t_python_fork) PyOS_BeforeFork();
}
void after_fork_parent() {
  if (t_python_fork) PyOS_AfterFork_Parent();
  t_python_fork = false;
}
void after_fork_child() {
  if (t_python_fork) {
    PyOS_AfterFork_Child();
    // A collection would touch every object the parent made, each page then copied: the child
    // lives for one call, its garbage dies with it.
#if PY_VERSION_HEX >= 0x030A0000
    PyGC_Disable();
#endif
  }
  t_python_fork = false;  // a fork the callable makes in the child is its own
}

// A page of memory the children write their call's counters into.
struct SharedStats {
  CallStats* stats;
  SharedStats() {
    void* p =
        mmap(nullptr, sizeof(CallStats), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("isolate: cannot map a shared page");
    stats = new (p) CallStats();
  }
  ~SharedStats() { munmap(stats, sizeof(CallStats)); }
  SharedStats(const SharedStats&) = delete;
  SharedStats& operator=(const SharedStats&) = delete;
};

Status run_forked(PyBackend& b, deltacheck::Backend& isolated, const Case& c,
                  const TensorMap& inputs, TensorMap& outputs) {
  if (b.interrupted) return Status::Unsupported("interrupted (KeyboardInterrupt)");
  nb::gil_scoped_acquire gil;  // held across the fork and the wait for the child
  *b.child_stats = CallStats();
  Status st;
  {
    ScopeTimer timer(b.seconds_calls);  // the fork and the copies of the outputs included
    t_python_fork = true;
    try {
      st = isolated.run(c, inputs, outputs);
    } catch (...) {
      t_python_fork = false;
      throw;
    }
    t_python_fork = false;
  }
  b.seconds_callable += b.child_stats->seconds_callable;
  b.calls += b.child_stats->calls;
  // A Ctrl-C reaches this process as well as the child: the run stops as it does in-process.
  if (PyErr_CheckSignals() != 0) {
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) b.interrupted = true;
    PyErr_Clear();
  }
  if (b.interrupted) return Status::Unsupported("interrupted (KeyboardInterrupt)");
  return st;
}

struct RunStats {
  double seconds = 0.0;           // wall time of run()
  double seconds_callable = 0.0;  // inside the user's function
  double seconds_calls = 0.0;     // the backend's run(): the callable and the route to it
  int64_t calls = 0;
};

// Runs the cases on a backend calling Python; `on_result(result)` is called with each result as
// it comes (in case order). The GIL is released while the C++ runner works.
std::pair<std::vector<CaseResult>, RunStats> run_cases(
    const std::vector<std::string>& ids, PyBackend& py, bool probes, nb::object on_result,
    const std::string& cache_dir, bool prepare_ahead, bool isolate, double timeout_s) {
  std::vector<Case> cases;
  cases.reserve(ids.size());
  for (const std::string& id : ids) cases.push_back(deltacheck::parse_case(id));
  py.interrupted = false;
  py.seconds_callable = 0.0;
  py.seconds_calls = 0.0;
  py.calls = 0;
  // The runner asks before every call (a case and each probe's variation of it, a dozen times a
  // case); the answer depends on the case id alone, so Python is asked once per id.
  std::unordered_map<std::string, deltacheck::Support> answers;
  std::mutex answers_mu;
  auto supports = [&py, &answers, &answers_mu](const Case& c) {
    const std::string id = c.id();
    {
      const std::lock_guard<std::mutex> lock(answers_mu);
      if (auto it = answers.find(id); it != answers.end()) return it->second;
    }
    deltacheck::Support answer = deltacheck::Support::Yes();
    {
      nb::gil_scoped_acquire gil;
      nb::object why = py.supports(id, c.op(), c.params());  // parsed already: passed along
      if (!why.is_none()) answer = deltacheck::Support::No(utf8(why));
    }
    const std::lock_guard<std::mutex> lock(answers_mu);
    answers.emplace(id, answer);
    return answer;
  };
  // The inputs are not the runner's to check (Backend::checks_inputs): the callable gets copies,
  // which run_python compares with them.
  auto inner = std::make_unique<deltacheck::FunctionBackend>(
      py.name,
      [&py](const Case& c, const TensorMap& in, TensorMap& out) {
        return run_python(py, c, in, out);
      },
      supports);
  inner->set_description("Python callable (deltacheck.check)");
  inner->set_deterministic(py.deterministic);
  inner->set_profile(py.profile);
  deltacheck::Backend* backend = inner.get();
  std::unique_ptr<deltacheck::Backend> isolated;
  std::unique_ptr<deltacheck::FunctionBackend> forked;
  std::optional<SharedStats> shared;
  if (isolate) {
    shared.emplace();
    py.child_stats = shared->stats;
    isolated = deltacheck::isolated_backend(std::move(inner), timeout_s);
    forked = std::make_unique<deltacheck::FunctionBackend>(
        py.name,
        [&py, &isolated](const Case& c, const TensorMap& in, TensorMap& out) {
          return run_forked(py, *isolated, c, in, out);
        },
        supports);
    forked->set_description(isolated->description());
    forked->set_deterministic(py.deterministic);
    forked->set_profile(py.profile);
    backend = forked.get();
  }
  deltacheck::RunOptions options;
  options.probes = probes;
  options.cache_dir = cache_dir;
  options.prepare_ahead = prepare_ahead;
  std::vector<CaseResult> results;
  std::string callback_error;
  const auto start = std::chrono::steady_clock::now();
  {
    nb::gil_scoped_release release;
    results = deltacheck::run(cases, {backend}, options, [&](const CaseResult& r) {
      if (on_result.is_none() || py.interrupted) return;
      nb::gil_scoped_acquire gil;
      try {
        on_result(r);
      } catch (nb::python_error& e) {
        py.interrupted = true;  // the remaining cases are not run
        if (callback_error.empty()) callback_error = e.what();
      }
    });
  }
  py.child_stats = nullptr;
  py.input_owner = nb::object();  // the last block (or the arrays still holding it)
  py.input_block = nullptr;
  RunStats stats;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.seconds_callable = py.seconds_callable;
  stats.seconds_calls = py.seconds_calls;
  stats.calls = py.calls;
  if (!callback_error.empty()) throw std::runtime_error("on_result raised: " + callback_error);
  if (py.interrupted) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw nb::python_error();
  }
  return {std::move(results), stats};
}

// The same cases on one of deltacheck's own backends (e.g. "cpu"), its calls timed: the runner's
// own cost per case without Python, for the overhead figures (deltacheck.bench).
RunStats run_builtin(const std::vector<std::string>& ids, const std::string& name, bool probes,
                     const std::string& cache_dir) {
  std::vector<Case> cases;
  for (const std::string& id : ids) cases.push_back(deltacheck::parse_case(id));
  std::unique_ptr<deltacheck::Backend> inner = deltacheck::make_backend(name);
  RunStats stats;
  deltacheck::FunctionBackend timed(
      inner->name(),
      [&](const Case& c, const TensorMap& in, TensorMap& out) {
        ScopeTimer timer(stats.seconds_calls);
        ++stats.calls;
        return inner->run(c, in, out);
      },
      [&](const Case& c) { return inner->supports(c); });
  timed.set_deterministic(inner->deterministic());
  deltacheck::RunOptions options;
  options.probes = probes;
  options.cache_dir = cache_dir;
  {
    nb::gil_scoped_release release;
    ScopeTimer timer(stats.seconds);
    deltacheck::run(cases, {&timed}, options);
  }
  stats.seconds_callable = stats.seconds_calls;
  return stats;
}

deltacheck::Selection make_selection(const std::string& suite, const std::vector<std::string>& ids,
                                     const std::vector<std::string>& filters,
                                     const std::vector<std::string>& excludes, int64_t seed,
                                     int shard_index, int shard_count) {
  deltacheck::Selection s =
      ids.empty() ? deltacheck::Selection(suite) : deltacheck::Selection::case_ids(ids);
  for (const auto& f : filters) s.filter(f);
  for (const auto& e : excludes) s.exclude(e);
  if (seed >= 0) s.seed(seed);
  if (shard_count != 1 || shard_index != 0) s.shard(shard_index, shard_count);
  return s;
}

}  // namespace

NB_MODULE(_deltacheck, m) {
  m.doc() = "deltacheck's C++ core: cases, the runner and reports (use the deltacheck package)";
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  m.def("version", &deltacheck::version);
  m.def("tolerance_policy", &deltacheck::tolerance_policy);
  m.def("suites", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& s : deltacheck::list_suites()) out.emplace_back(s.name, s.help);
    return out;
  });
  m.def(
      "select",
      [](const std::string& suite, const std::vector<std::string>& ids,
         const std::vector<std::string>& filters, const std::vector<std::string>& excludes,
         int64_t seed, int shard_index, int shard_count) {
        std::vector<std::string> out;
        for (const Case& c : deltacheck::select(
                 make_selection(suite, ids, filters, excludes, seed, shard_index, shard_count)))
          out.push_back(c.id());
        return out;
      },
      nb::arg("suite"), nb::arg("ids"), nb::arg("filters"), nb::arg("excludes"), nb::arg("seed"),
      nb::arg("shard_index"), nb::arg("shard_count"));
  // NumPy has no bfloat16: the NumPy route hands bf16 outputs as uint16 bit patterns, and a
  // callable's float32 result is rounded into them here (to nearest even, NaN kept a NaN), as
  // deltacheck's generator and kernels round: one pass, where NumPy needed six. fp16 outputs
  // (as their uint16 bits) the same way: NumPy's own float32 -> float16 assignment, which checks
  // the floating-point exception flags, took four times as long.
  auto store_16 = [](const char* name, DType dtype) {
    return [name, dtype](nb::ndarray<uint16_t, nb::c_contig, nb::device::cpu> dst,
                         nb::ndarray<const float, nb::c_contig, nb::device::cpu> src) {
      if (dst.size() != src.size())
        throw std::invalid_argument(std::string(name) + ": " + std::to_string(src.size()) +
                                    " values for " + std::to_string(dst.size()) + " elements");
      deltacheck::store_floats(src.data(), static_cast<int64_t>(src.size()), dtype, dst.data());
    };
  };
  m.def("store_bf16", store_16("store_bf16", DType::kBF16), nb::arg("dst"), nb::arg("src"));
  m.def("store_f16", store_16("store_f16", DType::kF16), nb::arg("dst"), nb::arg("src"));
  // ... and bf16 inputs widened to a new float32 array (exactly), in one pass.
  m.def(
      "widen_bf16",
      [](nb::ndarray<const uint16_t, nb::c_contig, nb::device::cpu> src) {
        auto* out = new float[std::max<size_t>(1, src.size())];
        nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        deltacheck::load_floats(src.data(), static_cast<int64_t>(src.size()), DType::kBF16, out);
        std::vector<size_t> shape(src.ndim());
        for (size_t d = 0; d < shape.size(); ++d) shape[d] = src.shape(d);
        return nb::ndarray<nb::numpy, float>(out, shape.size(), shape.data(), owner);
      },
      nb::arg("src"));
  m.def("case_params", [](const std::string& id) {
    const Case c = deltacheck::parse_derived_case(id);
    return std::make_pair(c.op(), c.params());
  });
  m.def("sequence_lengths", [](const std::string& id) {
    const Case c = deltacheck::parse_derived_case(id);
    const std::vector<int64_t>& lengths = c.layout().lengths;
    return std::vector<int64_t>(lengths);
  });
  m.def("short_id", [](const std::string& id) {
    return deltacheck::short_id(deltacheck::parse_derived_case(id));
  });
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const deltacheck::CaseIdError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  // The canonical spelling of a precision profile ("fp32" for the default); ValueError naming
  // the bad choice.
  m.def("profile_name", [](const std::string& profile) {
    return deltacheck::profile_name(deltacheck::profile_from_name(profile));
  });

  nb::class_<PyBackend>(m, "Backend")
      .def(
          "__init__",
          [](PyBackend* b, std::string name, nb::object call, nb::object supports,
             nb::object unsupported_type, bool deterministic, bool bf16_bits,
             const std::string& profile) {
            // A bad profile is the caller's ValueError, before anything runs.
            const deltacheck::PrecisionProfile declared = deltacheck::profile_from_name(profile);
            new (b) PyBackend();
            b->profile = declared;
            b->name = std::move(name);
            b->call = std::move(call);
            b->supports = std::move(supports);
            b->unsupported_type = std::move(unsupported_type);
            b->deterministic = deterministic;
            b->bf16_bits = bf16_bits;
          },
          nb::arg("name"), nb::arg("call"), nb::arg("supports"), nb::arg("unsupported_type"),
          nb::arg("deterministic") = true, nb::arg("bf16_bits") = false,
          nb::arg("profile") = "fp32")
      .def_ro("name", &PyBackend::name);

  nb::class_<RunStats>(m, "RunStats")
      .def_ro("seconds", &RunStats::seconds)
      .def_ro("seconds_callable", &RunStats::seconds_callable)
      .def_ro("seconds_calls", &RunStats::seconds_calls)
      .def_ro("calls", &RunStats::calls);
  // Opens the expectation cache in `cache_dir` and its key file (RuntimeError, one line, when
  // either is unusable): the pytest plugin checks before collecting.
  m.def(
      "check_cache",
      [](const std::string& cache_dir) { (void)deltacheck::open_expectation_cache(cache_dir); },
      nb::arg("cache_dir"));
  m.def("run_builtin", &run_builtin, nb::arg("ids"), nb::arg("backend"), nb::arg("probes") = true,
        nb::arg("cache_dir") = "");
  m.def("run", &run_cases, nb::arg("ids"), nb::arg("backend"), nb::arg("probes") = true,
        nb::arg("on_result") = nb::none(), nb::arg("cache_dir") = "",
        nb::arg("prepare_ahead") = true, nb::arg("isolate") = false, nb::arg("timeout") = 120.0);

  nb::class_<deltacheck::Metrics>(m, "Metrics")
      .def_ro("max_abs", &deltacheck::Metrics::max_abs)
      .def_ro("max_index", &deltacheck::Metrics::max_index)
      .def_ro("rel_rms", &deltacheck::Metrics::rel_rms)
      .def_ro("non_finite", &deltacheck::Metrics::non_finite);
  nb::class_<deltacheck::Threshold>(m, "Threshold")
      .def_ro("rel_rms", &deltacheck::Threshold::rel_rms)
      .def_ro("max_abs", &deltacheck::Threshold::max_abs);
  nb::class_<deltacheck::SeqReport>(m, "SeqReport")
      .def_ro("seq", &deltacheck::SeqReport::seq)
      .def_ro("length", &deltacheck::SeqReport::length)
      .def_ro("metrics", &deltacheck::SeqReport::metrics)
      .def_ro("threshold", &deltacheck::SeqReport::threshold)
      .def_ro("ok", &deltacheck::SeqReport::ok)
      .def_ro("first_bad_token", &deltacheck::SeqReport::first_bad_token);
  nb::class_<deltacheck::TensorReport>(m, "TensorReport")
      .def_ro("name", &deltacheck::TensorReport::name)
      .def_ro("dtype", &deltacheck::TensorReport::dtype)
      .def_ro("metrics", &deltacheck::TensorReport::metrics)
      .def_ro("baseline", &deltacheck::TensorReport::baseline)
      .def_ro("threshold", &deltacheck::TensorReport::threshold)
      .def_ro("ok", &deltacheck::TensorReport::ok)
      .def_ro("seqs", &deltacheck::TensorReport::seqs);
  nb::class_<deltacheck::ProbeReport>(m, "ProbeReport")
      .def_ro("name", &deltacheck::ProbeReport::name)
      .def_prop_ro(
          "verdict",
          [](const deltacheck::ProbeReport& p) { return deltacheck::verdict_name(p.verdict); })
      .def_ro("detail", &deltacheck::ProbeReport::detail);
  nb::class_<CaseResult>(m, "CaseResult")
      .def_ro("case_id", &CaseResult::case_id)
      .def_ro("op", &CaseResult::op)
      .def_ro("backend", &CaseResult::backend)
      .def_prop_ro(
          "verdict",
          [](const CaseResult& r) { return std::string(deltacheck::verdict_name(r.verdict)); })
      .def_prop_ro("failed", [](const CaseResult& r) { return deltacheck::is_failure(r.verdict); })
      .def_ro("message", &CaseResult::message)
      .def_ro("tensors", &CaseResult::tensors)
      .def_ro("probes", &CaseResult::probes)
      .def_ro("seq_lengths", &CaseResult::seq_lengths)
      .def_ro("leak_seq", &CaseResult::leak_seq)
      .def_ro("leak_token", &CaseResult::leak_token)
      .def_ro("leak_max_abs", &CaseResult::leak_max_abs)
      .def_ro("seconds_backend", &CaseResult::seconds_backend)
      .def_ro("seconds_total", &CaseResult::seconds_total)
      .def_ro("worst_tensor", &CaseResult::worst_tensor)
      .def_ro("worst_rel_rms", &CaseResult::worst_rel_rms)
      .def_ro("worst_threshold", &CaseResult::worst_threshold)
      .def_ro("margin", &CaseResult::margin)
      .def(
          "line", [](const CaseResult& r) { return deltacheck::format_result(r); },
          "The console row `deltacheck run` prints, and the reason line for a non-pass.");

  m.def(
      "format_summary",
      [](const std::vector<CaseResult>& results, double seconds) {
        return deltacheck::format_summary(results, seconds);
      },
      nb::arg("results"), nb::arg("seconds"));
  m.def(
      "write_report",
      [](const std::vector<CaseResult>& results, const std::string& dir,
         std::optional<std::vector<std::string>> selection, int64_t seed, double seconds,
         const std::string& command, const std::vector<std::pair<std::string, std::string>>& rerun,
         int shard_index, int shard_count) {
        deltacheck::ReportOptions options;
        options.seconds = seconds;
        if (selection) {
          // [suite, filter..., "--exclude", exclude...] or ["--cases", id...]
          std::vector<std::string> ids, filters, excludes;
          std::string suite = "smoke";
          std::vector<std::string>* into = &filters;
          size_t i = 0;
          if (!selection->empty() && (*selection)[0] == "--cases") {
            into = &ids;
            i = 1;
          } else if (!selection->empty()) {
            suite = (*selection)[0];
            i = 1;
          }
          for (; i < selection->size(); ++i) {
            if ((*selection)[i] == "--exclude")
              into = &excludes;
            else
              into->push_back((*selection)[i]);
          }
          // The shard the results are of: `report merge` checks them against its cases.
          options.selection =
              make_selection(suite, ids, filters, excludes, seed, shard_index, shard_count);
        }
        deltacheck::Report report = deltacheck::make_report(results, options);
        if (!command.empty()) report.command = command;
        for (auto& e : report.entries)
          for (const auto& [id, line] : rerun)
            if (e.result.case_id == id && deltacheck::is_failure(e.result.verdict)) e.rerun = line;
        const Status st = deltacheck::write_report(report, dir);
        if (!st.ok()) throw std::runtime_error(st.message());
      },
      nb::arg("results"), nb::arg("dir"), nb::arg("selection"), nb::arg("seed"), nb::arg("seconds"),
      nb::arg("command"), nb::arg("rerun"), nb::arg("shard_index") = 0, nb::arg("shard_count") = 1);
}
