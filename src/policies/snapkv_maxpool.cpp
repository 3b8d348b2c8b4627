// src/policies/snapkv_maxpool.cpp — `snapkv-maxpool`: SnapKV (snapkv.cpp, its score and manager)
// at the settings of SnapKV's LongBench configurations (`ablation_c*_w32_k7_maxpool.json`):
//
//   Settings: window 32, pool max7; heads=mean (kvpress); the window protected.
//
// Reports name its policy "snapkv" (policy_kind_name).
#include "src/policies/policy_entry.hpp"

namespace mla::policies {

PolicyEntry snapkv_maxpool_entry() {
  PolicyEntry e = snapkv_entry();
  e.name = "snapkv-maxpool";
  e.kind = "snapkv";
  e.settings.window = 32;
  e.settings.pool = Pooling::Max;
  e.settings.pool_width = 7;
  return e;
}

}  // namespace mla::policies
