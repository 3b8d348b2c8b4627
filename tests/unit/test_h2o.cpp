// tests/unit/test_h2o.cpp — suite h2o: the standalone H2O selector (include/mla/h2o_selector.hpp).
//
// Every expected decision below is written out by hand from the rule in h2o.hpp
// (sinks first, then the recent window minus sinks, then the top `budget` of the middle by
// score with ties to the lower index); none is produced by the code under test.
// Category letters in the expectations: S = sink, R = recent, H = heavy, E = evicted.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"

namespace {

using mla::H2ODecision;
using mla::H2OOptions;
using mla::TokenCategory;

std::string letters(const H2ODecision& d) {
  std::string s;
  for (TokenCategory c : d.category) {
    switch (c) {
      case TokenCategory::Sink: s += 'S'; break;
      case TokenCategory::Recent: s += 'R'; break;
      case TokenCategory::Heavy: s += 'H'; break;
      case TokenCategory::Evicted: s += 'E'; break;
    }
  }
  return s;
}

H2ODecision select(const std::vector<double>& scores, int64_t sinks, int64_t recent, int64_t budget) {
  return mla::h2o_select(scores, H2OOptions{sinks, recent, budget});
}

// Runs `f`, expects an mla::Error of `kind` whose message contains every word in `words`.
template <class F>
void expect_error(F f, mla::ErrorKind kind, const std::vector<std::string>& words) {
  try {
    f();
    BOOST_ERROR("expected an mla::Error");
  } catch (const mla::Error& e) {
    BOOST_TEST(static_cast<int>(e.kind()) == static_cast<int>(kind));
    for (const auto& w : words) BOOST_TEST(std::string(e.what()).find(w) != std::string::npos, "'" << w << "' in '" << e.what() << "'");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(h2o)

BOOST_AUTO_TEST_CASE(category_names) {
  BOOST_TEST(std::string(mla::category_name(TokenCategory::Sink)) == "sink");
  BOOST_TEST(std::string(mla::category_name(TokenCategory::Recent)) == "recent");
  BOOST_TEST(std::string(mla::category_name(TokenCategory::Heavy)) == "heavy");
  BOOST_TEST(std::string(mla::category_name(TokenCategory::Evicted)) == "evicted");
}

BOOST_AUTO_TEST_CASE(hand_made_vector) {
  // S = 12, 2 sinks, 3 recent, budget 3: middle = indices 2..8.
  // middle scores: 2:0.5 3:9 4:1 5:7 6:7 7:0.25 8:3 -> top 3 = 3 (9), 5 (7), 6 (7).
  const std::vector<double> s = {100, 0, 0.5, 9, 1, 7, 7, 0.25, 3, 50, 0, 1};
  const H2ODecision d = select(s, 2, 3, 3);
  BOOST_TEST(letters(d) == "SSEHEHHEERRR");
  BOOST_TEST(d.n_sink == 2);
  BOOST_TEST(d.n_recent == 3);
  BOOST_TEST(d.n_heavy == 3);
  BOOST_TEST(d.n_evicted == 4);
  BOOST_TEST(d.kept() == 8);
  BOOST_TEST(d.kept_indices() == (std::vector<int64_t>{0, 1, 3, 5, 6, 9, 10, 11}), boost::test_tools::per_element());
  BOOST_TEST(d.is_kept(3));
  BOOST_TEST(!d.is_kept(2));
}

BOOST_AUTO_TEST_CASE(demo_configuration_counts) {
  // The published Kimi K2.6 layer-0 H2O demo: 256 tokens, 4 sinks, 32 recent, budget 64 -> 100 kept, 156 evicted,
  // whatever the scores are (distinct values here: 256 - i so the heavy set is 4..67).
  std::vector<double> s(256);
  for (size_t i = 0; i < s.size(); ++i) s[i] = 256.0 - static_cast<double>(i);
  const H2ODecision d = select(s, 4, 32, 64);
  BOOST_TEST(d.kept() == 100);
  BOOST_TEST(d.n_sink == 4);
  BOOST_TEST(d.n_recent == 32);
  BOOST_TEST(d.n_heavy == 64);
  BOOST_TEST(d.n_evicted == 156);
  for (int64_t i = 4; i < 68; ++i) BOOST_TEST((d.category[static_cast<size_t>(i)] == TokenCategory::Heavy), "token " << i);
  for (int64_t i = 68; i < 224; ++i) BOOST_TEST((d.category[static_cast<size_t>(i)] == TokenCategory::Evicted), "token " << i);
}

BOOST_AUTO_TEST_CASE(sequence_shorter_than_windows) {
  // S = 3 < sinks: every token is a sink, nothing is recent or heavy.
  BOOST_TEST(letters(select({1, 2, 3}, 4, 32, 64)) == "SSS");
  // S = 5, sinks 4, recent 32: the recent window covers everything but only token 4 is not a sink.
  const H2ODecision d = select({1, 2, 3, 4, 5}, 4, 32, 64);
  BOOST_TEST(letters(d) == "SSSSR");
  BOOST_TEST(d.n_sink == 4);
  BOOST_TEST(d.n_recent == 1);
  BOOST_TEST(d.n_heavy == 0);
  BOOST_TEST(d.n_evicted == 0);
  // S = 0: an empty decision.
  const H2ODecision e = select({}, 4, 32, 64);
  BOOST_TEST(e.category.empty());
  BOOST_TEST(e.kept() == 0);
  BOOST_TEST(e.n_evicted == 0);
}

BOOST_AUTO_TEST_CASE(sinks_and_recent_overlap) {
  // S = 6, sinks 3, recent 4: windows overlap on index 2, which stays a sink.
  const H2ODecision d = select({0, 0, 0, 0, 0, 0}, 3, 4, 10);
  BOOST_TEST(letters(d) == "SSSRRR");
  BOOST_TEST(d.n_sink == 3);
  BOOST_TEST(d.n_recent == 3);
}

BOOST_AUTO_TEST_CASE(budget_zero) {
  const H2ODecision d = select({5, 9, 8, 7, 6, 1}, 1, 1, 0);
  BOOST_TEST(letters(d) == "SEEEER");
  BOOST_TEST(d.n_heavy == 0);
  BOOST_TEST(d.n_evicted == 4);
}

BOOST_AUTO_TEST_CASE(budget_larger_than_middle) {
  const H2ODecision d = select({5, 9, 8, 7, 6, 1}, 1, 1, 100);
  BOOST_TEST(letters(d) == "SHHHHR");
  BOOST_TEST(d.n_heavy == 4);
  BOOST_TEST(d.n_evicted == 0);
}

BOOST_AUTO_TEST_CASE(zero_windows) {
  // No sinks, no recent: pure top-k, ties to the lower index.
  BOOST_TEST(letters(select({1, 3, 2, 3, 0}, 0, 0, 2)) == "EHEHE");
  // Everything zero: everything evicted.
  BOOST_TEST(letters(select({1, 3, 2}, 0, 0, 0)) == "EEE");
  // Only a recent window.
  BOOST_TEST(letters(select({1, 3, 2}, 0, 2, 0)) == "ERR");
}

BOOST_AUTO_TEST_CASE(all_equal_scores_pick_lowest_indices) {
  const std::vector<double> s(10, 0.75);
  BOOST_TEST(letters(select(s, 1, 2, 3)) == "SHHHEEEERR");
}

BOOST_AUTO_TEST_CASE(ties_go_to_lower_index) {
  // middle (no windows): 0:2 1:5 2:2 3:5 4:2 5:1 -> budget 3 takes 1, 3 (5) then 0 (first 2).
  BOOST_TEST(letters(select({2, 5, 2, 5, 2, 1}, 0, 0, 3)) == "HHEHEE");
  // Zero scores are valid and rank last; ties among them still go to the lower index.
  BOOST_TEST(letters(select({0, 0, 1, 0}, 0, 0, 2)) == "HEHE");
}

BOOST_AUTO_TEST_CASE(sink_and_recent_scores_do_not_compete) {
  // The sink and recent tokens hold the largest scores; the heavy set is still chosen from the middle.
  BOOST_TEST(letters(select({99, 1, 2, 3, 99}, 1, 1, 1)) == "SEEHR");
}

BOOST_AUTO_TEST_CASE(deterministic) {
  std::vector<double> s(300);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<double>((i * 37) % 11);  // many ties
  const H2ODecision a = select(s, 4, 32, 64), b = select(s, 4, 32, 64);
  BOOST_TEST(letters(a) == letters(b));
  // Middle = [4, 268). s[i] = 4i mod 11 (37 = 3*11 + 4), so value 10 sits at i % 11 == 8,
  // value 9 at i % 11 == 5, value 8 at i % 11 == 2: 24 middle tokens each. Budget 64 takes
  // all 24 tens, all 24 nines and the 16 lowest-index eights (i = 13, 24, ..., 178).
  for (int64_t i = 4; i < 268; ++i) {
    const auto c = a.category[static_cast<size_t>(i)];
    const double v = s[static_cast<size_t>(i)];
    const bool heavy = v >= 9 || (v == 8 && i <= 178);
    BOOST_TEST((c == (heavy ? TokenCategory::Heavy : TokenCategory::Evicted)), "token " << i << " score " << v);
  }
  BOOST_TEST(a.n_heavy == 64);
}

BOOST_AUTO_TEST_CASE(rejects_nan_inf_negative_naming_the_index) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_error([&] { select({1, 2, nan, 3}, 0, 0, 1); }, mla::ErrorKind::InvalidValue, {"token 2", "NaN"});
  expect_error([&] { select({1, inf}, 0, 0, 1); }, mla::ErrorKind::InvalidValue, {"token 1", "infinite"});
  expect_error([&] { select({1, 2, 3, -0.5}, 0, 0, 1); }, mla::ErrorKind::InvalidValue, {"token 3", "negative", "-0.5"});
  // Invalid scores inside a window are rejected too: the scores are checked, not just the middle.
  expect_error([&] { select({nan, 2, 3}, 1, 1, 1); }, mla::ErrorKind::InvalidValue, {"token 0"});
  // Negative window sizes are argument errors.
  expect_error([&] { select({1}, -1, 0, 0); }, mla::ErrorKind::InvalidArgument, {"sinks"});
  expect_error([&] { select({1}, 0, -2, 0); }, mla::ErrorKind::InvalidArgument, {"recent"});
  expect_error([&] { select({1}, 0, 0, -3); }, mla::ErrorKind::InvalidArgument, {"budget"});
}

BOOST_AUTO_TEST_CASE(per_head) {
  // 2 heads x 5 tokens, 1 sink, 1 recent, budget 1: middle = tokens 1..3 of each head.
  const std::vector<double> hs = {
      0, 1, 5, 2, 0,   // head 0 -> heavy token 2
      0, 3, 3, 1, 0};  // head 1 -> tie 3/3 -> heavy token 1
  const auto d = mla::h2o_select_per_head(hs, 2, H2OOptions{1, 1, 1});
  BOOST_TEST(d.size() == 2u);
  BOOST_TEST(letters(d[0]) == "SEHER");
  BOOST_TEST(letters(d[1]) == "SHEER");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> bad = hs;
  bad[8] = nan;  // head 1, token 3
  expect_error([&] { mla::h2o_select_per_head(bad, 2, H2OOptions{1, 1, 1}); }, mla::ErrorKind::InvalidValue,
               {"head 1", "token 3"});
  expect_error([&] { mla::h2o_select_per_head(hs, 3, H2OOptions{1, 1, 1}); }, mla::ErrorKind::InvalidArgument, {"3 heads"});
  expect_error([&] { mla::h2o_select_per_head(hs, 0, H2OOptions{1, 1, 1}); }, mla::ErrorKind::InvalidArgument, {"n_heads"});
}

BOOST_AUTO_TEST_SUITE_END()
