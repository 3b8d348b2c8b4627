// tests/unit/test_policies.cpp — suite policies: the eviction policies of include/mla/policy.hpp,
// each worked out by hand on 6 tokens (docs/decode.md §2), driven directly through
// CacheManager with hand-made attention (no kernel, no model).
//
// The example: P = 4 prompt tokens, N = 2 decode steps (positions 4 and 5), budget K = 3.
// One head unless said otherwise. Query row x gives token t the weight W[x][t] > 0; attention
// over a cache S is p_t = W[x][t] / sum_{s in S} W[x][s]. Prompt queries attend over [0, q].
// The prefill mass (what every prompt query gave each token, H2O's prefill score) is given by
// hand: 2.0, 0.5, 0.9, 0.6. Every expected cut, eviction and cache below is worked out in the
// comments from these tables, not taken from the code under test.
//
// Tie rule (policy.hpp): the lowest (score, secondary score, position) goes: the newer token
// stays; pooling never drops the peak of a flat run.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/policy.hpp"
#include "mla/random.hpp"
#include "test_util.hpp"

namespace {

using namespace mla;
using Positions = std::vector<int64_t>;
using Table = std::vector<std::vector<double>>;  // [query x][token t]

const Table kW = {
    {1},                 // query 0 (unused)
    {1, 1},              // query 1 (unused)
    {1, 1, 2},           // query 2: .25 .25 .5
    {4, 1, 2, 1},        // query 3 (the last prompt query): .5 .125 .25 .125
    {2, 3, 1, 1, 1},     // query 4 = decode step 0
    {1, 2, 1, 3, 1, 2},  // query 5 = decode step 1
};
const std::vector<double> kMass = {2.0, 0.5, 0.9, 0.6};

// probabilities [n, |cache|] of query x over `cache` from one table per head
std::vector<double> attention(const std::vector<Table>& heads, int64_t x, std::span<const int64_t> cache) {
  std::vector<double> p;
  for (const Table& W : heads) {
    double sum = 0;
    for (int64_t t : cache) sum += W[static_cast<size_t>(x)][static_cast<size_t>(t)];
    for (int64_t t : cache) p.push_back(W[static_cast<size_t>(x)][static_cast<size_t>(t)] / sum);
  }
  return p;
}

struct Trace {
  Positions prefill_kept, attended0, attended1, held0, held1;
  Positions evicted0, evicted1;
};

// Drives one manager through the example: prompt queries, prefill, two steps.
Trace drive(PolicySettings s, int64_t K = 3, const std::vector<Table>& heads = {kW},
            const std::vector<double>& mass = kMass, const TokenFeatures* features = nullptr) {
  const int64_t n = static_cast<int64_t>(heads.size()), P = 4, T = 6;
  std::unique_ptr<CacheManager> m = make_cache_manager(s, K, PolicyContext{n, P, T, features});
  std::vector<double> head_mass;
  for (int64_t h = 0; h < n; ++h) head_mass.insert(head_mass.end(), mass.begin(), mass.end());
  std::vector<std::vector<double>> prompt;  // the queries it reads, alive until read_prompt returns
  prompt.reserve(static_cast<size_t>(P));
  m->read_prompt(head_mass, [&](int64_t q) -> std::span<const double> {
    Positions prefix(static_cast<size_t>(q + 1));
    std::iota(prefix.begin(), prefix.end(), 0);
    prompt.push_back(attention(heads, q, prefix));
    return prompt.back();
  });
  BOOST_TEST(static_cast<int64_t>(prompt.size()) == std::min(P, m->observation_window()));
  Trace t;
  t.prefill_kept.assign(m->cache().begin(), m->cache().end());
  for (int64_t x : {4, 5}) {
    Positions all(static_cast<size_t>(x + 1));
    std::iota(all.begin(), all.end(), 0);
    const std::vector<double> full = attention(heads, x, all);
    const std::span<const int64_t> c = m->begin_step(x, m->needs_full_attention() ? full : std::vector<double>{});
    const Positions cache(c.begin(), c.end());
    const Positions gone = m->end_step(attention(heads, x, cache));
    (x == 4 ? t.attended0 : t.attended1) = cache;
    (x == 4 ? t.evicted0 : t.evicted1) = gone;
    (x == 4 ? t.held0 : t.held1).assign(m->cache().begin(), m->cache().end());
  }
  return t;
}

PolicySettings with(const std::string& list) { return parse_policy_list(list).at(0); }

void check(const Trace& t, const Positions& kept, const Positions& a0, const Positions& a1, const Positions& e0,
           const Positions& e1) {
  BOOST_TEST(t.prefill_kept == kept, boost::test_tools::per_element());
  BOOST_TEST(t.attended0 == a0, boost::test_tools::per_element());
  BOOST_TEST(t.attended1 == a1, boost::test_tools::per_element());
  BOOST_TEST(t.evicted0 == e0, boost::test_tools::per_element());
  BOOST_TEST(t.evicted1 == e1, boost::test_tools::per_element());
  BOOST_TEST(t.held0.size() <= 3u);
  BOOST_TEST(t.held1.size() <= 3u);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(policies)

// full: nothing evicted.
BOOST_AUTO_TEST_CASE(six_tokens_full) {
  const Trace t = drive(with("full"));
  BOOST_TEST(t.prefill_kept == (Positions{0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(t.attended1 == (Positions{0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
  BOOST_TEST(t.held1 == t.attended1, boost::test_tools::per_element());
  BOOST_TEST((t.evicted0.empty() && t.evicted1.empty()));
}

// h2o (sinks 1, recent 1). Prefill: evictable {1, 2} (x = 3): 0.5 < 0.9 -> 1 goes.
// Step x = 4: cache {0,2,3,4}, W[4] = 2,1,1,1 -> p = .4,.2,.2,.2; mass 0: 2.4, 2: 1.1, 3: 0.8,
// 4: 0.2. Evictable {2, 3}: 3 goes (0.8 < 1.1). Step x = 5: cache {0,2,4,5}, W[5] = 1,1,1,2 ->
// .2,.2,.2,.4; mass 2: 1.3, 4: 0.4; evictable {2, 4}: 4 goes.
BOOST_AUTO_TEST_CASE(six_tokens_h2o) {
  check(drive(with("h2o:sinks=1,recent=1")), {0, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {3}, {4});
}

// h2o-normalized. Prefill mass / (P - t): 1: 0.5/3, 2: 0.9/2 -> 1 goes. Step 4: the masses of
// h2o divided by the queries that saw them (x - t + 1): 2: 1.1/3 = .367 < 3: 0.8/2 = .4 -> 2
// goes (h2o evicts 3 here). Step 5: cache {0,3,4,5}, W[5] = 1,3,1,2 -> 1/7,3/7,1/7,2/7;
// 3: (0.8 + 3/7)/3 = .41, 4: (0.2 + 1/7)/2 = .17 -> 4 goes.
BOOST_AUTO_TEST_CASE(six_tokens_h2o_normalized) {
  check(drive(with("h2o-normalized:sinks=1,recent=1")), {0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, {2}, {4});
}

// tova. Prefill: the last prompt query W[3] = .5,.125,.25,.125 -> 1 goes (.125 < .25).
// Step 4: p over {0,2,3,4} = .4,.2,.2,.2: 2 and 3 tie -> the older, 2, goes.
// Step 5: {0,3,4,5}: 1/7,3/7,1/7,2/7; evictable {3, 4} -> 4 goes.
BOOST_AUTO_TEST_CASE(six_tokens_tova) {
  check(drive(with("tova:sinks=1,recent=1")), {0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, {2}, {4});
}

// streaming (sinks 1): the oldest non-sink goes: 1 at the prefill, then 2, then 3.
BOOST_AUTO_TEST_CASE(six_tokens_streaming) {
  check(drive(with("streaming:sinks=1")), {0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, {2}, {3});
}

// snapkv (no sinks, window 2, max-pool 3). Prompt queries 2 and 3 vote: .25,.25,.5 and
// .5,.125,.25,.125 -> sums 0: .75, 1: .375 (2 and 3 are the window: kept, not pooled).
// Pooled over positions [0, 1] (the window is cut off first): 0: max(.75,.375) = .75, 1: .75
// — a flat run. The tie goes to the lower unpooled sum: 1 (.375) goes, the peak 0 stays
// (the older-first rule alone would drop the peak).
// Step 4: cache {0,2,3,4}, p = .4,.2,.2,.2; the window becomes queries 3, 4 (query 2 leaves):
// 0: .75 + .4 - .25 = .9, 2: .75 + .2 - .5 = .45. Protected: the window positions {3, 4};
// pooled over [0, 2] (1 is empty: 0): 0: .9, 2: max(0, .45) = .45 -> 2 goes.
// Step 5: cache {0,3,4,5}, p = 1/7,3/7,1/7,2/7; query 3 leaves (.5 on 0, .125 on 3):
// 0: .9 + 1/7 - .5 = .543, 3: .125 + .2 + 3/7 - .125 = .629 (3 entered the window sum at
// query 3 with .125 and at query 4 with .2). Protected {4, 5}; pooled over [0, 3]:
// 0: max(.543, 0) = .543 < 3: max(0, .629) -> 0 goes.
BOOST_AUTO_TEST_CASE(six_tokens_snapkv_maxpool) {
  check(drive(with("snapkv:window=2,pool=max3")), {0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, {2}, {0});
}

// snapkv with average pooling (width 3, zero padding counted): prefill sums 0: .75, 1: .375
// pooled over [0, 1]: 0: (0 + .75 + .375)/3 = .375, 1: (.75 + .375 + 0)/3 = .375 — a tie,
// broken by the unpooled sums: 1 goes.
BOOST_AUTO_TEST_CASE(six_tokens_snapkv_avgpool) {
  const Trace t = drive(with("snapkv:window=2,pool=avg3"));
  BOOST_TEST(t.prefill_kept == (Positions{0, 2, 3}), boost::test_tools::per_element());
  // The paper's preset: window 64 and avg-pool 5 (a window larger than the prompt keeps it all).
  const PolicySettings p = policy_preset("snapkv");
  BOOST_TEST(p.window == 64);
  BOOST_TEST((p.pool == Pooling::Avg && p.pool_width == 5));
  const PolicySettings q = policy_preset("snapkv-maxpool");
  BOOST_TEST(q.window == 32);
  BOOST_TEST((q.pool == Pooling::Max && q.pool_width == 7));
}

// knorm (sinks 1, recent 1): score -||k||; key norms 3, 1, 2, 4, 1.5, 5. Prefill: evictable
// {1, 2}: 2 (norm 2) goes. Step 4: {1, 3}: 3 (norm 4) goes. Step 5: {1, 4}: 4 (1.5 > 1) goes.
BOOST_AUTO_TEST_CASE(six_tokens_knorm) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.key_norm = {3, 1, 2, 4, 1.5, 5};
  check(drive(with("knorm:sinks=1,recent=1"), 3, {kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4}, {0, 1, 4, 5}, {3}, {4});
}

// keydiff (sinks 1, recent 1): score = -cos(k_t, anchor), given: -.9, .2, -.1, .5, 0, -.3 (the
// feature itself is checked against its definition in suite decode). Prefill: evictable {1, 2}:
// 2 (-.1 < .2) goes. Step 4: {1, 3}: 1 (.2 < .5) goes. Step 5: {3, 4}: 4 (0 < .5) goes. The key
// most like the anchor goes; 3, the most unlike, stays throughout.
BOOST_AUTO_TEST_CASE(six_tokens_keydiff) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.key_diff = {-.9, .2, -.1, .5, 0, -.3};
  check(drive(with("keydiff:sinks=1,recent=1"), 3, {kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4}, {0, 3, 4, 5}, {1}, {4});
  BOOST_TEST((policy_preset("keydiff").sinks == 0 && policy_preset("keydiff").recent == 1 &&
              policy_preset("keydiff").heads == HeadAggregation::Mean));  // kvpress's KeyDiffPress
}

// leverage (sinks 1, recent 1): score = the latent row's z-scored leverage, one per token (no
// heads), given: .3, -1.2, .8, -.1, .5, -.4 (the feature itself is checked against its definition
// in suite decode). Prefill {1, 2}: 1 (-1.2) goes. Step 4 {2, 3}: 3 (-.1 < .8) goes. Step 5 {2, 4}:
// 4 (.5 < .8) goes: the outlier 2 stays throughout.
BOOST_AUTO_TEST_CASE(six_tokens_leverage) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.leverage = {.3, -1.2, .8, -.1, .5, -.4};
  check(drive(with("leverage:sinks=1,recent=1"), 3, {kW}, kMass, &f), {0, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {3}, {4});
  const PolicySettings d = policy_preset("leverage");  // kvpress's LeverageScorePress
  BOOST_TEST((d.sinks == 0 && d.recent == 1 && d.sketch == 48));
  BOOST_CHECK_THROW(feature_needs(parse_policy_list("leverage,leverage:sketch=8")), Error);  // one set of scores
}

// cur (sinks 1, recent 1, local 2): k2 = ||k||^2 = 1, 4, 1, 9, 1, 4; v2 = ||v||^2 = 4, 1, 1, 1, 4, 1.
// The prompt's blocks [0, 2), [2, 4): k2 sums 5, 10, v2 sums 5, 2 -> k2' = .2, .8, .1, .9,
// v2' = .8, .2, .5, .5; kv_product r = .16, .16, .05, .45 (over Z = .82, one head: the order stays).
// Prefill {1, 2}: 2 goes. Step 4: a new block [4, 5): k2' = v2' = 1, r = 1; {1, 3}: 1 (.16 < .45)
// goes. Step 5: block [4, 6): k2 sum 5, v2 sum 5, k2' = .8, v2' = .2, r = .16 (token 4 keeps its
// r = 1: its block had only itself when it arrived); {3, 4}: 3 (.45 < 1) goes.
// cur=kv_avg, local=0: r = (k2 + v2) / 2 = 2.5, 2.5, 1, 5, 2.5, 2.5: prefill 2 goes; step 4 {1, 3}:
// 1; step 5 {3, 4}: 4.
BOOST_AUTO_TEST_CASE(six_tokens_cur) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.key_norm = {1, 2, 1, 3, 1, 2};
  f.value_norm = {2, 1, 1, 1, 2, 1};
  check(drive(with("cur:sinks=1,recent=1,local=2"), 3, {kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4}, {0, 3, 4, 5}, {1}, {3});
  check(drive(with("cur:sinks=1,recent=1,cur=kv_avg,local=0"), 3, {kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4},
        {0, 3, 4, 5}, {1}, {4});
  const PolicySettings d = policy_preset("cur");  // kvpress's CURPress
  BOOST_TEST((d.sinks == 4 && d.recent == 1 && d.cur == "kv_product" && d.local == 16 && d.heads == HeadAggregation::Mean));
}

// cur's per-head normaliser: two heads, cur=key, local=0, heads=mean. Head 0's k2 = 1, 4, 1, 9, 1, 4
// (Z0 = 15), head 1's k2 = 16, 1, 4, 1, 1, 1 (Z1 = 22): the means of k2/Z = (1/15 + 16/22)/2 = .397,
// (4/15 + 1/22)/2 = .156, (1/15 + 4/22)/2 = .124, (9/15 + 1/22)/2 = .323, (1/15 + 1/22)/2 = .056,
// (4/15 + 1/22)/2 = .156. Prefill {1, 2}: 2 (.124) goes. Step 4 {1, 3}: 1 (.156 < .323). Step 5 {3, 4}:
// 4 (.056). Unnormalised means (8.5, 2.5, 2.5, 5, 1, 2.5) would tie 1 and 2 at the prefill and evict 1.
BOOST_AUTO_TEST_CASE(six_tokens_cur_two_heads) {
  TokenFeatures f;
  f.heads = 2;
  f.tokens = 6;
  f.key_norm = {1, 2, 1, 3, 1, 2, 4, 1, 2, 1, 1, 1};
  f.value_norm.assign(12, 1.0);
  check(drive(with("cur:sinks=1,recent=1,cur=key,local=0"), 3, {kW, kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4},
        {0, 3, 4, 5}, {1}, {4});
}

// lagkv (sinks 0, recent 1, lag 2): partitions [0, 2), [2, 4), [4, 6); the ranks given: .5, 0 | 0, .5 |
// 0, .5 (the feature itself is checked against its definition in suite decode). Partition c counts
// once 2 (c + 2) <= x + 1, else its tokens score 1. Prefill (x = 3): c = 0 counts: 0: .5, 1: 0, 2: 1;
// 1 goes. Step 4: still c = 0 only: {0, 2, 3} = .5, 1, 1: 0 goes. Step 5: c <= 1: {2, 3, 4} = 0, .5, 1:
// 2 goes. (Read at once, token 2's 0 would have gone at step 4.)
BOOST_AUTO_TEST_CASE(six_tokens_lagkv) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.lagkv = {.5, 0, 0, .5, 0, .5};
  check(drive(with("lagkv:sinks=0,recent=1,lag=2"), 3, {kW}, kMass, &f), {0, 2, 3}, {0, 2, 3, 4}, {2, 3, 4, 5}, {0}, {2});
  const PolicySettings d = policy_preset("lagkv");  // kvpress's LagKVPress
  BOOST_TEST((d.sinks == 4 && d.recent == 1 && d.lag == 128 && d.heads == HeadAggregation::Mean));
  // lag 3: the prompt (4 < 2 lag) ranks nothing, every token 1, the oldest goes (kvpress's ramp) at the
  // prefill (0) and step 4 (1); at step 5 partition [0, 3) counts: {2, 3, 4} = 0, 1, 1: 2 goes
  check(drive(with("lagkv:sinks=0,recent=1,lag=3"), 3, {kW}, kMass, &f), {1, 2, 3}, {1, 2, 3, 4}, {2, 3, 4, 5}, {1}, {2});
}

// kvzip (kvpress's KVzipPress): the context's repeat, chunk by chunk. P = 10 in chunks of 4 with
// text ids first {7, 8}, later {9}, suffix {5} (row -(v+1) is text id v):
//   chunk [0, 4):  7 8 | 5 | 0 1 2 3                 sinks 0
//   chunk [4, 8):  9 | 0 1 2 3 (the previous chunk's last 8, here all 4) | 5 | 4 5 6 7   sinks min(4, 4)
//   chunk [8, 10): 9 | 4 5 6 7 | 5 | 8 9             sinks 4
// Row i of chunk [4, 8) scores over [0, 4) u [4, 8) u [10, 10 + i].
BOOST_AUTO_TEST_CASE(kvzip_chunks_and_keys) {
  const std::vector<ReconstructionChunk> c = reconstruction_chunks(10, ReconstructionText{{7, 8}, {9}, {5}}, 4);
  BOOST_REQUIRE(c.size() == 3u);
  BOOST_TEST(c[0].rows == (Positions{-8, -9, -6, 0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(c[1].rows == (Positions{-10, 0, 1, 2, 3, -6, 4, 5, 6, 7}), boost::test_tools::per_element());
  BOOST_TEST(c[2].rows == (Positions{-10, 4, 5, 6, 7, -6, 8, 9}), boost::test_tools::per_element());
  BOOST_TEST((c[0].begin == 0 && c[0].end == 4 && c[0].sinks == 0));
  BOOST_TEST((c[1].begin == 4 && c[1].end == 8 && c[1].sinks == 4));
  BOOST_TEST((c[2].begin == 8 && c[2].end == 10 && c[2].sinks == 4));
  BOOST_TEST(reconstruction_rows(c) == 10);
  BOOST_TEST(reconstruction_total_rows(c) == 25);
  BOOST_TEST(reconstruction_keys(c[1], 10, 2) == (Positions{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12}), boost::test_tools::per_element());
  BOOST_TEST(reconstruction_keys(c[0], 10, 0) == (Positions{0, 1, 2, 3, 10}), boost::test_tools::per_element());
  // kvpress's defaults: one chunk of the whole context up to 2048 tokens, its softmax the causal one
  const std::vector<ReconstructionChunk> whole = reconstruction_chunks(2048, {});
  BOOST_TEST((whole.size() == 1u && whole[0].sinks == 0 && whole[0].end == 2048 && whole[0].rows.size() == 2048u));
  BOOST_TEST(reconstruction_chunks(2049, {}).size() == 2u);
  // a later chunk's row: its attention on the sinks and on the repeat's own rows is not a score
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 12;
  const Positions keys = reconstruction_keys(c[1], 10, 0);  // 0 1 2 3 4 5 6 7 10
  add_reconstruction_row(f, c[1], keys, std::vector<double>{.2, .1, .1, .1, .05, .15, .02, .03, .24});
  BOOST_TEST(f.reconstruction == (std::vector<double>{0, 0, 0, 0, .05, .15, .02, .03, 0, 0, 0, 0}),
             boost::test_tools::per_element());
  BOOST_CHECK_THROW(add_reconstruction_row(f, c[1], keys, std::vector<double>(8, .1)), std::exception);
}

// kvzip on the example, two heads, P = 4, one chunk: repeat rows 0 and 1 (keys [0, 4] and [0, 5])
// give, per head over tokens 0..3 (the rest of each row on the repeat's own keys):
//   row 0  head 0: .1 .2  .3  .1  | .3        head 1: .4 .05 .25 0   | .3
//   row 1  head 0: .05 .5 .1  .05 | .2 .1     head 1: .1 .1  .05 .45 | .2 .1
//   max over rows  head 0: .1 .5 .3 .1        head 1: .4 .1 .25 .45
//   heads=max (the preset): .4 .5 .3 .45 -> at K = 3 (recent 1: 3 kept) 2 goes: {0, 1, 3}
//   heads=sum:              .5 .6 .55 .55 -> 0 goes: {1, 2, 3}
// Decode (scores fixed at the prefill, a decoded token above every context token): x = 4, cache
// {0,1,3,4}, evictable {0,1,3}: 0 goes (.4); x = 5, cache {1,3,4,5}, evictable {1,3,4}: 3 goes.
BOOST_AUTO_TEST_CASE(six_tokens_kvzip) {
  const std::vector<ReconstructionChunk> c = reconstruction_chunks(4, ReconstructionText{{9}, {}, {}});
  BOOST_REQUIRE(c.size() == 1u);
  BOOST_TEST(c[0].rows == (Positions{-10, 0, 1, 2, 3}), boost::test_tools::per_element());
  TokenFeatures f;
  f.heads = 2;
  f.tokens = 6;
  add_reconstruction_row(f, c[0], reconstruction_keys(c[0], 4, 0),
                         std::vector<double>{.1, .2, .3, .1, .3, /* head 1 */ .4, .05, .25, 0, .3});
  add_reconstruction_row(f, c[0], reconstruction_keys(c[0], 4, 1),
                         std::vector<double>{.05, .5, .1, .05, .2, .1, /* head 1 */ .1, .1, .05, .45, .2, .1});
  BOOST_TEST(f.reconstruction == (std::vector<double>{.1, .5, .3, .1, 0, 0, .4, .1, .25, .45, 0, 0}),
             boost::test_tools::per_element());
  check(drive(with("kvzip"), 3, {kW, kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4}, {1, 3, 4, 5}, {0}, {3});
  BOOST_TEST(drive(with("kvzip:heads=sum"), 3, {kW, kW}, kMass, &f).prefill_kept == (Positions{1, 2, 3}),
             boost::test_tools::per_element());
  BOOST_TEST((policy_preset("kvzip").sinks == 0 && policy_preset("kvzip").recent == 1 &&
              policy_preset("kvzip").heads == HeadAggregation::Max));  // max over the group (kvpress)
  BOOST_TEST(feature_needs({policy_preset("kvzip")}).reconstruction);
  BOOST_CHECK_THROW(make_cache_manager(policy_preset("kvzip"), 3, PolicyContext{2, 4, 6, nullptr}), std::exception);
}

// expected-attention (sinks 1, recent 1): score = expected attention x ||v||:
// .5 x 1, .1 x 4, .2 x 1, .2 x 1, .3 x 2, .4 x 1 = .5, .4, .2, .2, .6, .4.
// Prefill {1, 2}: 2 goes. Step 4 {1, 3}: 3 goes. Step 5 {1, 4}: 1 (.4 < .6) goes.
// vnorm=0: .5,.1,.2,.2,.3,.4: prefill 1 goes; step 4 {2, 3} tie .2 -> 2; step 5 {3, 4}: 3.
BOOST_AUTO_TEST_CASE(six_tokens_expected_attention) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.expected_attention = {.5, .1, .2, .2, .3, .4};
  f.value_norm = {1, 4, 1, 1, 2, 1};
  check(drive(with("expected-attention:sinks=1,recent=1"), 3, {kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4}, {0, 1, 4, 5},
        {3}, {1});
  check(drive(with("expected-attention:sinks=1,recent=1,vnorm=0"), 3, {kW}, kMass, &f), {0, 2, 3}, {0, 2, 3, 4},
        {0, 3, 4, 5}, {2}, {3});
}

// scissorhands (sinks 1, recent 1, history window 2): a query that saw m tokens marks t
// unimportant when p < 1/m; the most-marked token goes. Query 2 (1/3): .25,.25,.5 -> marks
// 0, 1. Query 3 (1/4): .5,.125,.25,.125 -> marks 1, 3. Counts 0: 1, 1: 2, 2: 0, 3: 1.
// Prefill {1, 2}: 1 (2 marks) goes. Step 4 (1/4): .4,.2,.2,.2 on {0,2,3,4} marks 2, 3, 4;
// query 2 leaves (its mark on 0 goes): 0: 0, 2: 1, 3: 2, 4: 1 -> {2, 3}: 3 goes.
// Step 5: .2,.2,.2,.4 on {0,2,4,5} marks 0, 2, 4; query 3 leaves (its marks were on 1 and 3,
// both gone): 0: 1, 2: 2, 4: 2 -> {2, 4} tie -> the older, 2, goes.
BOOST_AUTO_TEST_CASE(six_tokens_scissorhands) {
  check(drive(with("scissorhands:sinks=1,recent=1,window=2")), {0, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {3}, {2});
}

// value-aware (sinks 1, recent 1): H2O's mass, each term times ||W_O W_UV c_t|| =
// 1, 2, 1, 1, 4, 1. Prefill: 2.0, 1.0, 0.9, 0.6 -> {1, 2}: 2 goes (h2o drops 1).
// Step 4: {0,1,3,4}: W[4] = 2,3,1,1 -> 2/7, 3/7, 1/7, 1/7; 1: 1 + 2 * 3/7 = 1.86,
// 3: .6 + 1/7 = .74 -> 3 goes. Step 5: {0,1,4,5}: W[5] = 1,2,1,2 -> 1/6, 2/6, 1/6, 2/6;
// 1: 1.86 + 2/3 = 2.52, 4: 4/7 + 4/6 = 1.24 -> 4 goes.
BOOST_AUTO_TEST_CASE(six_tokens_value_aware) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.output_norm = {1, 2, 1, 1, 4, 1};
  check(drive(with("value-aware:sinks=1,recent=1"), 3, {kW}, kMass, &f), {0, 1, 3}, {0, 1, 3, 4}, {0, 1, 4, 5}, {3}, {4});
}

// random (seed 11, sinks 1, recent 1): prefill scores u_t = Rng(11, 7001).uniform() in token
// order, the lower of {1, 2} goes; decode: Rng(11, 7002 + 16 K) picks floor(u * count) among
// the evictable tokens in position order (the documented generator, mla/random.hpp).
BOOST_AUTO_TEST_CASE(six_tokens_random) {
  Rng prefill(11, 7001);
  std::vector<double> u(4);
  for (double& v : u) v = prefill.uniform();
  const int64_t kept = u[2] > u[1] ? 2 : 1;
  Rng pick(11, 7002 + 16 * 3);
  const Positions ev0 = {kept, 3};  // step 4: evictable positions in [1, 3]
  const int64_t e0 = ev0[static_cast<size_t>(pick.uniform() * 2.0)];
  Positions c1 = {0, kept, 3, 4};
  c1.erase(std::find(c1.begin(), c1.end(), e0));
  Positions ev1;  // step 5: positions in [1, 4]
  for (int64_t t : c1)
    if (t >= 1 && t <= 4) ev1.push_back(t);
  const int64_t e1 = ev1[static_cast<size_t>(pick.uniform() * static_cast<double>(ev1.size()))];
  c1.push_back(5);
  check(drive(with("random:sinks=1,recent=1,seed=11")), {0, kept, 3}, {0, kept, 3, 4}, c1, {e0}, {e1});
}

// oracle: each step the K + 1 = 4 tokens with the most full attention (ties keep the newer);
// it then holds its K best. Step 4: W[4] = 2,3,1,1,1 -> 1, 0, then 4, 3 of the tied {2,3,4}
// -> {0,1,3,4}; held {0,1,4} (3 and 4 tie: the older goes). Step 5: W[5] = 1,2,1,3,1,2 ->
// 3, then 1 and 5, then the newest 1: 4 -> {1,3,4,5}.
BOOST_AUTO_TEST_CASE(six_tokens_oracle) {
  const Trace t = drive(with("oracle"));
  BOOST_TEST(t.attended0 == (Positions{0, 1, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(t.held0 == (Positions{0, 1, 4}), boost::test_tools::per_element());
  BOOST_TEST(t.attended1 == (Positions{1, 3, 4, 5}), boost::test_tools::per_element());
}

// The prefill cut of `P` = |head_mass| / n prompt tokens at budget K, for inner presses that read
// only the prefill mass (h2o: no prompt query), one decode position after it.
Positions prefill_cut(const PolicySettings& s, int64_t K, int64_t n, const std::vector<double>& head_mass,
                      const TokenFeatures* f = nullptr) {
  const int64_t P = static_cast<int64_t>(head_mass.size()) / n;
  std::unique_ptr<CacheManager> m = make_cache_manager(s, K, PolicyContext{n, P, P + 1, f});
  BOOST_TEST(m->observation_window() == 0);
  m->read_prompt(head_mass, [](int64_t) -> std::span<const double> { return {}; });
  return Positions(m->cache().begin(), m->cache().end());
}

// chunkkv wrapping h2o (sinks 0, recent 1), chunks of 3, P = 8, K = 4. Prefill mass
// 1, 1, 1, 5, 0, 0, 1.8, 9; position 7 is protected, 0..6 evictable, 4 of them go. Chunks
// {0,1,2}: (1+1+1)/3 = 1, {3,4,5}: 5/3, {6,7}: 1.8 over its 2 positions = .9 (7 is not
// evictable: its score is left out, its position counted, kvpress's mean of a short last chunk).
// Lowest first: chunk {6,7} (6 goes), then {0,1,2} (all three) -> kept {3, 4, 5, 7}: the whole
// chunk of the heavy hitter 3. h2o alone keeps 3, 6, 7 and the newest 1-mass token 2: {2, 3, 6, 7}.
// At K >= T nothing goes. Whole chunks: chunk=1 is h2o itself.
BOOST_AUTO_TEST_CASE(chunkkv_keeps_whole_chunks) {
  const std::vector<double> mass = {1, 1, 1, 5, 0, 0, 1.8, 9};
  BOOST_TEST(prefill_cut(with("chunkkv:press=h2o,press.recent=1,chunk=3"), 4, 1, mass) == (Positions{3, 4, 5, 7}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("h2o:recent=1"), 4, 1, mass) == (Positions{2, 3, 6, 7}), boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("chunkkv:press=h2o,press.recent=1,chunk=1"), 4, 1, mass) == (Positions{2, 3, 6, 7}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("chunkkv:press=h2o,press.recent=1,chunk=3"), 9, 1, mass) == (Positions{0, 1, 2, 3, 4, 5, 6, 7}),
             boost::test_tools::per_element());
  const PolicySettings d = policy_preset("chunkkv");  // kvpress: ChunkKVPress(press=SnapKVPress(), chunk_length=20)
  BOOST_TEST((d.chunk == 20 && d.inner.size() == 1 && d.inner[0].preset == "snapkv" && d.window == 64));
}

// criticalkv wrapping h2o (sinks 0, recent 1), P = 6, K = 4: 0..4 evictable, 2 go, k = 3 kept,
// stage 1 keeps floor(3 x 50 %) = 1: the best by h2o, token 0 (mass 4). Prefill mass 4, 3, 2,
// 1, .5, 1; output norms (two heads, their mean) .1, 1, 1, 10, 1, 1. Stage 2: (mass + 1e-4) x
// norm: 1: 3.0001, 2: 2.0001, 3: 10.001, 4: .5001 -> 4 and 2 go: kept {0, 1, 3, 5}. h2o alone
// keeps {0, 1, 2, 5}; without stage 1 (first=0%) token 0 scores .40001 and goes with 4:
// {1, 2, 3, 5}.
BOOST_AUTO_TEST_CASE(criticalkv_two_stages) {
  TokenFeatures f;
  f.heads = 2;
  f.tokens = 7;
  f.output_norm = {.1, 1.5, 0, 19, 1, 1, 1, /* head 1 */ .1, .5, 2, 1, 1, 1, 1};  // mean .1, 1, 1, 10, 1, 1, 1
  const std::vector<double> mass = {2, 1.5, 1, .5, .25, .5, /* head 1 */ 2, 1.5, 1, .5, .25, .5};  // h2o sums: 4, 3, 2, 1, .5, 1
  BOOST_TEST(prefill_cut(with("criticalkv:press=h2o,press.recent=1"), 4, 2, mass, &f) == (Positions{0, 1, 3, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("h2o:recent=1"), 4, 2, mass, &f) == (Positions{0, 1, 2, 5}), boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("criticalkv:press=h2o,press.recent=1,first=0%"), 4, 2, mass, &f) == (Positions{1, 2, 3, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("criticalkv:press=h2o,press.recent=1"), 7, 2, mass, &f) == (Positions{0, 1, 2, 3, 4, 5}),
             boost::test_tools::per_element());
  const PolicySettings d = policy_preset("criticalkv");  // kvpress: CriticalKVPress(SnapKVPress()), first_stage_ratio .5
  BOOST_TEST((d.first_percent == 50 && d.inner.size() == 1 && d.inner[0].preset == "snapkv"));
  BOOST_TEST(feature_needs({d}).output_norm);
}

// adakv wrapping h2o (sinks 0, recent 1), two heads, P = 6, K = 4: 0..4 evictable, 2 go, k = 3.
// (a) Head masses h0: 5, 4, 3, 0, 0, 1 and h1: 0, 0, 0, 1, 2, 1. alpha 0: each token by its best
// head: 5, 4, 3, 1, 2 -> 3 and 4 go: {0, 1, 2, 5}. alpha 50 %: each head's floor(1.5) = 1 best is
// safe: h0's 0, h1's 4; the rest by their best head: 1: 4, 2: 3, 3: 1 -> 3 and 2 go: {0, 1, 4, 5}
// (head 1 keeps its token). The default alpha 20 % gives floor(.6) = 0 safe: as alpha 0.
// (b) h1: 0, 0, 2.5, 3.5, 2, 1 (h0 as before): best head 5, 4, 3, 3.5, 2 -> 4 and 2 go:
// {0, 1, 3, 5}; h2o's sum over heads (5, 4, 5.5, 3.5, 2) keeps 2 instead: {0, 1, 2, 5}.
BOOST_AUTO_TEST_CASE(adakv_union_of_head_choices) {
  const std::vector<double> a = {5, 4, 3, 0, 0, 1, /* head 1 */ 0, 0, 0, 1, 2, 1};
  BOOST_TEST(prefill_cut(with("adakv:press=h2o,press.recent=1,alpha=0%"), 4, 2, a) == (Positions{0, 1, 2, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("adakv:press=h2o,press.recent=1,alpha=50%"), 4, 2, a) == (Positions{0, 1, 4, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("adakv:press=h2o,press.recent=1"), 4, 2, a) == (Positions{0, 1, 2, 5}),
             boost::test_tools::per_element());
  const std::vector<double> b = {5, 4, 3, 0, 0, 1, /* head 1 */ 0, 0, 2.5, 3.5, 2, 1};
  BOOST_TEST(prefill_cut(with("adakv:press=h2o,press.recent=1,alpha=0%"), 4, 2, b) == (Positions{0, 1, 3, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("h2o:recent=1"), 4, 2, b) == (Positions{0, 1, 2, 5}), boost::test_tools::per_element());
  BOOST_TEST(prefill_cut(with("adakv:press=h2o,press.recent=1"), 6, 2, b) == (Positions{0, 1, 2, 3, 4, 5}),
             boost::test_tools::per_element());
  const PolicySettings d = policy_preset("adakv");  // kvpress: AdaKVPress(SnapKVPress()), alpha_safeguard .20
  BOOST_TEST((d.alpha_percent == 20 && d.inner.size() == 1 && d.inner[0].preset == "snapkv"));
}

// A wrapper at its neutral setting is its inner press, step by step (its manager evicts what the
// wrapper chose, and the inner press's tie order decides what the wrapper leaves tied): chunks of
// one token, stage 1 for every kept token, no safeguard on one head (the best head is the head).
// The inner press: snapkv (window 2, max-pool 3), worked by hand in six_tokens_snapkv_maxpool —
// its prefill cut is a pooled tie (.75, .75) that only its secondary score breaks.
BOOST_AUTO_TEST_CASE(wrappers_at_their_neutral_settings_are_the_inner_press) {
  for (const char* s : {"chunkkv:press=snapkv,press.window=2,press.pool=max3,chunk=1",
                        "criticalkv:press=snapkv,press.window=2,press.pool=max3,first=100%",
                        "adakv:press=snapkv,press.window=2,press.pool=max3,alpha=0%"}) {
    BOOST_TEST_CONTEXT(s) {
      TokenFeatures f;  // criticalkv reads the output norms; stage 1 keeps every kept token whatever they are
      f.heads = 1;
      f.tokens = 6;
      f.output_norm = {9, 1, 9, 1, 9, 1};
      check(drive(with(s), 3, {kW}, kMass, &f), {0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, {2}, {0});
    }
  }
}

// The wrappers' syntax (docs/decode.md §2.1): press=NAME names the one inner press, a scorer
// (the `press` row's choices); press.KEY=VALUE is the inner press's own setting, after press=.
// Everything else is one error line naming what was given.
BOOST_AUTO_TEST_CASE(wrapper_settings) {
  const PolicySettings s = with("chunkkv:press=knorm,press.sinks=2,press.recent=3,chunk=5");
  BOOST_TEST(s.label == "chunkkv:press=knorm,press.sinks=2,press.recent=3,chunk=5");
  BOOST_TEST((s.inner.at(0).preset == "knorm" && s.inner[0].sinks == 2 && s.inner[0].recent == 3));
  BOOST_TEST((s.sinks == 2 && s.recent == 3 && protected_tokens(s, 10) == 5));  // the inner press's protected set
  const PolicySettings w = with("adakv:press.window=8");                      // the default inner press's setting
  BOOST_TEST((w.inner.at(0).window == 8 && policy_window_is_recent(w) && protected_tokens(w, 10) == 8));
  BOOST_TEST(policy_observation_window(w) == 8);
  BOOST_TEST(parse_policy_list("chunkkv,chunkkv:press=tova,criticalkv,adakv").size() == 4u);
  // the `press` choices are exactly the presets a wrapper can drive: each makes a manager and cuts
  std::string choices;
  for (const PolicySettingDomain& d : policy_setting_domains())
    if (std::string(d.key) == "press") choices = std::string("|") + d.form + "|";
  BOOST_TEST(!choices.empty());
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 160;
  for (std::vector<double>* v : {&f.key_norm, &f.value_norm, &f.output_norm, &f.expected_attention, &f.key_diff}) v->assign(160, 1.0);
  for (const std::string& name : policy_preset_names()) {
    BOOST_TEST_CONTEXT(name) {
      const bool listed = choices.find("|" + name + "|") != std::string::npos;
      const bool wrapper = name == "chunkkv" || name == "criticalkv" || name == "adakv";
      // (leverage, cur, lagkv and kvzip, added beside the wrappers, are not yet inner presses: their
      // managers give no per-head scores to adakv, or read features a wrapper does not ask for;
      // docs/decode.md §2.1)
      const bool not_yet = name == "leverage" || name == "cur" || name == "lagkv" || name == "kvzip";
      BOOST_TEST(listed == !(wrapper || not_yet || name == "full" || name == "oracle" || name == "random" ||
                             name == "pyramidkv"));
      for (const char* outer : {"chunkkv", "criticalkv", "adakv"}) {
        std::string what;
        try {
          const PolicySettings p = with(std::string(outer) + ":press=" + name);
          std::unique_ptr<CacheManager> m = make_cache_manager(p, 100, PolicyContext{1, 128, 160, &f});
          std::vector<std::vector<double>> rows;
          rows.reserve(128);
          m->read_prompt(std::vector<double>(128, 1.0), [&](int64_t q) -> std::span<const double> {
            rows.emplace_back(static_cast<size_t>(q + 1), 1.0 / static_cast<double>(q + 1));
            return rows.back();
          });
          BOOST_TEST(m->cache().size() == 100u);
        } catch (const Error& e) {
          what = e.what();
        }
        BOOST_TEST(what.empty() == listed, outer << ":press=" << name << ": " << what);
        if (!listed) BOOST_TEST((what.find("press=" + name) != std::string::npos && what.find('\n') == std::string::npos), what);
      }
    }
  }
  for (const char* bad : {"chunkkv:press=", "chunkkv:press=lru", "chunkkv:press=snapkv,press=knorm",
                          "adakv:press=knorm,press=knorm", "chunkkv:press.window=8,press=knorm", "chunkkv:press.chunk=3",
                          "chunkkv:press.window=0", "chunkkv:press=knorm,press.window=8", "chunkkv:chunk=0",
                          "adakv:alpha=20", "adakv:alpha=101%", "criticalkv:first=0.5", "criticalkv:chunk=3",
                          "chunkkv:press.sinks=1,press.sinks=2", "h2o:press=knorm", "h2o:press.sinks=1"}) {
    BOOST_TEST_CONTEXT(bad) {
      std::string what;
      try {
        parse_policy_list(bad);
      } catch (const Error& e) {
        what = e.what();
      }
      BOOST_TEST(!what.empty(), "accepted");
      BOOST_TEST(what.find('\n') == std::string::npos, what);
    }
  }
}

// The prefill cut and decode follow one tie rule: on equal scores the older token goes.
// Prefill mass 2, .5, .5, .6 (sinks 1, recent 1): 1 and 2 tie -> 1 goes, 2 stays (the old
// prefill cut, h2o_select, kept the older one instead).
BOOST_AUTO_TEST_CASE(tie_rule_prefill_keeps_the_newer) {
  const Trace t = drive(with("h2o:sinks=1,recent=1"), 3, {kW}, {2.0, 0.5, 0.5, 0.6});
  BOOST_TEST(t.prefill_kept == (Positions{0, 2, 3}), boost::test_tools::per_element());
}

// Head aggregation, two heads, tova (sinks 1, recent 1) at the prefill. The last prompt
// query gives head 0: 0, .375, .625, 0 and head 1: .5625, .375, .0625, 0.
//   sum:  1: .75,  2: .6875 -> 2 goes;  mean: the same order -> 2 goes;
//   max:  1: .375, 2: .625  -> 1 goes (head 0 needs token 2).
BOOST_AUTO_TEST_CASE(head_aggregation_sum_max_mean) {
  Table h0 = kW, h1 = kW;
  h0[3] = {0, 3, 5, 0};   // /8: 0, .375, .625, 0
  h1[3] = {9, 6, 1, 0};   // /16: .5625, .375, .0625, 0
  BOOST_TEST(drive(with("tova:sinks=1,recent=1,heads=sum"), 3, {h0, h1}).prefill_kept == (Positions{0, 1, 3}),
             boost::test_tools::per_element());
  BOOST_TEST(drive(with("tova:sinks=1,recent=1,heads=mean"), 3, {h0, h1}).prefill_kept == (Positions{0, 1, 3}),
             boost::test_tools::per_element());
  BOOST_TEST(drive(with("tova:sinks=1,recent=1,heads=max"), 3, {h0, h1}).prefill_kept == (Positions{0, 2, 3}),
             boost::test_tools::per_element());
}

// Every policy holds at most K tokens after every step, the prefill included (snapkv's
// observation window counts; the old snapkv grew by one token per step).
BOOST_AUTO_TEST_CASE(every_policy_holds_its_budget) {
  TokenFeatures f;
  f.heads = 1;
  f.tokens = 6;
  f.key_norm = {3, 1, 2, 4, 1.5, 5};
  f.expected_attention = {.5, .1, .2, .2, .3, .4};
  f.value_norm = f.output_norm = {1, 2, 1, 1, 4, 1};
  f.key_diff = {-.9, .2, -.1, .5, 0, -.3};
  f.leverage = {.3, -1.2, .8, -.1, .5, -.4};
  f.lagkv = {.5, 0, 0, .5, 0, .5};
  f.reconstruction = {.3, .1, .4, .2, 0, 0};
  for (const std::string& name : policy_preset_names()) {
    if (name == "full") continue;
    PolicySettings s = policy_preset(name);
    const std::vector<std::string> keys = policy_setting_keys(s);
    for (const char* key : {"sinks", "recent"})
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) apply_policy_setting(s, key, key[0] == 's' ? "0" : "1");
    if (std::find(keys.begin(), keys.end(), "window") != keys.end()) apply_policy_setting(s, "window", "2");
    if (!s.inner.empty()) {  // a wrapper: its inner press's settings
      const std::vector<std::string> inner = policy_setting_keys(s.inner[0]);
      for (const char* key : {"sinks", "recent"})
        if (std::find(inner.begin(), inner.end(), key) != inner.end())
          apply_policy_setting(s, std::string("press.") + key, key[0] == 's' ? "0" : "1");
      if (std::find(inner.begin(), inner.end(), "window") != inner.end()) apply_policy_setting(s, "press.window", "2");
    }
    BOOST_TEST_CONTEXT(s.label) {
      const Trace t = drive(s, 3, {kW}, kMass, &f);
      BOOST_TEST(t.prefill_kept.size() <= 3u);
      BOOST_TEST(t.held0.size() <= 3u);
      BOOST_TEST(t.held1.size() <= 3u);
      BOOST_TEST(t.attended0.size() <= 4u);
      BOOST_TEST(t.attended1.size() <= 4u);
    }
  }
}

// PyramidKV's budgets, as kvpress's get_layer_budget: 5 layers, mean K = 100, window 10,
// beta 4, prompt 1000: min = 25, max = 175; steps (175 - 25)/4 = 37.5 ->
// 175, 137.5 -> 138 (round half to even, as Python's round), 100, 62.5 -> 62, 25.
// A prompt of 150 clamps max to P - w = 140, min = 200 - 140 = 60: 140, 120, 100, 80, 60.
// beta 20 with window 64: min = 5 < 64, infeasible -> K on every layer (SnapKV's budget).
BOOST_AUTO_TEST_CASE(pyramid_budgets) {
  const std::vector<int64_t> a = {175, 138, 100, 62, 25}, b = {140, 120, 100, 80, 60};
  for (int64_t l = 0; l < 5; ++l) {
    BOOST_TEST(pyramid_budget(l, 5, 100, 10, 4, 1000) == a[static_cast<size_t>(l)]);
    BOOST_TEST(pyramid_budget(l, 5, 100, 10, 4, 150) == b[static_cast<size_t>(l)]);
    BOOST_TEST(pyramid_budget(l, 5, 100, 64, 20, 1000) == 100);
  }
  BOOST_TEST(pyramid_budget(0, 1, 100, 10, 4, 1000) == 100);
  BOOST_CHECK_THROW(pyramid_budget(5, 5, 100, 10, 4, 1000), std::exception);
}

// --policy: presets, per-policy settings, the same policy at two settings, bad items.
BOOST_AUTO_TEST_CASE(policy_list_syntax) {
  const std::vector<PolicySettings> p =
      parse_policy_list("h2o:sinks=4,recent=32,tova:sinks=0,recent=1,snapkv:window=64,pool=avg5,snapkv,h2o");
  BOOST_REQUIRE(p.size() == 5u);
  BOOST_TEST(p[0].label == "h2o:sinks=4,recent=32");
  BOOST_TEST(p[0].sinks == 4);
  BOOST_TEST(p[0].recent == 32);
  BOOST_TEST(p[0].recent_percent == 0);
  BOOST_TEST(p[1].label == "tova:sinks=0,recent=1");
  BOOST_TEST(p[2].window == 64);
  BOOST_TEST(p[3].label == "snapkv");
  BOOST_TEST(p[4].label == "h2o");
  BOOST_TEST(p[4].recent_percent == 50);  // the paper's heavy_ratio = recent_ratio
  BOOST_TEST(recent_tokens(p[4], 100) == 50);
  BOOST_TEST(parse_policy_list("all").size() == policy_preset_names().size());
  for (const char* bad : {"lru", "h2o:window=3", "h2o,h2o", "sinks=3", "h2o:heads=median", "snapkv:pool=avg4",
                          "h2o,,tova", "h2o:recent=0", "h2o:recent=100%"})
    BOOST_CHECK_THROW(parse_policy_list(bad), std::exception);
  // a budget that cannot hold what a policy protects
  BOOST_CHECK_THROW(make_cache_manager(with("h2o:sinks=2,recent=1"), 3, PolicyContext{1, 4, 6, nullptr}), std::exception);
}

// The registry is the one list (src/policies/registry.def, docs/decode.md §2.3): its order is
// the documented one (policy.hpp, the definitions table of docs/decode.md §2.2, registry.def's
// lines), every preset's name round-trips through --policy, and what decode and eval ask of a
// policy is answered by its entry: the full cache, a budget per layer, full attention, its policy.
BOOST_AUTO_TEST_CASE(registry_is_the_one_list) {
  const std::vector<std::string> documented = {
      "full",  "h2o",  "h2o-normalized",     "tova",         "streaming",   "snapkv",  "snapkv-maxpool", "pyramidkv",
      "knorm", "expected-attention", "scissorhands", "value-aware", "keydiff", "leverage", "cur", "lagkv", "chunkkv",
      "criticalkv", "adakv", "random", "kvzip", "oracle"};
  BOOST_TEST(policy_preset_names() == documented, boost::test_tools::per_element());
  const std::string root = test::data_dir() + "/../..";
  // the first run of lines of a file that start with `open`, each up to `close`: registry.def's
  // names, the definitions table's presets (its first column)
  const auto names_in = [](const std::string& path, const std::string& open, const std::string& close) {
    std::ifstream f(path);
    BOOST_REQUIRE_MESSAGE(f.good(), "cannot read " << path);
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) {
      if (line.rfind(open, 0) == 0) out.push_back(line.substr(open.size(), line.find(close, open.size()) - open.size()));
      else if (!out.empty()) break;
    }
    return out;
  };
  std::vector<std::string> def = names_in(root + "/src/policies/registry.def", "MLA_POLICY(", ")");
  for (std::string& n : def) std::replace(n.begin(), n.end(), '_', '-');
  BOOST_TEST(def == documented, boost::test_tools::per_element());
  BOOST_TEST(names_in(root + "/docs/decode.md", "| `", "`") == documented, boost::test_tools::per_element());

  std::vector<std::string> all;
  for (const PolicySettings& s : parse_policy_list("all")) all.push_back(s.label);
  BOOST_TEST(all == documented, boost::test_tools::per_element());
  TokenFeatures features;  // what a manager of every preset may read: 1 head, 160 tokens
  features.heads = 1;
  features.tokens = 160;
  for (std::vector<double>* v : {&features.key_norm, &features.value_norm, &features.output_norm,
                                 &features.expected_attention, &features.key_diff, &features.lagkv, &features.reconstruction})
    v->assign(160, 1.0);
  features.leverage.assign(160, 1.0);
  for (const std::string& name : documented) {
    BOOST_TEST_CONTEXT(name) {
      const PolicySettings s = policy_preset(name);
      BOOST_TEST(s.preset == name);
      BOOST_TEST(s.label == name);
      BOOST_TEST(parse_policy_list(name).at(0).label == name);
      BOOST_TEST(std::string(policy_kind_name(s)) == (name == "snapkv-maxpool" ? "snapkv" : name));
      BOOST_TEST(policy_is_full_cache(s) == (name == "full"));
      BOOST_TEST(policy_needs_full_attention(s) == (name == "oracle"));
      BOOST_TEST(policy_budget_depends_on_layer(s) == (name == "pyramidkv"));
      BOOST_TEST(policy_protects_nothing(s) == (name == "full" || name == "oracle"));
      if (name != "full") BOOST_TEST(make_cache_manager(s, 100, PolicyContext{1, 128, 160, &features})->needs_full_attention() ==
                                     (name == "oracle"));
    }
  }
  PolicySettings unknown;
  unknown.preset = "lru";
  BOOST_CHECK_THROW(policy_is_full_cache(unknown), std::exception);
  BOOST_TEST(policy_is_full_cache(PolicySettings{}));  // the default is the full cache
}

// Issue 46, fault 3: expected-attention:future had no upper bound (10^12 hung decode for hours).
// Every setting of every policy has a domain, in one table (policy_setting_domains) that
// apply_policy_setting checks, and docs/decode.md lists each row. Walked here at its bounds ± 1:
// inside accepted, outside refused with one line naming what was given.
BOOST_AUTO_TEST_CASE(every_setting_is_checked_at_its_bounds) {
  const std::string doc = test::read_text(test::data_dir() + "/../../docs/decode.md");
  size_t walked = 0;
  for (const std::string& name : policy_preset_names()) {
    for (const std::string& key : policy_setting_keys(policy_preset(name))) {
      bool has_domain = false;
      for (const PolicySettingDomain& d : policy_setting_domains()) {
        if (key != d.key) continue;
        has_domain = true;
        const std::string form = d.form;
        std::vector<std::string> inside, outside;
        const auto n = [](int64_t v) { return std::to_string(v); };
        if (form == "N" || form == "N%") {
          const std::string pct = form == "N%" ? "%" : "";
          inside = {n(d.lo) + pct, n(d.hi) + pct};
          outside = {n(d.lo - 1) + pct, n(d.hi + 1) + pct};
        } else if (form == "avgN|maxN|none") {
          const int64_t top = d.hi % 2 ? d.hi : d.hi - 1;  // the largest odd width
          inside = {"avg" + n(d.lo), "max" + n(d.lo), "avg" + n(top), "max" + n(top), "none"};
          outside = {"avg" + n(d.lo - 1), "max" + n(top + 1), "avg" + n(top + 2), "mean3"};
        } else {
          std::string alternatives = form;
          for (size_t at = 0;;) {
            const size_t bar = alternatives.find('|', at);
            inside.push_back(alternatives.substr(at, bar - at));
            if (bar == std::string::npos) break;
            at = bar + 1;
          }
          outside = {"", inside.front() + "x", "2"};
        }
        for (const std::string& v : inside) {
          BOOST_TEST_CONTEXT(name << ":" << key << "=" << v) {
            std::vector<PolicySettings> p;
            BOOST_CHECK_NO_THROW(p = parse_policy_list(name + ":" + key + "=" + v));
            if (!p.empty()) BOOST_TEST(p.front().label == name + ":" + key + "=" + v);
          }
          ++walked;
        }
        for (const std::string& v : outside) {
          BOOST_TEST_CONTEXT(name << ":" << key << "=" << v) {
            std::string what;
            try {
              parse_policy_list(name + ":" + key + "=" + v);
            } catch (const Error& e) {
              what = e.what();
            }
            BOOST_TEST(!what.empty(), "accepted");
            BOOST_TEST(what.find('\n') == std::string::npos, what);
            BOOST_TEST(what.find(key + "=" + v) != std::string::npos, what);
          }
          ++walked;
        }
        // the row of docs/decode.md's settings table
        std::string shown = form;
        for (size_t at = 0; (at = shown.find('|', at)) != std::string::npos; at += 2) shown.insert(at, "\\");
        const bool integer = form == "N" || form == "N%" || form == "avgN|maxN|none";
        const std::string row = "| `" + key + "=" + shown + "` | " + (integer ? n(d.lo) + " … " + n(d.hi) : "—") + " |";
        BOOST_TEST(doc.find(row) != std::string::npos, "docs/decode.md has no row " << row);
      }
      BOOST_TEST(has_domain, name << ": setting '" << key << "' has no domain");
    }
  }
  BOOST_TEST(walked > 150u);
  // the bound of the issue: future
  BOOST_CHECK_THROW(parse_policy_list("expected-attention:future=1099511627776"), Error);
  BOOST_TEST(parse_policy_list("expected-attention:future=10000000").front().future == kPolicyFutureMax);
}

BOOST_AUTO_TEST_SUITE_END()
