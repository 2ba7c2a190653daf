// forgeviz's reader of the gradients an optimizer applies, for a recording (recording.py), in C++.
//
// Why C++: a recording reads every parameter's .grad at each optimizer step: a one-pass summary
// (tensor_stats.cpp) and, with more than one rank, a CRC-32 of its bytes, the number the rank-divergence
// check compares across ranks. A Python reader thread did that beside step(), but each of its calls took
// the GIL back from the training thread (a hand-off per tensor and per call), and zlib's CRC-32 reads about
// 1 GB/s: on a millisecond step that was most of what recording cost. Here the training thread hands the list of
// tensors over in one call (`read`), a C++ thread that never touches Python summarises and
// fingerprints them while step() runs, `wait` says they are read (and lets the tensors go), and `numbers`
// gives them back, later and on any thread (the recorder's writer builds the rows from them). The CRC folds 64 bytes at a
// time with carry-less multiplies (Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", as Chromium's zlib does): the same CRC-32 as zlib.crc32, at several GB/s.
//
// Built as a Python extension module of its own (_grad_reader), with tensor_stats.cpp; without it the
// recording's Python reader thread does this work, as before.
#include "extension.h"

#include <torch/csrc/autograd/python_variable.h>

#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FV_PCLMUL 1
struct FvCpu {
  bool avx2_fma, pclmul_sse41;
};
const FvCpu& fv_cpu();  // tensor_stats.cpp
#endif

extern "C" int fv_summarize_tensor(const void* impl, int sample, int bins, int values_cap, double* out,
                                   int64_t* counts);  // tensor_stats.cpp

namespace {

constexpr int kAbiVersion = 4;

// --- CRC-32 (zlib's: reflected polynomial 0xEDB88320), on the running state (not inverted) ----------
struct Table {
  uint32_t t[256];
  constexpr Table() : t() {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
  }
};
constexpr Table kTable;

uint32_t crc_bytes(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#ifdef FV_PCLMUL
bool have_pclmul() { return fv_cpu().pclmul_sse41; }

// `len` is at least 64 and a multiple of 16. The constants are x^k mod P for the folding distances
// (k1..k5) and the Barrett reduction's (poly), bit-reflected, from the paper.
__attribute__((target("pclmul,sse4.1"))) uint32_t crc_folded(const uint8_t* buf, size_t len, uint32_t crc) {
  alignas(16) static const uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const uint64_t poly[] = {0x01db710641, 0x01f7011641};
  __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
  x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
  x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
  x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
  x4 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(static_cast<int>(crc)));
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  len -= 64;
  while (len >= 64) {  // four lanes of 16 bytes, each folded 64 bytes forward
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
    x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
    x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
    x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
    y5 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
    y6 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
    y7 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
    y8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
    x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
    x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
    x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
    buf += 64;
    len -= 64;
  }
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));  // the four lanes into one
  for (__m128i next : {x2, x3, x4}) {
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, next), x5);
  }
  while (len >= 16) {
    x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf));
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    buf += 16;
    len -= 16;
  }
  x2 = _mm_clmulepi64_si128(x1, x0, 0x10);  // 128 bits to 64
  x3 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_srli_si128(x1, 8);
  x1 = _mm_xor_si128(x1, x2);
  x0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_and_si128(x1, x3);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));  // Barrett reduction to 32 bits
  x2 = _mm_and_si128(x1, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
  x2 = _mm_and_si128(x2, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}
#endif

// zlib.crc32(bytes) of n bytes.
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t crc = 0xffffffffu;
#ifdef FV_PCLMUL
  if (n >= 64 && have_pclmul()) {
    const size_t folded = n & ~static_cast<size_t>(15);
    crc = crc_folded(p, folded, crc);
    p += folded;
    n -= folded;
  }
#endif
  return ~crc_bytes(crc, p, n);
}

// --- jobs ---------------------------------------------------------------------------------------------
struct Entry {
  at::Tensor grad;  // undefined for a parameter without a gradient
  int64_t version = 0;
  int64_t numel = 0;
  double stats[4] = {0, 0, 0, 0};  // min, max, sum, norm
  uint32_t crc = 0;
  bool read = false;  // false: Python reads it (not a float CPU tensor, NaN or inf; to fingerprint, not contiguous)
  bool fingerprinted = false;  // crc made (the job wanted fingerprints)
};

struct Job {
  std::vector<Entry> entries;
  std::chrono::steady_clock::time_point handed;  // when read() handed it over
  bool poll = false;  // whether the worker may poll for the next job (a core free of torch's threads)
  bool fingerprint = false;  // whether each gradient's CRC-32 is wanted (ranks to compare)
  bool done = false;  // under the worker's mutex
};

// The worker: one thread per process, jobs in the order handed over. Made once and never destroyed, so
// that a process exiting while it waits does not destroy a mutex in use.
//
// Waking a thread that sleeps on a condition variable costs the thread that hands the job over a system
// call and, on a virtual machine, an interrupt to another CPU: ~15 us of the training thread's time each
// step, measured on a 2-core VM (a third of what a recorded MLP step paid for recording). A training loop
// hands a job over every step, evenly spaced: so the worker waits (woken by a hand-off) until shortly
// before the next is due at the shorter of the last two hand-offs' spacings, then polls for it without
// being woken, and only a job that comes early or at no steady pace costs a wake-up. (The pace is the hand-offs', not the
// worker's pick-ups': those are late by its own waits, which would keep a slow pace slow.) Only when the
// job says so (read()'s `poll`: torch's threads leave a core free): polling on a core that torch's own
// threads use delays them by more than the wake-up costs (a 2-core VM with two torch threads: a recorded
// MLP step 1.24x capture's with polling, 1.06-1.13x without; with one torch thread 1.05x and 1.10-1.18x).
struct Worker {
  using Clock = std::chrono::steady_clock;
  std::mutex mutex;
  std::condition_variable wake, finished;
  std::deque<Job*> jobs;
  bool sleeping = false;  // on `wake`, under `mutex`: a hand-off must notify it
  // Counted for the benchmark (counters()): jobs handed over, those that had to wake the worker, and those
  // waited for before they were read (each a system call and a wake-up the training thread pays for); the
  // worker's polls, its CPU time reading, and its CPU time in all as of its last job (the other core's)
  std::atomic<uint64_t> handed{0}, woken{0}, blocked{0}, polls{0}, reading_ns{0}, worker_ns{0};
  // From the last hand-over to the training thread's wait for it (step()'s length: how late a job may be picked
  // up and still be read by then), stored by wait(); 0 until one is known
  std::atomic<int64_t> budget_ns{0};

  Worker() { std::thread([this] { run(); }).detach(); }

  void run() {
    prctl(PR_SET_TIMERSLACK, 1000UL);  // (the default 50 us slack would stretch each poll's sleep)
    Clock::time_point last{};         // when the last job was handed over
    Clock::duration pace{}, before{};  // the time between the last two hand-offs, and the two before them
    bool poll = false;                // whether the last job let it poll
    Clock::duration reading{};        // how long the last job took to read
    for (;;) {
      // Expected at the shorter of the last two paces: a step that a pause of the training thread's own (a
      // garbage collection, a log line) made longer would otherwise make the next hand-over look early, and
      // pay a wake-up
      const Clock::duration expected = before > Clock::duration{} && before < pace ? before : pace;
      Job* job = next(last, poll ? expected : Clock::duration{}, poll_interval(reading));
      poll = job->poll;
      before = pace;
      pace = last == Clock::time_point{} ? Clock::duration{} : job->handed - last;
      last = job->handed;
      const uint64_t start = thread_ns();
      const Clock::time_point began = Clock::now();
      for (Entry& e : job->entries) read(e, job->fingerprint);
      reading = Clock::now() - began;
      const uint64_t end = thread_ns();
      reading_ns.fetch_add(end - start, std::memory_order_relaxed);
      worker_ns.store(end, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mutex);
        jobs.pop_front();
        job->done = true;
      }
      finished.notify_all();
    }
  }

  // This thread's CPU time so far, in ns.
  static uint64_t thread_ns() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
  }

  // How long each poll sleeps: a third of what step() leaves after the reading (a job picked up that late is
  // still read before the step ends), from 20 to 100 us. A poll is a short sleep that costs this core 30-45 us
  // of CPU on a VM whatever its length: an MLP-256 step's polls cost it 170 us at 20 us each, 100 at 100.
  Clock::duration poll_interval(Clock::duration reading) const {
    constexpr Clock::duration kShortest = std::chrono::microseconds(20), kLongest = std::chrono::microseconds(100);
    const Clock::duration budget = std::chrono::nanoseconds(budget_ns.load(std::memory_order_relaxed));
    return std::clamp<Clock::duration>((budget - reading) / 3, kShortest, kLongest);
  }

  // The next job: polled for in the last quarter (at most kWindow) before it is due at `pace` after `last`
  // (a pace of at most kSteady: past it, a wake-up is too small a part of a step to be worth polling for);
  // else, and until then, waited for on the condition variable (a job handed over early, a
  // pace that quickens, wakes it: a pace measured across a pause must not keep it asleep while the
  // training thread waits for its job). Polls are `interval` apart.
  Job* next(Clock::time_point last, Clock::duration pace, Clock::duration interval) {
    constexpr auto kSteady = std::chrono::milliseconds(10);
    constexpr auto kWindow = std::chrono::microseconds(250);
    std::unique_lock<std::mutex> lock(mutex);
    auto ready = [this] { return !jobs.empty(); };
    if (pace > Clock::duration{} && pace <= kSteady) {
      sleeping = true;
      const bool early = wake.wait_until(lock, last + pace - std::min<Clock::duration>(pace / 4, kWindow), ready);
      sleeping = false;
      const Clock::time_point give_up = last + 2 * pace;
      while (!early && jobs.empty() && Clock::now() < give_up) {
        lock.unlock();
        polls.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(interval);
        lock.lock();
      }
    }
    sleeping = true;
    wake.wait(lock, ready);
    sleeping = false;
    return jobs.front();
  }

  // The tensor's memory is only read here; its reference was taken (and is dropped) with the GIL held.
  // Without `fingerprint` (one rank: nothing to compare) the summary alone, the CRC being most of the
  // work (a second pass over the bytes).
  static void read(Entry& e, bool fingerprint) {
    if (!e.grad.defined()) return;
    const c10::TensorImpl* impl = e.grad.unsafeGetTensorImpl();
    double out[4];
    if (fv_summarize_tensor(impl, 1, 0, 0, out, nullptr) != 0) return;
    if (fingerprint) {
      // The CRC is of the bytes in row-major order: only a contiguous tensor's memory is that as it lies.
      if (!impl->is_contiguous() || impl->is_conj()) return;
      e.crc = crc32(static_cast<const uint8_t*>(impl->data()), impl->numel() * impl->itemsize());
      e.fingerprinted = true;
    }
    std::memcpy(e.stats, out, sizeof out);
    e.read = true;
  }

  void wait(Job* job) {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [job] { return job->done; });
  }
};

Worker& worker() {
  static Worker* w = new Worker();
  return *w;
}

bool done(Job* job) {
  std::lock_guard<std::mutex> lock(worker().mutex);
  return job->done;
}

void wait_released(Job* job) {
  if (done(job)) return;
  worker().blocked.fetch_add(1, std::memory_order_relaxed);
  Py_BEGIN_ALLOW_THREADS;
  worker().wait(job);
  Py_END_ALLOW_THREADS;
}

constexpr const char* kCapsule = "forgeviz._grad_reader.job";

void drop_job(PyObject* capsule) {
  auto* job = static_cast<Job*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (job == nullptr) return;
  wait_released(job);  // the worker may still be reading it
  delete job;  // (its tensors' references go with the GIL held)
}

// read(grads) -> job, or None when there is no gradient to read: grads a list of tensors or None, handed
// to the worker. read(params, True): a list of parameters, whose .grad is taken here (the training thread
// then builds no list of them). A third argument, poll: the worker may poll for the next job (see Worker).
// A fourth, fingerprint (true unless given): each gradient's CRC-32 is made too.
PyObject* py_read(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n < 1 || n > 4 || !PyList_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "read(grads[, params[, poll[, fingerprint]]]): expected a list of tensors or None (or of "
                    "parameters)");
    return nullptr;
  }
  const bool params = n >= 2 && PyObject_IsTrue(args[1]) == 1;
  auto* job = new Job();
  job->handed = std::chrono::steady_clock::now();
  job->poll = n >= 3 && PyObject_IsTrue(args[2]) == 1;
  job->fingerprint = n < 4 || PyObject_IsTrue(args[3]) == 1;
  const Py_ssize_t count = PyList_GET_SIZE(args[0]);
  job->entries.resize(count);
  Py_ssize_t present = 0;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PyList_GET_ITEM(args[0], i);
    if (item == Py_None) continue;
    if (!THPVariable_Check(item)) {
      delete job;
      PyErr_Format(PyExc_TypeError, "read(grads): item %zd is a %s, expected a tensor or None", i,
                   Py_TYPE(item)->tp_name);
      return nullptr;
    }
    Entry& e = job->entries[i];
    e.grad = params ? THPVariable_Unpack(item).grad() : THPVariable_Unpack(item);
    if (!e.grad.defined()) continue;
    e.version = e.grad._version();
    e.numel = e.grad.numel();
    ++present;
  }
  if (present == 0) {
    delete job;
    Py_RETURN_NONE;
  }
  PyObject* capsule = PyCapsule_New(job, kCapsule, drop_job);
  if (capsule == nullptr) {
    delete job;
    return nullptr;
  }
  Worker& w = worker();
  bool sleeping;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    w.jobs.push_back(job);
    sleeping = w.sleeping;
  }
  w.handed.fetch_add(1, std::memory_order_relaxed);
  if (sleeping) {  // (else it polls for this job: no wake-up to pay for)
    w.woken.fetch_add(1, std::memory_order_relaxed);
    w.wake.notify_one();
  }
  return capsule;
}

Job* job_of(const char* call, PyObject* const* args, Py_ssize_t n) {
  auto* job = n == 1 ? static_cast<Job*>(PyCapsule_GetPointer(args[0], kCapsule)) : nullptr;
  if (job == nullptr && !PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s(job): expected the job read() gave", call);
  return job;
}

// wait(job) -> (changed, left), once the worker read the job: `changed` when a gradient's version moved
// since read() (written in place while it was read); `left`, how many gradients present were not read
// here (Python reads them: with none left, every number is here, and finite). Drops the job's references
// to the tensors it read (the numbers stay with the job, for numbers()). Two small ints, no list: the
// training thread pays for no Python object per gradient; the rows are built later, off it.
PyObject* py_wait(PyObject*, PyObject* const* args, Py_ssize_t n) {
  Job* job = job_of("wait", args, n);
  if (job == nullptr) return nullptr;
  worker().budget_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - job->handed).count(),
      std::memory_order_relaxed);
  wait_released(job);
  bool changed = false;
  Py_ssize_t left = 0;
  for (Entry& e : job->entries) {
    if (!e.grad.defined()) continue;
    if (e.grad._version() != e.version) changed = true;
    if (!e.read) {
      ++left;  // (kept for numbers(), which hands it to Python)
      continue;
    }
    e.grad.reset();
  }
  return Py_BuildValue("(On)", changed ? Py_True : Py_False, left);
}

// numbers(job) -> per gradient (min, max, sum, norm, numel, crc), None for one absent, or the tensor
// itself for one not read here (Python reads it); crc None for a job read without fingerprints. After
// wait(job). Lets go of those tensors.
PyObject* py_numbers(PyObject*, PyObject* const* args, Py_ssize_t n) {
  Job* job = job_of("numbers", args, n);
  if (job == nullptr) return nullptr;
  wait_released(job);
  const Py_ssize_t count = static_cast<Py_ssize_t>(job->entries.size());
  PyObject* out = PyList_New(count);
  if (out == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < count; ++i) {
    Entry& e = job->entries[i];
    PyObject* item;
    if (!e.read && e.grad.defined()) {
      item = THPVariable_Wrap(e.grad);
      e.grad.reset();
      if (item == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
    } else if (e.read) {
      item = e.fingerprinted ? Py_BuildValue("(ddddLk)", e.stats[0], e.stats[1], e.stats[2], e.stats[3],
                                             static_cast<long long>(e.numel), static_cast<unsigned long>(e.crc))
                             : Py_BuildValue("(ddddLO)", e.stats[0], e.stats[1], e.stats[2], e.stats[3],
                                             static_cast<long long>(e.numel), Py_None);
      if (item == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
    } else {
      Py_INCREF(Py_None);
      item = Py_None;
    }
    PyList_SET_ITEM(out, i, item);
  }
  return out;
}

// crc32(tensor) -> zlib.crc32 of a contiguous CPU tensor's bytes (for tests), or None.
PyObject* py_crc32(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n != 1 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "crc32(tensor): expected one tensor");
    return nullptr;
  }
  const at::Tensor& t = THPVariable_Unpack(args[0]);
  if (!t.is_cpu() || !t.is_contiguous() || t.is_conj() || !t.has_storage()) Py_RETURN_NONE;
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return PyLong_FromUnsignedLong(crc32(p, t.numel() * t.itemsize()));
}

// counters() -> (handed, woken, blocked, polls, reading_ns, worker_ns): since the process began (for the
// benchmark, bench_record.py; see Worker).
PyObject* py_counters(PyObject*, PyObject* const*, Py_ssize_t) {
  Worker& w = worker();
  return Py_BuildValue("(KKKKKK)", static_cast<unsigned long long>(w.handed.load()),
                       static_cast<unsigned long long>(w.woken.load()),
                       static_cast<unsigned long long>(w.blocked.load()),
                       static_cast<unsigned long long>(w.polls.load()),
                       static_cast<unsigned long long>(w.reading_ns.load()),
                       static_cast<unsigned long long>(w.worker_ns.load()));
}

PyMethodDef methods[] = {
    FV_METHOD(read, "read(grads[, params[, poll[, fingerprint]]]) -> job or None: summarise (and fingerprint) on "
                    "the reader's thread"),
    FV_METHOD(wait, "wait(job) -> (changed, left): the job read, the tensors it read let go"),
    FV_METHOD(numbers, "numbers(job) -> [(min, max, sum, norm, numel, crc), None or the tensor left to Python]"),
    FV_METHOD(crc32, "crc32(tensor) -> zlib.crc32 of its bytes, or None"),
    FV_METHOD(counters, "counters() -> (handed, woken, blocked, polls, reading_ns, worker_ns): for the benchmark"),
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

FV_MODULE(_grad_reader, "forgeviz's reader of applied gradients (forgeviz/_capture/native/grad_reader.cpp)", kAbiVersion)
