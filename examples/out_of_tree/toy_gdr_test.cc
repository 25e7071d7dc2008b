// The toy kernels checked by deltacheck: the gate suite's gated-delta-rule cases as one
// GoogleTest test per case and kernel. The correct kernel must pass every case it takes; the
// leaky one must be flagged leak on every case with two or more packed sequences.
#include "toy_gdr.h"

#include <deltacheck/deltacheck.h>
#include <deltacheck/gtest.h>

namespace {

// deltacheck's view of a call (GdrProblem) as the toy kernel's arguments.
deltacheck::GdrFunction adapt(bool (*kernel)(const toy::GdrArgs&)) {
  return [kernel](const deltacheck::GdrProblem& p) {
    toy::GdrArgs a;
    a.batch = p.batch, a.seq_len = p.seq_len, a.heads = p.num_heads;
    a.value_heads = p.num_value_heads, a.key_dim = p.key_dim, a.value_dim = p.value_dim;
    a.precision =
        p.dtype == deltacheck::DType::kBF16 ? toy::Precision::kBF16 : toy::Precision::kF32;
    a.q = p.q, a.k = p.k, a.v = p.v, a.g = p.g, a.beta = p.beta;
    a.cu_seqlens = p.cu_seqlens, a.num_seqs = p.num_seqs;
    a.initial_state = p.initial_state, a.o = p.o, a.final_state = p.final_state;
    a.scale = p.scale, a.l2norm = p.use_qk_l2norm;
    return kernel(a) ? deltacheck::Status::Ok()
                     : deltacheck::Status::InvalidArgument("toy: bad args");
  };
}

std::unique_ptr<deltacheck::Backend> toy_backend(const char* name,
                                                 bool (*kernel)(const toy::GdrArgs&)) {
  deltacheck::GdrBackendOptions options;
  options.dtypes = {deltacheck::DType::kF32, deltacheck::DType::kBF16};  // others: unsupported
  return deltacheck::gdr_backend(name, adapt(kernel), options);
}

// The gate's gdr cases in fp32 and bf16, without the state-pool modes (a GdrProblem does not
// carry slot indices) and the two 2000-token cases at K = V = 128 (6 s each for a scalar toy).
const deltacheck::Selection kCases = deltacheck::Selection("gate").filter("^gdr\\(").exclude(
    "dtype=fp16|cache=(pool|spec)|packed\\[700,1300\\]");

// Where carrying the state from one sequence into the next shows: every packed case with two
// or more sequences (rows of a batch stay separate, and the probes keep a batch a batch), except
// where the gate erases the state at each sequence's start anyway (gate=tail decays by e^-30 or
// more per token in the last chunk, which is the whole sequence when it has at most 64 tokens)
// — then nothing leaks.
std::vector<deltacheck::Verdict> leaky_verdict(const deltacheck::Case& c) {
  const deltacheck::Layout& layout = c.layout();
  bool state_survives = c.get("gate") != "tail";
  for (int64_t len : layout.lengths) state_survives = state_survives || len > 64;
  const bool leaks = layout.has_cu_seqlens() && layout.num_seqs() >= 2 && state_survives;
  return {leaks ? deltacheck::Verdict::kLeak : deltacheck::Verdict::kPass};
}

}  // namespace

DELTACHECK_INSTANTIATE_SUITE(ToyGdr, kCases, [] { return toy_backend("toy", toy::recurrent_gdr); });
DELTACHECK_EXPECT_VERDICTS(
    LeakyToyGdr, kCases, [] { return toy_backend("toy-leaky", toy::leaky_recurrent_gdr); },
    leaky_verdict);
