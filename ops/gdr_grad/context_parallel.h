// Context-parallel gdr_grad cases (cp=S): the packed row cut at token S into two calls, as
// context parallelism puts a sequence on two ranks. Rank 0 gets tokens [0, S), rank 1 [S, T);
// the sequence that spans the cut starts rank 1 from the forward state at the cut (the FP64
// oracle's, rounded to fp32: a CP runtime takes it from rank 0's forward), and rank 1's dh0 for
// it is the dht of rank 0's last sequence. The backward runs from the last rank to the first:
// rank 1 is called first. Sequences wholly on one side keep their own h0 and dht.
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
  int64_t seq = 0;  // the sequence that spans the cut
  int64_t at = 0;   // its tokens [0, at) are on rank 0, [at, length) on rank 1
  std::vector<Piece> rank0, rank1;
};

// Where cp=S cuts the case (p.cp > 0); InvalidArgument when S cuts no sequence (the schema's
// check refuses such a case, so for a case that exists it is a value).
StatusOr<CpSplit> cp_split(const Params& p);

// The case each rank is called with (a plain gdr_grad case of its pieces): {rank 0, rank 1}.
std::pair<cases::Case, cases::Case> rank_cases(const cases::Case& c);

// One rank's call: its case and inputs -> its gradients (by gdr_grad output name).
using RankRun =
    std::function<StatusOr<Values>(int rank, const cases::Case& c, const cases::TensorMap& in)>;

// Runs a cp case's two calls through `run` (rank 1, then rank 0 with rank 1's dh0 passed back)
// and returns the gradients in the whole case's layout: token rows of both ranks, dh0 of the
// spanning sequence from rank 0. The backend under test and the tolerance baselines both run
// through this, so a baseline is split exactly as the backend is.
StatusOr<Values> run_context_parallel(const cases::Case& c, const cases::TensorMap& in,
                                      const RankRun& run);

// The kind of rank r's call (DrivenCall::kind): "rank 0" | "rank 1". Kernels ignore it; the
// deliberately wrong CP backward (wrong:grad-cp-gate) acts on it, as a CP code path would.
inline std::string rank_kind(int rank) { return "rank " + std::to_string(rank); }

// Which rank computed token `token` of sequence `seq` (token < 0: its dh0), in words.
std::string explain_rank(const cases::Case& c, int64_t seq, int64_t token);

}  // namespace deltacheck::ops::gdr_grad
