// forgeviz's native CPU allocation ledger.
//
// Why C++: a TorchDispatchMode costs ~10 us per op in Python, which doubles a small training step.
// This wraps c10's CPU allocator instead, so an allocation costs a hash insert and a few appends.
// The ledger keeps the same columns as forgeviz/model/memory.py EVENT_COLUMNS, so Python copies
// them out in bulk. Loaded with ctypes: no Python headers, no pybind11; forgeviz/_capture/native/__init__.py
// compiles it once per torch build (c10 and torch_cpu are the only libraries it links).
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <pthread.h>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

constexpr uint8_t kAlloc = 0, kFree = 1, kRecategorize = 2;  // model/memory.py ACTIONS
constexpr uint8_t kTemporary = 6;                              // model/memory.py TEMPORARY
constexpr uint32_t kNoId = 0xFFFFFFFF;
constexpr uint16_t kNoSmall = 0xFFFF;

double now_s() {
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock of Python's time.perf_counter().
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Live {
  uint32_t sid;
  uint32_t node;
  double bytes;
  uint16_t op, module, cell, line;
  uint8_t category;
  uint8_t own = 0;      // while claimed: the category it goes back to
  uint32_t claims = 0;  // how many live Nodes hold it as an activation (fv_claim, fv_release)
};

}  // namespace

extern "C" {
// What Python reads of one storage (ctypes mirrors this layout).
struct FvRecord {
  uint32_t sid;
  uint32_t node;
  double bytes;
  uint16_t op, module, cell, line;
  uint8_t category;
  uint8_t pad[7];
};
}

namespace {

struct Ledger {
  std::vector<float> time;
  std::vector<double> bytes;
  std::vector<uint32_t> storage, node;
  std::vector<uint16_t> op, module, cell, line;
  std::vector<uint8_t> action, category;
  std::unordered_map<uint64_t, Live> live;  // data pointer -> what is alive there
  std::vector<double> cuts;                 // (cut, kept, cut time) per compaction
  uint32_t next_sid = 0;
  double t0 = 0;
  int64_t max_events = 1000000;
  int64_t dropped = 0;
  double live_bytes = 0, peak_bytes = 0, peak_time = 0;
  bool recording = false;
  // Where its Python side says the program is (cell starts, module calls, steps, backward passes).
  uint16_t at_cell = 0, at_module = kNoSmall, at_line = 0, at_op = kNoSmall;
  // Storages allocated since Python last named them (most ops are views or in place: none).
  std::vector<uint64_t> fresh;
  // fresh.size(), where Python reads it directly (fv_fresh_address): the TorchFunctionMode asks after
  // every op, and a memory read is cheaper than a call. An aligned 8-byte word: reads never tear.
  alignas(8) volatile int64_t fresh_count = 0;
  size_t published = 0;  // events before this index were sent somewhere: never rewrite them
  uint32_t claimable = 0;  // the categories a claim may turn into an activation (bit mask, fv_claim)

  size_t count() const { return time.size(); }

  // f(this ledger's column, the same column of `other`), for every event column.
  template <typename F>
  void each_column(Ledger& other, F f) {
    f(time, other.time);
    f(bytes, other.bytes);
    f(storage, other.storage);
    f(node, other.node);
    f(op, other.op);
    f(module, other.module);
    f(cell, other.cell);
    f(line, other.line);
    f(action, other.action);
    f(category, other.category);
  }

  void emit(uint8_t act, const Live& r, float t) {
    time.push_back(t);
    bytes.push_back(r.bytes);
    storage.push_back(r.sid);
    node.push_back(r.node);
    op.push_back(r.op);
    module.push_back(r.module);
    cell.push_back(r.cell);
    line.push_back(r.line);
    action.push_back(act);
    category.push_back(r.category);
    if (act == kAlloc && live_bytes > peak_bytes) {
      peak_bytes = live_bytes;
      peak_time = t;
    }
    if (static_cast<int64_t>(count()) > max_events) compact();
  }

  // Merge the older half: storages alloc'd and freed there vanish; the ones still alive are
  // re-emitted as allocs at the cut, so live totals stay exact (same rule as the Python ledger).
  void compact() {
    const size_t cut = count() / 2;
    const float cut_time = time[cut];
    std::unordered_set<uint32_t> freed;
    for (size_t i = 0; i < cut; ++i)
      if (action[i] == kFree) freed.insert(storage[i]);
    std::unordered_map<uint32_t, size_t> last;
    for (size_t i = 0; i < cut; ++i)
      if (!freed.count(storage[i])) last[storage[i]] = i;
    std::vector<size_t> keep;
    keep.reserve(last.size());
    for (auto& kv : last) keep.push_back(kv.second);
    std::sort(keep.begin(), keep.end());
    Ledger next;
    each_column(next, [&](auto& src, auto& dst) {
      dst.reserve(keep.size() + src.size() - cut);
      for (size_t i : keep) dst.push_back(src[i]);
      dst.insert(dst.end(), src.begin() + cut, src.end());
    });
    for (size_t k = 0; k < keep.size(); ++k) {
      next.action[k] = kAlloc;
      next.time[k] = cut_time;
    }
    each_column(next, [](auto& mine, auto& kept) { mine.swap(kept); });
    dropped += static_cast<int64_t>(cut - keep.size());
    published = 0;  // every index moved: readers start over
    cuts.push_back(static_cast<double>(cut));
    cuts.push_back(static_cast<double>(keep.size()));
    cuts.push_back(cut_time);
  }
};

struct Shared {
  std::mutex mutex;  // guards every ledger, the op table and the ledger list
  std::vector<Ledger*> ledgers;
  std::unordered_map<std::string, uint16_t> op_ids;
  std::deque<std::string> op_names;  // a deque: c_str() pointers stay valid as it grows
};
// Heap-allocated and never destroyed: torch frees tensors during static destruction at exit, after
// this library's own statics would be gone. Replaced in a forked child (see after_fork_in_child).
Shared* g = new Shared();
std::atomic<int> g_live_ledgers{0};  // frees are looked up only while a ledger exists
std::atomic<int> g_recording{0};     // allocations are recorded only while one records
c10::Allocator* g_inner = nullptr;
c10::DeleterFnPtr g_inner_deleter = nullptr;

// The dispatcher ops running on this thread, pushed by a RecordFunction callback.
thread_local const char* t_ops[64];
thread_local int t_depth = 0;
thread_local int t_paused = 0;  // forgeviz's own work on this thread (untraced()) is not the user's memory
at::CallbackHandle g_op_callback = 0;

uint16_t intern_op(const char* name) {  // g->mutex held
  if (name == nullptr) return kNoSmall;
  auto it = g->op_ids.find(name);
  if (it != g->op_ids.end()) return it->second;
  if (g->op_names.size() >= kNoSmall - 1) return kNoSmall;
  uint16_t id = static_cast<uint16_t>(g->op_names.size());
  g->op_names.emplace_back(name);
  g->op_ids.emplace(g->op_names.back(), id);
  return id;
}

void note_alloc(void* ptr, size_t nbytes) {
  const double t = now_s();
  // The outermost dispatcher op: the one the program called (ones, linear), not the kernel's
  // helper that happened to allocate (empty, addmm).
  const char* op = t_depth > 0 ? t_ops[0] : nullptr;
  std::lock_guard<std::mutex> guard(g->mutex);
  const uint16_t op_id = intern_op(op);
  for (Ledger* ledger : g->ledgers) {
    if (!ledger->recording) continue;
    Live r{ledger->next_sid++, kNoId, static_cast<double>(nbytes), op_id != kNoSmall ? op_id : ledger->at_op,
           ledger->at_module, ledger->at_cell, ledger->at_line, kTemporary};
    ledger->live[reinterpret_cast<uint64_t>(ptr)] = r;
    ledger->live_bytes += r.bytes;
    if (ledger->fresh.size() < 4096) ledger->fresh.push_back(reinterpret_cast<uint64_t>(ptr));
    ledger->fresh_count = static_cast<int64_t>(ledger->fresh.size());
    ledger->emit(kAlloc, r, static_cast<float>(t - ledger->t0));
  }
}

void note_free(void* ptr) {
  const double t = now_s();
  std::lock_guard<std::mutex> guard(g->mutex);
  for (Ledger* ledger : g->ledgers) {
    auto it = ledger->live.find(reinterpret_cast<uint64_t>(ptr));
    if (it == ledger->live.end()) continue;
    Live r = it->second;
    ledger->live.erase(it);
    ledger->live_bytes -= r.bytes;
    ledger->emit(kFree, r, static_cast<float>(t - ledger->t0));
    // Freed before Python could name it (a wrapped scalar, an op's scratch buffer): it keeps the
    // site's names, and an op that leaves nothing alive costs Python no naming call.
    // Only the newest few are looked at: a long backward can leave thousands unnamed, and a count
    // too high merely costs one naming call.
    auto& fresh = ledger->fresh;
    for (size_t i = fresh.size(), seen = 0; i-- > 0 && seen++ < 64;) {
      if (fresh[i] != reinterpret_cast<uint64_t>(ptr)) continue;
      fresh[i] = fresh.back();
      fresh.pop_back();
      ledger->fresh_count = static_cast<int64_t>(fresh.size());
      break;
    }
  }
}

void traced_free(void* ptr) {
  if (g_live_ledgers.load(std::memory_order_relaxed) > 0) note_free(ptr);
  g_inner_deleter(ptr);
}

class TracingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr inner = g_inner->allocate(nbytes);
    // Wrap only what we can free exactly like the inner allocator would: data == context.
    if (inner.get() != inner.get_context() || inner.get_deleter() != g_inner_deleter) return inner;
    void* ptr = inner.release_context();
    if (nbytes > 0 && t_paused == 0 && g_recording.load(std::memory_order_relaxed) > 0) note_alloc(ptr, nbytes);
    return {ptr, ptr, &traced_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &traced_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    g_inner->copy_data(dest, src, count);
  }
};

TracingAllocator* g_tracing = new TracingAllocator();  // never destroyed: c10 keeps pointing at it

// A child forked while another thread held the lock would deadlock on it: start it afresh, with
// no ledger (the parent's trackers are the parent's).
void after_fork_in_child() {
  g = new Shared();
  g_live_ledgers.store(0);
  g_recording.store(0);
}

std::unique_ptr<at::ObserverContext> op_enter(const at::RecordFunction& fn) {
  if (t_depth < 64) t_ops[t_depth] = fn.name();
  ++t_depth;
  return nullptr;
}

void op_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (t_depth > 0) --t_depth;
}

// Off by default: Python names each op it sees (fv_name_fresh) for less than the ~0.3 us per op a
// RecordFunction callback costs; on, allocations carry the dispatcher op (aten::mm in backward too).
bool g_want_op_names = false;

void update_op_callback() {  // g->mutex held
  bool want = g_recording.load() > 0 && g_want_op_names;
  if (want && g_op_callback == 0) {
    g_op_callback = at::addGlobalCallback(
        at::RecordFunctionCallback(op_enter, op_exit).needsInputs(false).scopes({at::RecordScope::FUNCTION}));
  } else if (!want && g_op_callback != 0) {
    at::removeCallback(g_op_callback);
    g_op_callback = 0;
  }
}

Ledger* as_ledger(void* handle) { return static_cast<Ledger*>(handle); }

}  // namespace

extern "C" {

int fv_abi_version() { return 3; }

double fv_now() { return now_s(); }

// Put the tracing allocator in front of c10's CPU allocator (once; it stays for the process:
// storages it made keep its deleter). Returns 1 when installed, 0 when the CPU allocator is not
// one it can wrap.
int fv_install() {
  std::lock_guard<std::mutex> guard(g->mutex);
  if (g_inner != nullptr) return 1;
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current == nullptr || current->raw_deleter() == nullptr) return 0;
  g_inner = current;
  g_inner_deleter = current->raw_deleter();
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  c10::SetCPUAllocator(g_tracing, /*priority=*/200);
  return c10::GetCPUAllocator() == g_tracing ? 1 : 0;
}

void* fv_ledger_new(int64_t max_events, double t0) {
  auto* ledger = new Ledger();
  ledger->max_events = max_events;
  ledger->t0 = t0;
  std::lock_guard<std::mutex> guard(g->mutex);
  g->ledgers.push_back(ledger);
  g_live_ledgers.fetch_add(1);
  return ledger;
}

void fv_ledger_delete(void* handle) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  auto it = std::find(g->ledgers.begin(), g->ledgers.end(), ledger);
  if (it == g->ledgers.end()) return;
  g->ledgers.erase(it);
  g_live_ledgers.fetch_sub(1);
  if (ledger->recording) g_recording.fetch_sub(1);
  update_op_callback();
  delete ledger;
}

void fv_ledger_recording(void* handle, int on) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  if (static_cast<bool>(on) == ledger->recording) return;
  ledger->recording = on;
  g_recording.fetch_add(on ? 1 : -1);
  update_op_callback();
}

// Whether allocations carry the dispatcher op that made them (a RecordFunction callback per op).
void fv_record_ops(int on) {
  std::lock_guard<std::mutex> guard(g->mutex);
  g_want_op_names = on != 0;
  update_op_callback();
}

void fv_pause(int delta) { t_paused += delta; }

int fv_intern(const char* name) {
  std::lock_guard<std::mutex> guard(g->mutex);
  return intern_op(name);
}

void fv_set_context(void* handle, uint32_t cell, uint32_t module, uint32_t line, uint32_t op) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  ledger->at_op = static_cast<uint16_t>(op);
  ledger->at_cell = static_cast<uint16_t>(cell);
  ledger->at_module = static_cast<uint16_t>(module);
  ledger->at_line = static_cast<uint16_t>(line);
}

// A storage the allocator did not report (it existed before, or came from elsewhere): Python
// tracks it and reports its free. Returns its storage id, or -1 when it is already tracked.
int64_t fv_track(void* handle, uint64_t ptr, double nbytes, int category, const char* op, int module, int cell,
                 int line, double when) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  if (ledger->live.count(ptr)) return -1;
  Live r{ledger->next_sid++, kNoId, nbytes, intern_op(op), static_cast<uint16_t>(module),
         static_cast<uint16_t>(cell), static_cast<uint16_t>(line), static_cast<uint8_t>(category)};
  ledger->live[ptr] = r;
  ledger->live_bytes += nbytes;
  ledger->emit(kAlloc, r, static_cast<float>(when < 0 ? now_s() - ledger->t0 : when));
  return r.sid;
}

// The free of a storage Python tracked (a weakref.finalize fired). 1 if it was live.
int fv_untrack(void* handle, uint64_t ptr, int64_t sid) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  auto it = ledger->live.find(ptr);
  if (it == ledger->live.end() || it->second.sid != static_cast<uint32_t>(sid)) return 0;
  Live r = it->second;
  ledger->live.erase(it);
  ledger->live_bytes -= r.bytes;
  ledger->emit(kFree, r, static_cast<float>(now_s() - ledger->t0));
  return 1;
}

// The live record at ptr, or null (g->mutex held).
Live* live_at(Ledger* ledger, uint64_t ptr) {
  auto it = ledger->live.find(ptr);
  return it == ledger->live.end() ? nullptr : &it->second;
}

// f(ledger, the live storage at ptr) under the lock: what it returns, or -1 when nothing is tracked there.
extern "C++" template <typename F>
int64_t with_live(void* handle, uint64_t ptr, F f) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  Live* found = live_at(ledger, ptr);
  return found == nullptr ? -1 : f(ledger, *found);
}

// Give r a new category. A hook learns some categories late (a gradient at the end of backward,
// optimizer state after the step, an activation once its op returned) though they held from the
// allocation on: when `late` and that allocation is recent, unpublished and r's only event, it is
// rewritten; else a recategorize event marks the change now.
void set_category(Ledger* ledger, Live& r, uint8_t category, bool late) {
  r.category = category;
  if (late) {
    const size_t n = ledger->count();
    const size_t floor = std::max(ledger->published, n > (1u << 16) ? n - (1u << 16) : size_t{0});
    for (size_t i = n; i > floor; --i) {
      if (ledger->storage[i - 1] != r.sid) continue;
      if (ledger->action[i - 1] != kAlloc) break;  // it changed since its allocation: this is a change too
      ledger->category[i - 1] = category;
      return;
    }
  }
  ledger->emit(kRecategorize, r, static_cast<float>(now_s() - ledger->t0));
}

// Give a live storage a category (and the autograd node that saved it). only_from is a bit mask
// of the categories its own category may be (0: any). While Nodes hold it as an activation, a
// category a claim may take over (temporary, other) only changes what it goes back to; any other
// (a parameter, a buffer) ends the claims. Returns its storage id, or -1 when not tracked.
int64_t recategorize_live(Ledger* ledger, Live& r, int category, uint32_t node, uint32_t only_from) {  // g->mutex held
  const uint8_t own = r.claims ? r.own : r.category;
  if (only_from != 0 && !(only_from & (1u << own))) return r.sid;  // e.g. a parameter passed as input
  if (node != kNoId && r.node == kNoId) r.node = node;
  if (r.claims) {
    if (ledger->claimable & (1u << category)) {
      r.own = static_cast<uint8_t>(category);
      return r.sid;
    }
    r.claims = 0;
  }
  if (r.category != category) set_category(ledger, r, static_cast<uint8_t>(category), true);
  return r.sid;
}

int64_t fv_recategorize(void* handle, uint64_t ptr, int category, uint32_t node, uint32_t only_from) {
  return with_live(handle, ptr, [&](Ledger* ledger, Live& r) { return recategorize_live(ledger, r, category, node, only_from); });
}

// fv_recategorize for n storages at once, with no node and any own category: every parameter's
// `.grad` after a backward is one call, not one per parameter. sids[i] gets the storage id of the
// one at ptrs[i], or -1 when nothing is tracked there. Returns how many are tracked.
int64_t fv_recategorize_many(void* handle, const uint64_t* ptrs, int64_t n, int category, int64_t* sids) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  int64_t found = 0;
  for (int64_t i = 0; i < n; ++i) {
    Live* r = live_at(ledger, ptrs[i]);
    sids[i] = r == nullptr ? -1 : recategorize_live(ledger, *r, category, kNoId, 0);
    found += r != nullptr;
  }
  return found;
}

// Node `node` saved the storage at ptr for backward: if its category is one of `claimable` (a bit
// mask), it is an `activation` until every Node that claimed it released it. Returns its storage
// id, or -1 when it is not claimed (untracked, or a parameter, a buffer ...).
int64_t fv_claim(void* handle, uint64_t ptr, uint32_t node, uint32_t claimable, int activation) {
  return with_live(handle, ptr, [&](Ledger* ledger, Live& r) -> int64_t {
  ledger->claimable = claimable;
  if (r.claims) {
    ++r.claims;
    return r.sid;
  }
  if (!(claimable & (1u << r.category))) return -1;
  r.own = r.category;
  r.claims = 1;
  if (node != kNoId && r.node == kNoId) r.node = node;
  set_category(ledger, r, static_cast<uint8_t>(activation), true);
  return r.sid;
  });
}

// A Node that claimed storage `sid` at ptr freed its saved tensors, or died: when it was the last,
// the storage goes back to its own category, an event dated now. 1 if it went back (g->mutex held).
int release_claim(Ledger* ledger, uint64_t ptr, int64_t sid) {
  Live* r = live_at(ledger, ptr);
  if (r == nullptr || r->sid != static_cast<uint32_t>(sid) || r->claims == 0 || --r->claims) return 0;
  set_category(ledger, *r, r->own, false);
  return 1;
}

int fv_release(void* handle, uint64_t ptr, int64_t sid) {
  std::lock_guard<std::mutex> guard(g->mutex);
  return release_claim(as_ledger(handle), ptr, sid);
}

// fv_release for n (ptr, sid) pairs at once: the claims of every Node a backward freed. Returns how
// many storages went back to their own category.
int64_t fv_release_many(void* handle, const uint64_t* ptrs, const int64_t* sids, int64_t n) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  int64_t back = 0;
  for (int64_t i = 0; i < n; ++i) back += release_claim(ledger, ptrs[i], sids[i]);
  return back;
}

// The bytes this ledger holds for its own bookkeeping: the event columns (as allocated) and the
// table of live storages (nodes and buckets, as libstdc++ lays them out).
double fv_own_bytes(void* handle) {
  std::lock_guard<std::mutex> guard(g->mutex);
  const Ledger* l = as_ledger(handle);
  const double columns = 4.0 * l->time.capacity() + 8.0 * l->bytes.capacity() + 4.0 * l->storage.capacity() +
                         4.0 * l->node.capacity() + 2.0 * (l->op.capacity() + l->module.capacity() +
                                                           l->cell.capacity() + l->line.capacity()) +
                         l->action.capacity() + l->category.capacity();
  const double live = (sizeof(void*) + sizeof(uint64_t) + sizeof(Live) + sizeof(size_t)) * l->live.size() +
                      sizeof(void*) * l->live.bucket_count();
  return columns + live + 8.0 * (l->cuts.capacity() + l->fresh.capacity()) + sizeof(Ledger);
}

// Events before `count` were sent to a view: later category changes must not rewrite them.
void fv_publish(void* handle, int64_t count) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  ledger->published = std::max(ledger->published, static_cast<size_t>(std::max<int64_t>(0, count)));
}

// Where the count of storages allocated since Python last named them lives (read, never written).
const volatile int64_t* fv_fresh_address(void* handle) { return &as_ledger(handle)->fresh_count; }

// Name the storages allocated since the last call, the op Python just saw return having made them
// (its outputs and its intermediates): what they do not know yet of op, cell, line and module is
// set on their live record and on their alloc event. Also returns the storage id of the op's output
// at `out_ptr` when that holds exactly `out_bytes` (whose shape Python then remembers), else -1.
// `site` packs op | cell << 16 | line << 32 | module << 48: one argument instead of four is a third
// of the call's cost from ctypes, and this runs after every allocating op.
int64_t fv_name_fresh(void* handle, uint64_t site, uint64_t out_ptr, double out_bytes) {
  const uint16_t op = site & 0xFFFF, cell = (site >> 16) & 0xFFFF, line = (site >> 32) & 0xFFFF,
                 module = (site >> 48) & 0xFFFF;
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  const size_t n = ledger->count();
  for (uint64_t ptr : ledger->fresh) {
    auto it = ledger->live.find(ptr);
    if (it == ledger->live.end()) continue;
    Live& r = it->second;
    if (r.op == kNoSmall) r.op = op;
    if (r.line == 0 && line != 0) {
      r.cell = cell;
      r.line = line;
    }
    if (r.module == kNoSmall) r.module = module;
    for (size_t k = 0; k < n && k < 8192; ++k) {  // its alloc is among the last events
      const size_t i = n - 1 - k;
      if (ledger->storage[i] != r.sid || ledger->action[i] != kAlloc) continue;
      ledger->op[i] = r.op;
      ledger->cell[i] = r.cell;
      ledger->line[i] = r.line;
      ledger->module[i] = r.module;
      break;
    }
  }
  ledger->fresh.clear();
  ledger->fresh_count = 0;
  auto out = out_ptr ? ledger->live.find(out_ptr) : ledger->live.end();
  return out == ledger->live.end() || out->second.bytes != out_bytes ? -1 : static_cast<int64_t>(out->second.sid);
}

// Forget the storages allocated since Python last named them: inside an optimizer step, the
// step's own site (its line, "Adam.step") already names them, and Python skips naming each op.
void fv_forget_fresh(void* handle) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  ledger->fresh.clear();
  ledger->fresh_count = 0;
}

// The storage id of a live storage at `ptr` holding exactly `logical_bytes` (an op's output, whose
// shape Python then remembers), else -1.
int64_t fv_sid_of(void* handle, uint64_t ptr, double logical_bytes) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  auto it = ledger->live.find(ptr);
  return it == ledger->live.end() || it->second.bytes != logical_bytes ? -1 : static_cast<int64_t>(it->second.sid);
}

int fv_lookup(void* handle, uint64_t ptr, FvRecord* out) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  auto it = ledger->live.find(ptr);
  if (it == ledger->live.end()) return 0;
  const Live& r = it->second;
  *out = FvRecord{r.sid, r.node, r.bytes, r.op, r.module, r.cell, r.line, r.category, {0}};
  return 1;
}

// The storage with id `sid` (a hover asks for one): 1 and its record while it is alive, 2 and what
// its last event says once it was freed, 0 when the history no longer has it.
int fv_find(void* handle, uint32_t sid, FvRecord* out) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  for (auto& kv : ledger->live) {
    const Live& r = kv.second;
    if (r.sid != sid) continue;
    *out = FvRecord{r.sid, r.node, r.bytes, r.op, r.module, r.cell, r.line, r.category, {0}};
    return 1;
  }
  for (size_t i = ledger->count(); i > 0; --i) {
    if (ledger->storage[i - 1] != sid) continue;
    const size_t k = i - 1;
    *out = FvRecord{sid, ledger->node[k], ledger->bytes[k], ledger->op[k], ledger->module[k], ledger->cell[k],
                    ledger->line[k], ledger->category[k], {0}};
    return 2;
  }
  return 0;
}

// Every live storage: ptrs[i] and records[i]; returns how many there are (fills at most cap).
int64_t fv_live(void* handle, uint64_t* ptrs, FvRecord* records, int64_t cap) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  int64_t i = 0;
  for (auto& kv : ledger->live) {
    if (i < cap) {
      const Live& r = kv.second;
      ptrs[i] = kv.first;
      records[i] = FvRecord{r.sid, r.node, r.bytes, r.op, r.module, r.cell, r.line, r.category, {0}};
    }
    ++i;
  }
  return i;
}

// stats[0..4] = count, dropped, live bytes, peak bytes, peak time; returns compactions so far.
int64_t fv_stats(void* handle, double* stats) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  stats[0] = static_cast<double>(ledger->count());
  stats[1] = static_cast<double>(ledger->dropped);
  stats[2] = ledger->live_bytes;
  stats[3] = ledger->peak_bytes;
  stats[4] = ledger->peak_time;
  return static_cast<int64_t>(ledger->cuts.size() / 3);
}

// Compaction k: (cut index, allocs kept, time of the cut).
void fv_cut(void* handle, int64_t k, double* out) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  for (int j = 0; j < 3; ++j) out[j] = ledger->cuts[3 * k + j];
}

// Copy events [start, end) of all ten columns (EVENT_COLUMNS order) into outs[0..9], under one
// lock so a compaction cannot fall between two columns. Returns how many events were copied.
int64_t fv_copy(void* handle, int64_t start, int64_t end, void* const* outs) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  const int64_t n = static_cast<int64_t>(ledger->count());
  start = std::max<int64_t>(0, std::min(start, n));
  end = std::max(start, std::min(end, n));
  int column = 0;
  auto copy = [&](auto& v) {
    const size_t size = static_cast<size_t>(end - start) * sizeof(v[0]);
    if (size > 0) std::memcpy(outs[column], v.data() + start, size);
    ++column;
  };
  copy(ledger->time);
  copy(ledger->bytes);
  copy(ledger->storage);
  copy(ledger->node);
  copy(ledger->op);
  copy(ledger->module);
  copy(ledger->cell);
  copy(ledger->line);
  copy(ledger->action);
  copy(ledger->category);
  return end - start;
}

// Set the cell column of events [start, count) from `from` to `to` (a cell's number, known late).
void fv_patch_cell(void* handle, int64_t start, int from, int to) {
  std::lock_guard<std::mutex> guard(g->mutex);
  Ledger* ledger = as_ledger(handle);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, start)); i < ledger->count(); ++i)
    if (ledger->cell[i] == from) ledger->cell[i] = static_cast<uint16_t>(to);
  for (auto& kv : ledger->live)
    if (kv.second.cell == from) kv.second.cell = static_cast<uint16_t>(to);
}

int fv_op_count() {
  std::lock_guard<std::mutex> guard(g->mutex);
  return static_cast<int>(g->op_names.size());
}

const char* fv_op_name(int id) {
  std::lock_guard<std::mutex> guard(g->mutex);
  return id >= 0 && id < static_cast<int>(g->op_names.size()) ? g->op_names[id].c_str() : nullptr;
}

}  // extern "C"
