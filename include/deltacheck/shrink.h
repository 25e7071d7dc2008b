// Shrinking and hunting: the smallest case that fails the same way (shrink), cases drawn from each
// operation's whole parameter space until one fails (hunt), and corpora of the minimal failing ids
// that later runs replay as a suite (`--suite corpus:DIR`, Selection("corpus:DIR")). What
// `deltacheck shrink` and `deltacheck hunt` do, without the console (docs/shrinking.md).
#pragma once

#include "cases/corpus.h"
#include "deltacheck/backend.h"
#include "deltacheck/case.h"
#include "deltacheck/result.h"
#include "harness/hunt.h"
#include "harness/shrink.h"

namespace deltacheck {

// A failure's class, which a shrink keeps: verdict and kind ("leak (o)", "error (threw)");
// failure_class(result).
using FailureClass = harness::FailureClass;
using harness::failure_class;
// A case's size: sequences, tokens, input bytes, id length; case_size(c).
using CaseSize = harness::CaseSize;
using harness::case_size;
// shrink(case, backend, ShrinkOptions{probes, max_runs, budget_seconds, max_memory_bytes,
// on_step}) -> ShrinkResult{status, kept, original, minimal, trail (ShrinkStep: change, case_id,
// size, message), before, after, runs, complete, seconds}. The candidates it tries, in order:
// shrink_candidates(case); a layout's: smaller_layouts(text).
using ShrinkOptions = harness::ShrinkOptions;
using ShrinkResult = harness::ShrinkResult;
using ShrinkStep = harness::ShrinkStep;
using harness::shrink;
using harness::shrink_candidates;
using harness::smaller_layouts;
// hunt(backend, HuntOptions{seed, ops, filter, budget_seconds, max_cases, shard_index,
// shard_count, probes, shrink, shrink_options, max_memory_bytes, on_case}) -> HuntResult{drawn,
// rejected, filtered, run, unsupported, failures, findings (HuntFinding: found, kind, shrunk,
// minimal_id()), seconds}; draw i of a seed: draw_case(seed, i, ops).
using HuntOptions = harness::HuntOptions;
using HuntResult = harness::HuntResult;
using HuntFinding = harness::HuntFinding;
using harness::draw_case;
using harness::hunt;
// Corpus folders: write_corpus_case(dir, case, notes, &added), read_corpus(dir),
// corpus_file_name(id).
using cases::corpus_file_name;
using cases::read_corpus;
using cases::write_corpus_case;

}  // namespace deltacheck
