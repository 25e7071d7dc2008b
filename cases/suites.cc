// Suite definitions. Cases vary one or two parameters around a base at a time, and cross the
// packing layouts with dtypes, gates and cache modes where bugs live.
#include "cases/suites.h"

#include "cases/op.h"

namespace deltacheck::cases {
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
  for (const OpDefinition& d : op_definitions())
    if (d.suite) d.suite(b, static_cast<Tier>(tier));
  return b.take();
}

}  // namespace deltacheck::cases
