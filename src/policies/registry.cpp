// src/policies/registry.cpp — every preset, in the order `--policy all` runs them, and what is
// looked up by a policy's kind. One line per preset: adding a policy adds its line here.
#include <algorithm>
#include <string>

#include "mla/error.hpp"
#include "src/policies/policy_entry.hpp"

namespace mla {
namespace policies {

void bad(const std::string& what) { fail(ErrorKind::InvalidArgument, what); }

PolicySettings base_settings(PolicyKind kind, int64_t sinks, int64_t recent, HeadAggregation heads) {
  PolicySettings s;
  s.kind = kind;
  s.sinks = sinks;
  s.recent = recent;
  s.heads = heads;
  return s;
}

namespace {

const std::vector<PolicyEntry>& registry() {
  static const std::vector<PolicyEntry> all = [] {
    std::vector<PolicyEntry> r = {
        full_entry(),
        h2o_entry(),
        h2o_normalized_entry(),
        tova_entry(),
        streaming_entry(),
        snapkv_entry(),
        snapkv_maxpool_entry(),
        pyramidkv_entry(),
        knorm_entry(),
        expected_attention_entry(),
        scissorhands_entry(),
        value_aware_entry(),
        keydiff_entry(),
        random_entry(),
        oracle_entry(),
    };
    for (PolicyEntry& e : r) {
      e.settings.preset = e.name;
      e.settings.label = e.name;
    }
    return r;
  }();
  return all;
}

// The first preset of a kind (its name is the kind's name).
const PolicyEntry& entry_of(PolicyKind k) {
  for (const PolicyEntry& e : registry())
    if (e.settings.kind == k) return e;
  bad("unknown policy kind");
}

}  // namespace
}  // namespace policies

using policies::bad;
using policies::entry_of;
using policies::PolicyEntry;
using policies::registry;

const char* policy_kind_name(PolicyKind k) { return entry_of(k).name; }

const std::vector<std::string>& policy_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const PolicyEntry& e : registry()) v.push_back(e.name);
    return v;
  }();
  return names;
}

PolicySettings policy_preset(std::string_view name) {
  std::string known;
  for (const PolicyEntry& e : registry()) {
    if (name == e.name) return e.settings;
    known += std::string(known.empty() ? "" : ", ") + e.name;
  }
  bad("unknown policy '" + std::string(name) + "' (known: " + known + ", all)");
}

std::vector<std::string> policy_setting_keys(PolicyKind k) { return entry_of(k).keys; }

bool policy_window_is_recent(PolicyKind k) { return entry_of(k).window_is_recent; }

bool policy_protects_nothing(PolicyKind k) { return entry_of(k).protects_nothing; }

bool policy_is_full_cache(PolicyKind k) { return entry_of(k).full_cache; }

bool policy_budget_depends_on_layer(PolicyKind k) { return entry_of(k).layer_budget != nullptr; }

std::vector<PolicyRun> policy_runs(const std::vector<int64_t>& budgets, const std::vector<PolicySettings>& policies) {
  std::vector<PolicyRun> runs;
  for (int64_t K : budgets)
    for (size_t p = 0; p < policies.size(); ++p)
      if (!policy_is_full_cache(policies[p].kind)) runs.push_back(PolicyRun{p, K});
  return runs;
}

int64_t evicting_policy_count(const std::vector<PolicySettings>& policies) {
  return static_cast<int64_t>(std::count_if(policies.begin(), policies.end(),
                                            [](const PolicySettings& s) { return !policy_is_full_cache(s.kind); }));
}

int64_t policy_observation_window(const PolicySettings& s) {
  const PolicyEntry& e = entry_of(s.kind);
  return e.observation_window ? e.observation_window(s) : 0;
}

int64_t held_prompt_queries(const std::vector<PolicySettings>& policies, int64_t prompt_len) {
  int64_t w = 0;
  for (const PolicySettings& s : policies) w = std::max(w, policy_observation_window(s));
  return std::min(w, prompt_len);
}

void add_feature_needs(const PolicySettings& s, FeatureNeeds& needs) {
  if (const PolicyEntry& e = entry_of(s.kind); e.needs) e.needs(s, needs);
}

int64_t layer_budget(const PolicySettings& s, int64_t K, int64_t layer, int64_t num_layers, int64_t P) {
  const PolicyEntry& e = entry_of(s.kind);
  return e.layer_budget ? e.layer_budget(s, K, layer, num_layers, P) : K;
}

std::unique_ptr<CacheManager> make_cache_manager(const PolicySettings& s, int64_t K, const PolicyContext& c) {
  const PolicyEntry& e = entry_of(s.kind);
  if (s.kind != PolicyKind::Full && K < 1) bad("--cache-budget " + std::to_string(K) + " must be >= 1");
  if (e.has_window && s.window < 1)
    bad("--policy " + s.label + ": window must be >= 1");
  return e.make(s, K, c);
}

}  // namespace mla
