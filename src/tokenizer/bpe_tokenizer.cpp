// src/tokenizer/bpe_tokenizer.cpp — the engine of both formats (bpe_tokenizer.hpp):
//   text --added-token passes--> segments (an added token's id, or text)
//        --pre-token steps------> pieces (byte ranges of a segment, or owned text after a prefix space)
//        --BPE by rank----------> ids
// BPE of one piece of n bytes: n symbols in a linked list, a binary heap of candidate pairs keyed
// (rank, position): the lowest rank merges first, the leftmost among equal ranks (HF's BPE
// word.merge_all and tiktoken's byte_pair_merge both do exactly this); stale heap entries are
// recognised by their ids. O(n log n) per piece; results cached per distinct piece.
#include "bpe_tokenizer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <thread>

#include "mla/error.hpp"
#include "mla/json_text.hpp"

namespace mla {

size_t first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

namespace tok {

// ---- PairTable -------------------------------------------------------------------------------
namespace {
constexpr uint64_t kEmptyKey = ~uint64_t{0};
inline size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}
}  // namespace

void PairTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys_.assign(cap, kEmptyKey);
  values_.assign(cap, 0);
  mask_ = cap - 1;
  size_ = 0;
}

bool PairTable::insert(uint64_t key, uint64_t value) {
  if ((size_ + 1) * 2 > keys_.size()) {
    std::vector<uint64_t> k = std::move(keys_), v = std::move(values_);
    reserve(std::max<size_t>(16, (size_ + 1) * 2));
    for (size_t i = 0; i < k.size(); ++i)
      if (k[i] != kEmptyKey) insert(k[i], v[i]);
  }
  for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) {
      values_[i] = value;
      return false;
    }
    if (keys_[i] == kEmptyKey) {
      keys_[i] = key;
      values_[i] = value;
      ++size_;
      return true;
    }
  }
}

const uint64_t* PairTable::find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) return &values_[i];
    if (keys_[i] == kEmptyKey) return nullptr;
  }
}

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;
// pre-token -> (offset, count) into a pool of ids
using PieceCache = std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>;

// A segment of the text after the added-token passes: an added token, or text to pre-tokenize.
struct Segment {
  size_t begin = 0, end = 0;
  int64_t added = -1;  // index into BpeSpec::added, or -1
};

// An item of the encoded sequence: a piece of text for BPE, or an added token's id.
struct Item {
  std::string_view text;
  int64_t id = -1;  // >= 0: an added token
};

bool is_space_at(std::string_view s, size_t i, size_t& len);

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);
  std::vector<uint32_t> encode(std::string_view text, int threads) const override;
  std::string decode(std::span<const uint32_t> ids) const override;
  size_t vocab_size() const override { return vocab_size_; }
  const std::vector<AddedToken>& added_tokens() const override { return spec_.added; }
  std::string format() const override { return spec_.format; }
  std::string file() const override { return spec_.file; }
  std::vector<std::string> patterns() const override { return spec_.patterns; }

 private:
  void added_pass(std::string_view text, const std::vector<size_t>& tokens, std::vector<Segment>& segs) const;
  // Steps [first, last) of the pre-tokenizer on `seg`; the pieces appended to `out`.
  // `threads` scan the whole segment's first Split (the later steps see one piece each).
  void pre_tokenize(std::string_view seg, size_t first, size_t last, std::deque<std::string>& arena,
                    std::vector<Item>& out, int threads = 1) const;
  void bpe(std::string_view piece, std::vector<uint32_t>& out, PieceCache& cache, std::vector<uint32_t>& pool) const;
  void merge(std::string_view piece, std::vector<uint32_t>& out) const;
  [[noreturn]] void no_byte_token(char byte) const {
    fail(ErrorKind::Unsupported, spec_.file + ": the vocabulary has no token for the byte " +
                                     std::to_string(static_cast<unsigned char>(byte)) + " of the text");
  }
  static constexpr uint32_t kNoToken = ~uint32_t{0};

  BpeSpec spec_;
  BytesToId bytes_to_id_;
  uint32_t byte_id_[256] = {};
  std::vector<int64_t> added_by_id_;  // id -> index into spec_.added, or -1
  size_t vocab_size_ = 0;
};

BpeTokenizer::BpeTokenizer(BpeSpec spec) : spec_(std::move(spec)) {
  size_t n = spec_.token_bytes.size();
  for (const AddedToken& a : spec_.added) n = std::max<size_t>(n, size_t{a.id} + 1);
  vocab_size_ = n;
  bytes_to_id_.reserve(spec_.token_bytes.size());
  for (size_t id = 0; id < spec_.token_bytes.size(); ++id)
    if (!spec_.token_bytes[id].empty() && (spec_.bpe_token.empty() || spec_.bpe_token[id])) bytes_to_id_.emplace(spec_.token_bytes[id], static_cast<uint32_t>(id));
  // A byte without a token (DeepSeek-V2 has none for 0xC0, 0xC1, 0xF5..0xFF, which UTF-8 never
  // holds) is refused if a pre-token ever holds it (merge).
  for (int b = 0; b < 256; ++b) {
    const auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    byte_id_[b] = it == bytes_to_id_.end() ? kNoToken : it->second;
  }
  added_by_id_.assign(vocab_size_, -1);
  for (size_t k = 0; k < spec_.added.size(); ++k) added_by_id_[spec_.added[k].id] = static_cast<int64_t>(k);
}

// ---- added tokens -----------------------------------------------------------------------------

bool is_word_char(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  return c >= 0x80 || std::isalnum(c) || c == '_';
}

// Start of the last UTF-8 character before `end`.
size_t char_start_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// Splits the text segments of `segs` at the leftmost-longest matches of `tokens` (HF's
// AddedVocabulary::find_matches: single_word, then lstrip / rstrip widen the match over whitespace).
void BpeTokenizer::added_pass(std::string_view text, const std::vector<size_t>& tokens,
                              std::vector<Segment>& segs) const {
  if (tokens.empty()) return;
  bool first_byte[256] = {};
  for (size_t k : tokens) first_byte[static_cast<unsigned char>(spec_.added[k].content[0])] = true;
  std::vector<Segment> out;
  for (const Segment& seg : segs) {
    if (seg.added >= 0) { out.push_back(seg); continue; }
    size_t start_offset = seg.begin;
    for (size_t i = seg.begin; i < seg.end; ++i) {
      if (!first_byte[static_cast<unsigned char>(text[i])]) continue;
      int64_t best = -1;
      for (size_t k : tokens) {
        const std::string& c = spec_.added[k].content;
        if (c.size() <= seg.end - i && (best < 0 || c.size() > spec_.added[best].content.size()) &&
            std::memcmp(text.data() + i, c.data(), c.size()) == 0)
          best = static_cast<int64_t>(k);
      }
      if (best < 0) continue;
      const AddedToken& a = spec_.added[best];
      size_t start = i, stop = i + a.content.size();
      if (a.single_word && ((start > seg.begin && is_word_char(text, char_start_before(text, start))) ||
                            (stop < seg.end && is_word_char(text, stop))))
        continue;
      size_t len = 0;
      if (a.lstrip)
        while (start > start_offset && is_space_at(text, char_start_before(text, start), len)) start -= len;
      if (a.rstrip)
        while (stop < seg.end && is_space_at(text, stop, len)) stop += len;
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, best});
      start_offset = stop;
      i = stop - 1;
    }
    if (start_offset < seg.end) out.push_back({start_offset, seg.end, -1});
  }
  segs = std::move(out);
}

// Unicode White_Space at s[i] (the set of Rust's char::is_whitespace); its length in `len`.
bool is_space_at(std::string_view s, size_t i, size_t& len) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  len = 1;
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return true;
  if (c < 0x80) return false;
  uint32_t cp = 0;
  len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- pre-tokenization -------------------------------------------------------------------------

// A part of a piece: a match of the pattern or the text between two.
struct Part {
  size_t b, e;
  bool match;
};

// HF's NormalizedString::split: the piece cut at the pattern's matches by `behavior`.
void split_piece(std::string_view piece, const PreTokenStep& step, std::vector<Span>& spans,
                 std::vector<std::string_view>& out, int threads = 1) {
  if (piece.empty()) return;
  thread_local std::vector<Part> parts, res;  // parts cover the piece; res = after the behavior
  spans.clear();
  parts.clear();
  res.clear();
  step.regex->find_all(piece, spans, threads);
  size_t prev = 0;
  for (const Span& m : spans) {
    if (prev != m.begin) parts.push_back({prev, m.begin, false});
    parts.push_back({m.begin, m.end, true});
    prev = m.end;
  }
  if (prev != piece.size()) parts.push_back({prev, piece.size(), false});
  if (step.invert)
    for (Part& p : parts) p.match = !p.match;
  bool previous = false;
  const std::vector<Part>* kept = &res;
  switch (step.behavior) {
    case SplitBehavior::Isolated: kept = &parts; break;
    case SplitBehavior::Removed:
      for (const Part& p : parts) if (!p.match) res.push_back(p);
      break;
    case SplitBehavior::Contiguous:
    case SplitBehavior::MergedWithPrevious:
      for (const Part& p : parts) {
        const bool join = step.behavior == SplitBehavior::Contiguous ? p.match == previous : p.match && !previous;
        if (join && !res.empty()) res.back().e = p.e; else res.push_back(p);
        previous = p.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.match && !previous && !res.empty()) res.back().b = p.b; else res.push_back(p);
        previous = p.match;
      }
      std::reverse(res.begin(), res.end());
      break;
  }
  for (const Part& p : *kept)
    if (p.e > p.b) out.push_back(piece.substr(p.b, p.e - p.b));
}

void BpeTokenizer::pre_tokenize(std::string_view seg, size_t first, size_t last, std::deque<std::string>& arena,
                                std::vector<Item>& out, int threads) const {
  std::vector<std::string_view> pieces{seg}, next;
  std::vector<Span> spans;
  for (size_t k = first; k < last; ++k) {
    const PreTokenStep& step = spec_.steps[k];
    next.clear();
    for (std::string_view p : pieces) {
      if (step.kind == PreTokenStep::Kind::PrefixSpace) {
        if (!p.empty() && p[0] != ' ') p = arena.emplace_back(" " + std::string(p));
        next.push_back(p);
      } else {
        split_piece(p, step, spans, next, pieces.size() == 1 ? threads : 1);
      }
    }
    pieces.swap(next);
  }
  for (std::string_view p : pieces)
    if (!p.empty()) out.push_back({p, -1});
}

// ---- BPE --------------------------------------------------------------------------------------

struct Candidate {
  uint32_t rank, pos, left, right, merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

void BpeTokenizer::merge(std::string_view piece, std::vector<uint32_t>& out) const {
  const size_t n = piece.size();  // symbols: one per byte at first
  thread_local std::vector<uint32_t> id;
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<Candidate> heap;
  id.resize(n);
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    if (id[i] == kNoToken) no_byte_token(piece[i]);
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  const auto push = [&](int32_t p) {
    if (p < 0) return;
    const int32_t q = next[p];
    if (q < 0) return;
    const uint64_t* v = spec_.pairs.find((uint64_t{id[p]} << 32) | id[q]);
    if (v == nullptr) return;
    heap.push_back({static_cast<uint32_t>(*v >> 32), static_cast<uint32_t>(p), id[p], id[q], static_cast<uint32_t>(*v)});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    const int32_t p = static_cast<int32_t>(c.pos), q = next[p];
    if (q < 0 || id[p] != c.left || id[q] != c.right || prev[p] == -2) continue;
    id[p] = c.merged;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    prev[q] = -2;  // removed
    push(prev[p]);
    push(p);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

void BpeTokenizer::bpe(std::string_view piece, std::vector<uint32_t>& out, PieceCache& cache,
                       std::vector<uint32_t>& pool) const {
  if (piece.size() == 1) {
    const uint32_t id = byte_id_[static_cast<unsigned char>(piece[0])];
    if (id == kNoToken) no_byte_token(piece[0]);
    out.push_back(id);
    return;
  }
  if (spec_.ignore_merges) {
    const auto it = bytes_to_id_.find(piece);
    if (it != bytes_to_id_.end()) { out.push_back(it->second); return; }
  }
  const auto hit = cache.find(piece);
  if (hit != cache.end()) {
    out.insert(out.end(), pool.begin() + hit->second.first, pool.begin() + hit->second.first + hit->second.second);
    return;
  }
  const size_t before = out.size();
  merge(piece, out);
  if (piece.size() <= 256 && cache.size() < (size_t{1} << 20)) {
    cache.emplace(std::string(piece), std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(pool.size()),
                                                                    static_cast<uint32_t>(out.size() - before)));
    pool.insert(pool.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  }
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text, int threads) const {
  const size_t bad = first_invalid_utf8(text);
  if (bad != text.size())
    fail(ErrorKind::InvalidValue, "the text is not valid UTF-8 at byte offset " + std::to_string(bad));
  std::vector<Segment> segs{{0, text.size(), -1}};
  for (const auto& pass : spec_.added_passes) added_pass(text, pass, segs);
  // Each step splits every piece on its own, so only the steps through the first Split see the
  // whole text: they run here; the later steps and the BPE run on `threads` runs of pieces.
  size_t head = 0;
  while (head < spec_.steps.size() && spec_.steps[head].kind != PreTokenStep::Kind::Split) ++head;
  head = std::min(head + 1, spec_.steps.size());
  std::deque<std::string> arena;  // pieces that a prefix space made
  std::vector<Item> items;        // the pieces after the head steps, and the added tokens
  for (const Segment& s : segs) {
    if (s.added >= 0) items.push_back({{}, spec_.added[s.added].id});
    else pre_tokenize(text.substr(s.begin, s.end - s.begin), 0, head, arena, items, threads);
  }
  const size_t parts = std::clamp<size_t>(threads, 1, std::max<size_t>(1, items.size() / 1024));
  std::vector<std::vector<uint32_t>> ids(parts);
  const auto work = [&](size_t part) {
    PieceCache cache;
    std::vector<uint32_t> pool;
    std::deque<std::string> own_arena;
    std::vector<Item> pieces;
    const size_t b = items.size() * part / parts, e = items.size() * (part + 1) / parts;
    for (size_t k = b; k < e; ++k) {
      if (items[k].id >= 0) { ids[part].push_back(static_cast<uint32_t>(items[k].id)); continue; }
      pieces.clear();
      if (head < spec_.steps.size()) pre_tokenize(items[k].text, head, spec_.steps.size(), own_arena, pieces);
      else pieces.push_back(items[k]);
      for (const Item& p : pieces) bpe(p.text, ids[part], cache, pool);
    }
  };
  std::vector<std::thread> pool;
  for (size_t part = 1; part < parts; ++part) pool.emplace_back(work, part);
  work(0);
  for (std::thread& t : pool) t.join();
  for (size_t part = 1; part < parts; ++part) ids[0].insert(ids[0].end(), ids[part].begin(), ids[part].end());
  return std::move(ids[0]);
}

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint32_t id = ids[k];
    if (id < added_by_id_.size() && added_by_id_[id] >= 0) { out += spec_.added[added_by_id_[id]].content; continue; }
    if (id >= spec_.token_bytes.size() || spec_.token_bytes[id].empty())
      fail(ErrorKind::InvalidValue, "id " + std::to_string(id) + " (position " + std::to_string(k) +
                                        ") is not a token of " + spec_.file + " (vocabulary size " +
                                        std::to_string(vocab_size_) + ")");
    out += spec_.token_bytes[id];
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeSpec spec, int64_t max_vocab_size) {
  auto t = std::make_unique<BpeTokenizer>(std::move(spec));
  if (max_vocab_size > 0 && t->vocab_size() > static_cast<size_t>(max_vocab_size))
    fail(ErrorKind::Config, t->file() + ": the vocabulary (largest id + 1 = " + std::to_string(t->vocab_size()) +
                                ") is larger than config.json's vocab_size " + std::to_string(max_vocab_size));
  return t;
}

const std::string& byte_level_char(unsigned char b) {
  static const std::vector<std::string> table = [] {
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100 + k.
    std::vector<std::string> t(256);
    int k = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(c) : static_cast<uint32_t>(256 + k++);
      std::string s;
      if (cp < 0x80) s += static_cast<char>(cp);
      else { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
      t[c] = s;
    }
    return t;
  }();
  return table[b];
}

}  // namespace tok
}  // namespace mla
