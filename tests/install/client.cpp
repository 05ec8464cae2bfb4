// tests/install/client.cpp: the C++ client of the install test: the umbrella header in a C++17
// program (extern "C" linkage, no C-only constructs), the version, the runtime and its agents.
#include <hsamono/hsamono.h>

#include <cstdio>
#include <memory>
#include <string>

// the client's own short names, as in client.c: the headers must leave them free
using u64 = unsigned long long;
using f32 = double;

int main() {
  if (std::string(hm_version()) != HM_VERSION) {
    std::printf("FAIL library %s, headers %s\n", hm_version(), HM_VERSION);
    return 1;
  }
  std::printf("version %s\n", hm_version());
  hm_runtime *raw = nullptr;
  if (hm_status s = hm_runtime_open(nullptr, &raw)) {
    std::printf("FAIL hm_runtime_open: %s: %s\n", hm_status_name(s), hm_errmsg());
    return 1;
  }
  std::unique_ptr<hm_runtime, decltype(&hm_runtime_close)> rt(raw, hm_runtime_close);
  std::printf("backend %s\n", hm_runtime_backend(rt.get()));
  const unsigned n = hm_agent_count(rt.get());
  std::printf("agents %u\n", n);
  for (unsigned i = 0; i < n; i++) {
    const hm_agent_info *in = hm_agent_info_of(hm_agent_get(rt.get(), i));
    std::printf("agent %u %s cus %u\n", i, in->name, static_cast<unsigned>(in->cus));
  }
  hm_layer_config cfg{};
  if (hm_config_v41_flash(3, &cfg) != HM_OK) {
    std::printf("FAIL hm_config_v41_flash: %s\n", hm_errmsg());
    return 1;
  }
  std::printf("layer 3 hidden %u experts %u\n", static_cast<unsigned>(cfg.hidden), static_cast<unsigned>(cfg.experts));
  return 0;
}
