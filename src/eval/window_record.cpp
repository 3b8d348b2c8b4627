// src/eval/window_record.cpp — one finished eval window as bytes (mla/window_record.hpp has the
// layout; docs/scale-out.md §2 why one format serves --resume and MPI).
#include "mla/window_record.hpp"

#include <cstring>

#include "mla/error.hpp"

namespace mla {
namespace {

constexpr std::string_view kMagic = "mla-h2o window record v1\n";
constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnvOffset) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnvPrime;
  return h;
}

// Appends fixed-width little-endian values (x86-64 and every target we build for is little-endian).
class Writer {
 public:
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void u8(bool v) { out_.push_back(v ? '\1' : '\0'); }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  void floats(const std::vector<float>& v) { raw(v.data(), v.size() * sizeof(float)); }
  std::string& bytes() { return out_; }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// Reads what Writer wrote; running past the end is one error line naming the record.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& what) : in_(bytes), what_(what) {}
  uint64_t u64() { return take<uint64_t>(); }
  int64_t i64() { return take<int64_t>(); }
  double f64() { return take<double>(); }
  bool u8() { return take<uint8_t>() != 0; }
  std::string str() {
    const uint64_t n = count(1);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  // A count of items of `item_bytes` each that the rest of the record can hold.
  uint64_t count(uint64_t item_bytes) {
    const uint64_t n = u64();
    if (item_bytes > 0 && n > (in_.size() - at_) / item_bytes) truncated();
    return n;
  }
  void floats(std::vector<float>& v, uint64_t n) {
    if (n > (in_.size() - at_) / sizeof(float)) truncated();
    v.resize(n);
    std::memcpy(v.data(), in_.data() + at_, n * sizeof(float));
    at_ += n * sizeof(float);
  }
  bool done() const { return at_ == in_.size(); }
  [[noreturn]] void truncated() const {
    fail(ErrorKind::InvalidValue, what_ + ": the window record is truncated or corrupt (it ends inside its payload)");
  }

 private:
  template <class T>
  T take() {
    if (in_.size() - at_ < sizeof(T)) truncated();
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string_view in_;
  size_t at_ = 0;
  const std::string& what_;
};

void write_seconds(Writer& w, const StageSeconds& s) {
  w.u64(s.size());
  for (const auto& [name, seconds] : s) {
    w.str(name);
    w.f64(seconds);
  }
}
StageSeconds read_seconds(Reader& r) {
  StageSeconds s(r.count(16));
  for (auto& [name, seconds] : s) {
    name = r.str();
    seconds = r.f64();
  }
  return s;
}

void write_run(Writer& w, const EvalRun& run) {
  w.str(run.policy.label);
  w.i64(run.budget);
  w.u64(run.positions.size());
  for (const EvalPosition& p : run.positions) {
    w.i64(p.position);
    w.i64(p.token);
    w.i64(p.predicted);
    w.f64(p.nll);
    w.f64(p.kl);
    w.f64(p.predicted_prob);
    w.u8(p.top1_agree);
    w.u8(p.top1_correct);
  }
  w.u64(run.layers.size());
  for (const EvalLayer& l : run.layers) {
    w.i64(l.layer);
    w.i64(l.budget);
    for (double v : {l.mean_cache_len, l.mean_held, l.mean_mass_recall, l.min_mass_recall, l.mean_attn_rel_error,
                     l.max_attn_rel_error, l.mean_hidden_rel_error})
      w.f64(v);
  }
}
EvalRun read_run(Reader& r, const PolicySettings& policy, const std::string& what) {
  EvalRun run;
  const std::string label = r.str();
  if (label != policy.label)
    fail(ErrorKind::InvalidValue, what + ": the window record holds a run of '" + label + "' where this run has '" +
                                      policy.label + "'");
  run.policy = policy;
  run.budget = r.i64();
  run.positions.resize(r.count(42));
  for (EvalPosition& p : run.positions) {
    p.position = r.i64();
    p.token = r.i64();
    p.predicted = r.i64();
    p.nll = r.f64();
    p.kl = r.f64();
    p.predicted_prob = r.f64();
    p.top1_agree = r.u8();
    p.top1_correct = r.u8();
  }
  run.layers.resize(r.count(72));
  for (EvalLayer& l : run.layers) {
    l.layer = r.i64();
    l.budget = r.i64();
    for (double* v : {&l.mean_cache_len, &l.mean_held, &l.mean_mass_recall, &l.min_mass_recall, &l.mean_attn_rel_error,
                      &l.max_attn_rel_error, &l.mean_hidden_rel_error})
      *v = r.f64();
  }
  return run;
}

void write_tensor(Writer& w, const TensorF& t) {
  w.str(t.name);
  w.u64(t.shape.size());
  for (int64_t d : t.shape) w.i64(d);
  w.floats(t.data);
}
TensorF read_tensor(Reader& r) {
  TensorF t;
  t.name = r.str();
  t.shape.resize(r.count(8));
  uint64_t n = 1;
  for (int64_t& d : t.shape) {
    d = r.i64();
    if (d < 0 || (d > 0 && n > (uint64_t{1} << 40) / static_cast<uint64_t>(d))) r.truncated();
    n *= static_cast<uint64_t>(d);
  }
  r.floats(t.data, n);
  return t;
}

}  // namespace

uint64_t token_ids_digest(const std::vector<int64_t>& ids) {
  uint64_t h = kFnvOffset;
  for (int64_t id : ids) h = fnv1a(std::string_view(reinterpret_cast<const char*>(&id), sizeof id), h);
  return h;
}

std::string encode_window_record(const EvalWindow& win, uint64_t index, uint64_t input_digest,
                                 const std::string& settings_digest) {
  Writer p;  // the payload
  const EvalResult& res = win.result;
  p.str(win.source);
  p.i64(win.offset);
  p.str(res.engine);
  p.str(res.passkey.key);
  p.u64(res.passkey.digits.size());
  for (int64_t d : res.passkey.digits) p.i64(d);
  write_seconds(p, res.stage_seconds);
  write_seconds(p, res.profile);
  p.u64(res.runs.size() + 1);
  write_run(p, res.full);
  for (const EvalRun& run : res.runs) write_run(p, run);
  const bool dumped = !res.full_logits.empty();
  p.u64(dumped ? res.hidden_states.size() + 1 : 0);
  if (dumped) {
    write_tensor(p, res.full_logits);
    for (const TensorF& h : res.hidden_states) write_tensor(p, h);
  }
  Writer w;
  w.bytes().append(kMagic);
  w.str(settings_digest);
  w.u64(index);
  w.u64(input_digest);
  w.u64(p.bytes().size());
  w.bytes().append(p.bytes());
  w.u64(fnv1a(w.bytes()));
  return std::move(w.bytes());
}

uint64_t record_window_index(std::string_view bytes, const std::string& what) {
  if (bytes.substr(0, kMagic.size()) != kMagic)
    fail(ErrorKind::InvalidValue, what + ": not an mla-h2o window record of this version");
  Reader r(bytes.substr(kMagic.size()), what);
  (void)r.str();  // the settings digest
  return r.u64();
}

EvalWindow decode_window_record(std::string_view bytes, const EvalOptions& opt, const std::string& what,
                                WindowRecordHeader& header) {
  if (bytes.substr(0, kMagic.size()) != kMagic)
    fail(ErrorKind::InvalidValue, what + ": not an mla-h2o window record of this version (it does not begin '" +
                                      std::string(kMagic.substr(0, kMagic.size() - 1)) + "')");
  if (bytes.size() < kMagic.size() + 8)
    fail(ErrorKind::InvalidValue, what + ": the window record is truncated (" + std::to_string(bytes.size()) + " bytes)");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), 8);
  if (fnv1a(body) != stored)
    fail(ErrorKind::InvalidValue, what + ": the window record's checksum does not match its bytes (a torn or altered file)");
  Reader r(body.substr(kMagic.size()), what);
  header.settings_digest = r.str();
  header.index = r.u64();
  header.input_digest = r.u64();
  const uint64_t payload = r.count(1);
  (void)payload;
  EvalWindow win;
  EvalResult& res = win.result;
  win.source = r.str();
  win.offset = r.i64();
  res.engine = r.str();
  res.passkey.key = r.str();
  res.passkey.digits.resize(r.count(8));
  for (int64_t& d : res.passkey.digits) d = r.i64();
  res.stage_seconds = read_seconds(r);
  res.profile = read_seconds(r);
  const std::vector<PolicyRun> order = policy_runs(opt.budgets, opt.policies);
  const uint64_t runs = r.count(1);
  if (runs != order.size() + 1)
    fail(ErrorKind::InvalidValue, what + ": the window record holds " + std::to_string(runs) + " runs where this run has " +
                                      std::to_string(order.size() + 1));
  res.full = read_run(r, policy_preset("full"), what);
  for (const PolicyRun& pr : order) res.runs.push_back(read_run(r, opt.policies[pr.policy], what));
  const uint64_t tensors = r.count(1);
  for (uint64_t t = 0; t < tensors; ++t) {
    TensorF x = read_tensor(r);
    if (t == 0) res.full_logits = std::move(x);
    else res.hidden_states.push_back(std::move(x));
  }
  if (!r.done()) r.truncated();
  return win;
}

}  // namespace mla
