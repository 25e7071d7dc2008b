// Context-parallel gdr_grad cases (cp=S, or cp=S1+S2+... for more ranks): the packed row cut at
// those tokens into one call per rank, as context parallelism puts a long sequence on several
// ranks. Rank r gets tokens [S_r, S_r+1) (S_0 = 0, the last rank's end = T). A sequence cut by a
// rank's start begins that rank's call from the forward state at the cut (the FP64 oracle's,
// rounded to fp32: a CP runtime takes it from the previous rank's forward), and that call's dh0
// for it is the dht of the previous rank's last sequence. The backward runs from the last rank
// to the first: the last rank is called first. Sequences wholly on one rank keep their own h0
// and dht; a rank may hold only a middle piece of one sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"
#include "ops/gdr_grad/params.h"
#include "ops/operation.h"
#include "ops/repack.h"

namespace deltacheck::ops::gdr_grad {

struct CpSplit {
  std::vector<int64_t> cuts;              // the tokens each rank after the first starts at
  std::vector<std::vector<Piece>> ranks;  // each rank's pieces, in token order
};

// The cuts of a cp value: "0" (none), "S" or "S1+S2+..." (ascending, canonical decimals).
// InvalidArgument naming what is wrong otherwise.
StatusOr<std::vector<int64_t>> parse_cuts(const std::string& cp);

// Where the cuts of p.cp (not empty) split the case; InvalidArgument when a cut falls outside
// every sequence (the schema's check refuses such a case, so for a case that exists it is a
// value).
StatusOr<CpSplit> cp_split(const Params& p);

// The case each rank is called with (a plain gdr_grad case of its pieces), in rank order.
std::vector<cases::Case> rank_cases(const cases::Case& c);

// One rank's call: its case and inputs -> its gradients (by gdr_grad output name).
using RankRun =
    std::function<StatusOr<Values>(int rank, const cases::Case& c, const cases::TensorMap& in)>;

// Runs a cp case's calls through `run` (the last rank first, then each earlier rank with the
// dh0 of the next rank's cut sequence passed back as its dht) and returns the gradients in the
// whole case's layout: token rows of every rank, each sequence's dh0 from the rank holding its
// first token. The backend under test and the tolerance baselines both run through this, so a
// baseline is split exactly as the backend is.
StatusOr<Values> run_context_parallel(const cases::Case& c, const cases::TensorMap& in,
                                      const RankRun& run);

// The kind of rank r's call (DrivenCall::kind): "rank 0", "rank 1", ... Kernels ignore it; the
// deliberately wrong CP backward (wrong:grad-cp-gate) acts on the ranks before the last, as a CP
// code path would. The call index counts from the last rank (index 0).
inline std::string rank_kind(int rank) { return "rank " + std::to_string(rank); }

// Which rank computed token `token` of sequence `seq` (token < 0: its dh0), in words.
std::string explain_rank(const cases::Case& c, int64_t seq, int64_t token);

}  // namespace deltacheck::ops::gdr_grad
