// Suite definitions. Cases vary one or two parameters around a base at a time, and cross the
// packing layouts with dtypes, gates and cache modes where bugs live.
#include "cases/suites.h"

#include <set>

namespace deltacheck::cases {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

class SuiteBuilder {
 public:
  void add(const std::string& op, const Params& p) {
    Case c(op, p);
    if (seen_.insert(c.id()).second) cases_.push_back(c);
  }
  std::vector<Case> take() { return std::move(cases_); }

 private:
  std::set<std::string> seen_;
  std::vector<Case> cases_;
};

Params merge(Params base, const Params& over) {
  for (const auto& [k, v] : over) {
    bool found = false;
    for (auto& kv : base)
      if (kv.first == k) kv.second = v, found = true;
    if (!found) base.emplace_back(k, v);
  }
  return base;
}

void gdr_suite(SuiteBuilder& b, int tier) {
  // tier 0 = smoke, 1 = gate, 2 = full
  const Params base{{"H", "2"},         {"HV", "4"},       {"K", "64"},  {"V", "64"},
                    {"gate", "strong"}, {"state", "rand"}, {"seed", "1"}};
  int seed = 1;
  auto add = [&](const Params& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  std::vector<std::string> layouts = layout_family("smoke");
  if (tier >= 1) layouts = layout_family("gate");
  if (tier >= 2) layouts = layout_family("full");
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};

  // Every layout in every dtype.
  for (const auto& l : layouts)
    for (const auto& dt : dtypes) add({{"layout", l}, {"dtype", dt}});

  // Gate, beta and key regimes on the chunk-edge pack and a single sequence.
  const std::vector<std::string> probe_layouts =
      tier == 0 ? std::vector<std::string>{"packed[63,0,65]"}
                : std::vector<std::string>{"packed[63,0,65]", "single[129]", "packed[1,2,15,16]"};
  for (const auto& l : probe_layouts) {
    for (const auto& g : {"zero", "weak", "strong", "tail"})
      for (const auto& dt : tier >= 1 ? dtypes : std::vector<std::string>{"fp32"})
        add({{"layout", l}, {"gate", g}, {"dtype", dt}});
    for (const auto& be : {"zero", "one", "wide"}) add({{"layout", l}, {"beta", be}});
    add({{"layout", l}, {"keys", "pos"}});
    add({{"layout", l}, {"keys", "pos"}, {"dtype", "bf16"}});
    add({{"layout", l}, {"l2", "0"}});
    add({{"layout", l}, {"state", "mixed"}});
    add({{"layout", l}, {"state", "none"}});
    add({{"layout", l}, {"cache", "none"}, {"state", "none"}});
  }
  // Head dims (incl. odd ones) and GVA ratios.
  for (const auto& kv : tier == 0 ? std::vector<std::string>{"60"}
                                  : std::vector<std::string>{"64", "128", "60", "100"})
    for (const auto& dt : tier == 0 ? std::vector<std::string>{"fp32"} : dtypes)
      add({{"layout", "packed[63,0,65]"}, {"K", kv}, {"V", kv}, {"dtype", dt}});
  add({{"layout", "packed[63,0,65]"}, {"K", "128"}, {"V", "64"}});
  for (const auto& [h, hv] : std::vector<std::pair<std::string, std::string>>{
           {"4", "4"}, {"2", "4"}, {"1", "4"}, {"2", "8"}})
    add({{"layout", "packed[15,64,65]"}, {"H", h}, {"HV", hv}});
  if (tier >= 1) {
    // Long sequences at the head dims of real models.
    add({{"layout", "packed[700,1300]"}, {"K", "128"}, {"V", "128"}, {"HV", "4"}, {"H", "2"}});
    add({{"layout", "packed[700,1300]"}, {"K", "128"}, {"V", "128"}, {"dtype", "bf16"}});
    add({{"layout", "packed[3*20,1500,5*20]"}, {"gate", "tail"}, {"dtype", "bf16"}});
  }
  if (tier >= 2) {
    for (const auto& g : {"weak", "strong", "tail"})
      for (const auto& dt : dtypes)
        add({{"layout", "packed[4100,0,3*30]"},
             {"K", "128"},
             {"V", "128"},
             {"gate", g},
             {"dtype", dt},
             {"HV", "8"}});
    for (int s = 100; s < 110; ++s)
      add({{"layout", "packed[1*30,64,127,129,0,257]"}, {"seed", std::to_string(s)}});
  }
}

}  // namespace

std::vector<std::string> layout_family(const std::string& family) {
  std::vector<std::string> smoke{"single[1]",          "single[65]",        "batch[3x64]",
                                 "packed[63,0,65]",    "packed[0,37,64,0]", "packed[1*24,2*12]",
                                 "packed[3*8,300,2*8]"};
  if (family == "smoke") return smoke;
  std::vector<std::string> gate{"single[1]",
                                "single[2]",
                                "single[64]",
                                "single[129]",
                                "batch[3x64]",
                                "batch[2x100]",
                                "packed[1,2,15,16]",
                                "packed[63,64,65]",
                                "packed[127,128,129]",
                                "packed[63,0,65]",
                                "packed[0,37,64]",
                                "packed[37,0,64]",
                                "packed[37,64,0]",
                                "packed[0,0,5,0]",
                                "packed[1*40,2*30,3*20]",
                                "packed[3*10,700,5*10]",
                                "packed[300,500]"};
  if (family == "gate") return gate;
  std::vector<std::string> full = gate;
  for (const char* l : {"single[4096]", "packed[2000,3]", "packed[1*300]", "batch[8x300]",
                        "packed[16*40]", "packed[65*10,0*5,1]"})
    full.push_back(l);
  if (family == "full") return full;
  throw CaseIdError("unknown layout family '" + family + "'");
}

std::vector<SuiteInfo> list_suites() {
  return {{"smoke", "a quick look: every layout family and dtype once, small shapes (seconds)"},
          {"gate", "the CI gate: every op x layout family x dtype x regime (under 2 minutes)"},
          {"full", "everything, incl. thousands of tokens at K = V = 128"}};
}

std::vector<Case> suite(const std::string& name) {
  int tier = -1;
  if (name == "smoke") tier = 0;
  if (name == "gate") tier = 1;
  if (name == "full") tier = 2;
  if (tier < 0) throw CaseIdError("unknown suite '" + name + "' (known: smoke, gate, full)");
  SuiteBuilder b;
  gdr_suite(b, tier);
  return b.take();
}

}  // namespace deltacheck::cases
