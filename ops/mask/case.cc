// The mask-construction ops (docs/semantics.md "Masks"): schemas, input generators and suite cases.
//   mask      one attention mask: rules (causal, window, chunk), cache mode and offset, padding,
//             packed or multimodal position ids, output format
//   layers    the masks a hybrid model pre-builds per layer type (the static-cache KeyError bug)
//   segments  sequence boundaries for the linear layers: from cu_seqlens, from position_ids
//             (batch > 1 flattened) and from a 2-D padding mask
// Padding lengths and packed segment lengths come from the case seed, so a failing case is
// reproduced from its id alone.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "ops/decode.h"
#include "ops/mask/params.h"
#include "ops/schema.h"

namespace deltacheck::ops::mask {
namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 20;
// Largest mask (B * q * kv elements) a case may ask for: 256 Mi elements, 2 GiB as the doubles
// the runner compares.
constexpr int64_t kMaxMaskElements = int64_t{1} << 28;

// ---- parameters shared by mask and layers ----------------------------------------------------

std::vector<ParamSpec> shape_params(const std::string& default_q) {
  return {
      integer("B", "1", 1, 1024, "batch rows"),
      integer("q", default_q, 1, kMaxTokens, "new (query) tokens per row"),
      integer("kv", "0", 0, kMaxTokens,
              "key buffer length; 0 = offset + q (what a dynamic cache holds); static: "
              "max_cache_len > offset + q"),
      integer("offset", "0", 0, kMaxTokens, "cache position of query 0 (tokens already cached)"),
      choice("cache", "none", {"none", "dynamic", "static", "chunked"},
             "none: one prefill | dynamic: past tokens cached | static: pre-allocated "
             "max_cache_len | chunked: a later call of a chunked prefill (offset > 0, q > 1)"),
  };
}

std::vector<ParamSpec> token_params() {
  return {
      choice("padding", "none", {"none", "left", "right"},
             "2-D padding mask, pad lengths from the seed (row 0 always padded)"),
      choice("packed", "none", {"none", "packed", "mrope"},
             "position_ids: none | packed segments (seeded lengths, length-1 and non-zero "
             "starts) | the same as 3-row multimodal rotary ids with a 2x2 image"),
  };
}

Status check_cache(const Case& c) {
  const std::string cache = c.get("cache");
  const int64_t q = c.get_int("q"), offset = c.get_int("offset"), kv = c.get_int("kv");
  const int64_t used = offset + q;
  const std::string where = "cache=" + cache + ": ";
  if (cache == "static") {
    if (kv <= used)
      return invalid(where + "kv (max_cache_len) must exceed offset + q = " + std::to_string(used) +
                     " (kv=" + std::to_string(kv) + ")");
  } else if (kv != 0 && kv != used) {
    return invalid(where + "kv must be 0 or offset + q = " + std::to_string(used) +
                   " (kv=" + std::to_string(kv) + ")");
  }
  if (cache == "none" && offset != 0)
    return invalid(where + "no cached tokens, offset must be 0 (offset=" + std::to_string(offset) +
                   ")");
  if ((cache == "dynamic" || cache == "chunked") && offset == 0)
    return invalid(where + "needs cached tokens, offset must be > 0");
  if (cache == "chunked" && q < 2)
    return invalid(where + "a chunked-prefill call has q > 1 (a decode step is cache=dynamic)");
  if (c.get_int("B") * q * mask_kv_length(c) > kMaxMaskElements)
    return invalid("mask of B * q * kv > 2^28 elements");
  return Status::Ok();
}

// ---- mask ------------------------------------------------------------------------------------

Status check_mask(const Case& c) {
  if (Status st = check_cache(c); !st.ok()) return st;
  if (!c.get_bool("causal") && (c.get_int("window") > 0 || c.get_int("chunk") > 0))
    return invalid("window and chunk are defined for causal masks only (causal=0)");
  if (c.get("format") == "bool" && c.get("dtype") != "fp32")
    return invalid("dtype applies to additive masks only (format=bool takes dtype=fp32)");
  return Status::Ok();
}

OpSchema mask_schema() {
  std::vector<ParamSpec> p = shape_params("16");
  p.push_back(integer("causal", "1", 0, 1, "causal (0: bidirectional, padding and segments)"));
  p.push_back(integer("window", "0", 0, kMaxTokens, "sliding window W (0 = none)"));
  p.push_back(integer("chunk", "0", 0, kMaxTokens, "chunked attention C (0 = none)"));
  for (ParamSpec& s : token_params()) p.push_back(std::move(s));
  p.push_back(choice("format", "bool", {"bool", "additive-lowest", "additive-inf"},
                     "boolean [B,1,q,kv] | additive 0 / dtype lowest | additive 0 / -inf"));
  p.push_back(choice("dtype", "fp32", {"fp32", "bf16", "fp16"}, "additive mask dtype"));
  p.push_back(seed_param());
  return {"mask", "one attention mask [B,1,q,kv] + needed flag + fully masked rows (exact)",
          std::move(p), check_mask};
}

// ---- layers ----------------------------------------------------------------------------------

Status check_layers(const Case& c) {
  const StatusOr<std::vector<std::string>> types = mask_layer_types(c.get("pattern"));
  if (!types.ok()) return types.status();
  if (Status st = check_cache(c); !st.ok()) return st;
  for (const std::string& t : types.value()) {
    if (t == "sliding_attention" && c.get_int("window") == 0)
      return invalid("pattern has sliding_attention layers: window must be > 0");
    if (t == "chunked_attention" && c.get_int("chunk") == 0)
      return invalid("pattern has chunked_attention layers: chunk must be > 0");
  }
  return Status::Ok();
}

OpSchema layers_schema() {
  std::vector<ParamSpec> p;
  p.push_back(text("pattern", "qwen35",
                   "layer_types: qwen35 | qwen35-gdn | hybrid3 | all-linear | all-full | a+b+... "
                   "of linear, full, sliding, chunked, mamba, mamba2, gdn"));
  for (ParamSpec& s : shape_params("16")) p.push_back(std::move(s));
  p.push_back(integer("window", "16", 0, kMaxTokens, "sliding_window of sliding layers"));
  p.push_back(integer("chunk", "16", 0, kMaxTokens, "chunk size of chunked layers"));
  for (ParamSpec& s : token_params()) p.push_back(std::move(s));
  p.push_back(seed_param());
  return {"layers",
          "per-layer-type masks of a hybrid model (one per distinct type + mapping; exact)",
          std::move(p), check_layers};
}

// ---- segments --------------------------------------------------------------------------------

Status check_segments(const Case& c) {
  if (c.get("source") == "cu" && c.get_int("B") != 1)
    return invalid("source=cu: cu_seqlens index one flat row, B must be 1");
  if (c.get_int("B") * c.get_int("T") > (int64_t{1} << 26)) return invalid("B * T > 2^26 tokens");
  return Status::Ok();
}

OpSchema segments_schema() {
  return {"segments",
          "sequence boundaries for linear layers from cu_seqlens, position_ids or a 2-D padding "
          "mask (exact)",
          {
              choice("source", "position", {"cu", "position", "padding"},
                     "cu_seqlens -> per-token index | position_ids [B,T] -> cu_seqlens, index, "
                     "max | padding mask [B,T] -> unpad indices, cu_seqlens, max"),
              integer("B", "1", 1, 4096, "rows (flattened for position_ids)"),
              integer("T", "64", 1, int64_t{1} << 26, "tokens per row"),
              choice("pad", "mixed", {"left", "right", "mixed"},
                     "source=padding: where each row's padding sits (mixed: alternating)"),
              seed_param(),
          },
          check_segments};
}

// ---- generators ------------------------------------------------------------------------------

int64_t scaled(double u, int64_t n) {  // floor(u * n) for u in [0, 1), clamped into [0, n - 1]
  return std::min<int64_t>(n - 1, std::max<int64_t>(0, static_cast<int64_t>(u * n)));
}

// Pad counts per row: up to half the written tokens, row 0 always padded.
std::vector<int64_t> pad_counts(uint64_t seed, int64_t batch, int64_t used) {
  const Stream st(seed, "padding");
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t p = scaled(st.uniform(static_cast<uint64_t>(b)), std::max<int64_t>(1, used / 2) + 1);
    if (b == 0) p = std::max<int64_t>(p, std::min<int64_t>(1, used));
    out.push_back(std::min(p, used));
  }
  return out;
}

// Position ids of one row of new tokens: segments of seeded lengths (a quarter of them length 1,
// the first capped so there are at least two), the first continuing the cache at `offset` (or
// starting anywhere without one), later ones at 0 or a seeded start that never continues the
// previous segment. With `image`, the first segment carries a 2x2 image in multimodal rotary form
// (temporal row constant, height and width rows stepping); rows is 1 or 3.
void packed_row(const Stream& st, int64_t q, int64_t offset, bool image, int64_t* rows_out[3]) {
  uint64_t k = 0;
  auto draw = [&] { return st.uniform(k++); };
  int64_t t = 0, previous_last = -2;
  for (int64_t seg = 0; t < q; ++seg) {
    int64_t len = draw() < 0.25 ? 1 : 2 + scaled(draw(), std::max<int64_t>(1, q / 3 - 1));
    if (seg == 0 && image) len = std::max<int64_t>(len, 7);
    if (seg == 0 && q >= 2) len = std::min(len, q - 1);
    len = std::min(len, q - t);
    int64_t start = 0;
    if (seg == 0) {
      start = offset > 0 ? offset : (draw() < 0.5 ? 0 : 1 + scaled(draw(), 40));
    } else {
      start = draw() < 0.5 ? 0 : 1 + scaled(draw(), 40);
      if (start == previous_last + 1) start = 0;  // previous_last >= 0, so 0 always breaks
    }
    for (int64_t j = 0; j < len; ++j)
      for (int r = 0; r < 3; ++r)
        if (rows_out[r]) rows_out[r][t + j] = start + j;
    previous_last = start + len - 1;
    if (seg == 0 && image && len >= 7) {
      // Text token, then image tokens 1..4 at temporal s, height s + {0,0,1,1}, width s +
      // {0,1,0,1}, then text again at s + 2 (s + the larger grid side), as Qwen2-VL lays it out.
      const int64_t s = start + 1;
      for (int64_t i = 0; i < 4; ++i) {
        if (rows_out[0]) rows_out[0][t + 1 + i] = s;
        if (rows_out[1]) rows_out[1][t + 1 + i] = s + i / 2;
        if (rows_out[2]) rows_out[2][t + 1 + i] = s + i % 2;
      }
      for (int64_t j = 5; j < len; ++j)
        for (int r = 0; r < 3; ++r)
          if (rows_out[r]) rows_out[r][t + j] = s + 2 + (j - 5);
      previous_last = s + 2 + (len - 6);
    }
    t += len;
  }
}

TensorMap generate_masked_tokens(const Case& c, const GenOptions&) {
  TensorMap m;
  const Params d = decode(c);
  const int64_t B = d.B, q = d.q, kv = d.kv_length, offset = d.offset, used = offset + q;
  if (d.padding != Padding::kNone) {
    Tensor& t = m.add(Tensor("padding_mask", DType::kU8, {B, kv}));
    uint8_t* p = t.as<uint8_t>();
    const std::vector<int64_t> pads = pad_counts(d.seed, B, used);
    for (int64_t b = 0; b < B; ++b) {
      // Real tokens where written and not padding; unwritten static-cache slots are not tokens.
      const int64_t lo = d.padding == Padding::kLeft ? pads[b] : 0;
      const int64_t hi = d.padding == Padding::kLeft ? used : used - pads[b];
      for (int64_t j = 0; j < kv; ++j) p[b * kv + j] = j >= lo && j < hi ? 1 : 0;
    }
  }
  if (d.packed != Packed::kNone) {
    const int64_t rows = d.packed == Packed::kMrope ? 3 : 1;
    Tensor& t = m.add(Tensor("position_ids", DType::kI64, {rows, B, q}));
    int64_t* p = t.as<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t* out[3] = {p + b * q, rows == 3 ? p + (B + b) * q : nullptr,
                         rows == 3 ? p + (2 * B + b) * q : nullptr};
      packed_row(Stream(d.seed, "position_ids/" + std::to_string(b)), q, offset, rows == 3, out);
    }
  }
  return m;
}

int64_t masked_tokens_bytes(const Case& c) {
  const Params d = decode(c);
  return d.B * d.kv_length + 3 * d.B * d.q * 8;
}

TensorMap generate_segments(const Case& c, const GenOptions&) {
  TensorMap m;
  const Params d = decode(c);
  const int64_t B = d.B, T = d.T;
  if (d.source == Source::kCu) {
    // 3..8 sequences over T tokens; zero-length ones at the start, the middle and the end.
    const Stream st(d.seed, "cu_seqlens");
    const int64_t n = 3 + scaled(st.uniform(0), 6);
    std::vector<int64_t> cuts;
    for (int64_t i = 0; i < n - 1; ++i) cuts.push_back(scaled(st.uniform(1 + i), T + 1));
    std::sort(cuts.begin(), cuts.end());
    if (st.uniform(100) < 0.5) cuts.front() = 0;
    if (st.uniform(101) < 0.5) cuts.back() = T;
    if (cuts.size() >= 3) cuts[1] = cuts[0];
    Tensor& t = m.add(Tensor("cu_seqlens", DType::kI64, {n + 1}));
    int64_t* p = t.as<int64_t>();
    p[0] = 0;
    for (int64_t i = 0; i < n - 1; ++i) p[i + 1] = cuts[i];
    p[n] = T;
  } else if (d.source == Source::kPosition) {
    Tensor& t = m.add(Tensor("position_ids", DType::kI64, {B, T}));
    for (int64_t b = 0; b < B; ++b) {
      int64_t* out[3] = {t.as<int64_t>() + b * T, nullptr, nullptr};
      packed_row(Stream(d.seed, "position_ids/" + std::to_string(b)), T, 0, false, out);
    }
  } else {
    // Seeded real-token counts; row 0 is partly padded, and with three or more rows row 1 has no
    // padding and row 2 is all padding.
    const Stream st(d.seed, "padding");
    Tensor& t = m.add(Tensor("padding_mask", DType::kU8, {B, T}));
    for (int64_t b = 0; b < B; ++b) {
      int64_t real = scaled(st.uniform(static_cast<uint64_t>(b)), T + 1);
      if (b == 0 && T >= 2) real = std::min(std::max<int64_t>(real, 1), T - 1);
      if (B >= 3 && b == 1) real = T;
      if (B >= 3 && b == 2) real = 0;
      const bool left = d.pad == Pad::kLeft || (d.pad == Pad::kMixed && b % 2 == 0);
      for (int64_t j = 0; j < T; ++j)
        t.as<uint8_t>()[b * T + j] = left ? (j >= T - real) : (j < real);
    }
  }
  return m;
}

int64_t segments_bytes(const Case& c) {
  const Params d = decode(c);
  return d.B * d.T * 8;
}

// ---- suites ----------------------------------------------------------------------------------

// A cache mode with the shape it is checked at (kv 0 = offset + q).
struct CacheShape {
  std::string cache;
  int64_t q, offset, kv;
};

SuiteParams shape_of(const CacheShape& s) {
  return {{"cache", s.cache},
          {"q", std::to_string(s.q)},
          {"offset", std::to_string(s.offset)},
          {"kv", std::to_string(s.kv)}};
}

const std::vector<CacheShape>& gate_shapes() {
  static const std::vector<CacheShape> shapes{
      {"none", 24, 0, 0},      // prefill
      {"dynamic", 1, 37, 0},   // decode with past tokens
      {"static", 24, 0, 64},   // prefill into a pre-allocated cache (the KeyError path)
      {"static", 1, 37, 64},   // decode from a static cache
      {"chunked", 16, 24, 0},  // the second call of a chunked prefill
  };
  return shapes;
}

void mask_suite(SuiteBuilder& b, Tier tier) {
  int seed = 1;
  auto add = [&](const SuiteParams& p) {
    b.add("mask", merge(p, {{"seed", std::to_string(seed++)}}));
  };
  if (tier == Tier::kSmoke) {
    add({{"B", "2"}, {"q", "24"}, {"padding", "left"}, {"packed", "packed"}});
    add(merge(shape_of({"dynamic", 1, 37, 0}), {{"window", "16"}, {"padding", "left"}}));
    add(merge(shape_of({"static", 24, 0, 64}),
              {{"format", "additive-lowest"}, {"dtype", "bf16"}, {"padding", "right"}}));
    return;
  }
  // Every rule and combination across cache modes, padding and packing.
  const std::vector<SuiteParams> rules{{},
                                       {{"window", "1"}},
                                       {{"window", "4"}},
                                       {{"window", "16"}},
                                       {{"chunk", "4"}},
                                       {{"chunk", "16"}},
                                       {{"causal", "0"}}};
  const std::vector<CacheShape> shapes{
      {"none", 24, 0, 0}, {"chunked", 16, 24, 0}, {"dynamic", 1, 37, 0}, {"static", 24, 0, 64}};
  for (const SuiteParams& rule : rules)
    for (const CacheShape& s : shapes)
      for (const char* padding : {"none", "left", "right"})
        for (const char* packed : {"none", "packed"}) {
          if (rule.size() == 1 && rule[0].first == "causal" && s.cache != "none") continue;
          add(merge(merge(shape_of(s), rule),
                    {{"B", "2"}, {"padding", padding}, {"packed", packed}}));
        }
  // Batch 1 with padding (the padding-not-masked-at-batch-1 bug), batch > 1, multimodal ids.
  for (const CacheShape& s : gate_shapes())
    for (const char* padding : {"left", "right"}) {
      add(merge(shape_of(s), {{"padding", padding}}));
      add(merge(shape_of(s), {{"padding", padding}, {"B", "4"}, {"window", "8"}}));
    }
  for (const CacheShape& s : {CacheShape{"none", 40, 0, 0}, CacheShape{"chunked", 32, 9, 0},
                              CacheShape{"static", 40, 0, 96}})
    for (const char* padding : {"none", "left"}) {
      add(merge(shape_of(s), {{"B", "3"}, {"packed", "mrope"}, {"padding", padding}}));
      add(merge(shape_of(s), {{"B", "2"}, {"packed", "mrope"}, {"chunk", "8"}}));
    }
  // Output formats and dtypes.
  for (const char* dtype : {"fp32", "bf16", "fp16"})
    for (const char* format : {"additive-lowest", "additive-inf"})
      for (const CacheShape& s : {CacheShape{"none", 24, 0, 0}, CacheShape{"static", 1, 37, 64}})
        add(merge(shape_of(s), {{"B", "2"},
                                {"format", format},
                                {"dtype", dtype},
                                {"padding", "left"},
                                {"window", "8"}}));
  // When a mask may be skipped, and when not: square and last-query causal (skip), window not
  // reached (skip), window reached, static cache (never).
  for (const SuiteParams& p :
       std::vector<SuiteParams>{{{"q", "1"}},
                                {{"q", "64"}},
                                {{"q", "64"}, {"window", "65"}},
                                {{"q", "64"}, {"window", "64"}},
                                {{"q", "64"}, {"chunk", "100"}},
                                {{"q", "1"}, {"offset", "63"}, {"cache", "dynamic"}},
                                {{"q", "2"}, {"offset", "62"}, {"cache", "dynamic"}},
                                {{"q", "1"}, {"kv", "64"}, {"cache", "static"}},
                                {{"q", "64"}, {"kv", "65"}, {"cache", "static"}}})
    add(p);
  // Sizes around powers of two, and one long sequence.
  for (const auto& [q, offset] : std::vector<std::pair<int, int>>{{127, 0}, {129, 0}, {65, 63}})
    add({{"q", std::to_string(q)},
         {"offset", std::to_string(offset)},
         {"cache", offset ? "chunked" : "none"},
         {"window", "64"},
         {"padding", "left"},
         {"packed", "packed"}});
  add({{"q", "1500"}, {"padding", "left"}, {"packed", "packed"}, {"chunk", "256"}});
  if (tier == Tier::kFull) {
    add({{"q", "8192"}});
    add({{"q", "8192"}, {"window", "4096"}, {"padding", "left"}});
    add({{"q", "1"}, {"offset", "8191"}, {"kv", "0"}, {"cache", "dynamic"}, {"B", "8"}});
    add({{"q", "1"},
         {"offset", "4000"},
         {"kv", "8192"},
         {"cache", "static"},
         {"B", "8"},
         {"padding", "left"}});
    add({{"q", "4096"}, {"packed", "packed"}, {"format", "additive-lowest"}});
    add({{"q", "2048"},
         {"kv", "4096"},
         {"cache", "static"},
         {"B", "2"},
         {"packed", "mrope"},
         {"padding", "right"},
         {"format", "additive-inf"},
         {"dtype", "bf16"}});
  }
}

void layers_suite(SuiteBuilder& b, Tier tier) {
  int seed = 1;
  auto add = [&](const SuiteParams& p) {
    b.add("layers", merge(p, {{"seed", std::to_string(seed++)}}));
  };
  // The layer types Transformers PR #46738 named per backbone (linear_attention_mamba, _mamba2,
  // _gated_delta_net): appended with seeds of their own (from 2000), so the cases around them
  // keep their ids.
  int renamed_seed = 2000;
  auto add_renamed = [&]() {
    auto one = [&](const SuiteParams& p) {
      b.add("layers", merge(p, {{"seed", std::to_string(renamed_seed++)}}));
    };
    one(merge(shape_of({"static", 24, 0, 64}), {{"pattern", "qwen35-gdn"}, {"padding", "left"}}));
    if (tier == Tier::kSmoke) return;
    for (const CacheShape& s : gate_shapes())
      for (const char* padding : {"none", "left"})
        one(merge(shape_of(s),
                  {{"pattern", "mamba+mamba2+gdn+linear+full"}, {"B", "2"}, {"padding", padding}}));
  };
  if (tier == Tier::kSmoke) {
    add(merge(shape_of({"static", 24, 0, 64}), {{"pattern", "qwen35"}, {"padding", "left"}}));
    add(merge(shape_of({"chunked", 16, 24, 0}),
              {{"pattern", "hybrid3"}, {"B", "2"}, {"packed", "packed"}}));
    add_renamed();
    return;
  }
  // Every layer pattern x cache mode x padding x packing, at batch 2; batch 1 with padding.
  const std::vector<std::string> patterns{"qwen35", "hybrid3", "all-linear", "all-full",
                                          "linear+chunked+sliding+full+linear"};
  for (const std::string& pattern : patterns)
    for (const CacheShape& s : gate_shapes()) {
      for (const char* padding : {"none", "left", "right"})
        for (const char* packed : {"none", "packed", "mrope"})
          add(merge(shape_of(s),
                    {{"pattern", pattern}, {"B", "2"}, {"padding", padding}, {"packed", packed}}));
      for (const char* padding : {"left", "right"})
        add(merge(shape_of(s), {{"pattern", pattern}, {"padding", padding}}));
    }
  if (tier == Tier::kFull) {
    add({{"pattern", "qwen35"},
         {"q", "2048"},
         {"kv", "4096"},
         {"cache", "static"},
         {"padding", "left"},
         {"packed", "packed"}});
    add({{"pattern", "hybrid3"},
         {"q", "1"},
         {"offset", "4000"},
         {"kv", "8192"},
         {"cache", "static"},
         {"B", "4"},
         {"window", "1024"},
         {"padding", "left"}});
  }
  add_renamed();
}

void segments_suite(SuiteBuilder& b, Tier tier) {
  int seed = 1;
  auto add = [&](const SuiteParams& p) {
    b.add("segments", merge(p, {{"seed", std::to_string(seed++)}}));
  };
  if (tier == Tier::kSmoke) {
    add({{"source", "cu"}, {"T", "64"}});
    add({{"source", "position"}, {"B", "2"}, {"T", "40"}});
    add({{"source", "padding"}, {"B", "3"}, {"T", "16"}});
    return;
  }
  for (const char* T : {"1", "2", "64", "300"})
    for (int rep = 0; rep < 3; ++rep) add({{"source", "cu"}, {"T", T}});
  for (const char* B : {"1", "3"})
    for (const char* T : {"1", "2", "16", "129", "700"})
      add({{"source", "position"}, {"B", B}, {"T", T}});
  for (const char* B : {"1", "2", "4"})
    for (const char* pad : {"left", "right", "mixed"})
      for (const char* T : {"1", "16", "129"})
        add({{"source", "padding"}, {"B", B}, {"T", T}, {"pad", pad}});
  if (tier == Tier::kFull) {
    add({{"source", "cu"}, {"T", "1048576"}});
    add({{"source", "position"}, {"B", "4"}, {"T", "65536"}});
    add({{"source", "padding"}, {"B", "64"}, {"T", "8192"}});
  }
}

}  // namespace

Params decode(const Case& c) {
  Params d;
  const auto op =
      std::find_if(kOpNames.begin(), kOpNames.end(), [&](const char* n) { return c.op() == n; });
  if (op == kOpNames.end())
    throw std::invalid_argument("not a mask, layers or segments case: " + c.id());
  d.op = static_cast<Op>(op - kOpNames.begin());
  d.seed = c.seed();
  d.B = c.get_int("B");
  if (d.op == Op::kSegments) {
    d.source = decode_choice<Source>(c, "source", kSourceNames);
    d.T = c.get_int("T");
    d.pad = decode_choice<Pad>(c, "pad", kPadNames);
    return d;
  }
  d.q = c.get_int("q");
  d.kv = c.get_int("kv");
  d.offset = c.get_int("offset");
  d.kv_length = d.kv > 0 ? d.kv : d.offset + d.q;
  d.cache = decode_choice<Cache>(c, "cache", kCacheNames);
  d.window = c.get_int("window");
  d.chunk = c.get_int("chunk");
  d.padding = decode_choice<Padding>(c, "padding", kPaddingNames);
  d.packed = decode_choice<Packed>(c, "packed", kPackedNames);
  if (d.op == Op::kMask) {
    d.causal = c.get_bool("causal");
    d.format = decode_choice<Format>(c, "format", kFormatNames);
    d.dtype = decode_dtype(c);
  } else {
    d.layer_types = checked(mask_layer_types(c.get("pattern")));
  }
  return d;
}

bool is_mask_op(const std::string& op) {
  return op == "mask" || op == "layers" || op == "segments";
}

int64_t mask_kv_length(const Case& c) {
  const int64_t kv = c.get_int("kv");
  return kv > 0 ? kv : c.get_int("offset") + c.get_int("q");
}

StatusOr<std::vector<std::string>> mask_layer_types(const std::string& pattern) {
  auto repeat = [](std::vector<std::string> period, int times) {
    std::vector<std::string> out;
    for (int i = 0; i < times; ++i) out.insert(out.end(), period.begin(), period.end());
    return out;
  };
  const std::string L = "linear_attention", F = "full_attention", S = "sliding_attention";
  if (pattern == "qwen35") return repeat({L, L, L, F}, 2);
  if (pattern == "qwen35-gdn") {
    const std::string G = "linear_attention_gated_delta_net";
    return repeat({G, G, G, F}, 2);
  }
  if (pattern == "hybrid3") return repeat({L, S, F}, 2);
  if (pattern == "all-linear") return repeat({L}, 4);
  if (pattern == "all-full") return repeat({F}, 4);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= pattern.size()) {
    size_t plus = pattern.find('+', start);
    if (plus == std::string::npos) plus = pattern.size();
    const std::string name = pattern.substr(start, plus - start);
    if (name == "linear" || name == "full" || name == "sliding" || name == "chunked")
      out.push_back(name + "_attention");
    else if (name == "mamba" || name == "mamba2")
      out.push_back("linear_attention_" + name);
    else if (name == "gdn")
      out.push_back("linear_attention_gated_delta_net");
    else
      return invalid("pattern '" + pattern + "': unknown layer '" + name +
                     "' (named patterns: qwen35, qwen35-gdn, hybrid3, all-linear, all-full; or "
                     "a+b+... of linear, full, sliding, chunked, mamba, mamba2, gdn)");
    start = plus + 1;
  }
  return out;
}

cases::OpDefinition mask_definition() {
  return {mask_schema(), generate_masked_tokens, masked_tokens_bytes, mask_suite};
}
cases::OpDefinition layers_definition() {
  return {layers_schema(), generate_masked_tokens, masked_tokens_bytes, layers_suite};
}
cases::OpDefinition segments_definition() {
  return {segments_schema(), generate_segments, segments_bytes, segments_suite};
}

}  // namespace deltacheck::ops::mask
