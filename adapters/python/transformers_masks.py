#!/usr/bin/env python3
"""deltacheck peer adapter: Transformers' attention-mask construction (transformers.masking_utils)
on deltacheck's mask and layers cases, through the external backend:

    build/deltacheck run --suite smoke --filter '^(mask|layers)\\(' --backend external \
        --cmd "$VENV/bin/python adapters/python/transformers_masks.py {in} {out}"

What runs, called as a model's forward and generate() call them:
  mask    create_causal_mask (causal), create_sliding_window_causal_mask (window=W),
          create_chunked_causal_mask (chunk=C), create_causal_mask with config.is_causal = False
          (causal=0: it hands over to create_bidirectional_mask). Config: a PreTrainedConfig
          with sliding_window / attention_chunk_size set, one full-attention layer.
  layers  create_masks_for_generate with a hybrid config: layer_types from the case's pattern
          (linear_attention, full_attention, sliding_attention, chunked_attention, and the
          renamed linear_attention_{mamba,mamba2,gated_delta_net} of Transformers PR #46738),
          one dict entry per layer type.
Inputs, as generate() passes them:
  - inputs_embeds [B, q, 1] (only its shape, dtype and device are read);
  - attention_mask: the case's 2-D padding mask over the tokens written so far, [B, offset + q]
    (a static cache's unwritten slots are padded by Transformers itself); none without padding;
  - position_ids: [B, q] (row 0 of multimodal [3, B, q] ids, as the Qwen-VL models pass them);
  - cache: none | DynamicCache(config) (dynamic, chunked) | StaticCache(config, max_cache_len=kv)
    (static), holding `offset` tokens in every attention layer (written with update()).
Outputs, converted to deltacheck's (ops/mask/problem.h):
  - mask [B, 1, q, kv]: format=bool from the "sdpa" mask interface (bool, True = attend);
    format=additive-lowest from the "eager" interface in the case's dtype (0 / finfo(dtype).min);
  - needed: 0 where the sdpa interface returned None (SDPA's is_causal path), else 1; the mask
    is then the one SDPA applies instead: with q > 1 is_causal=True (upper-left: kv <= q index),
    with q == 1 no mask (every key);
  - fully_masked [B, q]: rows of that mask with no allowed key (derived here);
  - layers: per type its mask ([B,1,q,kv] attention; the 2-D mask [B,q] of linear_attention or all
    ones when it returned None), mask_kind (0 attention, 1 validity, 2 none), needed (attention:
    not None; linear: 0) and layer_to_mask (layer i -> its type's entry, as the model indexes it).
    Sliding and chunked cache layers hold a window of the keys: their masks cover keys
    [kv_offset, kv_offset + kv_length) (Cache.get_mask_sizes) and are placed there in the full
    key buffer, masked elsewhere.
Older Transformers (4.5x) named the arguments input_embeds, past_key_values and cache_position;
the adapter passes whichever names the installed version takes.
Declined (verdict unsupported), as docs/semantics.md "Masks" expects of Transformers:
  - position_ids with a 2-D mask or a cache, or with causal=0: Transformers looks for packed
    sequences only without a 2-D mask and without a cache (and never for bidirectional masks);
  - format=additive-inf: Transformers' additive masks hold finfo(dtype).min, never -inf;
  - segments cases (Transformers' varlen helpers are not wired here).
"""
import argparse
import inspect
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_protocol as dc  # noqa: E402

SHORT = {"linear": "linear_attention", "full": "full_attention",
         "sliding": "sliding_attention", "chunked": "chunked_attention",
         # the per-backbone names of Transformers PR #46738 (same rule as linear_attention)
         "mamba": "linear_attention_mamba", "mamba2": "linear_attention_mamba2",
         "gdn": "linear_attention_gated_delta_net"}
NAMED = {"qwen35": ["linear"] * 3 + ["full"] + ["linear"] * 3 + ["full"],
         "qwen35-gdn": ["gdn"] * 3 + ["full"] + ["gdn"] * 3 + ["full"],
         "hybrid3": ["linear", "sliding", "full"] * 2,
         "all-linear": ["linear"] * 4, "all-full": ["full"] * 4}
ATTENTION = ("full_attention", "sliding_attention", "chunked_attention")


def layer_types(pattern):
    """The layer_types a layers case names (ops/mask/case.cc, mask_layer_types)."""
    return [SHORT[s] for s in NAMED.get(pattern) or pattern.split("+")]


def facts():
    import torch
    import transformers
    import transformers.masking_utils as mu
    return {"implementation": "transformers.masking_utils: create_causal_mask, "
                              "create_sliding_window_causal_mask, create_chunked_causal_mask, "
                              "create_masks_for_generate (" + mu.__file__ + ")",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__}}


def make_config(case, types, attn):
    from transformers import PretrainedConfig
    window, chunk = case.int_param("window"), case.int_param("chunk")
    cfg = PretrainedConfig(num_hidden_layers=len(types), num_attention_heads=1, hidden_size=1,
                           num_key_value_heads=1, head_dim=1)
    cfg.layer_types = list(types)
    cfg.sliding_window = window if window > 0 else None
    cfg.attention_chunk_size = chunk if chunk > 0 else None
    cfg.is_causal = case.param("causal", "1") == "1"
    cfg._attn_implementation = attn
    return cfg


def positions(case):
    import torch
    offset = case.int_param("offset")
    return torch.arange(offset, offset + case.int_param("q"))


def call(fn, case, **kw):
    """Calls a masking function with this version's argument names: Transformers 5 takes
    inputs_embeds and cache, 4.5x took input_embeds, past_key_values and cache_position."""
    params = inspect.signature(fn).parameters
    if "inputs_embeds" not in params:
        kw["input_embeds"] = kw.pop("inputs_embeds")
    if "cache" not in params:
        kw["past_key_values"] = kw.pop("cache")
    if "cache_position" in params:
        kw["cache_position"] = positions(case)
    return fn(**kw)


def make_cache(case, cfg):
    """None, or a cache of the case's kind holding `offset` tokens in every attention layer."""
    import torch
    from transformers import DynamicCache, StaticCache
    from transformers.cache_utils import CacheLayerMixin
    mode, offset, B = case.param("cache"), case.int_param("offset"), case.int_param("B")
    if mode == "none":
        return None
    cache = (StaticCache(config=cfg, max_cache_len=kv_length(case)) if mode == "static"
             else DynamicCache(config=cfg))
    if offset > 0:
        kv = torch.zeros(B, 1, offset, 1)
        extra = ({"cache_kwargs": {"cache_position": torch.arange(offset)}}
                 if "cache_kwargs" in inspect.signature(cache.update).parameters else {})
        for i, layer in enumerate(cache.layers):
            if isinstance(layer, CacheLayerMixin):
                cache.update(kv, kv, i, **extra)
    return cache


def kv_length(case):
    kv = case.int_param("kv")
    return kv if kv > 0 else case.int_param("offset") + case.int_param("q")


def implied(case, q, kv, causal):
    """The mask SDPA applies when it gets none: is_causal (upper-left) for q > 1, else all."""
    B = case.int_param("B")
    if not causal or q == 1:
        return np.ones((B, 1, q, kv), dtype=bool)
    return np.broadcast_to(np.arange(kv)[None, :] <= np.arange(q)[:, None], (B, 1, q, kv))


def placed(case, m, cache, layer_idx):
    """A mask [B,1,q,kv_length] over keys [kv_offset, ...) of a cache layer, as [B,1,q,kv]."""
    m = np.asarray(m)
    kv = kv_length(case)
    offset = 0
    if cache is not None and layer_idx is not None:
        sizes = cache.layers[layer_idx].get_mask_sizes
        arg = (positions(case) if "cache_position" in inspect.signature(sizes).parameters
               else case.int_param("q"))
        kv_len, offset = sizes(arg)
        offset = int(offset)
    if offset == 0 and m.shape[-1] == kv:
        return m
    out = np.zeros(m.shape[:-1] + (kv,), dtype=m.dtype)
    width = min(m.shape[-1], kv - offset)
    if m[..., width:].any():
        dc.fail(f"mask allows keys past the buffer: columns {offset + width}.. of kv {kv}")
    out[..., offset:offset + width] = m[..., :width]
    return out


def tokens(case, torch, dtype):
    """inputs_embeds, attention_mask, position_ids as a model would pass them."""
    B, q, offset = case.int_param("B"), case.int_param("q"), case.int_param("offset")
    embeds = torch.zeros(B, q, 1, dtype=dtype)
    mask = None
    if "padding_mask" in case.inputs:
        mask = torch.from_numpy(case.inputs["padding_mask"][:, :offset + q].astype(bool))
    pos = None
    if "position_ids" in case.inputs:
        pos = torch.from_numpy(np.ascontiguousarray(case.inputs["position_ids"][0]))
    return embeds, mask, pos


def unsupported_combination(case):
    if case.param("packed", "none") != "none":
        if case.param("padding", "none") != "none" or case.param("cache") != "none":
            return ("Transformers looks for packed sequences in position_ids only without a 2-D "
                    "attention mask and without a cache (docs/semantics.md, Masks)")
        if case.param("causal", "1") == "0":
            return "Transformers' bidirectional masks take no position_ids (no packed sequences)"
    if case.param("format") == "additive-inf":
        return "Transformers' additive masks hold torch.finfo(dtype).min, never -inf"
    return None


def run_mask(case):
    import torch
    import transformers.masking_utils as mu
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(case.param("dtype"), torch.float32)
    q, kv = case.int_param("q"), kv_length(case)
    causal = case.param("causal", "1") == "1"
    builder = (mu.create_sliding_window_causal_mask if case.int_param("window") > 0 else
               mu.create_chunked_causal_mask if case.int_param("chunk") > 0 else
               mu.create_causal_mask)

    def build(attn, dt):
        cfg = make_config(case, ["full_attention"], attn)
        embeds, mask, pos = tokens(case, torch, dt)
        cache = make_cache(case, cfg)
        return call(builder, case, config=cfg, inputs_embeds=embeds, attention_mask=mask,
                    cache=cache, position_ids=pos), cache

    sdpa, cache = build("sdpa", torch.float32)
    needed = sdpa is not None
    if case.param("format") == "bool":
        m = placed(case, sdpa.numpy(), cache, 0) if needed else implied(case, q, kv, causal)
        allowed = m.astype(bool)
        values = allowed.astype(np.uint8)
    else:
        eager, cache = build("eager", dtype)
        if eager is None:
            allowed = implied(case, q, kv, causal)
            lowest = torch.finfo(dtype).min
            values = np.where(allowed, 0.0, lowest)
        else:
            e = placed(case, eager.float().numpy(), cache, 0)
            if e.shape[-1] != kv:
                dc.fail(f"eager mask has {e.shape[-1]} keys, expected {kv}")
            allowed = e == 0
            values = e
    return {"mask": values, "needed": np.array([1 if needed else 0]),
            "fully_masked": (~allowed.any(axis=-1)).reshape(allowed.shape[0], -1).astype(np.uint8)}


def run_layers(case):
    import torch
    import transformers.masking_utils as mu
    types = layer_types(case.param("pattern"))
    distinct = list(dict.fromkeys(types))
    q, kv, B = case.int_param("q"), kv_length(case), case.int_param("B")
    cfg = make_config(case, types, "sdpa")
    embeds, mask, pos = tokens(case, torch, torch.float32)
    cache = make_cache(case, cfg)
    masks = call(mu.create_masks_for_generate, case, config=cfg, inputs_embeds=embeds,
                 attention_mask=mask, cache=cache, position_ids=pos)
    if not isinstance(masks, dict):
        dc.fail("create_masks_for_generate returned " + type(masks).__name__ +
                " instead of a dict per layer type (a layer type without a mask function)")
    out, kinds, needed = {}, [], []
    for t in distinct:
        if t not in masks:
            dc.fail(f"create_masks_for_generate returned no mask for layer type '{t}' "
                    f"(got {sorted(masks)})")
        m = masks[t]
        if t.startswith("linear_attention"):
            kinds.append(2 if m is None else 1)
            needed.append(0)
            out[t] = np.ones((B, q), np.uint8) if m is None else m.numpy().astype(np.uint8)
            continue
        if t not in ATTENTION:
            dc.fail(f"no conversion for layer type '{t}'")
        kinds.append(0)
        needed.append(0 if m is None else 1)
        layer = types.index(t)
        if m is None:
            out[t] = implied(case, q, kv, True).astype(np.uint8)
        else:
            out[t] = placed(case, m.numpy(), cache, layer).astype(np.uint8)
    out["mask_kind"] = np.array(kinds)
    out["needed"] = np.array(needed)
    out["layer_to_mask"] = np.array([distinct.index(t) for t in types])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inp", nargs="?", help="{in}: the case (HDF5)")
    ap.add_argument("out", nargs="?", help="{out}: the outputs to write (HDF5)")
    ap.add_argument("--describe", action="store_true",
                    help="print what would run, as JSON, and exit")
    args = ap.parse_args()
    reason = None
    try:
        info = facts()
    except Exception as e:  # not installed (peers-setup.sh could not install it)
        info = None
        reason = f"transformers/torch not importable: {type(e).__name__}: {e}"
    if args.describe:
        return dc.describe(info or {"unavailable": reason})
    return dc.main(lambda inp, out: answer(info, reason, inp, out), args.inp, args.out, ap)


def answer(info, reason, inp, out):
    case = dc.Case(inp)
    if info is None:
        dc.decline(out, reason)
        return
    if case.op not in ("mask", "layers"):
        dc.decline(out, f"transformers_masks.py answers mask and layers cases, not {case.op}",
                   info)
        return
    why = unsupported_combination(case)
    if why:
        dc.decline(out, why, info)
        return
    import torch
    torch.set_num_threads(1)
    with torch.no_grad():
        values = run_mask(case) if case.op == "mask" else run_layers(case)
    dc.write_outputs(out, case, values, info)


if __name__ == "__main__":
    sys.exit(main())
