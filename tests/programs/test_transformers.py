"""transformers models under primtrace.jit, called as users call them.

Tiny configs (2 layers, hidden 64, sequences of 8), random weights, eval mode:
``primtrace.jit(model)(input_ids=ids, attention_mask=mask)`` returns eager's output type
holding real tensors equal to eager's, on every call (new ids and masks, padding
included), and ``explain`` finds no opaque op. What this needs: rebuilt output containers
(ModelOutput), ``torch.compiler.is_compiling()`` true while tracing (the mask utilities'
value-reading shortcuts), refs for ``torch.tensor([])`` (cache layers) and sdpa with
``enable_gqa`` (LLaMA with fewer key/value heads than query heads).
"""
import warnings

import pytest
import torch

import primtrace

transformers = pytest.importorskip("transformers")

VOCAB, SEQ = 100, 8


def gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config), "logits"


def llama():
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(config), "logits"


def bert():
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                     num_attention_heads=4, vocab_size=VOCAB)
    return transformers.BertModel(config), "last_hidden_state"


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert}


def _calls():
    """Three (ids, mask) pairs: no padding, the second row padded, both rows padded."""
    gen = torch.Generator().manual_seed(1)
    masks = [torch.ones(2, SEQ, dtype=torch.long) for _ in range(3)]
    masks[1][1, 6:] = 0
    masks[2][0, 5:] = 0
    masks[2][1, 3:] = 0
    return [(torch.randint(0, VOCAB, (2, SEQ), generator=gen), m) for m in masks]


@pytest.fixture
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # transformers' config and deprecation notes
        yield


@pytest.mark.parametrize("name", MODELS)
def test_jit_model_called_as_users_call_it(name, quiet):
    torch.manual_seed(0)
    model, field = MODELS[name]()
    model.eval()
    jm = primtrace.jit(model)
    with torch.no_grad():
        for ids, mask in _calls():
            out = jm(input_ids=ids, attention_mask=mask, use_cache=False)
            eager = model(input_ids=ids, attention_mask=mask, use_cache=False)
            assert type(out) is type(eager)
            assert list(out.keys()) == list(eager.keys())
            got = getattr(out, field)
            assert type(got) is torch.Tensor
            torch.testing.assert_close(got, getattr(eager, field), atol=1e-5, rtol=1e-4)
            assert out[0] is got   # ModelOutput's tuple view and attribute agree
    assert not primtrace.explain(model, input_ids=ids, attention_mask=mask,
                                 use_cache=False).opaque


def test_explain_finds_no_opaque_op_with_the_defaults(quiet):
    """Called with input_ids only (use_cache's default, the cache layers' torch.tensor([]),
    GQA attention): every op has a ref."""
    torch.manual_seed(0)
    model, _ = llama()
    model.eval()
    ids = _calls()[0][0]
    assert not primtrace.explain(model, input_ids=ids).opaque


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_default_call_returns_a_cache_of_real_tensors(name, quiet):
    """With use_cache's default the model builds a DynamicCache while tracing and returns it:
    every call gets a new cache object holding that call's keys and values, eager's."""
    torch.manual_seed(0)
    model, _ = MODELS[name]()
    model.eval()
    jm = primtrace.jit(model)
    caches = []
    with torch.no_grad():
        for ids, mask in _calls():
            out, eager = jm(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
            torch.testing.assert_close(out.logits, eager.logits, atol=1e-5, rtol=1e-4)
            got, want = out.past_key_values, eager.past_key_values
            assert type(got) is type(want) and len(got.layers) == len(want.layers)
            for g, w in zip(got.layers, want.layers):
                assert type(g.keys) is torch.Tensor and type(g.values) is torch.Tensor
                torch.testing.assert_close(g.keys, w.keys, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(g.values, w.values, atol=1e-5, rtol=1e-4)
            caches.append(got)
    assert len({id(c) for c in caches}) == 3


def test_greedy_generation_carrying_the_cache(quiet):
    """The loop users write: the cache a call returns goes into the next call, which grows
    it in place (replayed Python writes); tokens and cache equal eager's. The cache's
    length is traced symbolic: one trace for the prompt, one for every later step (the first
    step's growth by torch.cat makes it symbolic)."""
    torch.manual_seed(0)
    model, _ = gpt2()
    model.eval()
    ids = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(3))

    def generate(m, steps=6):
        out = m(input_ids=ids)
        tokens, cache = [out.logits[:, -1].argmax(-1)], out.past_key_values
        for _ in range(steps):
            out = m(input_ids=tokens[-1][:, None], past_key_values=cache)
            assert out.past_key_values is cache
            tokens.append(out.logits[:, -1].argmax(-1))
        return torch.stack(tokens, 1), cache

    jitted = primtrace.jit(model)
    with torch.no_grad():
        (got, gcache), (want, wcache) = generate(jitted), generate(model)
    assert torch.equal(got, want)
    assert primtrace.cache_info(jitted).misses == 2
    for g, w in zip(gcache.layers, wcache.layers):
        assert type(g.keys) is torch.Tensor and g.keys.shape == w.keys.shape == (2, 4, 10, 16)
        torch.testing.assert_close(g.keys, w.keys, atol=1e-5, rtol=1e-4)
