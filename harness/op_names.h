// The operations' interface (ops/operation.h) and repacking (ops/repack.h) under the names the
// harness code uses: the harness runs operations, it does not define them.
#pragma once

#include "ops/operation.h"
#include "ops/repack.h"

namespace deltacheck::harness {

using ops::Baseline;
using ops::CallMode;
using ops::ElementRange;
using ops::Operation;
using ops::operation_for;
using ops::OutputSpec;
using ops::SeqSlice;
using ops::TensorMajor;
using ops::Values;

using ops::Piece;
using ops::repack;
using ops::Repacked;
using ops::row_bytes;
using ops::row_values;
using ops::token_row;
using ops::token_rows;

}  // namespace deltacheck::harness
