// forgeviz's reader of the gradients an optimizer applies, for a recording (recording.py), in C++.
//
// Why C++: a recording reads every parameter's .grad at each optimizer step: a one-pass summary
// (tensor_stats.cpp) and, with more than one rank, a fingerprint, the number the rank-divergence check compares
// across ranks (the sum of its bit patterns, tensor_stats.cpp's fv_bit_sum_tensor, added in the summary's pass:
// fv_summarize_bit_sum_tensor: 256 MiB of gradients in 11 ms, 22 as a second pass). A Python reader
// thread did that beside step(), but each of its calls took the GIL back from the training thread (a hand-off
// per tensor and per call): on a millisecond step that was most of what recording cost. Here the training thread
// hands the list of tensors over in one call (`read`); `wait` says they are read (and lets the tensors go), and
// `packed` gives them back as bytes, later and on any thread (the recorder's writer builds the rows from them;
// `numbers` also gives back a gradient left to Python).
//
// Who reads them: a job of up to a few MiB (inline_bytes) is read at once, in `read`, on the training thread,
// with no other thread woken. A larger one goes to a C++ thread that never touches Python, which reads it while
// step() runs. Reading beside step() looked free, but the training thread paid about as much as the reading
// took: on a 2-core VM, MLP-256's gradients (0.5 MiB, 55 us to read with the CRC-32 that was the fingerprint
// then) slowed its step by 50-58 us read beside it, even with the other core to itself, and the worker's
// wake-ups or polls cost its thread time too (a recorded step as a rank of two: 1.08-1.09x capture's). Read at
// once (24 us with this fingerprint), 1.06-1.07x. A large job (GPT-2-shaped: 340 MiB, 27-30 ms) read at once
// would stop every torch thread for it; beside, it shares the cores with them.
//
// Built as a Python extension module of its own (_grad_reader), with tensor_stats.cpp; without it the
// recording's Python reader thread does this work, as before.
#include "extension.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/object_ptr.h>

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

extern "C" int fv_summarize_tensor(const void* impl, int sample, int bins, int values_cap, double* out,
                                   int64_t* counts);  // tensor_stats.cpp
extern "C" int fv_bit_sum_tensor(const void* impl, uint64_t* total);  // tensor_stats.cpp
extern "C" int fv_summarize_bit_sum_tensor(const void* impl, double* stats, uint64_t* total);  // tensor_stats.cpp

namespace {

constexpr int kAbiVersion = 5;

// Jobs of up to 4 MiB of gradients are read on the training thread (about 0.2-0.4 ms at the summary's 10-30 GB/s).
constexpr int64_t kInlineBytes = int64_t{4} << 20;

// A gradient's fingerprint column: the bit-pattern sum folded to 32 bits (recording.fold_bit_sum).
uint32_t fold_bit_sum(uint64_t total) { return static_cast<uint32_t>(total ^ (total >> 32)); }

// --- jobs ---------------------------------------------------------------------------------------------
struct Entry {
  at::Tensor grad;  // undefined for a parameter without a gradient
  int64_t version = 0;
  int64_t numel = 0;
  double stats[4] = {0, 0, 0, 0};  // min, max, sum, norm
  uint32_t print = 0;  // the fingerprint: the bit-pattern sum, folded
  bool read = false;  // false: Python reads it (not a float32/float64 CPU tensor with memory, NaN or inf)
  bool fingerprinted = false;  // print made (the job wanted fingerprints)
};

struct Job {
  std::vector<Entry> entries;
  std::chrono::steady_clock::time_point handed;  // when read() handed it over
  bool poll = false;  // whether the worker may poll for the next job (a core free of torch's threads)
  bool fingerprint = false;  // whether each gradient's fingerprint is wanted (ranks to compare)
  bool done = false;  // under the worker's mutex
  bool changed = false;  // whether a gradient's version moved while it was read (wait() says it again if asked again)
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
  // worker's polls, its CPU time reading, and its CPU time in all as of its last job (the other core's); and
  // the jobs read at once, on the thread that handed them over, and that thread's CPU time reading them
  std::atomic<uint64_t> handed{0}, woken{0}, blocked{0}, polls{0}, reading_ns{0}, worker_ns{0}, read_at_once{0},
      at_once_ns{0};
  // A job of at most this many bytes of gradients is read at once (see the file's head); set_inline_bytes()
  std::atomic<int64_t> inline_bytes{kInlineBytes};
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
  // With `fingerprint` the summary and the bit sum in one pass; without (one rank: nothing to compare) the summary.
  static void read(Entry& e, bool fingerprint) {
    if (!e.grad.defined()) return;
    const c10::TensorImpl* impl = e.grad.unsafeGetTensorImpl();
    double out[4];
    if (fingerprint) {
      uint64_t total;
      if (fv_summarize_bit_sum_tensor(impl, out, &total) != 0) return;
      e.print = fold_bit_sum(total);
      e.fingerprinted = true;
    } else if (fv_summarize_tensor(impl, 1, 0, 0, out, nullptr) != 0) {
      return;
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

// read(grads) -> job, or None when there is no gradient to read: grads a list of tensors or None, read here
// and now, or handed to the worker (see the file's head). read(params, True): a list of parameters, whose .grad
// is taken here (the training thread then builds no list of them). A third argument, poll: the worker may poll
// for the next job (see Worker). A fourth, fingerprint (true unless given): each gradient's fingerprint too.
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
  int64_t bytes = 0;
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
    bytes += e.numel * static_cast<int64_t>(e.grad.itemsize());
    ++present;
  }
  if (present == 0) {
    delete job;
    Py_RETURN_NONE;
  }
  Worker& w = worker();
  const bool at_once = bytes <= w.inline_bytes.load(std::memory_order_relaxed);
  if (at_once) {
    const uint64_t start = Worker::thread_ns();
    for (Entry& e : job->entries) Worker::read(e, job->fingerprint);
    job->done = true;  // (never queued: no other thread sees it)
    w.read_at_once.fetch_add(1, std::memory_order_relaxed);
    w.at_once_ns.fetch_add(Worker::thread_ns() - start, std::memory_order_relaxed);
  }
  PyObject* capsule = PyCapsule_New(job, kCapsule, drop_job);
  if (capsule == nullptr) {
    delete job;
    return nullptr;
  }
  if (at_once) return capsule;
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
// training thread pays for no Python object per gradient; the rows are built later, off it. Asked again, it says
// the same (the C++ step hooks ask first, and hand a job that is not as expected to Python, which asks again).
PyObject* py_wait(PyObject*, PyObject* const* args, Py_ssize_t n) {
  Job* job = job_of("wait", args, n);
  if (job == nullptr) return nullptr;
  worker().budget_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - job->handed).count(),
      std::memory_order_relaxed);
  wait_released(job);
  Py_ssize_t left = 0;
  for (Entry& e : job->entries) {
    if (!e.grad.defined()) continue;
    if (e.grad._version() != e.version) job->changed = true;
    if (!e.read) {
      ++left;  // (kept for numbers(), which hands it to Python)
      continue;
    }
    e.grad.reset();
  }
  return Py_BuildValue("(On)", job->changed ? Py_True : Py_False, left);
}

// numbers(job) -> per gradient (min, max, sum, norm, numel, fingerprint), None for one absent, or the tensor
// itself for one not read here (Python reads it); fingerprint None for a job read without them. After
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
                                             static_cast<long long>(e.numel), static_cast<unsigned long>(e.print))
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

// packed(job) -> (stats, prints): numbers() of a job that left no gradient to Python, as the writer's columns take
// them: stats, five native doubles a gradient (min, max, sum, norm, numel; numel -1 and zeros for one absent);
// prints, a native uint32 a gradient (0 for one absent), or None for a job read without fingerprints. Two bytes
// objects, not a tuple a gradient: the recording's writer builds a rank's rows from them holding the GIL, which
// the training thread then waits for. After wait(job).
PyObject* py_packed(PyObject*, PyObject* const* args, Py_ssize_t n) {
  Job* job = job_of("packed", args, n);
  if (job == nullptr) return nullptr;
  wait_released(job);
  const Py_ssize_t count = static_cast<Py_ssize_t>(job->entries.size());
  THPObjectPtr stats(PyBytes_FromStringAndSize(nullptr, count * 5 * static_cast<Py_ssize_t>(sizeof(double))));
  THPObjectPtr prints(job->fingerprint ? PyBytes_FromStringAndSize(nullptr, count * 4) : Py_NewRef(Py_None));
  if (!stats || !prints) return nullptr;
  auto* numbers = reinterpret_cast<double*>(PyBytes_AS_STRING(stats.get()));
  auto* folded = job->fingerprint ? reinterpret_cast<uint32_t*>(PyBytes_AS_STRING(prints.get())) : nullptr;
  for (Py_ssize_t i = 0; i < count; ++i) {
    const Entry& e = job->entries[i];
    if (!e.read && e.grad.defined()) {
      PyErr_Format(PyExc_ValueError, "packed(job): gradient %zd was left to Python (numbers() gives it)", i);
      return nullptr;
    }
    double* row = numbers + 5 * i;
    std::memcpy(row, e.stats, sizeof e.stats);  // (zeros for one absent)
    row[4] = e.read ? static_cast<double>(e.numel) : -1.0;
    if (folded != nullptr) {
      const uint32_t print = e.read && e.fingerprinted ? e.print : 0;
      std::memcpy(folded + i, &print, sizeof print);
    }
  }
  return PyTuple_Pack(2, stats.get(), prints.get());
}

// fingerprint(tensor) -> the fingerprint a job gives a float32 or float64 CPU tensor (for tests), or None.
PyObject* py_fingerprint(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n != 1 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "fingerprint(tensor): expected one tensor");
    return nullptr;
  }
  uint64_t total;
  if (fv_bit_sum_tensor(THPVariable_Unpack(args[0]).unsafeGetTensorImpl(), &total) != 0) Py_RETURN_NONE;
  return PyLong_FromUnsignedLong(fold_bit_sum(total));
}

// set_inline_bytes(n) -> the previous: jobs of at most n bytes of gradients are read at once (for tests and the
// benchmark; -1: none).
PyObject* py_set_inline_bytes(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n != 1 || !PyLong_Check(args[0])) {
    PyErr_Format(PyExc_TypeError, "set_inline_bytes(n): expected one int, a number of bytes, got %s",
                 n == 1 ? Py_TYPE(args[0])->tp_name : "another number of arguments");
    return nullptr;
  }
  const long long bytes = PyLong_AsLongLong(args[0]);
  if (bytes == -1 && PyErr_Occurred()) return nullptr;  // (an int past 64 bits: Python's OverflowError)
  return PyLong_FromLongLong(worker().inline_bytes.exchange(bytes));
}

// counters() -> (handed, woken, blocked, polls, reading_ns, worker_ns, read_at_once, at_once_ns): since the
// process began (for the benchmark, bench_record.py; see Worker).
PyObject* py_counters(PyObject*, PyObject* const*, Py_ssize_t) {
  Worker& w = worker();
  return Py_BuildValue("(KKKKKKKK)", static_cast<unsigned long long>(w.handed.load()),
                       static_cast<unsigned long long>(w.woken.load()),
                       static_cast<unsigned long long>(w.blocked.load()),
                       static_cast<unsigned long long>(w.polls.load()),
                       static_cast<unsigned long long>(w.reading_ns.load()),
                       static_cast<unsigned long long>(w.worker_ns.load()),
                       static_cast<unsigned long long>(w.read_at_once.load()),
                       static_cast<unsigned long long>(w.at_once_ns.load()));
}

PyMethodDef methods[] = {
    FV_METHOD(read, "read(grads[, params[, poll[, fingerprint]]]) -> job or None: summarise (and fingerprint), "
                    "at once or on the reader's thread"),
    FV_METHOD(wait, "wait(job) -> (changed, left): the job read, the tensors it read let go"),
    FV_METHOD(numbers, "numbers(job) -> [(min, max, sum, norm, numel, fingerprint), None or the tensor left to "
                       "Python]"),
    FV_METHOD(packed, "packed(job) -> (stats, prints or None): numbers() of a job with none left to Python, as "
                      "bytes"),
    FV_METHOD(fingerprint, "fingerprint(tensor) -> a float CPU tensor's folded bit-pattern sum, or None"),
    FV_METHOD(set_inline_bytes, "set_inline_bytes(n) -> the previous: jobs of at most n bytes are read at once"),
    FV_METHOD(counters, "counters() -> (handed, woken, blocked, polls, reading_ns, worker_ns, read_at_once, "
                        "at_once_ns): for the benchmark"),
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

FV_MODULE(_grad_reader, "forgeviz's reader of applied gradients (forgeviz/_capture/native/grad_reader.cpp)", kAbiVersion)
