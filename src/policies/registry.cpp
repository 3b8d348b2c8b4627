// src/policies/registry.cpp — the registry: registry.def's presets, in its order (`--policy all`),
// and everything asked of a policy, looked up by its preset in its entry. No policy is named here.
#include <algorithm>
#include <string>

#include "mla/error.hpp"
#include "src/policies/policy_entry.hpp"

namespace mla {
namespace policies {

void bad(const std::string& what) { fail(ErrorKind::InvalidArgument, what); }

PolicySettings base_settings(int64_t sinks, int64_t recent, HeadAggregation heads) {
  PolicySettings s;
  s.sinks = sinks;
  s.recent = recent;
  s.heads = heads;
  return s;
}

// every file's entry function (policy_entry.hpp)
#define MLA_POLICY(NAME) PolicyEntry NAME##_entry();
#include "src/policies/registry.def"
#undef MLA_POLICY

namespace {

// The entry of registry.def's line `file`, whose preset is `file` with '_' written '-' (a line
// and its file that disagree fail every lookup).
PolicyEntry registered(std::string file, PolicyEntry e) {
  std::replace(file.begin(), file.end(), '_', '-');
  if (file != e.name) bad("policy registry: src/policies/registry.def's line for " + file + " names preset " + e.name);
  if (e.kind == nullptr) e.kind = e.name;
  e.settings.preset = e.name;
  e.settings.label = e.name;
  return e;
}

const std::vector<PolicyEntry>& registry() {
  static const std::vector<PolicyEntry> all = {
#define MLA_POLICY(NAME) registered(#NAME, NAME##_entry()),
#include "src/policies/registry.def"
#undef MLA_POLICY
  };
  return all;
}

// The entry a policy's settings started from.
const PolicyEntry& entry_of(const PolicySettings& s) {
  for (const PolicyEntry& e : registry())
    if (s.preset == e.name) return e;
  bad("unknown policy preset '" + s.preset + "'");
}

}  // namespace
}  // namespace policies

using policies::bad;
using policies::entry_of;
using policies::PolicyEntry;
using policies::registry;

const char* policy_kind_name(const PolicySettings& s) { return entry_of(s).kind; }

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

std::vector<std::string> policy_setting_keys(const PolicySettings& s) { return entry_of(s).keys; }

bool policy_window_is_recent(const PolicySettings& s) {
  return s.inner.empty() ? entry_of(s).window_is_recent : policy_window_is_recent(s.inner.front());
}

bool policy_protects_nothing(const PolicySettings& s) { return entry_of(s).protects_nothing; }

bool policy_is_full_cache(const PolicySettings& s) { return entry_of(s).full_cache; }

bool policy_budget_depends_on_layer(const PolicySettings& s) { return entry_of(s).layer_budget != nullptr; }

bool policy_needs_full_attention(const PolicySettings& s) { return entry_of(s).needs_full_attention; }

std::vector<PolicyRun> policy_runs(const std::vector<int64_t>& budgets, const std::vector<PolicySettings>& policies) {
  std::vector<PolicyRun> runs;
  for (int64_t K : budgets)
    for (size_t p = 0; p < policies.size(); ++p)
      if (!policy_is_full_cache(policies[p])) runs.push_back(PolicyRun{p, K});
  return runs;
}

int64_t evicting_policy_count(const std::vector<PolicySettings>& policies) {
  return static_cast<int64_t>(std::count_if(policies.begin(), policies.end(),
                                            [](const PolicySettings& s) { return !policy_is_full_cache(s); }));
}

int64_t policy_observation_window(const PolicySettings& s) {
  const PolicyEntry& e = entry_of(s);
  return e.observation_window ? e.observation_window(s) : 0;
}

int64_t held_prompt_queries(const std::vector<PolicySettings>& policies, int64_t prompt_len) {
  int64_t w = 0;
  for (const PolicySettings& s : policies) w = std::max(w, policy_observation_window(s));
  return std::min(w, prompt_len);
}

void add_feature_needs(const PolicySettings& s, FeatureNeeds& needs) {
  if (const PolicyEntry& e = entry_of(s); e.needs) e.needs(s, needs);
}

int64_t layer_budget(const PolicySettings& s, int64_t K, int64_t layer, int64_t num_layers, int64_t P) {
  const PolicyEntry& e = entry_of(s);
  return e.layer_budget ? e.layer_budget(s, K, layer, num_layers, P) : K;
}

std::unique_ptr<CacheManager> make_cache_manager(const PolicySettings& s, int64_t K, const PolicyContext& c) {
  const PolicyEntry& e = entry_of(s);
  if (!e.full_cache && K < 1) bad("--cache-budget " + std::to_string(K) + " must be >= 1");
  if (e.has_window && s.window < 1)
    bad("--policy " + s.label + ": window must be >= 1");
  return e.make(s, K, c);
}

}  // namespace mla
