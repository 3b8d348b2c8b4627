// src/policies/settings.cpp — the `--policy` language (mla/policy.hpp): a list of presets with
// `key=value` settings, parsed into PolicySettings; the protected sets and the checks every run
// makes of its budgets and policies. No policy's arithmetic lives here.
#include <algorithm>
#include <limits>
#include <string>

#include "src/policies/policy_entry.hpp"

namespace mla {

using policies::bad;

namespace {

// The one table of the settings' domains (policy.hpp; docs/decode.md §2.1).
const std::vector<PolicySettingDomain> kDomains = {
    {"sinks", "N", 0, kPolicySettingMax},
    {"recent", "N", 1, kPolicySettingMax},
    {"recent", "N%", 1, 99},
    {"heads", "sum|max|mean"},
    {"window", "N", 1, kPolicySettingMax},
    {"pool", "avgN|maxN|none", 1, kPolicySettingMax},
    {"future", "N", 1, kPolicyFutureMax},
    {"vnorm", "0|1"},
    {"beta", "N", 1, kPolicySettingMax},
    {"seed", "N", 0, kPolicySettingMax},
    {"sketch", "N", 0, kPolicySketchMax},
    {"cur", "key|value|kv_avg|kv_product"},
    {"local", "N", 0, kPolicySettingMax},
    {"lag", "N", 1, kPolicySettingMax},
    // a wrapper's inner press: the presets whose entry is a scorer (policy_entry.hpp; a test checks the list)
    {"press", "h2o|h2o-normalized|tova|streaming|snapkv|snapkv-maxpool|knorm|expected-attention|scissorhands|value-aware|keydiff"},
    {"chunk", "N", 1, kPolicySettingMax},
    {"first", "N%", 0, 100},
    {"alpha", "N%", 0, 100},
};

const PolicySettingDomain& domain(std::string_view key, std::string_view form) {
  for (const PolicySettingDomain& d : kDomains)
    if (key == d.key && form == d.form) return d;
  bad("policy settings: no domain for " + std::string(key) + " (" + std::string(form) + ")");
}

// `digits` (the N of key=value, `shown`) as an integer within key's domain of form `form`.
int64_t parse_int(std::string_view key, std::string_view form, std::string_view digits, std::string_view shown) {
  const PolicySettingDomain& d = domain(key, form);
  int64_t out = 0;
  bool ok = !digits.empty() && digits.size() <= 18;  // <= kPolicySettingMax: never overflows
  for (char c : digits) {
    if (c < '0' || c > '9') ok = false;
    else out = out * 10 + (c - '0');
  }
  if (!ok || out < d.lo || out > d.hi)
    bad("--policy: " + std::string(key) + "=" + std::string(shown) + " is not " +
        (std::string_view(form) == "N" ? "an integer" : "of the form " + std::string(form) + " with N an integer") + " in [" +
        std::to_string(d.lo) + ", " + std::to_string(d.hi) + "]");
  return out;
}

// `value` as one of the choices of key's domain (form "a|b|c").
void check_choice(std::string_view key, std::string_view value) {
  for (const PolicySettingDomain& d : kDomains) {
    if (key != d.key) continue;
    std::string form = std::string("|") + d.form + "|";
    if (form.find("|" + std::string(value) + "|") != std::string::npos && !value.empty()) return;
    std::replace(form.begin(), form.end(), '|', ' ');
    bad("--policy: " + std::string(key) + "=" + std::string(value) + " is not one of:" + form.substr(0, form.size() - 1));
  }
  bad("policy settings: no domain for " + std::string(key));
}

}  // namespace

const std::vector<PolicySettingDomain>& policy_setting_domains() { return kDomains; }

const char* head_aggregation_name(HeadAggregation a) {
  return a == HeadAggregation::Sum ? "sum" : a == HeadAggregation::Max ? "max" : "mean";
}

namespace policies {

void mirror_inner_press(PolicySettings& s) {
  const PolicySettings& in = s.inner.at(0);
  s.sinks = in.sinks;
  s.recent = in.recent;
  s.recent_percent = in.recent_percent;
  s.window = in.window;
}

}  // namespace policies

namespace {

// `N%` (shown as given) within key's domain of that form; "N" alone is refused
int64_t parse_percent(const std::string& key, const std::string& v) {
  const bool pct = !v.empty() && v.back() == '%';
  return parse_int(key, "N%", pct ? std::string_view(v).substr(0, v.size() - 1) : std::string_view("not a share"), v);
}

}  // namespace

void apply_policy_setting(PolicySettings& s, std::string_view key, std::string_view value) {
  if (!s.inner.empty() && key.substr(0, 6) == "press.") {  // the inner press's own setting, checked by it
    apply_policy_setting(s.inner[0], key.substr(6), value);
    policies::mirror_inner_press(s);
    s.label += (s.label == s.preset ? ":" : ",") + std::string(key) + "=" + std::string(value);
    return;
  }
  const std::vector<std::string> keys = policy_setting_keys(s);
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    bad("--policy: '" + std::string(key) + "' is not a setting of " + s.preset + " (its settings: " +
        (list.empty() ? "none" : list) + ")");
  }
  const std::string k(key), v(value);
  // one value per key: h2o:sinks=4,sinks=8 is refused, as h2o,h2o is (the label holds what was set)
  if (const std::string set = s.label.substr(std::min(s.label.size(), s.preset.size()));
      set.find(":" + k + "=") != std::string::npos || set.find("," + k + "=") != std::string::npos)
    bad("--policy: '" + k + "' given twice for " + s.preset + " (" + s.label + "," + k + "=" + v + ")");
  if (k == "sinks") {
    s.sinks = parse_int(k, "N", v, v);
  } else if (k == "recent") {
    if (!v.empty() && v.back() == '%') {
      s.recent_percent = parse_int(k, "N%", std::string_view(v).substr(0, v.size() - 1), v);
    } else {
      s.recent = parse_int(k, "N", v, v);
      s.recent_percent = 0;
    }
  } else if (k == "heads") {
    check_choice(k, v);
    s.heads = v == "sum" ? HeadAggregation::Sum : v == "max" ? HeadAggregation::Max : HeadAggregation::Mean;
  } else if (k == "window") {
    s.window = parse_int(k, "N", v, v);
  } else if (k == "pool") {
    if (v == "none") {
      s.pool = Pooling::None;
      s.pool_width = 1;
    } else if (v.rfind("max", 0) == 0 || v.rfind("avg", 0) == 0) {
      s.pool = v[0] == 'm' ? Pooling::Max : Pooling::Avg;
      s.pool_width = parse_int(k, "avgN|maxN|none", std::string_view(v).substr(3), v);
      if (s.pool_width % 2 == 0) bad("--policy: pool=" + v + ": the pooling width must be odd (centred)");
    } else {
      bad("--policy: pool=" + v + " is not none, maxN or avgN (N odd, e.g. avg5)");
    }
  } else if (k == "future") {
    s.future = parse_int(k, "N", v, v);
  } else if (k == "vnorm") {
    check_choice(k, v);
    s.vnorm = v == "1";
  } else if (k == "beta") {
    s.beta = parse_int(k, "N", v, v);
  } else if (k == "seed") {
    s.seed = static_cast<uint64_t>(parse_int(k, "N", v, v));
  } else if (k == "sketch") {
    s.sketch = parse_int(k, "N", v, v);
  } else if (k == "cur") {
    check_choice(k, v);
    s.cur = v;
  } else if (k == "local") {
    s.local = parse_int(k, "N", v, v);
  } else if (k == "lag") {
    s.lag = parse_int(k, "N", v, v);
  } else if (k == "press") {
    if (s.label.find(":press.") != std::string::npos || s.label.find(",press.") != std::string::npos)
      bad("--policy: press=" + v + " comes after settings of " + s.preset + "'s inner press (" + s.label +
          "): name the press first");
    check_choice(k, v);
    s.inner = {policy_preset(v)};
    policies::mirror_inner_press(s);
  } else if (k == "chunk") {
    s.chunk = parse_int(k, "N", v, v);
  } else if (k == "first") {
    s.first_percent = parse_percent(k, v);
  } else if (k == "alpha") {
    s.alpha_percent = parse_percent(k, v);
  }
  s.label += (s.label == s.preset ? ":" : ",") + k + "=" + v;
}

std::vector<PolicySettings> parse_policy_list(std::string_view list) {
  std::vector<PolicySettings> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string_view item = list.substr(begin, end - begin);
    if (item.empty()) bad("--policy: empty item in '" + std::string(list) + "'");
    const size_t colon = item.find(':'), eq = item.find('=');
    if (eq != std::string_view::npos && (colon == std::string_view::npos || colon > eq)) {  // key=value of the last policy
      if (out.empty()) bad("--policy: '" + std::string(item) + "' comes before any policy name");
      apply_policy_setting(out.back(), item.substr(0, eq), item.substr(eq + 1));
    } else {
      const std::string_view name = item.substr(0, colon);
      if (name == "all") {
        if (colon != std::string_view::npos) bad("--policy: 'all' takes no settings");
        for (const std::string& p : policy_preset_names()) out.push_back(policy_preset(p));
      } else {
        out.push_back(policy_preset(name));
        if (colon != std::string_view::npos) {
          const std::string_view kv = item.substr(colon + 1);
          const size_t e = kv.find('=');
          if (e == std::string_view::npos) bad("--policy: '" + std::string(item) + "': expected name:key=value");
          apply_policy_setting(out.back(), kv.substr(0, e), kv.substr(e + 1));
        }
      }
    }
    begin = end + 1;
  }
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (out[i].label == out[j].label) bad("--policy: '" + out[i].label + "' given twice");
  return out;
}

int64_t recent_tokens(const PolicySettings& s, int64_t K) {
  if (policy_window_is_recent(s)) return s.window;
  // floor(K * pct / 100) without the product (K may be near 2^63): K = 100a + b
  if (s.recent_percent > 0) return std::max<int64_t>(1, K / 100 * s.recent_percent + K % 100 * s.recent_percent / 100);
  return s.recent;
}

void check_budgets_and_policies(const std::vector<int64_t>& budgets, const std::vector<PolicySettings>& policies) {
  if (budgets.empty()) bad("--cache-budget: no budget given");
  for (size_t i = 0; i < budgets.size(); ++i) {
    if (budgets[i] < 1) bad("--cache-budget " + std::to_string(budgets[i]) + " must be >= 1");
    if (i > 0 && budgets[i] <= budgets[i - 1])
      bad("--cache-budget: budgets must be strictly increasing (" + std::to_string(budgets[i - 1]) + " then " +
          std::to_string(budgets[i]) + ")");
  }
  if (policies.empty()) bad("--policy: no policy given");
  for (size_t i = 0; i < policies.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (policies[i].label == policies[j].label) bad("--policy: '" + policies[i].label + "' given twice");
}

int64_t protected_tokens(const PolicySettings& s, int64_t K) {
  if (policy_protects_nothing(s)) return 0;
  int64_t p = 0;  // sinks + recent, saturated at 2^63 - 1 (flags near 2^63 never wrap into a pass)
  if (__builtin_add_overflow(s.sinks, recent_tokens(s, K), &p)) return std::numeric_limits<int64_t>::max();
  return p;
}

void check_budget_holds(const PolicySettings& s, int64_t budget, int64_t layer_budget) {
  const int64_t p = protected_tokens(s, layer_budget);  // saturates: never wraps
  if (layer_budget > p) return;
  bad("--cache-budget " + std::to_string(budget) +
      (layer_budget != budget ? " (" + std::to_string(layer_budget) + " on this layer)" : "") + " must be > the " +
      std::to_string(p) + " tokens " + s.label + " never evicts (sinks " + std::to_string(s.sinks) +
      (policy_window_is_recent(s) ? " + observation window " : " + recent ") + std::to_string(recent_tokens(s, layer_budget)) +
      ")");
}

FeatureNeeds feature_needs(const std::vector<PolicySettings>& policies) {
  FeatureNeeds f;
  for (const PolicySettings& s : policies) add_feature_needs(s, f);
  return f;
}

}  // namespace mla
